"""The evaluation generator: batched, left-padded greedy decoding through the chat template.

Run: .venv/bin/python -m pytest tests/evaluation/test_eval_generate.py -q
"""
from __future__ import annotations

import pytest

from mrtpo.evaluation.generate import GenerationConfig, generate, load_model, render_prompts

CONVERSATIONS = [
    [{"role": "user", "content": "How many singers are there?"}],
    [{"role": "system", "content": "You write SQL."},
     {"role": "user", "content": "SELECT name, age FROM singer WHERE age > 30 ORDER BY age DESC"}],
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "no such column: nme"}],
    [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 3}],
]


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_model(tiny_qwen2_dir, GenerationConfig(device="cpu"))


def test_prompts_use_the_chat_template_with_the_assistant_turn_opened(tiny):
    _, tok = tiny
    ids = render_prompts(tok, CONVERSATIONS[:1])[0]
    text = tok.decode(ids)
    assert text == "<|im_start|>user\nHow many singers are there?<|im_end|>\n<|im_start|>assistant\n"


def test_batched_left_padded_greedy_equals_one_prompt_at_a_time(tiny):
    model, tok = tiny
    cfg = GenerationConfig(max_new_tokens=12, batch_size=4, device="cpu")
    batched = generate(model, tok, CONVERSATIONS, cfg, progress=False)
    single = [generate(model, tok, [c], GenerationConfig(max_new_tokens=12, batch_size=1, device="cpu"),
                       progress=False)[0] for c in CONVERSATIONS]
    assert batched == single
    assert len(batched) == len(CONVERSATIONS)
    assert any(batched)  # a random tiny model still emits some tokens within 12 steps


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def lively(request):
    """A tiny random Qwen2 and Llama whose weights (but the norms') are redrawn larger, seeded,
    so that greedy decoding draws varied tokens (the saved tiny models repeat one token)."""
    import torch

    model, tok = load_model(request.getfixturevalue(f"tiny_{request.param}_dir"), GenerationConfig(device="cpu"))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model, tok


def fast_and_plain(model, tok, batch_size: int) -> tuple[list[str], list[str]]:
    """(the fast path's responses, plain `generate`'s) to the conversations with and without a
    shared system turn; the fast one must be the lean decoder's."""
    from mrtpo.harness.fast.decode import supports

    system = {"role": "system", "content": "You answer with one SQL query about the concert database."}
    conversations = CONVERSATIONS + [[system, *c] for c in CONVERSATIONS]
    cfg = GenerationConfig(max_new_tokens=12, batch_size=batch_size, device="cpu")
    assert supports(model)  # the path under test is the lean one
    return (generate(model, tok, conversations, cfg, progress=False),
            generate(model, tok, conversations, cfg, progress=False, fast=False))


@pytest.mark.parametrize("batch_size", [1, 3, 5])
def test_the_fast_prompt_pass_gives_plain_generates_responses(tiny, batch_size):
    """Prompts encoded as the rollout does (a shared beginning once) and decoded greedily by
    the rollout's lean decoder (`harness.fast.decode`: Qwen2 and Llama on CPU take it) give
    what plain `generate` gives, prompts with and without a shared system turn."""
    fast, plain = fast_and_plain(*tiny, batch_size)
    assert fast == plain and any(fast)


@pytest.mark.parametrize("batch_size", [1, 3, 5])
def test_the_fast_pass_gives_plain_generates_varied_responses(lively, batch_size):
    """The same on models whose greedy responses differ from one another (a Llama and a
    Qwen2), so that equal outputs say more than one repeated token does."""
    fast, plain = fast_and_plain(*lively, batch_size)
    assert fast == plain and len(set(fast)) > 1


def test_rows_that_stop_early_leave_the_lean_batch_and_the_rest_go_on(lively):
    """A second stop token that some rows draw and others do not: the lean decoder drops the
    stopped rows from its products and the rest decode on, as plain `generate` does."""
    from mrtpo.evaluation.generate import generations

    model, tok = lively
    cfg = GenerationConfig(max_new_tokens=12, batch_size=5, device="cpu")
    own = model.generation_config.eos_token_id
    try:
        for stop in range(tok.vocab_size):  # the first token that ends some rows early, not all
            model.generation_config.eos_token_id = [tok.eos_token_id, stop]
            plain = generations(model, tok, CONVERSATIONS, cfg, progress=False, fast=False)
            if any(g.truncated for g in plain) and any(not g.truncated for g in plain):
                break
        fast = generations(model, tok, CONVERSATIONS, cfg, progress=False)
    finally:
        model.generation_config.eos_token_id = own
    assert any(g.truncated for g in plain) and any(not g.truncated for g in plain)  # a mix of ends
    assert fast == plain


def test_outputs_follow_input_order_whatever_the_batching(tiny):
    model, tok = tiny
    a = generate(model, tok, CONVERSATIONS, GenerationConfig(max_new_tokens=6, batch_size=2), progress=False)
    b = generate(model, tok, CONVERSATIONS[::-1], GenerationConfig(max_new_tokens=6, batch_size=3), progress=False)
    assert a == b[::-1]


def test_generation_stops_at_eos_and_drops_special_tokens(tiny):
    model, tok = tiny
    # Force EOS as the first token: the response is empty, not padding or "<|im_end|>".
    eos = tok.eos_token_id
    bias = model.lm_head.weight.new_zeros(model.lm_head.weight.shape[0])  # [V]
    bias[eos] = 1e4
    model.lm_head.bias = __import__("torch").nn.Parameter(bias)
    try:
        out = generate(model, tok, CONVERSATIONS[:2], GenerationConfig(max_new_tokens=5), progress=False)
    finally:
        model.lm_head.bias = None
    assert out == ["", ""]


def test_bad_settings_and_templateless_tokenizers_are_refused(tiny):
    _, tok = tiny
    with pytest.raises(ValueError, match="batch_size"):
        GenerationConfig(batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        GenerationConfig(dtype="float8")
    template, tok.chat_template = tok.chat_template, None
    try:
        with pytest.raises(ValueError, match="chat template"):
            render_prompts(tok, CONVERSATIONS[:1])
    finally:
        tok.chat_template = template
