"""The block lint measured on a corpus of good and bad blocks (tests/data/blocks_corpus.jsonl).

Each record is one block in its context (example prompt and label, the verifier's feedback,
the task's format). Reference blocks are scored by real verifiers (SQL executed on a real
SQLite database by `exec_match`, tool calls by `ast_check`), so R5's "full marks" is the real
thing. Precision and recall are printed (run with -s) and held to floors.

The corpus and the rules were written by the same hand, so its figures are in-sample. Two
held-out sets are measured apart: blocks_corpus_heldout.jsonl was written after the rules were
first frozen (measured then at precision 0.929, recall 0.765; its misses then led to a revision
of the label and inline-fence checks, so it is no longer held out), and
blocks_corpus_heldout2.jsonl was written after that revision and has not been used to change
the rules. The held-out floors are below the measured figures, not tuned to them.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from mrtpo.blocks.rules import RULES, check_block
from mrtpo.formats import get_format
from mrtpo.tasks.base import Example, Reward, Verdict

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "concert.sqlite"
    con = sqlite3.connect(path)
    con.executescript((DATA / "blocks_corpus.sql").read_text())
    con.close()
    return path


def reward_for(rec: dict, db: Path) -> Reward:
    """The reward the record's block belongs to, with a real verifier for its format."""
    from mrtpo.verifiers.sql import exec_match
    from mrtpo.verifiers.toolcall import ast_check

    fmt = get_format(rec["format"], think=rec["think"])

    def verify(ex: Example, response: str) -> Verdict:
        p = fmt.parse(response)
        if p.answer is None:
            return Verdict(0.0, p.error)
        if rec["format"] == "sql":
            ok = exec_match(p.answer, ex.data["query"], db)
        elif rec["format"] == "tool_call":
            calls = [{c["name"]: c["arguments"]} for c in p.answer]
            ok = ast_check(ex.data["functions"], calls, ex.data["answer"], ex.data["category"])
        elif "answer" in ex.data:  # a marked answer (\\boxed{}, <answer> tags): the number itself
            ok = str(p.answer).strip() == str(ex.data["answer"]).strip()
        else:
            ok = True
        return Verdict(1.0 if ok else 0.0, "" if ok else "the answer differs from the reference")

    return Reward(rec["kind"] or "block", verify, lambda ex, v: rec["block"],
                  response_dependent=rec["kind"] == "feedback", kind=rec["kind"])


def lint_record(rec: dict, db: Path):
    fmt = get_format(rec["format"], think=rec["think"])
    ex = Example(id=rec["id"], prompt=rec["prompt"], data=rec["data"])
    verdict = Verdict(0.0 if rec["feedback"] else 1.0, rec["feedback"])
    return check_block(rec["block"], kind=rec["kind"], example=ex, verdict=verdict,
                       reward=reward_for(rec, db), fmt=fmt, placement=rec["placement"],
                       p0_messages=[{"role": "user", "content": rec["prompt"]}], try_builder=False)


def measure(records: list[dict], db: Path) -> dict:
    """Block-level precision/recall (flagged = any finding) and per-rule figures."""
    tp = fp = fn = tn = 0
    per_rule = {r: Counter() for r in RULES}
    misses, false_alarms = [], []
    for rec in records:
        found = lint_record(rec, db)
        rules_found = {f.rule for f in found}
        bad = rec["expect"] is not None
        if bad and found:
            tp += 1
        elif bad:
            fn += 1
            misses.append(rec["id"])
        elif found:
            fp += 1
            false_alarms.append((rec["id"], [str(f) for f in found]))
        else:
            tn += 1
        for r in RULES:
            hit, want = r in rules_found, rec["expect"] == r
            per_rule[r]["tp" if hit and want else "fp" if hit else "fn" if want else "tn"] += 1
    return {
        "good": sum(1 for r in records if r["expect"] is None),
        "bad": sum(1 for r in records if r["expect"] is not None),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "false_positive_rate": fp / (fp + tn) if fp + tn else 0.0,
        "per_rule": {r: (c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else float("nan"),
                         c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else float("nan"))
                     for r, c in per_rule.items()},
        "misses": misses,
        "false_alarms": false_alarms,
    }


def _print(name: str, m: dict) -> None:
    print(f"\n{name}: {m['good']} good, {m['bad']} bad blocks; precision {m['precision']:.3f}, "
          f"recall {m['recall']:.3f}, false-positive rate {m['false_positive_rate']:.3f}")
    for r, (p, rc) in m["per_rule"].items():
        print(f"  {r} {RULES[r]}: precision {p:.3f}, recall {rc:.3f}")
    for i in m["misses"]:
        print(f"  missed: {i}")
    for i, fs in m["false_alarms"]:
        print(f"  false alarm: {i}: {fs}")


def test_corpus_size_and_shape():
    recs = load("blocks_corpus.jsonl")
    good = [r for r in recs if r["expect"] is None]
    bad = [r for r in recs if r["expect"] is not None]
    assert len(good) >= 60 and len(bad) >= 60
    assert {r["expect"] for r in bad} == set(RULES)  # every rule has violating examples
    assert len({r["id"] for r in recs}) == len(recs)


def test_corpus_precision_recall(corpus_db):
    m = measure(load("blocks_corpus.jsonl"), corpus_db)
    _print("blocks_corpus.jsonl", m)
    assert m["precision"] >= 0.95, m["false_alarms"]
    assert m["recall"] >= 0.95, m["misses"]
    for r, (p, rc) in m["per_rule"].items():
        assert rc >= 0.9, (r, rc)


def test_each_bad_block_is_caught_for_its_own_rule(corpus_db):
    """Beyond being flagged at all, a bad block is flagged for the rule it breaks."""
    wrong = []
    for rec in load("blocks_corpus.jsonl"):
        if rec["expect"] is None:
            continue
        rules_found = {f.rule for f in lint_record(rec, corpus_db)}
        if rec["expect"] not in rules_found:
            wrong.append((rec["id"], rec["expect"], sorted(rules_found)))
    assert len(wrong) <= 3, wrong


@pytest.mark.parametrize("name,min_precision,min_recall", [
    ("blocks_corpus_heldout.jsonl", 0.95, 0.85),
    ("blocks_corpus_heldout2.jsonl", 0.9, 0.8),
])
def test_heldout_corpus(corpus_db, name, min_precision, min_recall):
    recs = load(name)
    m = measure(recs, corpus_db)
    _print(name, m)
    assert m["good"] >= 15 and m["bad"] >= 15
    assert m["precision"] >= min_precision, m["false_alarms"]
    assert m["recall"] >= min_recall, m["misses"]
