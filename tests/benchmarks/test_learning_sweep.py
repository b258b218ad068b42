"""benchmarks/learning/sweep.py: the recorded sweep that chooses the first command's settings.
The choice and the fifths are pure functions (checked on rows whose answer is known); the
runner trains each (learning rate, shape, seed) in a fresh process through the real entry point,
measures the held-out examples before and after, writes the results file and keeps each
finished run, from where a later session reads it back instead of training again."""
from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.learning import sweep



def test_fifths_are_the_means_of_the_first_and_last_fifth_of_the_steps():
    history = [{"reward": float(i)} for i in range(10)] + [{"loss": 1.0}]  # a step without reward is skipped
    assert sweep.fifths(history) == (0.5, 8.5)
    assert sweep.fifths([{"reward": 2.0}, {"reward": 4.0}]) == (2.0, 4.0)  # at least one step each
    assert sweep.fifths([]) == (None, None)


def test_the_choice_is_the_largest_held_out_rise_among_settings_that_rise_in_each_of_3_seeds():
    three = [{"seed": s} for s in range(3)]
    rows = [{"lr": 5e-5, "shape": "2x4", "rises_every_seed": True, "change": 0.05, "per_seed": three},
            {"lr": 2e-4, "shape": "2x4", "rises_every_seed": False, "change": 0.30, "per_seed": three},  # one fell
            {"lr": 5e-4, "shape": "2x4", "rises_every_seed": True, "change": 0.40, "per_seed": three[:1]},  # 1 seed
            {"lr": 1e-4, "shape": "2x4", "rises_every_seed": True, "change": 0.10, "per_seed": three}]
    assert sweep.choose(rows) == {"lr": 1e-4, "shape": "2x4"}
    assert sweep.choose([dict(r, rises_every_seed=False) for r in rows]) is None


def test_the_official_metric_ranks_the_settings_whose_headline_rises():
    """A gamed headline (a query that runs for every question: executes 1, execution accuracy 0)
    loses to a smaller rise that is more often right."""
    three = [{"seed": s} for s in range(3)]
    gamed = {"lr": 1e-3, "shape": "2x4", "rises_every_seed": True, "change": 0.7, "per_seed": three,
             "heldout_after": 1.0, "metrics": {"execution_accuracy": {"after": 0.0}, "executes": {"after": 1.0}}}
    right = {"lr": 3e-4, "shape": "2x4", "rises_every_seed": True, "change": 0.4, "per_seed": three,
             "heldout_after": 0.7, "metrics": {"execution_accuracy": {"after": 0.1}, "executes": {"after": 0.7}}}
    assert sweep.choose([gamed, right], official="execution_accuracy") == {"lr": 3e-4, "shape": "2x4"}
    assert sweep.choose([gamed, right]) == {"lr": 1e-3, "shape": "2x4"}  # the headline alone: the larger rise
    tie = dict(right, lr=5e-4, change=0.5)  # same official metric: the larger headline rise
    assert sweep.choose([right, tie], official="execution_accuracy") == {"lr": 5e-4, "shape": "2x4"}
    # a tie in exact arithmetic that floating point breaks: the headline rise still decides
    a = dict(right, metrics={"execution_accuracy": {"after": (0 + 0.01 + 0.06) / 3}}, change=0.5, lr=5e-4)
    b = dict(right, metrics={"execution_accuracy": {"after": (0 + 0 + 0.07) / 3}}, change=0.2)
    assert a["metrics"]["execution_accuracy"]["after"] != b["metrics"]["execution_accuracy"]["after"]
    assert sweep.choose([a, b], official="execution_accuracy") == {"lr": 5e-4, "shape": "2x4"}
    assert sweep.choose([b, a], official="execution_accuracy") == {"lr": 5e-4, "shape": "2x4"}


def test_shapes_are_read_and_bad_ones_refused():
    assert sweep.shapes_of("2x4, 4X8") == [(2, 4), (4, 8)]
    for bad in ("2", "2x1", "axb"):
        with pytest.raises(SystemExit, match="--shapes"):
            sweep.shapes_of(bad)


def test_the_sweep_writes_one_row_per_setting_and_keeps_each_run(tmp_path, tiny_qwen2_dir, capsys):
    results = tmp_path / "results" / "sweep-first-command-toolcall-tiny.json"
    argv = ["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--lrs", "1e-4,1e-2", "--shapes", "2x2",
            "--seeds", "0", "--steps", "2", "--heldout", "4", "--max-new-tokens", "4", "--save-every", "1",
            "--threads", "1", "--lora-dropout", "0.1", "--out", str(tmp_path / "out"), "--json", str(results)]
    summary = sweep.main(argv)
    doc = json.loads(results.read_text())
    assert doc == json.loads(json.dumps(summary, allow_nan=False))  # what it returned, strict JSON
    assert doc["schema"] == "mrtpo.sweep/1" and doc["metric"] == "ast_accuracy"
    assert doc["settings"]["lrs"] == [1e-4, 1e-2] and doc["settings"]["shapes"] == ["2x2"]
    assert [(r["lr"], r["shape"]) for r in doc["rows"]] == [(1e-4, "2x2"), (1e-2, "2x2")]
    for row in doc["rows"]:
        (seed,) = row["per_seed"]
        assert row["heldout_before"] == seed["before"] and row["heldout_after"] == seed["after"]
        assert row["change"] == pytest.approx(seed["after"] - seed["before"])
        assert row["low"] <= row["change"] <= row["high"]
        assert row["rises_every_seed"] == (seed["after"] > seed["before"] and seed["train_last"] > seed["train_first"])
        assert {"ast_accuracy", "format"} <= set(row["metrics"])
        assert row["metrics"]["ast_accuracy"] == {"before": seed["before"], "after": seed["after"]}
    assert doc["official_metric"] == "ast_accuracy"
    assert doc["chosen"] == sweep.choose(doc["rows"], "ast_accuracy")
    # each run trained with its own learning rate and group shape, and is kept beside the results
    kept = results.with_suffix("") / "lr0.01-2x2" / "mrtpo" / "seed0"
    config = (kept / "config.yaml").read_text()
    assert "lr: 0.01" in config and "num_generations: 2" in config and "batch_prompts: 2" in config
    assert "lora_dropout: 0.1" in config  # --lora-dropout reaches the run (TrainConfig's default is 0)
    assert capsys.readouterr().out.count("  ran toolcall ") == 2
    # a later session reads the kept runs back: nothing trains again
    shutil.rmtree(tmp_path / "out")
    assert sweep.main(argv)["rows"] == summary["rows"]
    assert "  ran toolcall " not in capsys.readouterr().out
    # --kept-only summarises what finished, training nothing: seed 1 was never run
    partial = sweep.main([*argv[:argv.index("--seeds") + 1], "0,1", *argv[argv.index("--seeds") + 2:], "--kept-only"])
    assert partial["rows"] == summary["rows"] and "  ran toolcall " not in capsys.readouterr().out
