"""benchmarks/experiments/where_credit_lands.py: each reward's weight by kind of token, the
overlap between rewards, collapse and scale, on the completions an MRTPO run trained on. The
kinds of token and the figures are pure functions, checked on texts and distances whose answer
is known; the script trains its run through the CLI (a fresh process) and reads its log."""
from __future__ import annotations

import itertools
import json

import pytest

from benchmarks.experiments import where_credit_lands as wcl
from mrtpo.credit.records import CreditRecord



def _spans(text: str, kinds: list[str]) -> list[tuple[str, str]]:
    return [("".join(c for c, _ in g), k) for k, g in itertools.groupby(zip(text, kinds), key=lambda x: x[1]) if k]


def test_sql_kinds_name_the_fence_keywords_names_literals_and_what_is_outside():
    text = "Here:\n```sql\nSELECT name, COUNT(*) FROM member WHERE city = 'Oslo' AND age > 30\n```\nDone."
    assert _spans(text, wcl.sql_kinds(text)) == [
        ("Here:", "outside"), ("```sql", "fence"), ("SELECT", "keyword"), ("name", "name"), (",", "punct"),
        ("COUNT", "keyword"), ("(*)", "punct"), ("FROM", "keyword"), ("member", "name"), ("WHERE", "keyword"),
        ("city", "name"), ("=", "punct"), ("'Oslo'", "literal"), ("AND", "keyword"), ("age", "name"),
        (">", "punct"), ("30", "literal"), ("```", "fence"), ("Done.", "outside")]
    assert set(wcl.sql_kinds("SELECT 1")) == {"outside", ""}  # no fence: nothing is SQL


def test_toolcall_kinds_tell_the_function_from_argument_names_and_values():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}\n</tool_call> ok'
    assert _spans(text, wcl.toolcall_kinds(text)) == [
        ("<tool_call>", "tags"), ("{", "punct"), ('"name"', "json key"), (":", "punct"), ('"get_weather"', "function"),
        (",", "punct"), ('"arguments"', "json key"), (":", "punct"), ("{", "punct"), ('"city"', "argument name"),
        (":", "punct"), ('"Oslo"', "argument value"), (",", "punct"), ('"days"', "argument name"), (":", "punct"),
        ("3", "argument value"), ("}}", "punct"), ("</tool_call>", "tags"), ("ok", "outside")]


def test_a_token_takes_the_kind_of_its_first_visible_character():
    text = "```sql\nSELECT a FROM t\n```"
    tokens = ["```", "sql", "\n", "SELECT", " a", " FROM", " t", "\n", "```"]
    assert wcl.token_kinds(tokens, wcl.sql_kinds(text)) == [
        "fence", "fence", "space", "keyword", "name", "keyword", "name", "space", "fence"]


def _record(tokens, distances, names=("format", "result")):
    return CreditRecord(example_id="e", tokens=tokens, response_ids=list(range(len(tokens))), reward_names=list(names),
                        scores=[1.0] * len(names), credit=[0.5] * len(names), blocks=[""] * len(names), advantage=1.0,
                        distances=distances)


def test_figures_share_lift_overlap_collapse_and_scale():
    tokens = ["```", "sql", "\n", "SELECT", " a", " FROM", " t", "\n", "```"]
    fmt = [1.0, 1.0, 0, 0, 0, 0, 0, 0, 1.0]  # all on the fence
    res = [0, 0, 0, 0, 0.1, 0, 0.1, 0, 0]  # all on the names, a tenth of format's scale
    fig = wcl.figures([_record(tokens, [fmt, res])], "text2sql")
    by = {r["reward"]: r for r in fig["rewards"]}
    assert fig["token_share"]["fence"] == pytest.approx(3 / 9) and fig["token_share"]["name"] == pytest.approx(2 / 9)
    assert by["format"]["share"]["fence"] == pytest.approx(1.0) and by["format"]["lift"]["fence"] == pytest.approx(3.0)
    assert by["result"]["share"]["name"] == pytest.approx(1.0) and by["result"]["lift"]["name"] == pytest.approx(4.5)
    assert by["result"]["scale"] == pytest.approx(by["format"]["scale"] / 15)
    assert by["format"]["gini"] == pytest.approx(2 * (7 + 8 + 9) / (9 * 3) - 10 / 9)
    assert by["format"]["effective_token_ratio"] == pytest.approx(3 / 9)
    (corr,) = fig["correlation"]
    assert corr["a"] == "format" and corr["b"] == "result" and corr["mean"] < 0  # disjoint: no overlap
    same = wcl.figures([_record(tokens, [fmt, [x / 10 for x in fmt]])], "text2sql")
    assert same["correlation"][0]["mean"] == pytest.approx(1.0)
    # a reward with no distance (no credit to place) is left out of its figures
    none = wcl.figures([_record(tokens, [fmt, [0.0] * 9])], "text2sql")
    assert {r["reward"]: r["responses"] for r in none["rewards"]} == {"format": 1, "result": 0}


def test_the_script_trains_an_mrtpo_run_and_writes_the_table(tmp_path, tiny_qwen2_dir):
    out = tmp_path / "where.json"
    doc = wcl.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--steps", "1", "--batch-prompts", "2",
                    "--num-generations", "2", "--max-new-tokens", "8", "--threads", "1",
                    "--out", str(tmp_path / "out"), "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    assert doc["schema"] == "mrtpo.table/1" and doc["section"] == "one-step"
    names = [r[0] for r in doc["rows"][1:]]
    assert names == ["format", "schema", "correct"] and doc["figures"]["responses"] == 4
    assert (tmp_path / "out" / "toolcall" / "seed0" / "completions.jsonl").is_file()
