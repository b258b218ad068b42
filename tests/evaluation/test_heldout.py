"""The held-out before/after of `mrtpo train`: before step 1 and after the last
step the policy is scored greedily on held-out examples with the task's official metric (the
numbers `mrtpo eval TASK --model` gives), printed as the run's last line and written to
`<run>/heldout.json`; the held-out examples are never trained on; a resumed run keeps the
before it measured; each phase prints a progress line in a log."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app

harness_task.register()
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MRTPO_PROGRESS_SECONDS": "0"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _data(path, n=12):
    rows = [{"prompt": f"Row {i}: write the word {w} in lowercase inside <answer></answer> tags.", "word": w}
            for i, w in enumerate((harness_task.WORDS * 2)[:n])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(model, run, *extra):
    args = ["train", "--model", str(model), "--task", "harness-words", "--steps", "2", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "6", "--verify-workers", "0", "--lora-r", "4",
            "--lr", "0.05", "--log-completions-every", "1", "--output-dir", str(run), *extra]
    r = CliRunner().invoke(app, args, env=ENV, prog_name="mrtpo")
    return r, ANSI.sub("", r.output)


def test_train_measures_before_and_after_with_the_official_metric(tiny_qwen2_dir, tmp_path):
    data = _data(tmp_path / "words.jsonl")
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "3")
    assert r.exit_code == 0, out
    doc = json.loads((run / "heldout.json").read_text())
    metrics = {k: v for k, v in doc.items() if not k.startswith("_")}
    # harness-words has no benchmark of its own: `mrtpo eval`'s reward means (generic.py)
    assert set(metrics) == {"reward", "rewards/format/mean", "rewards/short/mean", "rewards/letters/mean",
                            "rewards/word/mean"}
    for entry in metrics.values():
        assert set(entry) == {"before", "after"}
        assert 0.0 <= entry["before"] <= 2.5 and 0.0 <= entry["after"] <= 2.5
    assert doc["_examples"] == 3 and doc["_example_ids"] == ["9", "10", "11"]  # the last 3 rows
    assert doc["_max_new_tokens"] == 6 and doc["_after_step"] == 2 and doc["_before_step"] == 0
    # the run's last line: each metric before -> after
    last = out.strip().splitlines()[-1]
    assert last.startswith("held-out (3 examples, greedy): reward ")
    assert f"reward {metrics['reward']['before']:.2f} -> {metrics['reward']['after']:.2f}" in last
    # never trained on: no logged completion answers a held-out prompt
    trained = {json.loads(line)["example_id"] for line in (run / "completions.jsonl").read_text().splitlines()}
    assert trained and not trained & {"9", "10", "11"}

    # the same numbers as `mrtpo eval --model RUN` on the held-out rows (one metric path)
    held_file = tmp_path / "held.jsonl"
    held_file.write_text("".join(line + "\n" for line in data.read_text().splitlines()[-3:]))
    r = CliRunner().invoke(app, ["eval", "harness-words", "--model", str(run), "--data", str(held_file),
                                 "--max-new-tokens", "6", "--json", "--no-progress"], env=ENV)
    assert r.exit_code == 0, r.output
    evaluated = json.loads(r.stdout)["metrics"]
    assert {k: v["after"] for k, v in metrics.items()} == pytest.approx(evaluated, abs=1e-9)

    # the before and after points keep the answers (in the order of _example_ids), which score
    # the same through `mrtpo eval --responses --heldout` once the checkpoints are gone
    for point, when in ((doc["_curve"][0], "before"), (doc["_curve"][-1], "after")):
        texts = point["_responses"]
        assert len(texts) == 3 and all(isinstance(t, str) for t in texts)
        answers = tmp_path / f"{when}.jsonl"
        answers.write_text("".join(json.dumps({"id": i, "response": t}) + "\n"
                                   for i, t in zip(doc["_example_ids"], texts)))
        r = CliRunner().invoke(app, ["eval", "harness-words", "--responses", str(answers), "--data", str(data),
                                     "--heldout", "3", "--json"], env=ENV)  # the run's held-out rows, by id
        assert r.exit_code == 0, r.output
        rescored = json.loads(r.stdout)["metrics"]
        assert {k: v[when] for k, v in metrics.items()} == pytest.approx(rescored, abs=1e-9)


def test_each_phase_prints_a_line_in_a_log(tiny_qwen2_dir, tmp_path):
    r, _ = _train(tiny_qwen2_dir, tmp_path / "run", "--data", str(_data(tmp_path / "w.jsonl")), "--heldout", "2")
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("train: ")]
    assert lines[0].startswith("train: loading model")
    assert lines[1] == "train: held-out before training: 2 examples, greedy, the task's official metric"
    assert lines[2] == "train: held-out before training: prompt 0/2"  # the generation's own progress
    assert re.fullmatch(r"train: held-out before training: prompt 2/2 \| [\d.]+ s/prompt \| ETA 0s", lines[3])
    assert re.fullmatch(r"train: held-out before training: reward [\d.]+, rewards/format/mean [\d.]+, .* \([\d.]+ s\)",
                        lines[4])
    assert lines[5] == "train: step 0/2 | sampling"
    assert re.fullmatch(r"train: step 1/2 \| [\d.]+ s/step \| ETA \d+s \| reward .*", lines[6])
    # the last step's measurement comes before its line: its eval/... metrics are in that line's record
    assert lines[7] == "train: held-out after training: 2 examples, greedy, the task's official metric"
    assert lines[-2].startswith("train: held-out after training: reward ")
    assert lines[-1].startswith("train: step 2/2 | ")


def test_heldout_zero_trains_on_every_example_and_writes_nothing(tiny_qwen2_dir, tmp_path):
    data = _data(tmp_path / "words.jsonl", n=8)
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "0", "--steps", "4")
    assert r.exit_code == 0, out
    assert not (run / "heldout.json").exists() and "held-out" not in out
    trained = {json.loads(line)["example_id"] for line in (run / "completions.jsonl").read_text().splitlines()}
    assert len(trained) == 8  # 4 steps x 2 prompts: one epoch over all 8 rows


def test_a_small_sample_holds_out_at_most_a_quarter(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--heldout", "32", "--steps", "1")  # the bundled 8 examples
    assert r.exit_code == 0, out
    doc = json.loads((run / "heldout.json").read_text())
    assert doc["_examples"] == 2 and doc["_example_ids"] == ["w6", "w7"]
    assert "held-out (2 examples, greedy): " in out


def test_eval_data_is_held_out_and_the_training_data_stays_whole(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "run"
    held = _data(tmp_path / "held.jsonl", n=3)
    r, out = _train(tiny_qwen2_dir, run, "--eval-data", str(held), "--heldout", "5", "--steps", "4")
    assert r.exit_code == 0, out
    doc = json.loads((run / "heldout.json").read_text())
    assert doc["_examples"] == 3 and "--eval-data" in doc["_source"]
    trained = {json.loads(line)["example_id"] for line in (run / "completions.jsonl").read_text().splitlines()}
    assert len(trained) == 8  # the bundled sample, all of it


def test_resume_keeps_the_before_and_measures_the_after_again(tiny_qwen2_dir, tmp_path):
    data = _data(tmp_path / "words.jsonl")
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "2", "--steps", "1", "--save-every", "1")
    assert r.exit_code == 0, out
    first = json.loads((run / "heldout.json").read_text())
    doc = dict(first, reward={"before": 0.123456, "after": first["reward"]["after"]})  # marks the saved before
    (run / "heldout.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["train", "--resume", "--output-dir", str(run), "--steps", "2"], env=ENV)
    assert r.exit_code == 0, r.output
    again = json.loads((run / "heldout.json").read_text())
    assert again["reward"]["before"] == 0.123456  # not measured again at step 1
    assert again["_after_step"] == 2
    assert "held-out before training" not in r.stderr and "held-out after training" in r.stderr


def test_a_run_saved_before_heldout_existed_resumes_without_it(tiny_qwen2_dir, tmp_path):
    """A config.yaml written without the setting trained on all its data: resuming keeps it so."""
    data = _data(tmp_path / "words.jsonl")
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "0", "--steps", "1")
    assert r.exit_code == 0, out
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["heldout"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    r = CliRunner().invoke(app, ["train", "--resume", "--output-dir", str(run), "--steps", "2"], env=ENV)
    assert r.exit_code == 0, r.output
    assert not (run / "heldout.json").exists()
    assert yaml.safe_load((run / "config.yaml").read_text())["heldout"] == 0


def test_measuring_leaves_training_unchanged(tiny_qwen2_dir, tmp_path):
    """The measurement is greedy and restores the random state: the run with it trains exactly
    as the run without it (the same examples held out), step for step."""
    from mrtpo.evaluation.heldout import measure
    from mrtpo.harness import TrainConfig, train

    data = _data(tmp_path / "words.jsonl")
    kw = dict(model=str(tiny_qwen2_dir), task="harness-words", data=str(data), steps=2, batch_prompts=2,
              num_generations=2, max_new_tokens=6, verify_workers=0, lora_r=4, lr=0.05, heldout=3,
              lora_dropout=0.1, log_completions_every=0)
    with_ = train(TrainConfig(output_dir=str(tmp_path / "a"), **kw), measure=measure)
    without = train(TrainConfig(output_dir=str(tmp_path / "b"), **kw))
    assert with_.heldout is not None and without.heldout is None
    assert not (tmp_path / "b" / "heldout.json").exists()
    for a, b in zip(with_.history, without.history):
        assert a["reward"] == b["reward"] and a["loss"] == b["loss"]


def _counting(calls: list):
    """The official metric, each call's label (`held-out at step 2`...) appended to `calls`."""
    from mrtpo.evaluation.heldout import measure

    def counting(*args, description: str, **kwargs):
        calls.append(description)
        return measure(*args, description=description, progress=False, **kwargs)

    return counting


def test_heldout_every_writes_a_curve_and_a_resumed_run_measures_no_step_twice(tiny_qwen2_dir, tmp_path):
    """--heldout-every 2 over 3 steps: points at 0, 2 and 3 (the last), each with every example's
    value; the before and after are the first and last points. A run resumed from an earlier
    checkpoint keeps the points it has; one trained further measures only the new steps."""
    from mrtpo.evaluation.report import mean
    from mrtpo.harness import TrainConfig, train

    data = _data(tmp_path / "words.jsonl")
    run = tmp_path / "run"
    kw = dict(model=str(tiny_qwen2_dir), task="harness-words", data=str(data), batch_prompts=2,
              num_generations=2, max_new_tokens=6, verify_workers=0, lora_r=4, lr=0.05, heldout=3,
              heldout_every=2, save_every=1, log_completions_every=0, output_dir=str(run))
    calls: list[str] = []
    result = train(TrainConfig(steps=3, **kw), measure=_counting(calls))
    assert calls == ["held-out before training", "held-out at step 2", "held-out after training"]
    doc = json.loads((run / "heldout.json").read_text())
    assert result.heldout == doc
    curve = doc["_curve"]
    assert [p["step"] for p in curve] == [0, 2, 3] and doc["_every"] == 2
    metrics = [k for k in doc if not k.startswith("_")]
    for name in metrics:  # the before/after form stays, and is the curve's first and last point
        assert doc[name] == {"before": curve[0][name], "after": curve[-1][name]}
    for point in curve:  # each example's value, in the order of _example_ids; the metric is their mean
        per = point["_per_example"]
        assert set(per) == set(metrics)
        for name, values in per.items():
            assert len(values) == 3 and point[name] == pytest.approx(mean(v for v in values if v is not None))

    # resumed from step 2's checkpoint (as after a crash): step 3 trains again, nothing is measured again
    import shutil

    shutil.rmtree(run / "checkpoints" / "step-000003")
    doc["_curve"][-1]["reward"] = 0.123456  # marks the saved point at step 3
    (run / "heldout.json").write_text(json.dumps(doc))
    calls.clear()
    train(TrainConfig(steps=3, resume=True, **kw), measure=_counting(calls))
    assert calls == []
    assert json.loads((run / "heldout.json").read_text())["_curve"][-1]["reward"] == 0.123456
    # step 3's line, written again, has the eval/... of the measurement that stands
    step3 = json.loads((run / "metrics.jsonl").read_text().splitlines()[2])
    assert {k: v for k, v in step3.items() if k.startswith("eval/")} == doc["_curve"][-1]["_eval"] != {}

    # trained on to step 6: the points of steps 4 and 6 only
    train(TrainConfig(steps=6, resume=True, **kw), measure=_counting(calls))
    assert calls == ["held-out at step 4", "held-out after training"]
    doc = json.loads((run / "heldout.json").read_text())
    assert [p["step"] for p in doc["_curve"]] == [0, 2, 3, 4, 6] and doc["_after_step"] == 6


def test_a_measure_without_per_example_gives_means_only(tiny_qwen2_dir, tmp_path):
    """A caller's own metric, which knows nothing of per-example values, still works: the curve
    holds its means."""
    from mrtpo.harness import TrainConfig, train

    def means_only(model, tokenizer, task, examples, max_new_tokens, description):
        return {"score": float(len(examples))}

    run = tmp_path / "run"
    train(TrainConfig(model=str(tiny_qwen2_dir), task="harness-words", data=str(_data(tmp_path / "w.jsonl")),
                      steps=2, batch_prompts=2, num_generations=2, max_new_tokens=4, verify_workers=0, lora_r=4,
                      heldout=2, heldout_every=1, log_completions_every=0, output_dir=str(run)), measure=means_only)
    doc = json.loads((run / "heldout.json").read_text())
    assert doc["_curve"] == [{"step": 0, "score": 2.0}, {"step": 1, "score": 2.0}, {"step": 2, "score": 2.0}]
    assert doc["score"] == {"before": 2.0, "after": 2.0}


@pytest.mark.parametrize("task_name", ["text2sql", "toolcall", "instruct", "harness-words"])
def test_per_example_values_average_to_the_metrics(task_name):
    """Each task's per-example values (what a bootstrap over examples resamples) are the
    examples' shares of the metrics that are means over examples, in the examples' order."""
    from mrtpo.evaluation.report import mean
    from mrtpo.evaluation.run import per_example, score
    from mrtpo.tasks import get_task

    task = get_task(task_name)
    examples = task.load(None)[:6]
    right = {"text2sql": lambda ex: f"```sql\n{ex.data['gold']}\n```",  # some right, some not
             "harness-words": lambda ex: f"<answer>{ex.data['word']}</answer>"}.get(task_name, lambda ex: "no")
    responses = [right(ex) if i % 2 else "no answer" for i, ex in enumerate(examples)]
    report = score(task, examples, responses)
    values = per_example(task, report)
    assert values and set(values) <= set(report.metrics)
    assert next(iter(values)) == next(iter(report.metrics))  # the headline metric has them
    for name, xs in values.items():
        assert len(xs) == len(examples)
        assert mean(x for x in xs if x is not None) == pytest.approx(report.metrics[name], abs=1e-12)
    if task_name == "text2sql":
        assert values["execution_accuracy"] == [0.0, 1.0] * 3


def _records(run):
    """metrics.jsonl's records without their timings."""
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_one_measurement_gives_the_official_metric_and_the_rewards_from_the_same_responses(tiny_qwen2_dir, tmp_path):
    """--eval-every 1: before step 1, after each step: one greedy generation on the --heldout
    examples, scored with the official metric (heldout.json's curve) and with the task's rewards
    (eval/... in that step's metrics.jsonl record, and in the point's `_eval`)."""
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(_data(tmp_path / "w.jsonl")), "--heldout", "3",
                    "--eval-every", "1")
    assert r.exit_code == 0, out
    doc = json.loads((run / "heldout.json").read_text())
    assert [p["step"] for p in doc["_curve"]] == [0, 1, 2] and doc["_every"] == 1
    records = _records(run)
    names = ("format", "short", "letters", "word")
    assert ["_responses" in p for p in doc["_curve"]] == [True, False, True]  # the before and after only
    for point in doc["_curve"]:
        evals = point["_eval"]
        assert {"eval/reward", "eval/completions/mean_length", "eval/completions/clipped_ratio"} <= set(evals)
        # harness-words' official metric is each reward's mean (`mrtpo eval`, generic.py): the
        # same numbers as the rewards' eval/... only when both scored the same responses
        assert evals["eval/reward"] == pytest.approx(point["reward"], abs=1e-6)  # float32 sums
        for name in names:
            assert evals[f"eval/rewards/{name}/mean"] == pytest.approx(point[f"rewards/{name}/mean"], abs=1e-6)
        if point["step"]:  # a step's record holds its measurement's eval/... (step 0 has no record)
            record = records[point["step"] - 1]
            assert {k: v for k, v in record.items() if k.startswith("eval/")} == evals
    assert 0 < records[-1]["eval/completions/mean_length"] <= 6  # --max-new-tokens 6, the stop token counted


def test_heldout_every_is_eval_every(tiny_qwen2_dir, tmp_path):
    """--heldout-every, the older flag, is the same setting: the same records, the same heldout.json,
    the same saved config; both at once are refused as two spellings of one setting."""
    data = _data(tmp_path / "w.jsonl")
    runs = {}
    for flag in ("--eval-every", "--heldout-every"):
        run = tmp_path / flag.strip("-")
        r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "3", flag, "1")
        assert r.exit_code == 0, out
        saved = yaml.safe_load((run / "config.yaml").read_text())
        runs[flag] = (_records(run), json.loads((run / "heldout.json").read_text()),
                      {k: v for k, v in saved.items() if k != "output_dir"})
    assert "eval/reward" in runs["--heldout-every"][0][0]
    assert runs["--heldout-every"] == runs["--eval-every"]
    assert saved["eval_every"] == 1 and "heldout_every" not in saved
    r, out = _train(tiny_qwen2_dir, tmp_path / "both", "--eval-every", "1", "--heldout-every", "2")
    assert r.exit_code == 2 and "--eval-every and --heldout-every name the same setting" in out


def test_a_config_written_before_the_merge_resumes(tiny_qwen2_dir, tmp_path):
    """A config.yaml of a run from before the two measurements were one (eval_every,
    eval_size and heldout_every side by side) resumes: heldout_every is the cadence, the
    examples held out stay the ones it trained without, and the config is saved anew."""
    data = _data(tmp_path / "w.jsonl")
    run = tmp_path / "run"
    r, out = _train(tiny_qwen2_dir, run, "--data", str(data), "--heldout", "3", "--steps", "1", "--save-every", "1")
    assert r.exit_code == 0, out
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved.update(eval_size=8, heldout_every=1, eval_every=0)  # as mrtpo wrote it before the merge
    (run / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    r = CliRunner().invoke(app, ["train", "--resume", "--output-dir", str(run), "--steps", "2"], env=ENV)
    assert r.exit_code == 0, r.output
    doc = json.loads((run / "heldout.json").read_text())
    assert [p["step"] for p in doc["_curve"]] == [0, 1, 2] and doc["_every"] == 1
    assert doc["_example_ids"] == ["9", "10", "11"]  # the same 3 held out
    assert "eval/reward" in _records(run)[-1]
    now = yaml.safe_load((run / "config.yaml").read_text())
    assert now["eval_every"] == 1 and now["heldout"] == 3 and not {"heldout_every", "eval_size"} & set(now)
