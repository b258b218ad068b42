"""Differential tests against BFCL's official checker and decoder (optional group `oracle`).

Needs `pip install --no-deps bfcl-eval` (the `oracle` extra); skipped when it is absent.
Outputs: every entry's reference (first possible values) and mutants from a seed that was
not used while the checker was written (seed 0 was; these use seeds 1 and 2), over all
2,351 entries of the eight single-turn Python categories.
Run: `python -m pytest tests/oracle -m oracle -q -s` (prints the agreement figures).
"""
from __future__ import annotations

import collections
import random

import pytest

pytest.importorskip("bfcl_eval")

from bfcl_mutations import (  # noqa: E402  (tests/helpers is on sys.path: pyproject's pytest `pythonpath`)
    bfcl_entries,
    mutants,
    official_checker,
    official_decoder,
    python_text,
    to_project_form,
)

from mrtpo.tasks.toolcall_data import bfcl_eval_data_dir, read_toolcall  # noqa: E402
from mrtpo.verifiers.toolcall import ast_check_reason, parse_python_calls, reference_calls  # noqa: E402

pytestmark = pytest.mark.oracle
HELD_OUT_SEED = 1
MUTANTS_PER_ENTRY = 10


@pytest.fixture(scope="module")
def entries():
    """(category, raw entry, ground truth, functions as this project loads them)."""
    rows = {r.id: r for r in read_toolcall(bfcl_eval_data_dir())}
    out = [(cat, e, gt, rows[e["id"]].functions) for cat, e, gt in bfcl_entries(bfcl_eval_data_dir())]
    assert len(out) == 2351
    return out


def test_ast_check_agrees_with_the_official_checker(entries):
    check = official_checker()
    rng = random.Random(HELD_OUT_SEED)
    stats = collections.Counter()
    per_cat = collections.defaultdict(collections.Counter)
    disagreements = []
    for cat, entry, gt, funcs in entries:
        outputs = [[{c["name"]: c["arguments"]} for c in reference_calls(funcs, gt)]]
        outputs += list(mutants(entry, gt, rng, MUTANTS_PER_ENTRY))
        for out in outputs:
            mine = ast_check_reason(funcs, to_project_form(out), gt, cat)  # must not raise
            try:
                official = check(entry["function"], out, gt, cat)
            except Exception:  # the official checker crashes on some inputs; ours says False
                stats["official_crashed"] += 1
                continue
            agree = official["valid"] == mine.valid
            stats["cases"] += 1
            stats["agree"] += agree
            stats["valid"] += official["valid"]
            per_cat[cat]["cases"] += 1
            per_cat[cat]["agree"] += agree
            if not official["valid"] and not mine.valid:
                stats["both_invalid"] += 1
                stats["same_error_type"] += official.get("error_type") == mine.error_type
            if not agree:
                disagreements.append((entry["id"], out, official, mine))
    rate = stats["agree"] / stats["cases"]
    print(f"\nAST agreement with bfcl_eval ast_checker: {stats['agree']}/{stats['cases']} = {rate:.4%} "
          f"(official valid {stats['valid']}, official crashed {stats['official_crashed']}, same error_type "
          f"{stats['same_error_type']}/{stats['both_invalid']})")
    for cat, c in per_cat.items():
        print(f"  {cat}: {c['agree']}/{c['cases']}")
    assert stats["cases"] > 20_000
    assert 0.3 < stats["valid"] / stats["cases"] < 0.7  # both verdicts are well exercised
    assert rate >= 0.995, disagreements[:5]


def test_python_call_parser_agrees_with_the_official_decoder(entries):
    decode = official_decoder()
    rng = random.Random(HELD_OUT_SEED + 1)
    stats = collections.Counter()
    disagreements = []
    for cat, entry, gt, _ in entries:
        for out in mutants(entry, gt, rng, 2):
            text = python_text(out)
            for t in (text, text[: rng.randrange(len(text) + 1)], text[1:-1]):
                try:
                    official = decode(t) or None
                except Exception:
                    official = None
                calls, _ = parse_python_calls(t)
                mine = [{c["name"]: c["arguments"]} for c in calls] or None
                stats["cases"] += 1
                same = repr(official) == repr(mine)  # repr: 1, 1.0 and True differ; tuples stay tuples
                stats["agree"] += same
                if not same:
                    disagreements.append((t[:200], official, mine))
    rate = stats["agree"] / stats["cases"]
    print(f"\nPython-call decoding agreement with bfcl_eval: {stats['agree']}/{stats['cases']} = {rate:.4%}")
    assert rate >= 0.995, disagreements[:5]
