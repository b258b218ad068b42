"""benchmarks/learning/heldout.py: paired held-out learning curves (the bootstrap interval's own
tests: test_stats.py). The runner trains each
(method, seed) in a fresh process through the real entry point, measures the held-out
examples along the way, writes the results file (settings, curves, paired rows) and keeps each
finished run beside it, from where a later session reads it back instead of training again."""
from __future__ import annotations

import json
import math

import pytest

from benchmarks.learning import heldout


def test_better_counts_are_the_discordant_examples_per_seed():
    diffs = [[1.0, 0.0, -1.0, 1.0, math.nan], [0.0, -0.5, -1.0, 0.0, 0.0]]  # [seed][example], a - b
    assert heldout.better_counts(diffs) == [[2, 1], [0, 2]]  # ties and NaN count for neither


def test_pairs_compare_mrtpo_with_gdpo_and_the_control():
    assert heldout.pairs_of(["gdpo", "mrtpo", "mrtpo-shuffled"]) == [
        ("mrtpo", "gdpo"), ("mrtpo", "mrtpo-shuffled"), ("mrtpo-shuffled", "gdpo")]
    assert heldout.pairs_of(["gdpo", "mrtpo"]) == [("mrtpo", "gdpo")]
    assert heldout.pairs_of(["gdpo", "mrtpo", "mrtpo-single"]) == [
        ("mrtpo", "gdpo"), ("mrtpo", "mrtpo-single"), ("mrtpo-single", "gdpo")]
    assert heldout.pairs_of(["grpo", "gdpo", "mrtpo"]) == [("mrtpo", "gdpo"), ("gdpo", "grpo"), ("mrtpo", "grpo")]


def test_the_runner_writes_paired_held_out_results_and_keeps_each_run(tmp_path, tiny_qwen2_dir, capsys):
    results = tmp_path / "results" / "learning-heldout-toolcall-tiny.json"
    argv = ["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--methods", "gdpo,mrtpo", "--seeds", "0,1",
            "--steps", "2", "--heldout", "4", "--heldout-every", "1", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "4", "--save-every", "1", "--threads", "1",
            "--out", str(tmp_path / "out"), "--json", str(results)]
    summary = heldout.main(argv)
    doc = json.loads(results.read_text())
    assert doc == json.loads(json.dumps(summary, allow_nan=False))  # what it returned, strict JSON
    s = doc["settings"]
    assert (s["task"], s["seeds"], s["steps"], s["heldout"], s["heldout_every"]) == ("toolcall", [0, 1], 2, 4, 1)
    assert s["model"] == str(tiny_qwen2_dir) and s["methods"] == ["gdpo", "mrtpo"] and s["heldout_examples"] == 4
    assert doc["metric"] == "ast_accuracy"
    assert doc["command"].startswith("python -m benchmarks.learning.heldout --model")
    assert doc["schema"] == "mrtpo.learning-heldout/1"  # its kind, declared for the results page
    # the held-out curve: steps 0, 1, 2, per seed and the mean over seeds
    curve = doc["curves"]["mrtpo"]["ast_accuracy"]
    assert curve["steps"] == [0, 1, 2] and len(curve["per_seed"]) == 2
    assert curve["mean"] == [pytest.approx((a + b) / 2) for a, b in zip(*curve["per_seed"])]
    # paired rows: the headline metric first, mrtpo - gdpo, an interval around the mean, per-seed differences
    row = doc["paired"][0]
    assert {k: row[k] for k in ("a", "b", "reward", "step", "seeds", "examples")} == {
        "a": "mrtpo", "b": "gdpo", "reward": "ast_accuracy", "step": 2, "seeds": 2, "examples": 4}
    assert row["low"] <= row["mean"] <= row["high"] and len(row["per_seed"]) == 2
    assert row["mean"] == pytest.approx(sum(row["per_seed"]) / 2)
    for seed_diff, (a_better, b_better) in zip(row["per_seed"], row["better"]):  # [a > b, b > a] per seed
        assert a_better + b_better <= 4 and (a_better - b_better) / 4 == pytest.approx(seed_diff)  # 0/1 metric
    assert {r["reward"] for r in doc["paired"]} == {"ast_accuracy", "format"}  # the metrics with per-example values
    assert results.with_suffix(".png").is_file()
    # the replay's share of the step, within each method's runs: MRTPO replays, GDPO does not
    assert 0 < doc["replay_share"]["mrtpo"] < 1 and doc["replay_share"]["gdpo"] < 0.01
    # each finished run is kept beside the results: its config, training curves and held-out curve
    kept = results.with_suffix("") / "mrtpo" / "seed1"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "heldout.json", "metrics.jsonl", "provenance.json"]
    made = json.loads((kept / "provenance.json").read_text())  # the commit and CPU it finished on
    assert set(made) == {"commit", "cpu"} and made["cpu"] and doc["provenance"]["mrtpo"]["1"] == made
    assert [p["step"] for p in json.loads((kept / "heldout.json").read_text())["_curve"]] == [0, 1, 2]
    out = capsys.readouterr().out
    assert out.count("  ran toolcall ") == 4 and "mrtpo - gdpo" in out

    # a later session without the training runs reads the kept ones back: nothing trains again
    import shutil

    shutil.rmtree(tmp_path / "out")
    again = heldout.main(argv)
    assert "  ran toolcall " not in capsys.readouterr().out
    assert again["paired"] == summary["paired"] and again["curves"] == summary["curves"]
    # ...unless the settings differ: a kept run is never mixed into another comparison
    with pytest.raises(SystemExit, match="holds a run with other settings.*lr"):
        heldout.main([*argv, "--lr", "0.5"])

    # --kept-only: while a run is still missing, the part result pairs each two methods on the
    # seeds both finished and trains nothing
    shutil.rmtree(results.with_suffix("") / "mrtpo" / "seed0")
    part = heldout.main([*argv, "--kept-only"])
    out = capsys.readouterr().out
    assert "  ran toolcall " not in out and not (tmp_path / "out").exists()
    assert "kept runs: gdpo seeds [0, 1]; mrtpo seeds [1]" in out and "a part result" in out
    row = part["paired"][0]
    assert (row["seeds"], row["seed_ids"]) == (1, [1]) and part["curves"]["mrtpo"]["ast_accuracy"]["seeds"] == [1]
    assert row["per_seed"] == [summary["paired"][0]["per_seed"][1]]  # seed 1's difference, as before
    assert part["curves"]["gdpo"] == summary["curves"]["gdpo"]
    with pytest.raises(SystemExit):
        heldout.main([a for a in argv if a not in ("--json", str(results))] + ["--kept-only"])
    assert "--kept-only reads the runs kept beside --json: give --json" in capsys.readouterr().err
