"""A step whose loss, gradient or weights are not finite stops the run before anything of it is
saved; a reward that times out is counted and said."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

import harness_task
from cli_runs import invoke as _invoke
from small_runs import small_config as _cfg
from mrtpo.harness import train
from mrtpo.harness.update import NonFiniteError

harness_task.register()
pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------- the step's loss, gradient, weights
def _checkpoint_tensors(run_dir: Path):
    from safetensors.torch import load_file

    for f in sorted(run_dir.glob("checkpoints/*/**/*.safetensors")):
        yield f, load_file(str(f))


def _steps_logged(run_dir: Path) -> list[int]:
    log = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in log.read_text().splitlines()] if log.exists() else []


def test_update_refuses_a_non_finite_loss_before_the_optimizer_steps(tiny_qwen2_dir):
    """The guard itself, on a real policy and batch: NaN advantages give a NaN loss (and
    gradient); update raises and the weights are as they were."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.update import update
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, device="cpu")
    rollout = sample(policy, task, task.load()[:2], 2, max_new_tokens=4)
    mask = rollout.response_mask()
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    for bad in (math.nan, math.inf):
        with pytest.raises(NonFiniteError, match="the loss is nan|the loss is inf|gradient norm is"):
            update(policy, optimizer, rollout.batch(policy.pad_id, policy.device),
                   torch.full(mask.shape, bad) * mask, temperature=1.0, loss_type="dapo", epsilon=0.2,
                   epsilon_high=None, beta=0.0, num_iterations=1, grad_accum=1, max_grad_norm=1.0,
                   max_completion_length=4)
        for p, q in zip(policy.trainable_parameters(), before):
            assert torch.equal(p.detach(), q)


def test_a_step_that_makes_weights_non_finite_is_refused(tiny_qwen2_dir):
    """Finite loss and gradient, but an optimizer step that overflows the weights (any
    optimizer: the check is on the weights after the step, not on the settings)."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.update import update
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, device="cpu")
    rollout = sample(policy, task, task.load()[:2], 2, max_new_tokens=4)
    mask = rollout.response_mask()
    adv = torch.linspace(-1e6, 1e6, mask.shape[0]).unsqueeze(-1) * mask  # large, finite
    with pytest.raises(NonFiniteError, match="the optimizer step made weights non-finite"):
        update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=3e38),
               rollout.batch(policy.pad_id, policy.device), adv, temperature=1.0, loss_type="dapo",
               epsilon=0.2, epsilon_high=None, beta=0.0, num_iterations=1, grad_accum=1,
               max_grad_norm=0.0, max_completion_length=4)


def test_a_step_with_an_infinite_gradient_saves_nothing(tiny_qwen2_dir, tmp_path):
    """--lora-alpha 1e30 is finite, but the LoRA update it scales overflows the first gradient."""
    out = tmp_path / "run"
    with pytest.raises(NonFiniteError, match=r"step 1: the gradient norm is inf.*nothing of this step "
                                             r"was saved.*--lora-alpha \(now 1e\+30\)"):
        train(_cfg(tiny_qwen2_dir, out, steps=2, lr=1.0, lora_alpha=1e30, max_grad_norm=0.0))
    assert not list(out.glob("checkpoints/*")) and _steps_logged(out) == []


def test_a_diverging_run_stops_with_a_clear_message_and_no_nan_checkpoint(tiny_qwen2_dir, tmp_path):
    """--lr 1 --lora-alpha 1e20: the first step is finite, the second overflows, and the guard
    stops the run there: exit 1, a one-paragraph message, and the checkpoint of step 1 (the
    only one) holds finite weights."""
    out = tmp_path / "run"
    result, text = _invoke("train", "--model", tiny_qwen2_dir, "--task", "harness-words", "--steps", 4,
                           "--batch-prompts", 2, "--num-generations", 2, "--max-new-tokens", 6,
                           "--verify-workers", 0, "--lora-r", 4, "--save-every", 1, "--no-mrtpo",
                           "--lr", "1", "--lora-alpha", "1e20", "--max-grad-norm", 0, "--output-dir", out)
    assert result.exit_code == 1, text
    assert "Traceback" not in text and isinstance(result.exception, SystemExit), text
    assert re.search(r"error: step 2: the (loss|gradient norm) is nan", text), text
    assert "nothing of this step was saved" in text and "--lora-alpha (now 1e+20)" in text
    assert _steps_logged(out) == [1]
    assert [p.name for p in out.glob("checkpoints/step-*")] == ["step-000001"]
    saved = list(_checkpoint_tensors(out))
    assert saved
    for f, tensors in saved:
        for name, t in tensors.items():
            assert torch.isfinite(t).all(), (f, name)


def test_the_progress_line_takes_a_missing_reward():
    from mrtpo.commands.train import _reward_line

    assert _reward_line({"step": 1, "reward": None, "rewards/format/mean": None}) == "reward n/a"
    assert _reward_line({"step": 1, "reward": 0.5, "rewards/format/mean": 1.0}) == "reward 0.500 | format 1.00"


# ------------------------------------------------------------ rewards that time out
def test_a_reward_that_times_out_is_counted_and_said(tiny_qwen2_dir, tmp_path, caplog):
    """harness-broken's `fragile` reward sleeps 30 s on every completion; with a 0.2 s deadline
    each of its jobs scores the floor as 'timed out'. The metric counts them, the console says
    it once, and rewards that ran in time count 0."""
    cfg = _cfg(tiny_qwen2_dir, tmp_path / "run", task="harness-broken", task_args={"mode": "sleep"},
               steps=2, verify_workers=1, verify_timeout=0.2)
    with caplog.at_level("WARNING", logger="mrtpo.harness.loop"):
        result = train(cfg)
    for record in result.history:
        assert record["rewards/fragile/timeout_frac"] == 1.0
        assert record["rewards/format/timeout_frac"] == 0.0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rewards/fragile/timeout_frac"] for r in logged] == [1.0, 1.0]
    said = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(said) == 1, said  # once per reward, not every step
    assert "step 1: reward 'fragile' timed out on 100% of the completions" in said[0]
    assert "rewards/fragile/timeout_frac" in said[0] and "--verify-timeout" in said[0]


def test_a_query_past_its_time_limit_counts_as_a_timeout():
    """text2sql's own query deadline (not the scorer's) reaches the metric the same way."""
    from mrtpo.harness.metrics import timeout_metrics
    from mrtpo.harness.scoring import Scorer, timed_out
    from mrtpo.tasks import get_task
    from mrtpo.tasks.base import Verdict

    task = get_task("text2sql", timeout=0.2, workers=0)
    ex = task.load()[0]
    slow = ("```sql\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT count(*) FROM c\n```")
    with Scorer(task, workers=0) as scorer:
        scored = scorer.score([ex, ex], [slow, "```sql\nSELECT 1\n```"])
    metrics = timeout_metrics(scored)
    assert metrics["rewards/executes/timeout_frac"] == 0.5
    assert metrics["rewards/format/timeout_frac"] == 0.0
    assert not timed_out(Verdict(0.0, "SQLite error: no such column: x"))
    assert timed_out(Verdict(0.0, "timed out after 30 s"))
