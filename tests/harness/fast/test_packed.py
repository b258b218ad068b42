"""Decoding's products with packed weights (mrtpo.harness.fast.packed): the vocabulary head, and the
layers' projections stacked into one product per input (`packed_linear`), each for both
packing libraries (MKL, oneDNN) where this torch build has them."""
from __future__ import annotations

import pytest
import torch

from mrtpo.harness.fast.packed import (_PACKED, BACKENDS, backend_for, can_pack, default_backend, packed_head,
                                       packed_linear)

needs_packing = pytest.mark.skipif(not can_pack(torch.zeros(1, 1)), reason="this torch build packs no weights")
each_backend = pytest.mark.parametrize("backend", [
    pytest.param(name, marks=pytest.mark.skipif(not BACKENDS[name].available(),
                                                reason=f"no {name} in this torch build"))
    for name in BACKENDS])


def test_the_backend_follows_the_cpus_vendor():
    """MKL on Intel CPUs and unknown ones; oneDNN on others (MKL's small products are slow
    there); the other one where the build lacks the first choice."""
    have = [name for name in BACKENDS if BACKENDS[name].available()]
    intel, amd = backend_for("GenuineIntel"), backend_for("AuthenticAMD")
    assert intel == ("mkl" if "mkl" in have else (have or [None])[0])
    assert amd == ("onednn" if "onednn" in have else (have or [None])[0])
    assert backend_for("") == intel
    assert default_backend() in (intel, amd)


@each_backend
def test_packed_logits_equal_the_plain_product_and_the_head_is_restored(tiny_qwen2_dir, backend):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    head = model.get_output_embeddings()
    x = torch.randn(6, 1, head.in_features, generator=torch.Generator().manual_seed(0))  # [rows, 1, H]
    with torch.no_grad():
        plain = head(x)
        with packed_head(model, rows=6, backend=backend) as on:
            assert on
            packed = head(x)
            other_rows = head(x[:4])  # another row count: the plain product
            sliced = head(torch.randn(6, 3, head.in_features)[:, -1:])  # a non-contiguous slice, as generate passes
        assert "forward" not in vars(head)  # the module's own forward again
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(other_rows, plain[:4])
    assert sliced.shape == (6, 1, head.out_features)


@each_backend
def test_the_packed_weight_is_kept_until_the_weight_changes(tiny_qwen2_dir, backend):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    head = model.get_output_embeddings()
    x = torch.randn(2, head.in_features)
    with torch.no_grad():
        with packed_head(model, rows=2, backend=backend):
            first = _PACKED[head][1]
        with packed_head(model, rows=2, backend=backend):
            assert _PACKED[head][1] is first  # packed once, reused by the next rollout
        head.weight.mul_(2.0)  # a trained head: its version moves
        with packed_head(model, rows=2, backend=backend):
            assert _PACKED[head][1] is not first
            torch.testing.assert_close(head(x), x @ head.weight.t(), atol=1e-5, rtol=1e-5)
        other = next((name for name in BACKENDS if name != backend and BACKENDS[name].available()), None)
        if other is not None:
            with packed_head(model, rows=2, backend=other):
                assert _PACKED[head][0][0] == other  # the other library's packing is not taken for its own
                torch.testing.assert_close(head(x), x @ head.weight.t(), atol=1e-5, rtol=1e-5)


def test_nothing_is_packed_with_gradients_other_dtypes_or_a_bias(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    with packed_head(model, rows=2) as on:  # gradients on: a training pass keeps autograd's product
        assert not on
    with torch.no_grad():
        with packed_head(model.to(torch.bfloat16), rows=2) as on:
            assert not on
        head = model.get_output_embeddings()
        model.set_output_embeddings(torch.nn.Linear(head.in_features, head.out_features, bias=True))
        with packed_head(model, rows=2) as on:
            assert not on


@needs_packing
def test_sampling_with_the_packed_head_draws_the_same_completions(tiny_qwen2_dir):
    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    task = get_task("toolcall")
    examples = task.load()[:2]

    def run(packed: bool):
        return sample(policy, task, examples, 3, temperature=0.9, max_new_tokens=12, packed=packed,
                      logits_processor=[RowSeededSampling(7, 1, 0, 0.9)]).response_ids

    assert run(True) == run(False)
    with torch.no_grad(), policy.sampler() as model, packed_head(model, rows=6) as on:
        assert on  # the LoRA policy's merged model has its head packed, as `sample` does


@needs_packing
def test_a_packed_head_does_not_stop_the_bf16_sampler_copy(tiny_qwen2_dir):
    """A float32 rollout (held-out before step 1) packs the head; --rollout-dtype bfloat16
    then deep-copies the merged model for its sampler, which must not meet the packed weight."""
    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    task = get_task("toolcall")
    examples = task.load()[:2]
    for dtype in (None, torch.bfloat16, None):
        roll = sample(policy, task, examples, 2, temperature=0.9, max_new_tokens=6, dtype=dtype,
                      logits_processor=[RowSeededSampling(3, 1, 0, 0.9)])
        assert len(roll) == 4


@each_backend
def test_stacked_projections_give_each_projections_product(tiny_qwen2_dir, backend):
    """A Qwen2 layer's q, k, v (with biases) and its gate and up (without) as one packed product
    each: every module's columns equal its own product; fewer rows give each row the product
    it had in the full batch (bitwise where the library's packed weight serves any row count,
    as decoding's dropped rows need; else through the plain product)."""
    from transformers import AutoModelForCausalLM

    layer = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    x = torch.randn(6, 1, attn.q_proj.in_features, generator=torch.Generator().manual_seed(0))  # [rows, 1, H]
    with torch.no_grad():
        for m in (attn.q_proj, attn.k_proj, attn.v_proj):  # biases away from their zero start
            m.bias.copy_(torch.randn(m.bias.shape, generator=torch.Generator().manual_seed(1)))
        for modules in ([attn.q_proj, attn.k_proj, attn.v_proj], [mlp.gate_proj, mlp.up_proj], [attn.o_proj]):
            product = packed_linear(modules, rows=6, backend=backend)
            plain = torch.cat([m(x) for m in modules], -1)  # [rows, 1, sum of outs]
            torch.testing.assert_close(product(x), plain, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(product(x[:4]), plain[:4], atol=1e-5, rtol=1e-5)
            if BACKENDS[backend].any_rows:
                assert torch.equal(product(x[[0, 2, 5]]), product(x)[[0, 2, 5]])
        assert attn.q_proj.bias is not None and mlp.gate_proj.bias is None  # both kinds were stacked


def test_only_plain_float32_linears_of_one_kind_are_stacked(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    from mrtpo.harness.policy import load_policy

    layer = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).model.layers[0]
    attn = layer.self_attn
    assert packed_linear([attn.q_proj, attn.o_proj], rows=0) is None  # no rows
    assert packed_linear([attn.q_proj, attn.o_proj], rows=2) is None  # a bias beside none
    assert packed_linear([layer.mlp.gate_proj.to(torch.bfloat16)], rows=2) is None
    lora = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0).model
    wrapped = lora.get_decoder().layers[0].self_attn.q_proj  # an unfolded adapter: three products, not one
    assert packed_linear([wrapped], rows=2) is None
