"""benchmarks/experiments/one_step.py: the paired one-step test's plumbing on a tiny model.

Every method steps from the same weights on the same batch (the weights are put back after
each), the effects are read off a shared pool, and a rerun goes on from the batches already
written (its Student-t interval: test_stats.py)."""
from __future__ import annotations

import json

import harness_task
import pytest
import torch

from benchmarks.experiments import one_step as one_step_module
from mrtpo.tasks.base import Example, Reward, Task, Verdict


@pytest.fixture(scope="module")
def one_step():
    return one_step_module


def test_effects_are_importance_weighted_changes(one_step):
    # one prompt, 4 pool completions; the new policy doubles the weight of the two that score 1
    start = torch.log(torch.tensor([0.25, 0.25, 0.25, 0.25]))
    new = torch.log(torch.tensor([0.5, 0.5, 0.0001, 0.0001]))
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    out = one_step.effects(new, start, {"format": r}, group_size=4)
    # mean of (rho - 1)(r - 0.5): rho = 2, 2, ~0, ~0 -> (0.5 + 0.5 + 0.5 + 0.5) / 4
    assert out["format"] == pytest.approx(0.5, abs=1e-3)
    assert out["kl"] > 0
    same = one_step.effects(start, start, {"format": r}, group_size=4)
    assert same == {"format": 0.0, "kl": 0.0}


@pytest.mark.parametrize("rows_per_pass", [32, 3, 2])
def test_sequence_logps_are_each_completions_own_sum(one_step, tiny_qwen2_dir, rows_per_pass):
    """Passes of several prompts' groups (their shared beginning once), of one group, and of
    two rows (a group cut): every completion's log-probability is the sum over its tokens of
    a forward of its own prompt and completion."""
    from mrtpo.harness.forward import token_logps
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import Rollout

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.normal_(0, 0.1, generator=g)
    common = torch.randint(3, 300, (6,), generator=g).tolist()
    prompts = [common + torch.randint(3, 300, (k,), generator=g).tolist() for k in (3, 5)]
    responses = [torch.randint(3, 300, (k,), generator=g).tolist() for k in (4, 6, 2, 5, 1, 3)]
    roll = Rollout(examples=[None] * 6, prompts=[""] * 6, prompt_ids=[prompts[i // 3] for i in range(6)],
                   response_ids=responses, responses=[""] * 6, truncated=[False] * 6, group_size=3)
    got = one_step.sequence_logps(policy, roll, 0.7, rows_per_pass=rows_per_pass)
    for i in range(6):
        own = Rollout(examples=[None], prompts=[""], prompt_ids=[roll.prompt_ids[i]], response_ids=[responses[i]],
                      responses=[""], truncated=[False], group_size=1)
        b = own.batch(policy.pad_id)
        with torch.no_grad(), policy.merged() as model:
            model.eval()
            logp, _ = token_logps(model, b.input_ids, b.attention_mask, b.position_ids, len(responses[i]), 0.7)
        assert float(got[i]) == pytest.approx(float(logp.sum()), abs=1e-4)


def test_every_method_steps_from_the_same_start_and_a_rerun_goes_on(one_step, tiny_qwen2_dir, tmp_path):
    harness_task.register()  # graded rewards: a random tiny model's groups spread, so there is credit
    args = ["--model", str(tiny_qwen2_dir), "--task", "harness-words", "--pool", "3", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "6", "--lr", "0.01", "--out", str(tmp_path / "b.jsonl"),
            "--json", str(tmp_path / "s.json")]
    doc = one_step.main(args + ["--batches", "2"])
    assert doc["settings"]["batches"] == 2
    methods = doc["settings"]["methods"]
    # the task says no reward spans; mrtpo-bf16-sampled is asked for by name only
    assert methods == [m for m in one_step.METHODS if m not in ("oracle", "mrtpo-bf16-sampled")]
    rewards = {r["reward"] for r in doc["rows"]}
    assert {"format", "short", "letters", "total", "kl", "param_norm"} <= rewards
    assert {(p["a"], p["b"]) for p in doc["paired"]} >= {("mrtpo", "gdpo"), ("mrtpo", "mrtpo-shuffled")}
    lines = (tmp_path / "b.jsonl").read_text().splitlines()
    first = [json.loads(x) for x in lines[1:]]
    assert [r["batch"] for r in first] == [0, 1]
    for rec in first:
        norms = rec["param_norm"]
        assert not rec["flat"]
        # Adam's first step: every weight with a gradient moves by lr, whatever the advantages
        assert norms["gdpo"] > 0 and norms["mrtpo"] == pytest.approx(norms["gdpo"], rel=0.05)
        assert rec["effects"]["mrtpo"]["kl"] > 0
        assert rec["effects"]["mrtpo"]["total"] != rec["effects"]["gdpo"]["total"]  # placement moved it
    # a rerun with more batches keeps the two written and adds one
    doc = one_step.main(args + ["--batches", "3"])
    again = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()[1:]]
    assert again[:2] == first and len(again) == 3 and doc["settings"]["batches"] == 3
    # the same settings from scratch give the same numbers (seeded), so the start is shared
    one_step.main(args[:-4] + ["--out", str(tmp_path / "c.jsonl"), "--batches", "2"])
    fresh = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()[1:]]
    for a, b in zip(first, fresh):
        for m in methods:
            assert a["effects"][m] == pytest.approx(b["effects"][m], rel=1e-4, abs=1e-7)


def test_the_bf16_sampled_arm_is_mrtpos_step_on_the_copys_batch_with_the_correction(one_step, tiny_qwen2_dir):
    """mrtpo-bf16-sampled draws the trainer's row-seeded batch from a copy of the weights and
    steps with TRL's correction on it. From a float32 "copy" it draws what mrtpo's batch holds,
    every ratio is 1, and its step is mrtpo's; from a bfloat16 copy it is another batch, whose
    correction statistics the record keeps."""
    from mrtpo.harness.config import TrainConfig
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.scoring import Scorer
    from mrtpo.tasks import get_task

    harness_task.register()
    task = get_task("harness-words")
    cfg = TrainConfig(model=str(tiny_qwen2_dir), task="harness-words", batch_prompts=2, num_generations=3,
                      max_new_tokens=6, lr=0.01, verify_workers=0)
    torch.manual_seed(0)
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    methods = ["mrtpo", "mrtpo-bf16-sampled"]
    same = one_step.run_batch(policy, task, Scorer(task, 0), task.load()[:2], cfg, pool=3, methods=methods,
                              seed=5, copy_dtype=torch.float32)
    assert not same["flat"]
    arm = same["bf16_sampled"]
    assert arm["same_completions"] == arm["completions"] == 6
    assert arm["sampling/sampling_logp_difference/max"] < 1e-4
    assert same["effects"]["mrtpo-bf16-sampled"] == pytest.approx(same["effects"]["mrtpo"], rel=1e-3, abs=1e-7)
    assert same["param_norm"]["mrtpo-bf16-sampled"] == pytest.approx(same["param_norm"]["mrtpo"], rel=1e-4)
    low = one_step.run_batch(policy, task, Scorer(task, 0), task.load()[:2], cfg, pool=3, methods=methods, seed=5)
    assert low["effects"]["mrtpo"] == same["effects"]["mrtpo"]  # the float32 arm is drawn alike either way
    assert low["bf16_sampled"]["sampling/sampling_logp_difference/max"] > 1e-4  # bf16 rounding moved them
    assert {"sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max"} <= set(low["bf16_sampled"])
    summary = one_step.bf16_summary([same, low, {"flat": True}])  # what the results file keeps of the arm
    assert (summary["same_completions"], summary["completions"]) == (6 + low["bf16_sampled"]["same_completions"], 12)
    assert summary["logp_difference_max"] == low["bf16_sampled"]["sampling/sampling_logp_difference/max"]
    assert summary["ratio_min"] <= 1 <= summary["ratio_max"]


def test_other_settings_are_not_mixed_into_a_results_file(one_step, tiny_qwen2_dir, tmp_path):
    args = ["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--pool", "2", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "4", "--out", str(tmp_path / "b.jsonl"),
            "--batches", "1", "--methods", "gdpo,mrtpo"]
    one_step.main(args)
    with pytest.raises(SystemExit, match="holds batches of other settings"):
        one_step.main(args[:-2] + ["--methods", "grpo,mrtpo"])


class Alike(Task):
    """Every response scores 1: every group scores its reward alike, so there is no credit."""

    name = "alike"

    def load(self, path=None, split=None):
        return [Example(id=str(i), prompt=f"Say something about {w}.") for i, w in enumerate(["tea", "rain"])]

    def rewards(self, example):
        return [Reward("any", lambda ex, r: Verdict(1.0), lambda ex, v: "Anything scores 1.")]


def test_a_batch_without_credit_records_zero_steps_and_samples_no_pool(one_step, tiny_qwen2_dir):
    from mrtpo.harness.config import TrainConfig
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.scoring import Scorer

    task = Alike()
    cfg = TrainConfig(model=str(tiny_qwen2_dir), task="toolcall", batch_prompts=2, num_generations=2,
                      max_new_tokens=4, verify_workers=0)
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4)
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    rec = one_step.run_batch(policy, task, Scorer(task, 0), task.load(), cfg, pool=64, methods=["gdpo", "mrtpo"],
                             seed=1)
    assert rec["flat"] and rec["pool_means"] == {}
    assert rec["effects"] == {m: {"any": 0.0, "total": 0.0, "kl": 0.0} for m in ("gdpo", "mrtpo")}
    assert rec["param_norm"] == {"gdpo": 0.0, "mrtpo": 0.0}
    assert all(torch.equal(a, b) for a, b in zip(before, policy.trainable_parameters()))


def test_a_built_in_policys_task_options_stay_with_its_own_task(one_step):
    """smollm2-135m's train defaults carry toolcall's -o demo=true: toolcall gets it, another
    task does not (instruct has no such option), and -o adds to what the task gets."""
    def cfg(*argv):
        return one_step.config_for(one_step.parser().parse_args(["--model", "smollm2-135m", *argv]))

    assert cfg("--task", "toolcall").task_args == {"demo": True}
    assert cfg("--task", "instruct").task_args == {}
    assert cfg("--task", "text2sql", "-o", "demo=true").task_args == {"demo": True}
    assert cfg("--task", "text2sql").lr == 5e-05 and cfg("--task", "text2sql").num_generations == 4


def test_rewards_that_vary_per_prompt_are_summarised_by_their_total(one_step):
    recs = [{"effects": {"gdpo": {"a": 0.1, "b": 0.2, "total": 0.3, "kl": 0.01}}},
            {"effects": {"gdpo": {"a": 0.1, "c": 0.2, "total": 0.3, "kl": 0.01}}}]
    assert one_step.common_rewards(recs, "gdpo") == ["a", "total"]
    assert one_step.common_rewards(recs[:1], "gdpo") == ["a", "b", "total"]


def test_combine_pools_the_batches_of_other_seeds_and_refuses_what_would_not_pool(one_step, tiny_qwen2_dir,
                                                                                  tmp_path):
    """--combine: files that differ only in the seed pool into one summary (batches of each, in
    order); the same seed twice, or other settings, are refused naming the file."""
    harness_task.register()
    base = ["--model", str(tiny_qwen2_dir), "--task", "harness-words", "--pool", "3", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "6", "--lr", "0.01", "--methods", "gdpo,mrtpo"]
    for seed, batches in (("1", "2"), ("2", "1")):
        one_step.main(base + ["--seed", seed, "--batches", batches, "--out", str(tmp_path / f"s{seed}.jsonl")])
    one_step.main(base + ["--seed", "3", "--batches", "1", "--pool", "2", "--out", str(tmp_path / "other.jsonl")])
    files = [str(tmp_path / "s1.jsonl"), str(tmp_path / "s2.jsonl")]
    doc = one_step.main(["--combine", *files, "--json", str(tmp_path / "pooled.json")])
    assert doc["settings"]["batches"] == 3 and doc["settings"]["seed"] == [1, 2]
    sources = doc["settings"]["sources"]
    assert [(x["file"], x["seed"], x["batches"]) for x in sources] == [("s1.jsonl", 1, 2), ("s2.jsonl", 2, 1)]
    assert all(x["seconds_per_batch"] > 0 for x in sources)
    records = [json.loads(x) for f in files for x in open(f).read().splitlines()[1:]]
    want = one_step.summarise(records, ["gdpo", "mrtpo"], one_step.common_rewards(records, "gdpo"))
    assert (doc["rows"], doc["paired"]) == want
    assert json.loads((tmp_path / "pooled.json").read_text())["settings"]["batches"] == 3
    with pytest.raises(SystemExit, match="s1.jsonl has seed 1"):
        one_step.main(["--combine", files[0], files[0]])
    with pytest.raises(SystemExit, match=r"other.jsonl was run with other settings .*\(pool\)"):
        one_step.main(["--combine", files[0], str(tmp_path / "other.jsonl")])
    with pytest.raises(SystemExit, match="missing.jsonl is not a batch file"):
        one_step.main(["--combine", files[0], str(tmp_path / "missing.jsonl")])


def test_combine_takes_a_file_that_stopped_before_its_first_batch(one_step, tmp_path):
    """A run killed before any batch leaves its settings line alone: it pools as no batches."""
    settings = {"model": "m", "task": "t", "pool": 2, "methods": ["gdpo", "mrtpo"], "seed": 1}
    (tmp_path / "a.jsonl").write_text(json.dumps({"settings": settings}) + "\n")
    records, got = one_step.combine([str(tmp_path / "a.jsonl")])
    assert records == [] and got["sources"] == [{"file": "a.jsonl", "seed": 1, "batches": 0,
                                                 "seconds_per_batch": None}]


def test_combine_refuses_what_is_not_a_batch_file_naming_file_and_line(one_step, tmp_path):
    """A summary passed for a batch file, a damaged line, or a line that is no batch record: one
    line naming the file (and line), not a KeyError or a JSON traceback."""
    settings = {"model": "m", "task": "t", "pool": 2, "methods": ["gdpo", "mrtpo"], "seed": 1}
    batch = {"effects": {"gdpo": {"total": 0.1, "kl": 0.0}}, "seconds": {"batch": 1.0}, "flat": False}
    cases = {
        "summary.json": json.dumps({"settings": {"task": "t"}, "rows": []}) + "\n",  # --json's output
        "damaged.jsonl": json.dumps({"settings": settings}) + "\n" + json.dumps(batch) + "\n{\"effects\": {\n",
        "other.jsonl": json.dumps({"settings": settings}) + "\n" + json.dumps([1, 2]) + "\n",
    }
    want = {"summary.json": "summary.json's first line holds no run settings",
            "damaged.jsonl": "damaged.jsonl line 3 is not JSON",
            "other.jsonl": "other.jsonl line 2 is not a batch record"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(SystemExit, match=want[name]):
            one_step.combine([str(tmp_path / name)])


def test_start_steps_every_method_from_a_checkpoints_adapter(one_step, tiny_qwen2_dir, tmp_path):
    """`--start CHECKPOINT`: the policy every method steps from is the run's, not a fresh LoRA
    (its batch's completions differ from a fresh start's; the settings name the checkpoint)."""
    from mrtpo.harness import TrainConfig, train

    harness_task.register()
    run = tmp_path / "run"
    train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(run), task="harness-words", steps=2, lr=0.05,
                      batch_prompts=2, num_generations=2, max_new_tokens=6, verify_workers=0, save_every=2,
                      heldout=0, log_completions_every=0, seed=0))
    ckpt = run / "checkpoints" / "step-000002"
    args = ["--model", str(tiny_qwen2_dir), "--task", "harness-words", "--pool", "3", "--batch-prompts", "2",
            "--num-generations", "2", "--max-new-tokens", "6", "--lr", "0.01", "--batches", "1",
            "--methods", "gdpo,mrtpo"]
    fresh = one_step.main(args + ["--out", str(tmp_path / "fresh.jsonl")])
    started = one_step.main(args + ["--out", str(tmp_path / "start.jsonl"), "--start", str(ckpt)])
    assert started["settings"]["start"] == "checkpoints/step-000002" and "start" not in fresh["settings"]
    a, b = (json.loads((tmp_path / f).read_text().splitlines()[1]) for f in ("fresh.jsonl", "start.jsonl"))
    assert a["train_means"] != b["train_means"] or a.get("pool_means") != b.get("pool_means")
