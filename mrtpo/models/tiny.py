"""Build a small causal LM and its tokenizer from scratch, offline and seeded.

`train_tokenizer` trains a byte-level BPE on given texts and wraps it as a transformers
fast tokenizer with a ChatML chat template (Qwen style), so prompts go through a real chat
template exactly as with a hub model. `build_model` creates a random-initialised Qwen2 or
Llama model of a chosen size for that tokenizer, and `save_policy` saves both as a user's
model directory. The tests' tiny models and the speed benchmarks' random policies are made
with them.
"""
from __future__ import annotations

from typing import Iterable, Literal

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2000, min_frequency: int = 2):
    """A byte-level BPE tokenizer with ChatML special tokens and chat template.

    Every byte is in the base alphabet, so any text encodes (no unknown tokens). `<|im_end|>`
    is the EOS token (what a chat model emits to end its turn); `<|endoftext|>` pads.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"  # generation pads on the left
    return fast


def build_model(tokenizer, arch: Literal["qwen2", "llama"] = "qwen2", hidden_size: int = 64,
                num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                intermediate_size: int | None = None, max_positions: int = 2048, seed: int = 0):
    """A random-initialised causal LM sized for `tokenizer` (fp32, eval mode off)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    cfg_cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch]
    config = cfg_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_policy(model, tokenizer, path) -> None:
    """Save model and tokenizer so `from_pretrained(path)` loads them as a user's model would."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
