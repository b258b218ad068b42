"""Every load of a model, tokenizer or config from a name the user gave, with no code run from it.

transformers imports a model directory's (or hub repository's) own Python files when its
config.json names them in `auto_map`, if the caller passes `trust_remote_code=True`; when the
caller passes nothing it asks "run the custom code? [y/N]" on stdin, so piping `y` into a
command was enough to run a directory's code (issue 40, item 1). mrtpo never runs it: every
`from_pretrained` of a user's path or hub id goes through `auto_tokenizer`, `auto_model` or
`auto_config` here, which pass `trust_remote_code=False` (transformers then never asks), and a
local directory whose config.json asks for its own code (an `auto_map` over a `model_type`
transformers does not ship) is refused before anything is read, in one line
(`CustomCodeRefused`). A model type transformers ships is loaded with transformers' own code,
whatever `auto_map` says. The TRL launcher keeps custom code as TRL's explicit
`--trust_remote_code` flag, off by default, and refuses the same directories without it.

Two more checks run before transformers does any work (item 6 and 9): a local directory's
config.json must fit its weights (`config_weights_problem`: a config claiming 10^6 layers over
weights for 2 would build gigabytes first; beyond the layer count, embedding width and a rough
parameter estimate, the model the config describes is built on the meta device and its
parameters' shapes compared with the safetensors headers, so `"head_dim": 500000` is refused
naming the first tensor that differs, `described_shapes_problem`), and a hub id that is not in the local cache is
asked for once, without retries (`check_hub_id`: an unreachable hub failed after ~50 s of
retries). Every refusal is a `Refused` (a ValueError) whose message is said as it is.
"""
from __future__ import annotations

import json
from pathlib import Path

#: what every load passes to transformers: never run a model's own code, never ask
NO_REMOTE_CODE = {"trust_remote_code": False}


class Refused(ValueError):
    """A model, tokenizer or config mrtpo will not load; the message is one line, said as it is."""


class CustomCodeRefused(Refused):
    """A model, tokenizer or config that needs its own Python code to load; mrtpo refuses it."""


def _refusal(name: str, detail: str) -> str:
    return (f"refused to load {name}: {detail}; mrtpo never runs a model's own code. Use a model whose "
            "architecture transformers ships (config.json's model_type, e.g. llama or qwen2)")


def custom_code_problem(name: str | Path) -> str | None:
    """Why the local directory `name` would need its own code to load (None when it would not,
    or when it is not a local directory: a hub id is checked by transformers, see `_checked`)."""
    path = Path(name).expanduser()
    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        if config.stat().st_size > 16 << 20:  # a config is a few KB; the loader names a huge one
            return None
        doc = json.loads(config.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None  # unreadable: the loader reports it, naming the file
    if not isinstance(doc, dict) or not doc.get("auto_map"):
        return None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = doc.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING_NAMES:
        return None  # transformers' own classes serve it; auto_map is ignored without trust_remote_code
    auto_map = doc["auto_map"]
    names = (", ".join(str(v)[:80] for v in list(auto_map.values())[:3]) if isinstance(auto_map, dict)
             else str(auto_map)[:80])
    return _refusal(str(name), f"its config.json has model_type {str(model_type)[:80]!r}, which transformers "
                               f"does not know, and an auto_map naming the directory's own Python code ({names})")


class HubUnreachable(OSError):
    """A hub id that is not in the local cache and that the hub does not answer for."""


def check_hub_id(name: str | Path) -> None:
    """For a hub id (not a local path) whose config is not in the local Hugging Face cache, ask
    the hub once, without retries: HubUnreachable at once when it cannot be reached or has no
    such repository, where transformers' download would retry for about 50 s (issue 40, item 9).
    A cached repository, offline mode (HF_HUB_OFFLINE) and a gated one are left to the loader."""
    import os

    if Path(str(name)).expanduser().exists() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError
    except ImportError:  # pragma: no cover (transformers requires it)
        return
    try:
        if isinstance(try_to_load_from_cache(str(name), "config.json"), str):
            return
        HfApi().model_info(str(name), timeout=10)
    except (GatedRepoError, HFValidationError):
        return
    except RepositoryNotFoundError:
        raise HubUnreachable(f"the hub has no repository {str(name)!r} (or it is private)") from None
    except HfHubHTTPError:
        return  # the hub answered (rate limit, server error...): the loader says what it says
    except Exception as exc:  # no network, DNS, a timeout, a proxy: say so now instead of retrying
        raise HubUnreachable(f"the hub could not be reached for {str(name)!r} ({type(exc).__name__})") from None


#: a config may describe at most this many times the parameters its weight files could hold at
#: half a byte each (4-bit): more means the config is not these weights' (item 6: 10^6 layers)
_OVERSIZE = 8


def config_weights_problem(name: str | Path) -> str | None:
    """Why the local model directory `name`'s config.json cannot describe its weights (None if
    it can, or when there is nothing to compare), read from the config and the weight files'
    sizes and safetensors headers only, before transformers builds the model the config
    describes: a config claiming 10^6 layers over weights for 2 would build gigabytes first."""
    import re
    import struct

    path = Path(name).expanduser()
    config_file = path / "config.json"
    if not path.is_dir() or not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    config = {**config, **(config.get("text_config") if isinstance(config.get("text_config"), dict) else {})}

    def number(*keys):
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    layers = number("num_hidden_layers", "n_layer", "num_layers")
    hidden = number("hidden_size", "n_embd", "d_model")
    vocab = number("vocab_size")
    inner = number("intermediate_size", "n_inner") or (4 * hidden if hidden else None)
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not files:
        return None
    size = sum(f.stat().st_size for f in files)
    for key, value in (("num_hidden_layers", layers), ("hidden_size", hidden), ("vocab_size", vocab),
                       ("intermediate_size", inner), ("num_attention_heads", number("num_attention_heads", "n_head")),
                       ("num_key_value_heads", number("num_key_value_heads")), ("head_dim", number("head_dim"))):
        if value is not None and value <= 0:
            return f"{config_file}: {key} is {value}; it must be a positive number"
    indices: set[int] = set()
    shapes: dict[str, list] = {}
    for f in files:
        if f.suffix != ".safetensors":
            break
        try:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > 100 << 20:
                    return None
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error, RecursionError):
            return None  # the weight-file check or the loader names a damaged file
        for tensor, info in header.items():
            if isinstance(info, dict) and isinstance(info.get("shape"), list):
                shapes[tensor] = info["shape"]
            m = re.search(r"\.(?:layers|h|blocks|layer)\.(\d+)\.", tensor)
            if m:
                indices.add(int(m.group(1)))
    if layers is not None and indices and layers > max(indices) + 1:
        return (f"{config_file}: num_hidden_layers is {layers}, but the weights hold {max(indices) + 1} layers; "
                "the config does not belong to these weights")
    embedding = next((shape for tensor, shape in shapes.items()
                      if tensor.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight"))), None)
    if embedding is not None and len(embedding) == 2 and hidden is not None and embedding[1] != hidden:
        return (f"{config_file}: hidden_size is {hidden}, but the embedding in the weights is {embedding[1]} wide; "
                "the config does not belong to these weights")
    if layers and hidden and vocab and inner:
        described = vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inner)
        if described > _OVERSIZE * 2 * size:
            return (f"{config_file} describes about {described:.3g} parameters, but the weight files hold "
                    f"{size:,} bytes; the config does not belong to these weights")
    if shapes and files[0].suffix == ".safetensors" and not config.get("quantization_config") \
            and (layers is None or layers <= max(_MAX_META_LAYERS, max(indices, default=0) + 1)):
        return described_shapes_problem(path, config_file, shapes, size)
    return None


#: the most layers a config may describe for `meta_shapes` to build it when the weights' tensor
#: names show no layer numbers (building a module per layer costs time, even without weights)
_MAX_META_LAYERS = 1024


def meta_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], int, set[str]] | None:
    """The model the directory's config.json describes, built on PyTorch's meta device (shapes
    only, no memory for weights, no code from the directory): (each parameter's shape by name,
    the number of parameters, the names of parameters that share another's tensor, such as an
    lm_head tied to the embedding). None when transformers cannot build it from the config (the
    loader then says why)."""
    import logging

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        config = AutoConfig.from_pretrained(str(path), **NO_REMOTE_CODE)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, **NO_REMOTE_CODE)
    except Exception:  # noqa: BLE001 - an unusable config: the loader names it
        return None
    finally:
        quiet.setLevel(level)
    shapes, first_name, shared = {}, {}, set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        shapes[name] = tuple(parameter.shape)
        if id(parameter) in first_name:
            shared.add(name)
        first_name.setdefault(id(parameter), name)
    count = sum(p.numel() for p in model.parameters())
    return shapes, count, shared


def described_shapes_problem(path: Path, config_file: Path, stored: dict[str, list], size: int) -> str | None:
    """Why the weights' safetensors headers (`stored`: tensor name -> shape) do not hold the
    model config.json describes (`meta_shapes`), None if they do: the first parameter whose
    shape differs (`"head_dim": 500000` makes every attention projection 500,000 rows a head;
    transformers would build that model, gigabytes, before it found the mismatch), or a
    parameter the weights lack where the weights name the others the model's way (a layer or
    a projection too many). A parameter tied to another (lm_head on the embedding) and tensors
    the model does not have (saved buffers) are not a mismatch."""
    built = meta_shapes(path)
    if built is None:
        return None
    expected, count, shared = built
    tail = "; the config does not belong to these weights: use the config.json saved with them"

    def plain(name: str) -> str:  # a base model's weights saved without the causal LM's prefix
        return name.split(".", 1)[1] if name.startswith(("model.", "transformer.")) else name

    in_file = {plain(name): shape for name, shape in stored.items()}
    matched = 0
    for name, shape in expected.items():
        held = in_file.get(plain(name))
        if held is None:
            continue
        matched += 1
        if tuple(held) != shape:
            return (f"{config_file} describes {name} as {list(shape)}, but the weights hold {list(held)}{tail}")
    if matched * 2 >= len(in_file):  # the weights name tensors as this model does
        for name, shape in expected.items():
            if plain(name) not in in_file and name not in shared:
                return (f"{config_file} describes {name} {list(shape)}, which the weights do not hold{tail}")
    if count > _OVERSIZE * 2 * size:  # named otherwise (a conversion transformers makes on load)
        return (f"{config_file} describes {count:,} parameters, but the weight files hold {size:,} bytes{tail}")
    return None


def _checked(name: str | Path, load, *args, **kwargs):
    """`load(name, *args, trust_remote_code=False, **kwargs)`, refused first if the directory
    asks for its own code; transformers' own refusal (a hub repository's code) in one line."""
    problem = custom_code_problem(name)
    if problem:
        raise CustomCodeRefused(problem)
    if "gguf_file" not in kwargs:
        check_hub_id(name)
    try:
        return load(str(name), *args, **NO_REMOTE_CODE, **kwargs)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise CustomCodeRefused(_refusal(str(name), "it needs its own Python code to load (custom code)")) from None
        raise


def auto_tokenizer(name: str | Path, **kwargs):
    """`AutoTokenizer.from_pretrained(name, **kwargs)`, never running the model's code."""
    from transformers import AutoTokenizer

    return _checked(name, AutoTokenizer.from_pretrained, **kwargs)


class ConfigMismatch(Refused):
    """A model directory whose config.json does not describe its weights."""


def auto_model(name: str | Path, **kwargs):
    """`AutoModelForCausalLM.from_pretrained(name, **kwargs)`, never running the model's code,
    and only once the config is seen to fit the weights (`config_weights_problem`)."""
    from transformers import AutoModelForCausalLM

    if "gguf_file" not in kwargs:
        problem = config_weights_problem(name)
        if problem:
            raise ConfigMismatch(problem)
    return _checked(name, AutoModelForCausalLM.from_pretrained, **kwargs)


def auto_config(name: str | Path, **kwargs):
    """`AutoConfig.from_pretrained(name, **kwargs)`, never running the model's code."""
    from transformers import AutoConfig

    return _checked(name, AutoConfig.from_pretrained, **kwargs)
