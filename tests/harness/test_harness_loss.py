"""The loss and update pieces of the harness: golden numbers derived by hand, and the
micro-batching claim (grad_accum gives the full batch's gradient) on a real model."""
from __future__ import annotations

import math

import pytest
import torch

from mrtpo.harness.forward import token_logps
from mrtpo.harness.loss import aggregate, kl_k3, policy_loss


def _loss(logp, old, adv, mask, **kw):
    n, t = logp.shape
    kw.setdefault("num_sequences", n)
    kw.setdefault("num_tokens", float(mask.sum()))
    kw.setdefault("max_completion_length", t)
    return policy_loss(logp, old, adv, mask, **kw)


def test_aggregations_follow_trl_definitions():
    # two sequences: lengths 1 and 3, per-token losses 4 | 1 2 3 (padding value 100 ignored)
    per = torch.tensor([[4.0, 100.0, 100.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    common = dict(num_sequences=2, num_tokens=4.0, max_completion_length=5)
    # dapo: (4 + 1 + 2 + 3) / 4 tokens
    assert aggregate(per, mask, "dapo", **common).item() == pytest.approx(2.5)
    # grpo: mean of per-sequence means (4 and 2)
    assert aggregate(per, mask, "grpo", **common).item() == pytest.approx(3.0)
    # dr_grpo: 10 / (2 sequences * 5 max tokens)
    assert aggregate(per, mask, "dr_grpo", **common).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(per, mask, "bnpo", **common)


def test_clipped_surrogate_by_hand():
    # ratios e^{0.5}=1.65 (A=+1: clipped at 1.2), e^{-0.5}=0.61 (A=-1: clipped at 0.8), 1 (A=2)
    logp = torch.tensor([[0.5, -0.5, 0.0]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    loss, parts = _loss(logp, old, adv, mask, epsilon=0.2, loss_type="dapo")
    # per-token: -min(1.65, 1.2) = -1.2 ; -min(-0.61, -0.8) = 0.8 ; -2
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.0) / 3, abs=1e-6)
    assert (parts.clip_high, parts.clip_low, parts.tokens) == (1.0, 1.0, 3.0)
    # a wider upper range leaves the first token unclipped: -e^{0.5}
    loss_hi, parts_hi = _loss(logp, old, adv, mask, epsilon=0.2, epsilon_high=1.0)
    assert loss_hi.item() == pytest.approx((-math.exp(0.5) + 0.8 - 2.0) / 3, abs=1e-6)
    assert parts_hi.clip_high == 0.0


def test_clip_extremes_follow_trl():
    """clip_ratio/low_min and high_max as TRL computes them: the per-sequence masked mean of
    the clipped tokens, then the min (low) and max (high) over sequences with tokens."""
    logp = torch.tensor([[0.5, -0.5, 0.0, 0.0], [-0.5, -0.5, 0.5, 0.0], [0.5, 0.5, 0.5, 0.5]])
    old = torch.zeros(3, 4)
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.0], [-1.0, -1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    _, parts = _loss(logp, old, adv, mask, epsilon=0.2)
    ratio = torch.exp(logp - old)
    low = ((ratio < 0.8) & (adv < 0)).float()
    high = ((ratio > 1.2) & (adv > 0)).float()
    seq = mask.sum(-1)
    trl_low = torch.nan_to_num((low * mask).sum(-1) / seq, nan=float("inf")).min()  # TRL's nanmin
    trl_high = torch.nan_to_num((high * mask).sum(-1) / seq, nan=-float("inf")).max()  # nanmax
    assert parts.clip_low_min == pytest.approx(float(trl_low)) == pytest.approx(1 / 3)
    assert parts.clip_high_max == pytest.approx(float(trl_high)) == pytest.approx(1 / 3)


def test_ratio_one_gives_minus_advantage_gradient():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, _ = _loss(logp, logp.detach(), adv, mask, loss_type="dapo")
    loss.backward()
    # d/dlogp of -ratio*A at ratio 1 is -A / num_tokens (3), padding gets none
    expected = -adv * mask / 3.0
    torch.testing.assert_close(logp.grad, expected)


def test_kl_k3_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0, -0.1]])
    assert torch.all(kl_k3(logp, logp) == 0)
    ref = torch.tensor([[-1.5, -1.0, -0.1]])
    kl = kl_k3(logp, ref)
    # d = ref - logp = -0.5 -> e^-0.5 + 0.5 - 1
    assert kl[0, 0].item() == pytest.approx(math.exp(-0.5) + 0.5 - 1.0)
    assert torch.all(kl >= 0)
    loss, parts = _loss(logp, logp, torch.zeros_like(logp), torch.ones_like(logp), ref_logp=ref, beta=0.5)
    assert loss.item() == pytest.approx(0.5 * kl.sum().item() / 3, abs=1e-6)
    assert parts.kl == pytest.approx(kl.sum().item(), abs=1e-6)


def test_token_advantages_must_match_logp_shape():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="must match"):
        _loss(logp, logp, torch.zeros(2, 1), torch.ones(2, 3))


def test_token_logps_match_a_full_forward(tiny_qwen2_dir):
    """Taking logits only at response positions equals slicing a full forward's log-softmax."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    ids = torch.tensor([[0, 5, 6, 7, 8, 9], [11, 12, 13, 14, 15, 16]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])  # row 0 left-padded
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logp, ent = token_logps(model, ids, attn, pos, num_response=3, temperature=0.7, with_entropy=True)
    full = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float() / 0.7
    lsm = full.log_softmax(-1)[:, -4:-1]  # positions predicting the last 3 tokens
    expected = lsm.gather(-1, ids[:, -3:].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logp, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, -(lsm.exp() * lsm).sum(-1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_grad_accum_gives_the_full_batch_gradient(tiny_qwen2_dir, loss_type):
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import Rollout
    from mrtpo.harness.update import update

    def grads(parts):
        torch.manual_seed(0)
        policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
        roll = Rollout(examples=[None] * 4, prompts=[""] * 4,
                       prompt_ids=[[1, 5, 6], [1, 7], [1, 8, 9, 10], [1, 11]],
                       response_ids=[[20, 21, 2], [22], [23, 24, 25, 26], [27, 28]],
                       responses=[""] * 4, truncated=[False] * 4, group_size=2)
        batch = roll.batch(policy.pad_id)
        adv = torch.tensor([[1.0, 0.5, -0.5, 0], [-1.0, 0, 0, 0], [2.0, 1.0, 0.0, -1.0], [0.3, -0.3, 0, 0]])
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.0)  # look at grads, move nothing
        captured = {}

        def keep(*_):
            captured.update({n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None})
        opt.register_step_pre_hook(keep)
        stats = update(policy, opt, batch, adv, temperature=1.0, loss_type=loss_type, epsilon=0.2,
                       epsilon_high=None, beta=0.1, num_iterations=1, grad_accum=parts,
                       max_grad_norm=0.0, max_completion_length=4)
        return captured, stats

    g1, s1 = grads(1)
    g3, s3 = grads(3)
    assert g1 and set(g1) == set(g3)
    assert any(v.abs().sum() > 0 for v in g1.values())
    for name in g1:
        torch.testing.assert_close(g1[name], g3[name], atol=1e-6, rtol=1e-4)
    assert s1["loss"] == pytest.approx(s3["loss"], abs=1e-6)


def _grouped_batch(pad_id: int, prompt_lens=(9, 14, 6), group=3, seed=0, common=0, alike=False):
    """Left-padded prompts of different lengths, each with `group` responses of varied length;
    `common`: the prompts begin with the same that many tokens (a system text, a worked example);
    `alike`: a group's responses begin with the same 3 tokens (one of them is only those), and
    one response is empty, as sampled groups have them."""
    from mrtpo.harness.rollout import Rollout

    g = torch.Generator().manual_seed(seed)
    start = torch.randint(3, 300, (common,), generator=g).tolist()
    prompts = [start + torch.randint(3, 300, (n,), generator=g).tolist() for n in prompt_lens]
    n = len(prompts) * group
    responses = [torch.randint(3, 300, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
                 for _ in range(n)]
    if alike:
        for i in range(0, n, group):
            head = torch.randint(3, 300, (3,), generator=g).tolist()
            responses[i:i + group] = [head + r for r in responses[i:i + group]]
            responses[i] = list(head)
        responses[-1] = []
    roll = Rollout(examples=[None] * n, prompts=[""] * n, prompt_ids=[prompts[i // group] for i in range(n)],
                   response_ids=responses, responses=[""] * n, truncated=[False] * n, group_size=group)
    return roll.batch(pad_id)


@pytest.mark.parametrize("model_dir,common,common_prefix,attention", [
    ("tiny_qwen2_dir", 0, True, "sdpa"), ("tiny_llama_dir", 0, True, "sdpa"), ("tiny_qwen2_dir", 7, True, "sdpa"),
    ("tiny_llama_dir", 7, True, "sdpa"), ("tiny_qwen2_dir", 7, False, "sdpa"), ("tiny_llama_dir", 7, True, "eager")])
def test_shared_prompt_pass_equals_the_full_forward(model_dir, common, common_prefix, attention, request):
    """Encoding each prompt once (its KV cache reused by its G rows), and the beginning all the
    prompts share once for all of them, gives the full forward's log-probs, entropies and LoRA
    gradients, rows of a group split across micro-batches too; with each prompt's responses
    as one trie (`response_tries`: responses that begin alike, an empty one) and as padded rows."""
    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(request.getfixturevalue(model_dir)), lora=True, lora_r=4, lora_dropout=0.0)
    model = policy.model
    model.set_attn_implementation(attention)
    model.train()
    with torch.no_grad():  # a LoRA away from its zero start, so its gradients are all non-trivial
        for p in policy.trainable_parameters():
            p.normal_(0, 0.1)
    batch = _grouped_batch(policy.pad_id, common=common, alike=True)
    t = batch.response_mask.shape[1]
    weights = torch.linspace(-1.0, 1.0, t)  # [T] a loss that weighs every position differently

    def run(share: bool, rows: slice, tries: bool = True):
        model.zero_grad(set_to_none=True)
        b = batch.rows(rows)
        logp, ent = token_logps(model, b.input_ids, b.attention_mask, b.position_ids, t, 0.7,
                                with_entropy=True, share_prompts=share, common_prefix=common_prefix,
                                response_tries=tries)
        assert torch.isfinite(logp).all() and torch.isfinite(ent).all()  # padding too
        (logp * b.response_mask * weights).sum().backward()
        m = b.response_mask.bool()
        return logp.detach()[m], ent[m], [p.grad.clone() for p in policy.trainable_parameters()]

    for rows in (slice(0, 9), slice(2, 7), slice(0, 9, 3)):  # whole groups; cut groups; one row per prompt
        plain = run(False, rows)
        for shared in (run(True, rows), run(True, rows, tries=False)):
            torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(shared[1], plain[1], atol=1e-5, rtol=1e-5)
            for g_shared, g_plain in zip(shared[2], plain[2]):
                torch.testing.assert_close(g_shared, g_plain, atol=1e-5, rtol=1e-4)


def test_shared_prompt_pass_declines_when_nothing_is_shared(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    from mrtpo.harness.forward import shared_prompt_hidden

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    batch = _grouped_batch(0, group=1)  # every prompt once, no shared beginning
    assert shared_prompt_hidden(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                batch.response_mask.shape[1]) is None
    batch = _grouped_batch(0, group=1, common=5)  # every prompt once, but a shared beginning
    assert shared_prompt_hidden(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                batch.response_mask.shape[1]) is not None
    assert shared_prompt_hidden(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                batch.response_mask.shape[1], common_prefix=False) is None
    model.activation_checkpointing_enable()
    model.train()
    batch = _grouped_batch(0, group=3)
    assert shared_prompt_hidden(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                batch.response_mask.shape[1]) is None


def _policy_with_an_adapter(model_dir):
    """A LoRA policy whose adapter changes the outputs (lora_B away from zero), and its weights."""
    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(model_dir), lora=True, lora_r=4, lora_dropout=0.0)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return policy, {k: v.clone() for k, v in policy.model.state_dict().items()}


def test_merged_adapter_gives_the_adapters_outputs_and_restores_the_weights(tiny_qwen2_dir):
    """Policy.merged() folds LoRA into fp32 weights for no-grad passes: the same logits to float
    rounding, once for nested calls, the base weights bit-for-bit afterwards and the adapter's
    own outputs again, and no folding where it would round."""
    from mrtpo.harness.policy import load_policy

    policy, before = _policy_with_an_adapter(tiny_qwen2_dir)
    ids = torch.tensor([[3, 5, 6, 7, 8, 9]])
    policy.model.eval()
    with torch.no_grad():
        plain = policy.model(input_ids=ids).logits
        with policy.merged() as model:
            assert any(getattr(m, "merged", False) for m in model.modules())  # really folded
            folded = model(input_ids=ids).logits
            with policy.merged() as inner:  # nested (the trainer's, then sample's): folded once
                assert torch.equal(inner(input_ids=ids).logits, folded)
            assert torch.equal(model(input_ids=ids).logits, folded)  # the inner exit did not unfold it
        with policy.model.disable_adapter():
            base = policy.model(input_ids=ids).logits
        assert torch.equal(policy.model(input_ids=ids).logits, plain)  # unfolded: the adapter's own path again
    torch.testing.assert_close(folded, plain, atol=1e-5, rtol=1e-5)
    assert (plain - base).abs().max() > 1e-2  # the adapter matters
    for key, value in policy.model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert not any(getattr(m, "merged", False) for m in policy.model.modules())
    with policy.merged() as model:  # with gradients on (the update) nothing is folded
        assert not any(getattr(m, "merged", False) for m in model.modules())
    half = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, dtype="bfloat16")
    with torch.no_grad(), half.merged() as model:
        assert not any(getattr(m, "merged", False) for m in model.modules())


def test_a_fold_is_undone_when_its_block_raises_and_refuses_a_pass_with_gradients(tiny_qwen2_dir):
    """An error inside nested folds leaves the weights as they were; a pass with gradients on
    inside a fold (which would give the adapter no gradient) is refused."""
    policy, before = _policy_with_an_adapter(tiny_qwen2_dir)
    with pytest.raises(KeyError):
        with torch.no_grad(), policy.merged(), policy.merged():
            raise KeyError("inside")
    for key, value in policy.model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert not any(getattr(m, "merged", False) for m in policy.model.modules())
    with torch.no_grad(), policy.merged():
        with torch.enable_grad(), pytest.raises(RuntimeError, match="no gradient"):
            with policy.merged():
                pass
    with policy.merged():  # after the fold, with gradients on: the model as it is, nothing folded
        assert not any(getattr(m, "merged", False) for m in policy.model.modules())


def test_a_micro_batch_of_empty_responses_still_backpropagates_with_tries(tiny_qwen2_dir):
    """Rows whose responses are all empty (no trie to build) take the padded rows, whose
    log-probs stay on the graph: the loss backpropagates, to zero."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import Rollout

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    policy.model.train()
    prompt = [5, 6, 7, 8, 9, 10]
    roll = Rollout(examples=[None] * 2, prompts=[""] * 2, prompt_ids=[prompt, prompt], response_ids=[[], []],
                   responses=["", ""], truncated=[False] * 2, group_size=2)
    b = roll.batch(policy.pad_id)
    t = b.response_mask.shape[1]
    logp, _ = token_logps(policy.model, b.input_ids, b.attention_mask, b.position_ids, t, 0.7,
                          share_prompts=True, response_tries=True)
    assert logp.requires_grad
    (logp * b.response_mask).sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in policy.trainable_parameters())
