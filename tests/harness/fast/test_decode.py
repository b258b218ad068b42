"""mrtpo.harness.fast.decode: decoding without `generate` gives the completions `generate` gives, through
`rollout.sample` (the trainer's seeded sampler, greedy decoding, stop tokens and the padding
after them), and only for the decoders it knows."""
from __future__ import annotations

import pytest
import torch

from mrtpo.harness.distributed import RowSeededSampling
from mrtpo.harness.fast import decode
from mrtpo.harness.policy import load_policy
from mrtpo.harness.rollout import sample
from mrtpo.tasks import get_task


class StopAt:
    """A logits processor that leaves row `row` nothing but `token` at decoding step `step`
    (a stop token drawn mid-way), and every other score as it is."""

    def __init__(self, row: int, step: int, token: int) -> None:
        self.row, self.step, self.token, self.calls = row, step, token, 0

    def __call__(self, input_ids, scores):
        if self.calls == self.step:
            scores = scores.clone()
            keep = scores[self.row, self.token].clone()
            scores[self.row] = float("-inf")
            scores[self.row, self.token] = keep
        self.calls += 1
        return scores


def _policy(model_dir):
    torch.manual_seed(0)
    policy = load_policy(str(model_dir), lora=True, lora_r=4, lora_dropout=0.0)
    with torch.no_grad():  # an adapter away from zero: the fold and the LoRA products matter
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape) * 0.05)
    return policy


@pytest.mark.parametrize("model_dir", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_lean_decoding_samples_what_generate_samples(model_dir, request, monkeypatch):
    policy = _policy(request.getfixturevalue(model_dir))
    assert decode.supports(policy.model)
    task = get_task("toolcall")
    examples = task.load()[:2]  # prompts of other lengths, with a long common beginning
    stop = policy.stop_ids[0]

    def run(lean: bool, **kw):
        if lean:  # the lean path never calls generate
            monkeypatch.setattr(type(policy.model), "generate", lambda *a, **k: pytest.fail("generate called"))
        try:
            procs = [StopAt(row=1, step=2, token=stop), RowSeededSampling(5, 1, 0, 0.9, record_logps=True)]
            out = sample(policy, task, examples, 3, temperature=0.9, max_new_tokens=10, lean=lean,
                         logits_processor=procs, **kw)
        finally:
            monkeypatch.undo()
        return out

    plain, lean, unpacked = run(False), run(True), run(True, packed=False)
    assert lean.response_ids == plain.response_ids and lean.truncated == plain.truncated
    assert unpacked.response_ids == plain.response_ids  # each projection its own product, joined
    for a, b in zip(plain.sampling_logps, unpacked.sampling_logps):
        assert a == pytest.approx(b, abs=1e-5)
    assert plain.response_ids[1][-1] == stop and len(plain.response_ids[1]) == 3  # stopped at step 2
    assert any(len(r) == 10 for r in plain.response_ids)  # others ran to the end
    for a, b in zip(plain.sampling_logps, lean.sampling_logps):
        assert a == pytest.approx(b, abs=1e-5)
    assert lean.prompt_start is not None and lean.prompt_start.ids == plain.prompt_start.ids
    greedy = [sample(policy, task, examples, 1, greedy=True, max_new_tokens=6, lean=lean).response_ids
              for lean in (False, True)]
    assert greedy[0] == greedy[1]


def test_every_row_stopping_ends_decoding_early(tiny_llama_dir):
    """When each row has drawn a stop token, decoding ends: no step past the last stop."""
    policy = _policy(tiny_llama_dir)
    task = get_task("toolcall")
    stop = policy.stop_ids[0]
    procs = [StopAt(row=r, step=s, token=stop) for r, s in ((0, 1), (1, 3))] + [RowSeededSampling(2, 1, 0, 1.0)]
    out = sample(policy, task, task.load()[:1], 2, max_new_tokens=20, logits_processor=procs)
    assert [len(r) for r in out.response_ids] == [2, 4] and out.truncated == [False, False]
    assert procs[0].calls == 4  # decoding steps taken: the last row stopped at step 3


@pytest.mark.parametrize("packed", [False, True])
def test_stopped_rows_leave_the_products_where_the_library_allows(tiny_llama_dir, packed):
    """After a row stops, later steps feed the running rows alone (unpacked products, or
    packed by a library that serves any row count), with the completions `generate` gives;
    MKL's packed products keep every row."""
    from mrtpo.harness.fast.packed import packs_any_rows

    policy = _policy(tiny_llama_dir)
    task = get_task("toolcall")
    stop = policy.stop_ids[0]
    fed = []  # rows fed at each decoding step
    hook = policy.model.get_decoder().embed_tokens.register_forward_hook(
        lambda m, args, out: fed.append(args[0].shape[0]) if args[0].shape[1] == 1 else None)

    def run(lean):
        procs = [StopAt(row=2, step=1, token=stop), RowSeededSampling(3, 1, 0, 1.0)]
        return sample(policy, task, task.load()[:1], 4, max_new_tokens=6, lean=lean, packed=packed,
                      logits_processor=procs)

    try:
        lean = run(True)
    finally:
        hook.remove()
    assert lean.response_ids == run(False).response_ids and len(lean.response_ids[2]) == 2
    dropped = not packed or packs_any_rows()
    assert len(fed) > 2 and fed[:2] == [4, 4] and fed[2:] == [3 if dropped else 4] * (len(fed) - 2)


def test_only_known_decoders_on_cpu_take_the_lean_path(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen2_dir))
    assert decode.supports(model)
    model.config.use_sliding_window = True  # a sliding window: generate's own cache handles it
    assert not decode.supports(model)
    model.config.use_sliding_window = False
    model.generation_config.repetition_penalty = 1.2  # generate would add a processor for it
    assert not decode.supports(model)
    model.generation_config.repetition_penalty = 1.0
    assert decode.supports(model)
    model.config.model_type = "gemma2"
    assert not decode.supports(model)


def test_a_folded_adapter_is_multiplied_by_its_base_layer_alone(tiny_llama_dir):
    """Inside `Policy.merged()` (float32: the adapter folded) a LoRA projection is its base
    layer's product; outside, the LoRA layer itself, which adds the adapter's products."""
    policy = _policy(tiny_llama_dir)
    proj = policy.model.get_decoder().layers[0].self_attn.q_proj
    x = torch.randn(3, 1, proj.in_features)
    with torch.no_grad():
        assert decode._product(proj) is proj
        want = proj(x)  # the base product plus the adapter's
        with policy.merged():
            folded = decode._product(proj)
            assert folded is proj.get_base_layer()
            assert torch.allclose(folded(x), want, atol=1e-5)  # the same function, folded
        assert decode._product(proj) is proj  # unfolded again


class Record:
    """A logits processor that keeps every step's scores and changes none."""

    def __init__(self) -> None:
        self.scores = []

    def __call__(self, input_ids, scores):
        self.scores.append(scores.clone())
        return scores


def test_a_one_token_prompt_beside_longer_ones_gets_its_own_logits(tiny_llama_dir):
    """A one-token prompt has no cached column: its prompt part is empty and must add nothing
    (torch's flash kernel gives an empty row a log-sum-exp of 0, which would shrink the row's
    own part). The lean path's logits equal plain `generate`'s, as does the cascade path's."""
    from transformers import GenerationConfig

    from mrtpo.harness.fast.decode import decode_prompts
    from mrtpo.harness.rollout import _generate

    policy = _policy(tiny_llama_dir)
    model = policy.model
    ids = [[10, 11, 12, 13], [20]]
    gen = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=policy.stop_ids, pad_token_id=0)
    got = {}
    with torch.no_grad(), policy.merged():
        for name, run in (("plain", lambda r: _generate(model, ids, 2, gen, 0, [r], False, False, False, False,
                                                         False, 4)),
                          ("cascade", lambda r: _generate(model, ids, 2, gen, 0, [r], True, True, True, True,
                                                           False, 4)),
                          ("lean", lambda r: decode_prompts(model, ids, 2, 4, policy.stop_ids, 0, [r], True, True))):
            rec = Record()
            got[name] = (run(rec)[0], torch.stack(rec.scores))  # tokens, [steps, N, V]
    for name in ("cascade", "lean"):
        assert got[name][0] == got["plain"][0], name
        assert (got[name][1] - got["plain"][1]).abs().max() <= 1e-4, name
