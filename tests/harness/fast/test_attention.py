"""mrtpo.harness.fast.attention: grouped key/value heads read in place on CPU, with the same results."""
from __future__ import annotations

import os

import harness_task
import torch

from mrtpo.harness.fast.attention import SWITCH, grouped_attention

harness_task.register()


def test_a_cpu_policy_turns_the_switch_on_unless_the_user_set_it(tiny_qwen2_dir, monkeypatch):
    from mrtpo.harness.policy import load_policy

    monkeypatch.delenv(SWITCH, raising=False)
    load_policy(str(tiny_qwen2_dir), lora=False, device="cpu")
    assert os.environ[SWITCH] == "1"
    monkeypatch.setenv(SWITCH, "0")  # the user's choice stands
    load_policy(str(tiny_qwen2_dir), lora=False, device="cpu")
    assert os.environ[SWITCH] == "0"


def test_the_block_sets_the_switch_and_restores_it(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    with grouped_attention(True):
        assert os.environ[SWITCH] == "1"
        with grouped_attention(False):
            assert os.environ[SWITCH] == "0"
        assert os.environ[SWITCH] == "1"
    assert SWITCH not in os.environ


def test_grouped_heads_give_the_copied_heads_results(tiny_llama_dir, monkeypatch):
    """Sampling (prefill with a mask, then decoding), the update's forward and backward, and the
    replay's distances are the same whether transformers copies the key/value heads or not, and
    the switch really decides which (the copies are counted)."""
    import transformers.integrations.sdpa_attention as sdpa

    from mrtpo.contexts import build_item, model_positions
    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.forward import token_logps
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.scoring import Scorer
    from mrtpo.replay import distances
    from mrtpo.tasks import get_task

    copies = []
    repeat_kv = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: copies.append(n) or repeat_kv(x, n))  # a counter
    policy = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.0, device="cpu")
    assert policy.model.config.num_key_value_heads < policy.model.config.num_attention_heads
    with torch.no_grad():  # an adapter away from its zero start: gradients and outputs it changes
        g = torch.Generator().manual_seed(0)
        for p in policy.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    task = get_task("harness-words")
    examples = task.load()[:3]

    def run(grouped: bool):
        copies.clear()
        with grouped_attention(grouped):
            rollout = sample(policy, task, examples, 3, temperature=0.9, max_new_tokens=10,
                             logits_processor=[RowSeededSampling(0, 1, 0, 0.9, 1.0)])
            batch = rollout.batch(policy.pad_id)
            t = batch.response_mask.shape[1]
            policy.model.train()
            policy.model.zero_grad(set_to_none=True)
            logp, _ = token_logps(policy.model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                  t, 0.9, share_prompts=True)  # [N, T]
            (logp * batch.response_mask * torch.linspace(-1, 1, t)).sum().backward()
            grads = [p.grad.clone() for p in policy.trainable_parameters()]
            scored = Scorer(task, 0).score(rollout.examples, rollout.responses)
            items = [build_item(task, policy.tokenizer, ex, ids, v, model_positions(policy.model))
                     for ex, ids, v in zip(rollout.examples, rollout.response_ids, scored.verdicts) if ids]
            policy.model.eval()
            with torch.no_grad():
                q = distances(policy.model, items, 0.9)
        return rollout.response_ids, logp.detach()[batch.response_mask.bool()], grads, q, len(copies)

    plain, grouped = run(False), run(True)
    assert plain[4] > 0 and grouped[4] == 0  # the switch decides whether heads are copied
    assert grouped[0] == plain[0]
    assert len({tuple(r) for r in plain[0]}) > 3  # the rows really differ
    torch.testing.assert_close(grouped[1], plain[1], atol=1e-5, rtol=1e-5)
    for a, b in zip(grouped[2], plain[2]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert float(plain[3].abs().max()) > 0
    torch.testing.assert_close(grouped[3], plain[3], atol=1e-5, rtol=1e-4)


def test_other_devices_are_left_alone(monkeypatch):
    """A GPU keeps transformers' default: there a mask with grouped heads selects a slower kernel."""
    from mrtpo.harness.fast.attention import prefer_grouped_attention

    monkeypatch.delenv(SWITCH, raising=False)
    prefer_grouped_attention("cuda:0")
    prefer_grouped_attention(torch.device("meta"))
    assert SWITCH not in os.environ
