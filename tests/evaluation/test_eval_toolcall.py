"""`mrtpo eval toolcall`: BFCL AST accuracy per category, overall, and BFCL's summaries.

Run: .venv/bin/python -m pytest tests/evaluation/test_eval_toolcall.py -q
The conformance tests against BFCL's own code skip when `bfcl-eval` is not installed.
"""
from __future__ import annotations

import collections
import json
import random
import sys
import types

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.evaluation import run_eval, score
from mrtpo.evaluation.toolcall import bfcl_summaries
from mrtpo.tasks import get_task

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}

WEATHER = {"name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "dict", "required": ["city"], "properties": {
               "city": {"type": "string", "description": "City name"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"}}}}
FACTORIAL = {"name": "math.factorial", "description": "n!",
             "parameters": {"type": "dict", "required": ["number"],
                            "properties": {"number": {"type": "integer", "description": "n"}}}}
ROWS = [
    {"id": "w1", "question": "Weather in Paris?", "functions": [WEATHER], "category": "simple",
     "ground_truth": [{"get_weather": {"city": ["Paris", "Paris, France"], "unit": ["", "celsius"]}}]},
    {"id": "w2", "question": "Weather in Paris and Rome?", "functions": [WEATHER], "category": "parallel",
     "ground_truth": [{"get_weather": {"city": ["Paris"], "unit": [""]}},
                      {"get_weather": {"city": ["Rome"], "unit": [""]}}]},
    {"id": "f1", "question": "What is 5 factorial?", "functions": [WEATHER, FACTORIAL], "category": "multiple",
     "ground_truth": [{"math.factorial": {"number": [5]}}]},
    {"id": "f2", "question": "What is 6 factorial?", "functions": [FACTORIAL], "category": "live_simple",
     "ground_truth": [{"math.factorial": {"number": [6]}}]},
    {"id": "f3", "question": "What is 7 factorial?", "functions": [FACTORIAL], "category": "live_simple",
     "ground_truth": [{"math.factorial": {"number": [7]}}]},
]


def _tc(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


RESPONSES = {
    "w1": _tc("get_weather", city="paris, france"),  # BFCL standardises strings: a match
    "w2": _tc("get_weather", city="Rome") + "\n" + _tc("get_weather", city="Paris"),  # any order
    "f1": "[math.factorial(number=5)]",  # BFCL's Python-call text also reads
    "f2": _tc("math.factorial", number=6.0),  # a float for an integer: BFCL rejects it
    "f3": "I would call the factorial function.",  # no call at all
}


@pytest.fixture()
def files(tmp_path):
    data = tmp_path / "calls.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in RESPONSES.items()))
    return data, responses


def test_per_category_overall_and_summaries(files):
    data, responses = files
    task = get_task("toolcall")
    report = run_eval(task, task.load(str(data)), responses_path=responses)
    valid = {r["id"]: r["valid"] for r in report.per_example}
    assert valid == {"w1": True, "w2": True, "f1": True, "f2": False, "f3": False}
    assert report.groups == {"simple": {"accuracy": 1.0, "n": 1}, "parallel": {"accuracy": 1.0, "n": 1},
                             "multiple": {"accuracy": 1.0, "n": 1}, "live_simple": {"accuracy": 0.0, "n": 2}}
    assert report.metrics["ast_accuracy"] == pytest.approx(3 / 5)
    assert report.metrics["non_live_ast"] == 1.0  # mean of simple, multiple, parallel present
    assert report.metrics["live_ast"] == 0.0
    assert report.metrics["format"] == pytest.approx(3 / 5)  # w1, w2, f2 follow the tag format
    by_id = {r["id"]: r for r in report.per_example}
    assert by_id["f1"]["syntax"] == "python"
    assert "type" in by_id["f2"]["error"].lower() or "float" in by_id["f2"]["error"].lower()
    assert by_id["f3"]["calls"] == [] and by_id["f3"]["error"]


def test_references_score_one_and_training_reward_agrees(files):
    data, _ = files
    task = get_task("toolcall")
    exs = task.load(str(data))
    report = score(task, exs, [task.reference(ex) for ex in exs])
    assert report.metrics["ast_accuracy"] == 1.0
    for ex, rec in zip(exs, score(task, exs, [RESPONSES[ex.id] for ex in exs]).per_example):
        correct = next(v for r, v in zip(task.rewards(ex), task.score(ex, rec["response"])) if r.name == "correct")
        assert correct.score == float(rec["valid"]), ex.id


def test_summary_weights_follow_bfcl():
    groups = {"simple_python": {"accuracy": 0.9, "n": 400}, "multiple": {"accuracy": 0.5, "n": 200},
              "live_simple": {"accuracy": 1.0, "n": 10}, "live_multiple": {"accuracy": 0.0, "n": 30}}
    out = bfcl_summaries(groups)
    assert out["non_live_ast"] == pytest.approx((0.9 + 0.5) / 2)  # unweighted
    assert out["live_ast"] == pytest.approx(10 / 40)  # weighted by size


def test_cli_table_and_json(files, tmp_path):
    data, responses = files
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(app, ["eval", "toolcall", "--data", str(data), "--responses", str(responses),
                                 "--out", str(out)], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    assert "ast_accuracy" in r.stdout and "live_simple" in r.stdout and "0.6000" in r.stdout
    assert len(out.read_text().splitlines()) == 5
    r = CliRunner().invoke(app, ["eval", "toolcall", "--data", str(data), "--responses", str(responses),
                                 "--json"], env=ENV, prog_name="mrtpo")
    summary = json.loads(r.stdout)
    assert summary["groups"]["live_simple"] == {"accuracy": 0.0, "n": 2}


# --- conformance with BFCL's own code (bfcl-eval installed with --no-deps) -----------------------

def _bfcl():
    """BFCL's checker and leaderboard helpers, with its model registry stubbed (it imports every
    model handler otherwise; the AST check reads the registry only for dotted names)."""
    pytest.importorskip("bfcl_eval")
    pytest.importorskip("pandas")
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)

        class _Config:
            underscore_to_dot = False

        stub.MODEL_CONFIG_MAPPING = collections.defaultdict(_Config)
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.eval_runner_helper import (calculate_unweighted_accuracy,
                                                           calculate_weighted_accuracy)
    return ast_checker, Language, calculate_unweighted_accuracy, calculate_weighted_accuracy


def _mutate(calls, rng):
    """A plausible wrong answer: change one argument's value, drop a call, or keep it."""
    calls = json.loads(json.dumps(calls))
    kind = rng.choice(["keep", "value", "drop", "name"])
    if kind == "value":
        c = rng.choice(calls)
        if c["arguments"]:
            k = rng.choice(sorted(c["arguments"]))
            v = c["arguments"][k]
            c["arguments"][k] = (v + 1) if isinstance(v, int) and not isinstance(v, bool) else f"{v}x"
    elif kind == "drop" and len(calls) > 1:
        calls.pop()
    elif kind == "name":
        calls[0]["name"] += "_v2"
    return calls


def test_category_accuracies_and_summaries_match_bfcl_on_its_own_data(tmp_path):
    ast_checker, Language, unweighted, weighted = _bfcl()
    from mrtpo.tasks.toolcall_data import BFCL_CATEGORIES, bfcl_eval_data_dir

    src = bfcl_eval_data_dir()
    (tmp_path / "possible_answer").mkdir()
    n = 0
    for c in BFCL_CATEGORIES:  # a BFCL layout holding the first 25 entries of each category
        name = f"BFCL_v4_{c}.json"
        lines = (src / name).read_text().splitlines()[:25]
        ids = {json.loads(line)["id"] for line in lines}
        n += len(lines)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        answers = [a for a in (src / "possible_answer" / name).read_text().splitlines()
                   if a.strip() and json.loads(a)["id"] in ids]
        (tmp_path / "possible_answer" / name).write_text("\n".join(answers) + "\n")
    task = get_task("toolcall")
    rng = random.Random(0)
    exs = task.load(str(tmp_path))
    from mrtpo.verifiers.toolcall import reference_calls
    responses, official = [], collections.defaultdict(list)
    for ex in exs:
        calls = _mutate(reference_calls(ex.data["functions"], ex.data["ground_truth"]), rng)
        responses.append(task.format.render(calls))
        res = ast_checker(ex.data["functions"], [{c["name"]: c["arguments"]} for c in calls],
                          ex.data["ground_truth"], Language.PYTHON, ex.data["category"], "any")
        official[ex.data["category"]].append(res["valid"])
    report = score(task, exs, responses)
    assert len(report.groups) == 8 and report.n == n == 190  # live_parallel(_multiple) hold 16 and 24
    acc = {c: {"accuracy": sum(v) / len(v), "total_count": len(v), "display_accuracy": sum(v) / len(v)}
           for c, v in official.items()}
    for c, g in report.groups.items():
        assert g["accuracy"] == pytest.approx(acc[c]["accuracy"]), c
    assert 0.2 < report.metrics["ast_accuracy"] < 0.9  # the mutations bite, and not always
    simple = unweighted([acc["simple_python"]])
    non_live = unweighted([simple] + [acc[c] for c in ("multiple", "parallel", "parallel_multiple")])
    live = weighted([acc[c] for c in ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")])
    assert report.metrics["non_live_ast"] == pytest.approx(non_live["accuracy"])
    assert report.metrics["live_ast"] == pytest.approx(live["accuracy"])
