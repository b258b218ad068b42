"""A tiny Llama GGUF file written with the `gguf` package's writer, for testing the conversion
of packaged pretrained policies (`mrtpo.models.packaged`) offline: the same file layout as
SmolLM2's (architecture "llama", a "gpt2" BPE tokenizer with merges, a chat template), with
float32 tensors from a seeded random model."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from mrtpo.models import packaged
from mrtpo.models.builtin import PackagedRecipe

# Hugging Face Llama parameter names -> GGUF tensor names (as llama.cpp's converter writes them)
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}


def write_tiny_gguf(path: str | Path, tokenizer, seed: int = 0) -> Path:
    """Write a 2-layer, 32-wide Llama with `tokenizer` (a byte-level BPE fast tokenizer) as GGUF."""
    import gguf

    from mrtpo.models.tiny import build_model

    model = build_model(tokenizer, arch="llama", hidden_size=32, num_layers=2, num_heads=4,
                        num_kv_heads=2, seed=seed)
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-test")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    tokens = [t for t, _ in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])]
    special = {a["content"] for a in spec["added_tokens"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])  # 3: control, 1: normal
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    w.add_bos_token_id(tokenizer.convert_tokens_to_ids("<|im_start|>"))
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_chat_template(tokenizer.chat_template)
    for name, value in model.state_dict().items():
        if name == "lm_head.weight":  # tied to the embedding
            continue
        if name in _TOP:
            out = _TOP[name]
        else:
            parts = name.split(".")  # model.layers.<i>.<module...>.weight
            out = f"blk.{parts[2]}.{_LAYER['.'.join(parts[3:-1])]}.weight"
        w.add_tensor(out, value.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def packaged_recipe(gguf_file: Path, **kw) -> PackagedRecipe:
    """A recipe that pins `gguf_file`'s own size and hash, for a package that is not installed."""
    size, sha = packaged.file_digest(gguf_file)
    fields = dict(name="test-packaged", package="mrtpo-test-no-such-package", version="0.0.1",
                  module="mrtpo_test_no_such_module", gguf=gguf_file.name, size=size, sha256=sha,
                  hub_id="example/tiny", parameters="0.04M", license="Apache-2.0")
    return PackagedRecipe(**{**fields, **kw})


def wheel_with(recipe: PackagedRecipe, gguf_file: Path, where: Path, data: bytes | None = None) -> Path:
    """A wheel in `where` holding the recipe's module with the GGUF (or `data` in its place)."""
    path = where / f"{recipe.module}-{recipe.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{recipe.module}/__init__.py", "raise ImportError('never import me')\n")
        z.writestr(f"{recipe.module}/{recipe.gguf}", gguf_file.read_bytes() if data is None else data)
    return path


def installed_package(recipe: PackagedRecipe, gguf_file: Path, where: Path) -> Path:
    """`recipe`'s package as an installed one looks to `packaged.installed_gguf`: its module's
    folder with the GGUF inside, under `where` (put `where` on sys.path or PYTHONPATH)."""
    folder = where / recipe.module
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("raise ImportError('never import me')\n")
    (folder / recipe.gguf).write_bytes(gguf_file.read_bytes())
    return where


def packaged_default(gguf_file: Path, where: Path, name: str, monkeypatch) -> PackagedRecipe:
    """A tiny packaged policy named `name` that builds in seconds with nothing to fetch: its
    recipe in the built-in table and its package 'installed' (on sys.path) under `where`."""
    from mrtpo.models import builtin

    recipe = packaged_recipe(gguf_file, name=name, module=f"mrtpo_test_{name.replace('-', '_')}")
    monkeypatch.syspath_prepend(str(installed_package(recipe, gguf_file, where)))
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    return recipe
