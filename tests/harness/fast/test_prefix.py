"""mrtpo.harness.fast.prefix: the beginning every prompt shares encoded once, and the layout its cache takes."""
from __future__ import annotations

import torch

from mrtpo.harness.fast.prefix import encode_prompts, prefix_layout


def test_prefix_layout_puts_the_shared_beginning_first_and_each_rest_last():
    ids, mask = prefix_layout([[7, 8, 1], [7, 8, 2, 3, 4], [7, 8]], 0, 2, 5)
    assert ids.tolist() == [[7, 8, 0, 0, 1], [7, 8, 2, 3, 4], [7, 8, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]


def test_encoded_prompts_give_the_plain_forward_logits(tiny_llama_dir):
    """A token after the encoded prompts sees what it sees after its plain left-padded prompt."""
    from transformers import AutoModelForCausalLM

    from mrtpo.replay.plumbing import cache_kwarg, decoder_of, head_of

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    start = torch.randint(3, 300, (6,)).tolist()
    prompts = [start + torch.randint(3, 300, (n,)).tolist() for n in (3, 0, 5)]
    last = [11, 12, 13]  # one more token per prompt, fed on the cache
    decoder, arg = decoder_of(model), cache_kwarg(decoder_of(model))
    with torch.no_grad():
        enc = encode_prompts(decoder, prompts, "cpu", arg)
        assert (enc.common, enc.width) == (6, 11)
        pos = torch.tensor([[len(p)] for p in prompts])  # [U, 1]
        mask = torch.cat([enc.mask, torch.ones(3, 1, dtype=torch.long)], 1)
        hidden = decoder(input_ids=torch.tensor(last)[:, None], attention_mask=mask, position_ids=pos,
                         use_cache=True, **{arg: enc.cache}).last_hidden_state  # [U, 1, H]
        got = head_of(model)(hidden[:, 0])  # [U, V]
        for i, p in enumerate(prompts):
            plain = model(input_ids=torch.tensor([p + [last[i]]])).logits[0, -1]  # [V]
            torch.testing.assert_close(got[i], plain, atol=1e-5, rtol=1e-5)
