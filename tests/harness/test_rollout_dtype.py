"""--rollout-dtype bfloat16: sampling from a bf16 copy of float32 weights, the sampled tokens'
log-probs it records, and the update's importance-sampling correction (TRL's
vllm_importance_sampling_correction), on a tiny real Qwen2 model and through `mrtpo train`.

The tolerance: on the tiny model the bf16 copy's log-probs of what it sampled stay within
0.05 of the float32 weights' on average (SmolLM2 measured 0.025, with a largest gap of 0.33:
`benchmarks/speed/rollout_dtype.py`); a bf16 copy that drifted further fails here."""
from __future__ import annotations

import json

import harness_task
import pytest
import torch
from cli_runs import clean_error, invoke

from mrtpo.harness.distributed import RowSeededSampling
from mrtpo.harness.forward import token_logps
from mrtpo.harness.loss import policy_loss, sampling_correction

harness_task.register()

BF16_MEAN_GAP = 0.05  # mean |log p_fp32 - log p_bf16| of the sampled tokens allowed


def _policy(model_dir):
    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(model_dir), lora=True, lora_r=4, lora_dropout=0.0, device="cpu", dtype="float32")
    with torch.no_grad():  # an adapter that changes the outputs
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return policy


def _sample(policy, dtype):
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    return sample(policy, task, task.load()[:3], 4, temperature=0.9, max_new_tokens=10, dtype=dtype,
                  logits_processor=[RowSeededSampling(0, 1, 0, 0.9, record_logps=True)])


def _weights_logps(policy, rollout):
    batch = rollout.batch(policy.pad_id)
    with torch.no_grad():
        logp, _ = token_logps(policy.model, batch.input_ids, batch.attention_mask, batch.position_ids,
                              batch.response_mask.shape[1], 0.9)  # [N, T]
    return logp, batch.response_mask.bool()


def test_recorded_logps_are_the_weights_logps_when_sampling_with_the_weights(tiny_qwen2_dir):
    policy = _policy(tiny_qwen2_dir)
    rollout = _sample(policy, None)
    logp, mask = _weights_logps(policy, rollout)
    recorded = rollout.sampling_logp_matrix()  # [N, T]
    assert recorded.shape == logp.shape and [len(r) for r in rollout.sampling_logps] == [len(r) for r in rollout.response_ids]
    torch.testing.assert_close(recorded[mask], logp[mask], atol=2e-5, rtol=0)


def test_a_bf16_copy_samples_within_the_tolerance_and_tracks_the_weights(tiny_qwen2_dir):
    policy = _policy(tiny_qwen2_dir)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    for _ in range(2):  # the second time through the cached copy, after the weights moved
        rollout = _sample(policy, torch.bfloat16)
        for key, value in policy.model.state_dict().items():  # the float32 weights are untouched
            assert torch.equal(value, before[key]), key
        logp, mask = _weights_logps(policy, rollout)
        gap = (rollout.sampling_logp_matrix() - logp)[mask].abs()
        assert 0 < float(gap.mean()) < BF16_MEAN_GAP, float(gap.mean())  # really bf16, and close
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.mul_(-1.0)
        before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    copy = policy._copies[torch.bfloat16]
    assert all(p.dtype == torch.bfloat16 for p in copy.parameters())
    assert all(b.dtype == torch.float32 for b in copy.buffers() if b.is_floating_point())


def test_sampling_correction_follows_trl_modes():
    old = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -2.0, -3.0]])  # [2, 3]
    sampling = torch.tensor([[-2.0, -1.5, 0.0], [-1.0, -1.9, -3.1]])  # [2, 3]
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # row 0 has 2 tokens
    tok = torch.exp(torch.tensor([[1.0, 0.5, 0.0], [0.0, -0.1, 0.1]])) * mask
    torch.testing.assert_close(sampling_correction(old, sampling, mask, "token_truncate", 3.0), tok.clamp(max=3.0))
    assert sampling_correction(old, sampling, mask, "token_truncate", 2.0)[0, 0] == 2.0
    assert sampling_correction(old, sampling, mask, "token_mask", 2.0)[0, 0] == 0.0  # e^1 > 2: dropped
    seq = sampling_correction(old, sampling, mask, "sequence_truncate", 10.0)
    torch.testing.assert_close(seq, torch.tensor([[1.5, 1.5, 0.0], [0.0, 0.0, 0.0]]).exp() * mask)
    masked = sampling_correction(old, sampling, mask, "sequence_mask", 3.0)  # row 0: e^1.5 > 3
    torch.testing.assert_close(masked, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="token_truncate"):
        sampling_correction(old, sampling, mask, "tokens", 3.0)


def test_a_masked_completion_leaves_the_gradient_and_weights_scale_the_rest():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)  # [2, 2]
    adv, mask = torch.tensor([[1.0, 1.0], [-1.0, 2.0]]), torch.ones(2, 2)
    kw = dict(num_sequences=2, num_tokens=4.0, max_completion_length=2)
    w = torch.tensor([[0.0, 0.0], [2.0, 2.0]])  # row 0 masked out, row 1 weighted 2
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, is_ratio=w, **kw)
    loss.backward()
    torch.testing.assert_close(logp.grad, -adv * w / 4.0)  # at ratio 1: d(-r A w)/dlogp = -A w


def test_train_with_a_bf16_rollout_logs_trls_sampling_statistics(tiny_qwen2_dir, tmp_path):
    out = tmp_path / "run"
    result, text = invoke("train", "--model", tiny_qwen2_dir, "--task", "harness-words", "--steps", "2",
                          "--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "8",
                          "--verify-workers", "0", "--lora-r", "4", "--heldout", "0", "--save-every", "0",
                          "--rollout-dtype", "bfloat16", "--vllm_importance_sampling_mode", "token_truncate",
                          "--output-dir", out)
    assert result.exit_code == 0, text
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        assert 0 < r["sampling/sampling_logp_difference/mean"] < BF16_MEAN_GAP
        assert r["sampling/sampling_logp_difference/max"] >= r["sampling/sampling_logp_difference/mean"]
        assert 0 < r["sampling/importance_sampling_ratio/min"] <= r["sampling/importance_sampling_ratio/max"] <= 3.0
    saved = (out / "config.yaml").read_text()
    assert "rollout_dtype: bfloat16" in saved and "importance_sampling_mode: token_truncate" in saved


def test_a_same_dtype_rollout_records_nothing(tiny_qwen2_dir, tmp_path):
    out = tmp_path / "run"
    result, text = invoke("train", "--model", tiny_qwen2_dir, "--task", "harness-words", "--steps", "1",
                          "--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "4",
                          "--verify-workers", "0", "--lora-r", "4", "--heldout", "0", "--save-every", "0",
                          "--output-dir", out)
    assert result.exit_code == 0, text
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert not any(k.startswith("sampling/") for k in record)


@pytest.mark.parametrize("flags, words", [
    (["--rollout-dtype", "float16"], ["--rollout-dtype", "same", "bfloat16"]),
    (["--importance-sampling-mode", "seq"], ["--importance-sampling-mode", "token-truncate"]),
    (["--importance-sampling-clip-max", "0"], ["--importance-sampling-clip-max must be > 0"]),
])
def test_bad_rollout_settings_are_refused(tmp_path, flags, words):
    result, text = invoke("train", "--model", "/nonexistent/model", "--task", "harness-words",
                          "--output-dir", tmp_path / "run", *flags)
    clean_error(result, text, *words)
    assert "nonexistent" not in text


def test_rollout_dtype_resolves_to_a_copy_only_when_it_differs_from_the_weights():
    """(A device that cannot compute in it is refused by the same `_cannot_compute` check as
    --dtype: tests/harness/test_harness_config.py.)"""
    from mrtpo.harness.policy import resolve_rollout_dtype

    assert resolve_rollout_dtype("same", torch.device("cpu"), torch.float32) is None
    assert resolve_rollout_dtype("bfloat16", torch.device("cpu"), torch.bfloat16) is None  # already bf16
    assert resolve_rollout_dtype("bfloat16", torch.device("cpu"), torch.float32) == torch.bfloat16
