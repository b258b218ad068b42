"""benchmarks/speed/gpu.py's parts at smoke scale on CPU: the one-step test (one process per
task and seed, each writing its batches, stopped at a budget, each task's seeds summarised
together), the roofline, the learning runs, the decode equality check and the decode-graphs
part, and the order they run in."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.speed import gpu

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_one_step_part_runs_each_seed_and_summarises_them_together(tiny_qwen2_dir, tmp_path):
    args = SimpleNamespace(smoke=True, device="cpu", one_step_batches=1, one_step_budget=300.0,
                           one_step_tasks="instruct", one_step_seeds="1,2")
    done = gpu.one_step_part(str(tiny_qwen2_dir), args, tmp_path)
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
    assert done["instruct"]["exits"] == {"1": 0, "2": 0} and done["instruct"]["batches"] == {"1": 1, "2": 1}, logs
    doc = json.loads((tmp_path / "one-step-instruct-smollm2-135m-gpu.json").read_text())
    assert doc["settings"]["task"] == "instruct" and doc["settings"]["batches"] == 2
    assert doc["settings"]["seed"] == [1, 2] and doc["settings"]["dtype"] == "float32"
    assert doc["settings"]["methods"] == gpu.ONE_STEP_METHODS.split(",")
    assert {r["method"] for r in doc["rows"]} == {"mrtpo", "gdpo", "mrtpo-shuffled"}


def test_each_task_runs_its_cpu_runs_methods_so_their_batches_pool(tmp_path):
    """The GPU's batches carry the methods of the task's CPU run (toolcall's also ran the
    oracle), or `--combine` refuses to pool them."""
    args = SimpleNamespace(smoke=False, device="cuda", one_step_batches=5)
    results = BENCHMARKS / "results"
    for task in ("text2sql", "instruct", "toolcall"):
        command = gpu.one_step_command("smollm2-135m", args, tmp_path, task, "7")
        cpu = json.loads((results / f"one-step-{task}-smollm2-135m.batches.jsonl").read_text().splitlines()[0])
        assert command[command.index("--methods") + 1].split(",") == cpu["settings"]["methods"], task
        assert command[command.index("--pool") + 1] == str(cpu["settings"]["pool"]), task


def test_stopped_processes_keep_their_batches(tiny_qwen2_dir, tmp_path):
    args = SimpleNamespace(smoke=True, device="cpu", one_step_batches=100_000, one_step_budget=15.0,
                           one_step_tasks="instruct", one_step_seeds="1")
    done = gpu.one_step_part(str(tiny_qwen2_dir), args, tmp_path)
    got = done["instruct"]
    log = (tmp_path / "instruct-seed1.log").read_text()
    assert "Traceback" not in log, log[-2000:]
    assert got["exits"]["1"] != 0 and got["batches"]["1"] < 100_000  # stopped by the budget
    lines = (tmp_path / "one-step-instruct-seed1.jsonl").read_text().splitlines() if got["batches"]["1"] else []
    assert all(json.loads(x) for x in lines)  # whole lines only
    if got["batches"]["1"]:  # stopped after some batches: they are summarised
        doc = json.loads((tmp_path / "one-step-instruct-smollm2-135m-gpu.json").read_text())
        assert doc["settings"]["batches"] == got["batches"]["1"]
    else:
        assert got["summary"] is None


def test_the_roofline_part_fills_the_phase_table(tiny_qwen2_dir, tmp_path):
    args = SimpleNamespace(smoke=True, device="cpu", roofline_budget=600.0)
    path = gpu.roofline_part(str(tiny_qwen2_dir), args, tmp_path)
    doc = json.loads((tmp_path / "roofline-smollm2-135m-cpu.json").read_text())
    assert path.endswith("roofline-smollm2-135m-cpu.json") and doc["machine"]["device"] == "cpu"
    assert [r["phase"] for r in doc["rows"]][:2] == ["prefill", "decode"]


def test_the_learning_part_runs_the_paired_heldout_runs(tiny_qwen2_dir, tmp_path):
    """gpu.py's learning part: heldout.py per (task, method, seed) in parallel, then one summary
    per task over its runs with their paired rows, under the task's -gpu name; then the same runs
    as a budget would have left them, one stopped after step 1: compared after step 1."""
    args = SimpleNamespace(smoke=True, device="cpu", learning_steps=2, learning_seeds="0", learning_budget=600.0,
                           learning_tasks="text2sql")
    out = gpu.learning_part(str(tiny_qwen2_dir), args, tmp_path, tmp_path / "train")
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("learning-*.log")}
    assert set(out["learning_exits"]) == {f"text2sql {m} seed 0" for m in gpu.LEARNING_METHODS}
    assert set(out["learning_exits"].values()) == {0}, logs
    got = out["learning"]["text2sql"]
    assert got["stopped_at"] == 2 and got["measured_steps"]["mrtpo seed 0"] == [0, 1, 2]
    assert got["compared_seeds"] == ["0"]
    name = gpu.learning_result("text2sql")
    assert name == "learning-heldout-text2sql-smollm2-135m-gpu.json" and got["summary"] == str(tmp_path / name)
    kept = tmp_path / name.removesuffix(".json") / "mrtpo" / "seed0"
    assert {p.name for p in kept.iterdir()} == {"config.yaml", "metrics.jsonl", "heldout.json", "provenance.json"}
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and "train" not in p.relative_to(tmp_path).parts]
    assert not [p for p in outside if p.suffix in (".safetensors", ".pt", ".bin")], "checkpoints stay in the train folder"
    doc = json.loads((tmp_path / name).read_text())
    assert doc["settings"]["seeds"] == [0] and doc["settings"]["task_args"]["questions"] == "single-table"
    assert {(r["a"], r["b"]) for r in doc["paired"]} >= {("mrtpo", "gdpo"), ("mrtpo", "mrtpo-shuffled")}
    assert {r["step"] for r in doc["paired"]} == {2}

    run = tmp_path / "train" / "learning" / "runs" / "text2sql" / "gdpo" / "seed0"  # stopped after step 1
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    held = json.loads((run / "heldout.json").read_text())
    held["_curve"] = [p for p in held["_curve"] if p["step"] <= 1]
    (run / "heldout.json").write_text(json.dumps(held))
    result = tmp_path / "stopped" / "result.json"
    common = gpu.heldout_flags(str(tiny_qwen2_dir), "text2sql", args, tmp_path / "train" / "learning", result)
    got = gpu.compare_runs(common, tmp_path / "train" / "learning", "text2sql", ["0"], result)
    assert got["stopped_at"] == 1 and got["summary"] == str(result)
    assert {r["step"] for r in json.loads(result.read_text())["paired"]} == {1}


def test_each_learning_task_runs_with_its_cpu_runs_settings():
    """The GPU's learning runs of instruct and toolcall are the CPU runs' (issue 58), so they
    measure the same question: the same task options, data, held-out source and token budget."""
    args = SimpleNamespace(smoke=False)
    flags = {t: gpu.heldout_flags("M", t, args, Path("learn"), Path("r.json")) for t in gpu.LEARNING_TASKS}
    assert "--batch-prompts" not in flags["instruct"]  # the recorded experiments' batch, as on CPU
    joined = {t: " ".join(f) for t, f in flags.items()}
    assert "-o prompts=generated -o fit_tokens=128 --eval-data ifeval --max-new-tokens 128" in joined["instruct"]
    assert "-o demo=true -o categories=simple_python --data bfcl_eval" in joined["toolcall"]
    assert all("--heldout 100 --heldout-every 25" in j for j in joined.values())
    assert gpu.parser().parse_args([]).learning_tasks.split(",") == ["toolcall", "instruct"]


def test_parts_run_in_the_order_of_their_value_to_a_short_lease():
    assert gpu.PARTS[:3] == ("smollm2-steps", "decode-equality", "learning")
    assert gpu.PARTS.index("learning") < gpu.PARTS.index("roofline") < gpu.PARTS.index("qwen")


def test_the_decode_equality_part_writes_its_figures(tiny_llama_dir, tmp_path):
    args = SimpleNamespace(smoke=True, device="cpu", decode_equality_budget=600.0)
    path = gpu.decode_equality_part(str(tiny_llama_dir), args, tmp_path)
    doc = json.loads((tmp_path / "decode-equality-smollm2-135m-cpu.json").read_text())
    assert path.endswith("decode-equality-smollm2-135m-cpu.json") and doc["results"]["float32"]["rows"] == 8


def _heldout_at(run_dir, steps):
    run_dir.mkdir(parents=True)
    curve = [{"step": s, "execution_accuracy": 0.0} for s in steps]
    (run_dir / "heldout.json").write_text(json.dumps({"_curve": curve}))
    return run_dir


def test_runs_stopped_at_other_steps_are_compared_at_the_last_step_all_measured(tmp_path):
    """A budget that stops paired runs mid-way: they are compared where every one was measured."""
    a = _heldout_at(tmp_path / "a", [0, 25, 50, 75])
    b = _heldout_at(tmp_path / "b", [0, 25, 50])
    assert gpu.last_common_step([a, b]) == 50
    assert gpu.last_common_step([a, _heldout_at(tmp_path / "c", [0])]) is None  # step 0 compares nothing
    assert gpu.last_common_step([a, tmp_path / "never-started"]) is None


def test_the_decode_graphs_part_writes_its_figures(tmp_path):
    args = SimpleNamespace(smoke=True, device="cpu", decode_graphs_budget=600.0)
    path = gpu.decode_graphs_part(args, tmp_path)
    doc = json.loads((tmp_path / "decode-graphs-cpu.json").read_text())
    assert path.endswith("decode-graphs-cpu.json") and {r["setting"] for r in doc["runs"]} == {"eager", "compiled"}


def test_skip_refuses_a_part_that_is_none():
    assert gpu.parser().parse_args(["--skip", "learning,roofline"]).skip == {"learning", "roofline"}
    with pytest.raises(SystemExit):
        gpu.parser().parse_args(["--skip", "learnign"])
    assert gpu.parser().parse_args(["--learning-tasks", "instruct"]).learning_tasks == "instruct"
    with pytest.raises(SystemExit):
        gpu.parser().parse_args(["--learning-tasks", "toolcal,instruct"])
