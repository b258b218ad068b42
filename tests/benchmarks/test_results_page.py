"""docs/results.md is what benchmarks/results_page.py makes of benchmarks/results/*.json: the page
is up to date, every table names the command that measured it, and results for another model
get their own tables, with that model in the command."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks import results_page as results_page_module

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PAGE_PATH = BENCHMARKS.parent / "docs" / "results.md"


@pytest.fixture(scope="module")
def page():
    return results_page_module


def _tables(text: str) -> list[tuple[int, list[str]]]:
    """(line index, the lines before it back to the previous table or heading) per table."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("|") and not (i and lines[i - 1].startswith("|")):
            before = []
            for prev in reversed(lines[:i]):
                if prev.startswith("|") or prev.startswith("#"):
                    break
                before.append(prev)
            out.append((i, before))
    return out


def test_the_page_is_up_to_date(page):
    assert PAGE_PATH.read_text(encoding="utf-8") == page.render(), \
        "docs/results.md is stale: run `python benchmarks/results_page.py`"
    assert page.main(["--check"]) == 0


def test_every_table_names_its_command_and_its_file(page):
    text = page.render()
    tables = _tables(text)
    assert len(tables) >= 15  # probe x 4, variants, context, block reading, learning x 3, spans, speed x 4, quickstart
    for index, before in tables:
        commands = [b for b in before if b.startswith("command: `")]
        assert len(commands) == 1, f"the table at line {index + 1} has no `command:` line: {before}"
        assert "not recorded" not in commands[0], f"line {index + 1}: {commands[0]}"
        assert any("benchmarks/results/" in b and ".json" in b for b in before), f"line {index + 1} names no file"
    # every results file appears in the page
    for path in (BENCHMARKS / "results").glob("*.json"):
        assert f"benchmarks/results/{path.name}" in text, path.name


def test_a_second_models_results_get_their_own_tables(page, tmp_path):
    """Files for another policy with the schema of the existing ones (as `mrtpo probe --json` and
    benchmarks/learning/learning.py write them) sit beside the retired mrtpo-tiny's tables, named by their model."""
    results = tmp_path / "results"
    shutil.copytree(BENCHMARKS / "results", results)
    model = "smollm2-135m (/root/.cache/mrtpo/models/smollm2-135m-0123456789ab)"
    probe = json.loads((results / "probe-toolcall.json").read_text())
    probe["model"] = model
    probe["kinds"][0]["specificity"] = 3.21
    (results / "probe-toolcall-smollm2-135m.json").write_text(json.dumps(probe))
    learning = json.loads((results / "learning-toolcall.json").read_text())
    learning = {"schema": "mrtpo.learning/1",
                "settings": dict(learning["settings"], model="/root/.cache/mrtpo/models/smollm2-135m-0123456789ab"),
                "rows": learning["rows"]}  # no command, seeds or notes: the page makes the command up
    (results / "learning-toolcall-smollm2-135m.json").write_text(json.dumps(learning))

    text = page.render(results)
    assert "**toolcall, smollm2-135m-0123456789ab, 35 examples** (`benchmarks/results/probe-toolcall-smollm2-135m.json`)" in text
    assert "command: `mrtpo probe toolcall`" in text  # the default policy's command names no model
    assert "| argument value (`correct`) | 34 | 3.30 | 3.09 (schema) | **3.21** |" in text
    assert "**toolcall, mrtpo-tiny-f28af8686579, 35 examples**" in text  # the retired toy's stays
    assert "command: `mrtpo probe toolcall --model mrtpo-tiny`" in text  # as it ran
    assert "command: `python -m benchmarks.learning.learning --tasks toolcall`" in text
    # the default policy's tables come first, the other model's after them, in the same section
    probe_section = text[text.index("## Where credit lands"):text.index("## Warm-start variants")]
    assert probe_section.index("smollm2-135m-0123456789ab") < probe_section.index("mrtpo-tiny-f28af8686579, 35")
    for index, before in _tables(text):
        assert any(b.startswith("command: `") for b in before), index

    # the real page no longer matches these results
    assert page.main(["--check", "--results", str(results)]) == 1


def test_check_fails_on_a_changed_figure_and_the_script_rewrites_the_page(page, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(BENCHMARKS / "results", results)
    out = tmp_path / "results.md"
    assert page.main(["--results", str(results), "--out", str(out)]) == 0
    assert page.main(["--check", "--results", str(results), "--out", str(out)]) == 0
    data = json.loads((results / "context-sensitivity.json").read_text())
    data["contexts"]["without the reference"]["at_value_mean"] = 0.5
    (results / "context-sensitivity.json").write_text(json.dumps(data))
    assert page.main(["--check", "--results", str(results), "--out", str(out)]) == 1
    assert page.main(["--results", str(results), "--out", str(out)]) == 0
    assert "| without the reference | 0.500 |" in out.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_an_unknown_file_is_listed_and_a_broken_one_named(page, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "notes.json").write_text('{"anything": 1}')
    text = page.render(results)
    assert "## Other result files" in text and "`benchmarks/results/notes.json`" in text
    (results / "broken.json").write_text("{not json")
    with pytest.raises(SystemExit, match=re.escape(str(results / "broken.json"))):
        page.render(results)


def test_a_one_step_file_gets_its_intervals_and_verdicts(page, tmp_path):
    """benchmarks/experiments/one_step.py's summary: each method's effect with its interval, and the
    paired differences with "no difference" where the interval holds 0."""
    results = tmp_path / "results"
    results.mkdir()
    doc = {"schema": "mrtpo.one-step/1",
           "settings": {"model": "smollm2-135m", "task": "text2sql", "batches": 30, "batch_prompts": 2,
                        "num_generations": 4, "pool": 16, "lr": 5e-5},
           "command": "python benchmarks/experiments/one_step.py --task text2sql",
           "rows": [{"method": m, "reward": "total", "mean": v, "low": v - 0.01, "high": v + 0.01}
                    for m, v in (("gdpo", 0.02), ("mrtpo", 0.05))],
           "paired": [{"a": "mrtpo", "b": "gdpo", "reward": "total", "mean": 0.03, "low": 0.01, "high": 0.05},
                      {"a": "mrtpo", "b": "gdpo", "reward": "format", "mean": 0.01, "low": -0.01, "high": 0.03}],
           "flat_batches": 2, "seconds_per_batch": 300.0}
    (results / "one-step-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    text = page.render(results)
    assert "| total | +0.0200 [+0.0100, +0.0300] | +0.0500 [+0.0400, +0.0600] |" in text
    assert "| mrtpo - gdpo | total | +0.0300 [+0.0100, +0.0500] | a > b |" in text
    assert "| mrtpo - gdpo | format | +0.0100 [-0.0100, +0.0300] | no difference |" in text
    assert "2 of 30 batches had no credit to place" in text
    assert "pooled from" not in text
    assert "; 300 s a batch" in text
    doc["settings"]["sources"] = [{"file": "a.jsonl", "seed": 0, "batches": 20, "seconds_per_batch": 125.0},
                                  {"file": "b.jsonl", "seed": 1, "batches": 10, "seconds_per_batch": 20.0}]
    (results / "one-step-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    text = page.render(results)
    assert ("pooled from a.jsonl (seed 0, 20 batches, 125 s a batch); b.jsonl (seed 1, 10 batches, 20 s a batch)"
            in text)
    assert "300 s a batch" not in text  # the pooled files' mean would mix machines
    assert "stepping from" not in text
    doc["settings"]["start"] = "step50/gdpo-seed3"  # `one_step.py --start`: a mid-training policy
    (results / "one-step-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    assert "lr 5e-05, every method stepping from step50/gdpo-seed3**" in page.render(results)
    assert "mrtpo-bf16-sampled:" not in page.render(results)
    doc["bf16_sampled"] = {"same_completions": 70, "completions": 240, "logp_difference_mean": 0.0261,
                           "logp_difference_max": 0.412, "ratio_min": 0.66, "ratio_max": 1.51}
    (results / "one-step-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    assert ("mrtpo-bf16-sampled: 70 of 240 completions the same as mrtpo's batch; the bf16 copy's log-probs "
            "against the float32 weights': mean |difference| 0.026, largest 0.41; the correction's per-token "
            "ratios 0.66 to 1.51") in page.render(results)


def test_a_sweep_file_gets_its_rows_and_its_choice(page, tmp_path):
    """benchmarks/learning/sweep.py's summary: a row per setting with the held-out change and its
    interval, and the setting chosen (or none, said so)."""
    results = tmp_path / "results"
    results.mkdir()
    row = {"lr": 1e-4, "shape": "2x4", "heldout_before": 0.04, "heldout_after": 0.1, "change": 0.06, "low": 0.02,
           "high": 0.1, "train_first": 1.2, "train_last": 1.5, "rises_every_seed": True, "seconds_per_run": 400.0,
           "metrics": {"execution_accuracy": {"before": 0.04, "after": 0.1}, "format": {"before": 0.5, "after": 0.8}},
           "per_seed": [{}, {}, {}]}
    doc = {"schema": "mrtpo.sweep/1", "command": "python benchmarks/learning/sweep.py --task text2sql",
           "settings": {"model": "smollm2-135m", "task": "text2sql", "method": "mrtpo", "steps": 20,
                        "heldout_examples": 32, "seeds": [0, 1, 2]},
           "metric": "execution_accuracy", "rows": [row, dict(row, lr=5e-4, rises_every_seed=False)],
           "chosen": {"lr": 1e-4, "shape": "2x4"}, "rule": "the rule", "interval": "95%"}
    (results / "sweep-first-command-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    text = page.render(results)
    assert ("| 0.000100 | 2x4 | 0.040 | 0.100 | +0.060 [+0.020, +0.100] | 1.200 -> 1.500 | yes | 400 | "
            "execution_accuracy 0.04 -> 0.10, format 0.50 -> 0.80 | 3 |") in text
    assert "| 0.000500 | 2x4 |" in text and "- chosen: lr 0.0001, shape 2x4 (the rule)" in text
    (results / "sweep-first-command-text2sql-smollm2-135m.json").write_text(json.dumps(dict(doc, chosen=None)))
    assert "- chosen: none (no setting measured with enough seeds rose in every seed)" in page.render(results)


def test_a_held_out_learning_file_gets_its_curves_and_paired_verdicts(page, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    doc = {"command": "python benchmarks/learning/heldout.py --task text2sql",
           "settings": {"model": "smollm2-135m", "task": "text2sql", "steps": 100, "batch_prompts": 2,
                        "num_generations": 4, "lr": 5e-5, "heldout_examples": 100, "seeds": [0]},
           "metric": "execution_accuracy", "metrics": ["execution_accuracy"], "interval": "95% bootstrap",
           "curves": {m: {"execution_accuracy": {"steps": [0, 100], "mean": [0.04, v], "per_seed": [[0.04, v]]}}
                      for m, v in (("gdpo", 0.1), ("mrtpo", 0.14))},
           "paired": [{"a": "mrtpo", "b": "gdpo", "reward": "execution_accuracy", "mean": 0.04, "low": -0.03,
                       "high": 0.11, "per_seed": [0.04], "seeds": 1}],
           "seconds_per_run": {"gdpo": 5000.0, "mrtpo": 6000.0}, "replay_share": {"gdpo": 0.0, "mrtpo": 0.2}}
    (results / "learning-heldout-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    text = page.render(results)
    assert "| execution_accuracy | mrtpo | 0.040 | 0.140 |" in text and "mean over seed 0" in text
    assert "(its step against one without the replay): gdpo 0% (1.00x), mrtpo 20% (1.25x)" in text
    assert ("| mrtpo - gdpo | execution_accuracy | +0.040 [-0.030, +0.110] | +0.040 | - | none yet: 1 of 3 seeds, "
            "the interval holds only the examples' spread |") in text  # a file from before "better" was recorded
    doc["paired"][0].update(low=0.01, seeds=3, per_seed=[0.03, 0.04, 0.05], better=[[5, 2], [6, 2], [5, 0]])
    (results / "learning-heldout-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    assert "| +0.040 [+0.010, +0.110] | +0.030 +0.040 +0.050 | 5/2 6/2 5/0 | a > b |" in page.render(results)
    doc["settings"]["seeds"] = [0, 1, 2]  # a part result: one method has fewer seeds than asked for
    doc["curves"]["mrtpo"]["execution_accuracy"]["seeds"] = [0]
    doc["curves"]["gdpo"]["execution_accuracy"]["seeds"] = [0, 1, 2]
    (results / "learning-heldout-text2sql-smollm2-135m.json").write_text(json.dumps(doc))
    text = page.render(results)
    assert "| execution_accuracy | mrtpo (seeds 0) | 0.040 | 0.140 |" in text
    assert "| execution_accuracy | gdpo | 0.040 | 0.100 |" in text


def test_a_file_is_rendered_by_the_kind_it_declares_not_by_its_name(page, tmp_path):
    """The page reads a file's `schema` (`mrtpo.KIND/VERSION`), never its name: a learning file
    under another name is a learning table, one named like a learning file but declaring no kind
    is listed under "Other result files", and so is a kind the page does not know."""
    results = tmp_path / "results"
    results.mkdir()
    learning = json.loads((BENCHMARKS / "results" / "learning-toolcall.json").read_text())
    assert learning["schema"] == "mrtpo.learning/1"
    (results / "curves-of-my-own.json").write_text(json.dumps(learning))
    (results / "learning-undeclared.json").write_text(json.dumps({k: v for k, v in learning.items() if k != "schema"}))
    (results / "probe-new-kind.json").write_text(json.dumps({"schema": "mrtpo.not-a-kind/1", "kinds": []}))
    text = page.render(results)
    mine = text.index("(`benchmarks/results/curves-of-my-own.json`)")
    assert text.index("## Learning") < mine < text.index("## Speed")
    other = text[text.index("## Other result files"):]
    assert "`benchmarks/results/learning-undeclared.json`" in other
    assert "`benchmarks/results/probe-new-kind.json`" in other
    assert page.kind_of(learning) == "learning"
    assert page.kind_of({"schema": "mrtpo.table/1", "section": "speed"}) == "speed"


def test_a_held_out_file_from_before_kinds_were_declared_still_renders(page, tmp_path):
    """benchmarks/learning/heldout.py wrote its files without `schema` before it declared its
    kind; such a file (its fields say what it is) renders as the kind heldout.py writes now."""
    from benchmarks.learning import heldout

    doc = json.loads((BENCHMARKS / "results" / "learning-heldout-text2sql-smollm2-135m.json").read_text())
    old = {k: v for k, v in doc.items() if k != "schema"}
    new = {"schema": f"mrtpo.{heldout.KIND}/1", **old}
    assert page.kind_of(old) == page.kind_of(new) == heldout.KIND == "learning-heldout"
    rendered = []
    for d in (old, new):
        results = tmp_path / str(len(rendered))
        results.mkdir()
        (results / "learning-heldout-text2sql-smollm2-135m.json").write_text(json.dumps(d))
        rendered.append(page.render(results))
    assert rendered[0] == rendered[1] and "**text2sql: paired differences after step" in rendered[0]
