"""The training loop end to end on a tiny random model loaded from disk by path.

One step of each estimator combination (grpo, gdpo, SAW on each, with and without MRTPO)
runs and changes only the LoRA parameters; 4 steps straight equal 2 steps + resume + 2 steps
(metrics, completions and adapter weights); broken rewards, a missing model and missing data
stop with clear errors.
"""
from __future__ import annotations

import importlib.util
import json
import math

import harness_task
import pytest
import torch
from safetensors.torch import load_file

from mrtpo.harness import ConfigError, TrainConfig, train
from mrtpo.harness.data import DataError
from mrtpo.harness.policy import PolicyLoadError
from mrtpo.harness.run import checkpoints
from mrtpo.tasks.contract import RewardError

harness_task.register()

SMALL = dict(task="harness-words", batch_prompts=2, num_generations=2, max_new_tokens=8,
             verify_workers=0, lr=5e-3, lora_r=4, log_completions_every=1, save_every=0)


def _cfg(model_dir, out, **kw):
    return TrainConfig(model=str(model_dir), output_dir=str(out), **{**SMALL, **kw})


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("advantage, saw, mrtpo, extra", [
    ("grpo", "off", False, {}), ("grpo", "off", True, {"loss_type": "grpo"}),
    ("gdpo", "off", False, {"loss_type": "dr_grpo"}), ("gdpo", "off", True, {}),
    ("grpo", "reward", True, {"scale_rewards": "batch"}),
    ("gdpo", "advantage", False, {"gradient_checkpointing": True}),
])
def test_one_step_changes_only_lora_parameters(tiny_qwen2_dir, tmp_path, advantage, saw, mrtpo, extra):
    from transformers import AutoModelForCausalLM

    result = train(_cfg(tiny_qwen2_dir, tmp_path / "run", steps=1, advantage=advantage, saw=saw,
                        mrtpo=mrtpo, **extra))
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).state_dict()
    changed_lora, n_lora = 0, 0
    for name, p in result.policy.model.named_parameters():
        if "lora_" in name:
            n_lora += 1
            changed_lora += bool(p.detach().abs().sum() > 0) if "lora_B" in name else 0
        else:  # peft names base weights base_model.model.<name> (.base_layer for wrapped ones)
            key = name.replace("base_model.model.", "", 1).replace(".base_layer", "")
            assert torch.equal(p.detach(), base[key]), f"{name} changed"
    assert n_lora > 0 and changed_lora > 0  # lora_B starts at 0: it moved

    (record,) = _read(tmp_path / "run" / "metrics.jsonl")
    for key in ("reward", "reward_std", "frac_reward_zero_std", "rewards/short/mean", "rewards/short/std",
                "rewards/short/frac_zero_std", "completions/mean_length", "clip_ratio", "loss",
                "num_tokens", "completions/mean_terminated_length", "completions/min_terminated_length",
                "completions/max_terminated_length", "clip_ratio/low_min", "clip_ratio/high_max",
                "grad_norm", "time/generate", "time/verify", "time/replay", "time/update"):
        assert key in record, key
    assert ("mrtpo/short/top80_token_share" in record) == mrtpo

    rows = _read(tmp_path / "run" / "completions.jsonl")
    assert len(rows) == 4 and rows[0]["step"] == 1
    for row in rows:
        n = len(row["response_ids"])
        assert len(row["tokens"]) == n == len(row["token_advantages"])
        assert len(row["scores"]) == len(row["reward_names"]) == len(row["blocks"]) == len(row["credit"])
        # the tokens' advantages average to the response's advantage (MRTPO only moves credit)
        assert sum(row["token_advantages"]) / n == pytest.approx(row["advantage"], abs=1e-4)
        assert sum(row["credit"]) + row["offset"] == pytest.approx(row["advantage"], abs=1e-4)
        if mrtpo:
            assert all(len(d) == n for d in row["distances"])
            for w in row["token_weights"]:
                assert sum(w) / n == pytest.approx(1.0, abs=1e-4)
        else:
            assert row["distances"] is None and row["token_weights"] is None
    assert (tmp_path / "run" / "checkpoints" / "step-000001" / "adapter" / "adapter_model.safetensors").is_file()


def test_zero_credit_pairs_are_not_replayed_and_the_advantages_stay(tiny_qwen2_dir):
    """`mrtpo_step`, the step `mrtpo train` and the TRL integration share: a step that does not
    log its completions skips the (completion, reward) pairs whose credit is exactly 0 (their
    q is 0); every other q and the token advantages are those of replaying every reward, which
    a logging step and `replay_zero_credit` do. The random policy's groups score `word` and
    `format` alike, so there are pairs to skip. An empty completion (TRL masks truncated ones
    out) is not replayed."""
    from mrtpo.advantages import estimate
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.scoring import Scorer
    from mrtpo.harness.token_credit import logs_completions, mrtpo_step, policy_replayer
    from mrtpo.tasks import get_task

    assert [s for s in range(1, 8) if logs_completions(s, 3)] == [1, 3, 6] and not logs_completions(1, 0)
    torch.manual_seed(0)
    task = get_task("harness-words")
    examples = task.load()[:3]
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4)
    rollout = sample(policy, task, examples, 4, max_new_tokens=8)
    with Scorer(task, 0) as scorer:
        scored = scorer.score(rollout.examples, rollout.responses)
    credit = estimate(scored.scores, 4, "gdpo")
    mask = torch.nn.functional.pad(rollout.response_mask(), (0, 2))  # [N, T + 2]: T may exceed the longest
    for lam in (1.0, 0.5):
        step = dict(lam=lam, temperature=1.0, seed=0, step=2)
        some = mrtpo_step("replay", policy_replayer(policy), task, rollout, scored, credit, mask, logs=False, **step)
        for every in (dict(logs=True), dict(logs=False, replay_zero_credit=True)):
            full = mrtpo_step("replay", policy_replayer(policy), task, rollout, scored, credit, mask, **every, **step)
            zero = credit.per_reward == 0  # [N, K]
            assert some.distances.shape == (len(rollout), len(scored.names), mask.shape[1])
            assert torch.all(some.distances[zero] == 0) and full.distances[zero].amax() > 0  # something was skipped
            torch.testing.assert_close(some.distances[~zero], full.distances[~zero], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(some.advantages, full.advantages, atol=1e-5, rtol=1e-4)
            assert some.blocks == full.blocks
    off = mrtpo_step(None, policy_replayer(policy), task, rollout, scored, credit, mask, logs=True, **step)
    assert off.distances is None and off.token_weights is None  # MRTPO off: the response's advantage on every token
    assert off.blocks == full.blocks  # a step that logs its completions has their blocks, MRTPO on or off
    torch.testing.assert_close(off.advantages, credit.total.unsqueeze(-1) * mask)
    rollout.response_ids[0] = []  # a row TRL masked out
    empty = mrtpo_step("replay", policy_replayer(policy), task, rollout, scored, credit, mask, logs=True, **step)
    assert empty.distances[0].eq(0).all() and empty.distances[1:].amax() > 0


def test_skipping_zero_credit_rewards_trains_the_same(tiny_qwen2_dir, tmp_path):
    """End to end, with and without `replay_zero_credit`: the same losses, rewards and
    adapter; steps that log their completions replay every reward (the logs show every
    distance), so the logs are the same too."""
    kw = dict(steps=3, mrtpo=True, log_completions_every=2)
    train(_cfg(tiny_qwen2_dir, tmp_path / "skip", **kw))
    train(_cfg(tiny_qwen2_dir, tmp_path / "full", replay_zero_credit=True, **kw))
    a, b = _read(tmp_path / "skip" / "metrics.jsonl"), _read(tmp_path / "full" / "metrics.jsonl")
    for ra, rb in zip(a, b):
        for key in ("loss", "grad_norm", "reward") + tuple(k for k in ra if k.startswith("mrtpo/")):
            assert ra[key] == pytest.approx(rb[key], rel=1e-4, abs=1e-6), key
    rows_a, rows_b = (_read(tmp_path / name / "completions.jsonl") for name in ("skip", "full"))
    assert [r["step"] for r in rows_a] == [1] * 4 + [2] * 4
    for ra, rb in zip(rows_a, rows_b):
        assert ra["response_ids"] == rb["response_ids"] and ra["credit"] == rb["credit"]
        for da, db in zip(ra["distances"], rb["distances"]):
            assert da == pytest.approx(db, rel=1e-4, abs=1e-5)
    wa = load_file(tmp_path / "skip" / "checkpoints" / "step-000003" / "adapter" / "adapter_model.safetensors")
    wb = load_file(tmp_path / "full" / "checkpoints" / "step-000003" / "adapter" / "adapter_model.safetensors")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4)


def test_resume_continues_exactly(tiny_qwen2_dir, tmp_path):
    """4 steps straight == 2 steps, then --resume to 4: every non-timing metric, every logged
    completion and the adapter weights. Dropout, KL, two optimizer passes and micro-batches
    are on so every RNG and every piece of optimizer state matters."""
    from mrtpo.evaluation.heldout import measure

    kw = dict(mrtpo=True, beta=0.05, lora_dropout=0.1, num_iterations=2, grad_accum=2, eval_every=2)
    straight = tmp_path / "straight"
    split = tmp_path / "split"
    train(_cfg(tiny_qwen2_dir, straight, steps=4, **kw), measure=measure)
    train(_cfg(tiny_qwen2_dir, split, steps=2, **kw), measure=measure)
    # a crashed later attempt left lines after the checkpoint: resume must drop them
    with (split / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "reward": 123.0}) + "\n")
    resumed = train(_cfg(tiny_qwen2_dir, split, steps=4, resume=True, **kw), measure=measure)
    assert [r["step"] for r in resumed.history] == [1, 2, 3, 4]

    a, b = _read(straight / "metrics.jsonl"), _read(split / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        keys = {k for k in ra if not k.startswith("time/")}
        assert keys == {k for k in rb if not k.startswith("time/")}
        for k in keys:
            if isinstance(ra[k], float):
                assert rb[k] == pytest.approx(ra[k], abs=1e-6), (ra["step"], k)
            else:
                assert rb[k] == ra[k], (ra["step"], k)
    assert "eval/reward" in a[1] and "kl" in a[1]
    assert 0 < a[0]["num_tokens"] < a[1]["num_tokens"] < a[3]["num_tokens"]  # running count, across the resume
    assert _read(straight / "completions.jsonl") == _read(split / "completions.jsonl")
    wa = load_file(straight / "checkpoints" / "step-000004" / "adapter" / "adapter_model.safetensors")
    wb = load_file(split / "checkpoints" / "step-000004" / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=0)
    assert (split / "checkpoints" / "step-000002").is_dir()  # the checkpoint it resumed from


def test_full_weights_without_lora(tiny_qwen2_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    result = train(_cfg(tiny_qwen2_dir, tmp_path / "run", steps=1, lora=False, beta=0.1, mrtpo=False))
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).state_dict()
    moved = sum(not torch.equal(p.detach(), base[n]) for n, p in result.policy.model.named_parameters())
    assert moved >= len(base) // 2
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoints" / "step-000001" / "model")
    for n, p in saved.named_parameters():
        torch.testing.assert_close(p, dict(result.policy.model.named_parameters())[n].detach())
    assert "kl" in result.history[0]


@pytest.mark.parametrize("mode", ["nan", "list"])
def test_a_wrong_reward_stops_the_run_with_its_name(tiny_qwen2_dir, tmp_path, mode):
    cfg = _cfg(tiny_qwen2_dir, tmp_path / "run", steps=1, task="harness-broken", task_args={"mode": mode})
    with pytest.raises(RewardError, match="reward 'fragile'"):
        train(cfg)


def test_missing_model_and_data_give_clear_errors(tiny_qwen2_dir, tmp_path):
    with pytest.raises(PolicyLoadError, match="--model is required"):
        train(TrainConfig(task="harness-words", output_dir=str(tmp_path / "a")))
    with pytest.raises(PolicyLoadError, match="no such local directory"):
        train(_cfg(tmp_path / "no-model-here", tmp_path / "b", steps=1))
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match=rf"--data {missing}: no such file"):
        train(_cfg(tiny_qwen2_dir, tmp_path / "c", steps=1, data=str(missing)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "Write the word poem."}\n{"prompt": \n')
    with pytest.raises(DataError, match=rf"--data {bad}: .*line 1 column 12"):  # the task's own words
        train(_cfg(tiny_qwen2_dir, tmp_path / "e", steps=1, data=str(bad)))
    with pytest.raises(ConfigError, match="--task is required"):
        train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(tmp_path / "d")))


def test_a_used_run_dir_needs_resume(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        train(_cfg(tiny_qwen2_dir, run, steps=1))


def test_half_written_checkpoints_are_ignored(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "step-000002").mkdir(parents=True)
    (root / "step-000002" / "state.json").write_text('{"step": 2}')
    (root / ".tmp-step-000004-abc").mkdir()  # killed while writing
    (root / "step-000003").mkdir()  # no state.json: incomplete
    assert checkpoints.latest(tmp_path) == root / "step-000002"
    (root / "latest").write_text("step-000003")  # a pointer to an incomplete one is not trusted
    assert checkpoints.latest(tmp_path) == root / "step-000002"


BUILTIN = ["text2sql", "toolcall", "instruct"]


@pytest.mark.parametrize("task", BUILTIN)
def test_built_in_tasks_train_one_step(tiny_qwen2_dir, tmp_path, task):
    if importlib.util.find_spec(f"mrtpo.tasks.{task}") is None:
        pytest.skip(f"mrtpo.tasks.{task} is not written yet")
    result = train(_cfg(tiny_qwen2_dir, tmp_path / "run", steps=1, task=task, batch_prompts=1,
                        verify_workers=1))
    record = result.history[0]
    assert any(k.startswith("rewards/") for k in record)
    assert math.isfinite(record["loss"])
    row = _read(tmp_path / "run" / "completions.jsonl")[0]
    assert len(row["distances"]) == len(row["reward_names"])
