"""The policy: a transformers causal LM and its tokenizer, optionally wrapped with a peft LoRA.

`load_policy` reads a local directory or a hub id (the tokenizer must carry a chat template:
prompts are rendered through it), picks the device and dtype (fp32 on CPU, bf16 on a GPU
that supports it), and wraps the model with LoRA on all linear projections by default.
`Policy.reference()` yields the model that the KL term compares against: with LoRA it is
the same model with the adapter switched off (no second copy); without LoRA a frozen copy
is kept, and only when `beta > 0` asks for it. On CPU, loading a policy also has transformers'
attention read grouped key/value heads in place instead of copying them (`harness.attention`).
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from mrtpo.models.builtin import RECIPES, retired


class PolicyLoadError(RuntimeError):
    """The model or tokenizer could not be loaded; the message says what to check."""


@dataclass
class Policy:
    model: torch.nn.Module  # a PeftModel when `lora`
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    lora: bool
    frozen_reference: torch.nn.Module | None = None  # only for --no-lora with beta > 0
    # LoRA on bfloat16/float16 weights: `merged()` folds the adapter into a copy (`folds_a_copy`)
    fold_copy: bool = False
    _copies: dict = field(default_factory=dict, repr=False)  # dtype (or "folded") -> a copy of the model
    _folded: torch.nn.Module | None = field(default=None, repr=False)  # inside `merged()`: what it yields

    @property
    def stop_ids(self) -> list[int]:
        """Token ids that end a completion: the tokenizer's EOS and the model's EOS ids."""
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
        return sorted(i for i in ids if i is not None)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def folds_a_copy(self) -> bool:
        """Whether `merged()` yields a folded copy (LoRA on bfloat16/float16 weights with
        `fold_copy`): its outputs differ from the weights' own by the fold's rounding, so the
        trainer records what the sampler drew under it and corrects for the gap."""
        return self.fold_copy and self.lora and self.dtype != torch.float32

    @contextlib.contextmanager
    def merged(self) -> Iterator[torch.nn.Module]:
        """The model with its LoRA adapter folded into the base weights, for no-grad passes
        (sampling, the replay): one matrix product per projection instead of three.

        - float32 weights are folded in place, which changes the outputs by float rounding
          (tested). The base weights are copied back exactly afterwards, and the layers marked
          unmerged (peft's unmerge would subtract BA again, one more product per projection,
          and leave rounding residue).
        - bfloat16/float16 weights: W + BA in them would round much of a small adapter's update
          away for good, so the weights are never folded in place. With `fold_copy` (the
          trainer's --low-precision-fold, on for CUDA) the fold goes into a copy of the model,
          made once and refreshed here: each adapted weight of the copy is W + BA computed in
          float32 and rounded once to the weights' dtype (`refresh_folded_copy`). The adapter
          itself stays in float32 and trains as before; what the copy samples differs from the
          weights' own distribution by that rounding, which the update's importance-sampling
          correction covers, as it does for vLLM in TRL. Without it (and in full-weight
          training) the model is yielded unchanged.

        Nested calls fold once: the trainer holds one `merged()` from sampling to the replay,
        and the ones inside (`sample`, the replay's) get the folded model as it is. A nested
        call with gradients on is refused: the folded model would give the adapter none."""
        if self._folded is not None and torch.is_grad_enabled():
            raise RuntimeError("Policy.merged() with gradients on inside a fold: the adapter is folded into the "
                               "weights there and would get no gradient; run this pass after the fold's block")
        if self._folded is not None:
            yield self._folded
            return
        if not self.lora or torch.is_grad_enabled() or (self.dtype != torch.float32 and not self.folds_a_copy):
            yield self.model
            return
        if self.folds_a_copy:
            try:
                self._folded = self.refresh_folded_copy()
                yield self._folded
            finally:
                self._folded = None
            return
        from peft.tuners.lora import LoraLayer

        layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)]
        saved = [(m.get_base_layer().weight, m.get_base_layer().weight.detach().clone()) for m in layers]
        try:  # the weights come back however far the fold got
            self._folded = self.model
            self.model.merge_adapter()
            yield self.model
        finally:
            self._folded = None
            for weight, exact in saved:
                weight.data.copy_(exact)
            for m in layers:
                m.merged_adapters.clear()  # what peft's unmerge leaves: no adapter in the weights

    @torch.no_grad()
    def refresh_folded_copy(self) -> torch.nn.Module:
        """The folded copy of a LoRA model (`merged()`), made on first use as a plain model
        without adapter layers (a second set of the base weights, held for the run) and brought
        up to date with the adapter: each adapted weight set to round(W + BA) from float32, in
        place (a compiled decoder keeps its buffers)."""
        from peft.tuners.lora import LoraLayer

        entry = self._copies.get("folded")
        if entry is None:
            pairs = [(name, m) for name, m in self.model.named_modules() if isinstance(m, LoraLayer)]
            plain = copy.deepcopy(self.model).unload()  # the adapter layers removed, nothing folded
            plain.requires_grad_(False).eval()
            prefix = "base_model.model."
            targets = [(m, plain.get_submodule(name.removeprefix(prefix))) for name, m in pairs]
            for _, target in targets:  # its own tensor: an adapted weight tied to another (an adapted
                # embedding tied to the head) must not carry its update into the other one
                target.weight = torch.nn.Parameter(target.weight.detach().clone(), requires_grad=False)
            entry = self._copies["folded"] = (plain, targets)
        plain, targets = entry
        for layer, target in targets:
            delta = sum(layer.get_delta_weight(a).float() for a in layer.active_adapters
                        if a in layer.lora_A or a in getattr(layer, "lora_embedding_A", {}))
            base = layer.get_base_layer().weight
            target.weight.copy_((base.float() + delta).to(target.weight.dtype))
        return plain

    @contextlib.contextmanager
    def sampler(self, dtype: torch.dtype | None = None) -> Iterator[torch.nn.Module]:
        """The model to sample from, without gradients: `merged()`, or with a `dtype` other than
        the weights' (--rollout-dtype bfloat16) a copy of the merged model in that dtype.

        The copy is made once and its parameters are overwritten from the merged weights on
        every call (one cast of the weights, ~0.05 s for SmolLM2 on a CPU), so it always holds
        the current policy; its buffers (rotary frequencies) stay as they are, in float32. It
        samples from a slightly different distribution than the weights: the update corrects
        for that with importance sampling (harness.loss.sampling_correction)."""
        with self.merged() as model:
            if dtype is None or dtype == self.dtype:
                yield model
                return
            low = self._copies.get(dtype)
            if low is None:
                low = copy.deepcopy(model)
                for p in low.parameters():
                    p.data = p.data.to(dtype)
                    p.requires_grad_(False)
                self._copies[dtype] = low
            else:
                for dst, src in zip(low.parameters(), model.parameters()):
                    dst.copy_(src)
            low.eval()
            yield low

    @contextlib.contextmanager
    def reference(self) -> Iterator[torch.nn.Module]:
        """The base model for the KL term: the adapter switched off, or the frozen copy."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
        elif self.frozen_reference is not None:
            yield self.frozen_reference
        else:
            raise RuntimeError("no reference model: it is kept only when beta > 0")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise PolicyLoadError(f"--device {name!r} is not a device torch knows: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PolicyLoadError(f"--device {name}: CUDA is not available here; use --device cpu")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The weights' dtype for `--dtype NAME` on `device`; a dtype the device cannot compute in
    is refused here, before any model loads (PolicyLoadError naming the device and what to use)."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise PolicyLoadError(f"--dtype bfloat16: this GPU ({device}) has no bfloat16 support; "
                              "use --dtype float16 or float32")
    problem = _cannot_compute(dtype, device)
    if problem:
        raise PolicyLoadError(f"--dtype {name}: {device} cannot compute in it ({problem}); use --dtype float32")
    return dtype


def resolve_rollout_dtype(name: str, device: torch.device, weights: torch.dtype) -> torch.dtype | None:
    """`--rollout-dtype NAME`: None for 'same' (or the weights' own dtype), else the dtype a copy
    of the policy samples in; refused before any model loads when `device` cannot compute in it."""
    if name == "same":
        return None
    dtype = {"bfloat16": torch.bfloat16}[name]
    if dtype == weights:
        return None
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise PolicyLoadError(f"--rollout-dtype {name}: this GPU ({device}) has no bfloat16 support; "
                              "use --rollout-dtype same")
    problem = _cannot_compute(dtype, device)
    if problem:
        raise PolicyLoadError(f"--rollout-dtype {name}: {device} cannot compute in it ({problem}); "
                              "use --rollout-dtype same")
    return dtype


def on_for_cuda(setting: str, device, what: str) -> bool:
    """An "auto|on|off" setting of a GPU path (`what`, for its error): "auto" = on for a CUDA
    policy, off elsewhere."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"{what} must be 'auto', 'on' or 'off', got {setting!r}")
    return setting == "on" or (setting == "auto" and torch.device(device).type == "cuda")


def low_precision_fold(setting: str, device) -> bool:
    """`--low-precision-fold`: "on", "off", or "auto" = on for a CUDA policy (where bf16 weights
    are the default and each projection's three products cost launches), off elsewhere.
    It acts only on LoRA policies whose weights are bfloat16 or float16 (`Policy.merged`)."""
    return on_for_cuda(setting, device, "the low-precision fold")


def _cannot_compute(dtype: torch.dtype, device: torch.device) -> str | None:
    """What fails when `device` runs the kernels a forward and backward need in `dtype`
    (a matrix product, softmax, their gradients), or None."""
    try:
        x = torch.ones(2, 4, dtype=dtype, device=device, requires_grad=True)
        w = torch.ones(4, 3, dtype=dtype, device=device)
        (x @ w).softmax(-1).float().sum().backward()
    except (RuntimeError, TypeError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _looks_local(name: str) -> bool:
    """Whether a --model value that does not exist was meant as a local path, not a hub id.
    A hub id is `name` or `org/name`, and its name may hold dots (`Qwen/Qwen2.5-0.5B-Instruct`),
    so a suffix only counts without an org."""
    p = Path(name).expanduser()
    return (name.startswith((".", "/", "~")) or name.count("/") > 1
            or ("/" not in name and p.suffix != "")
            or ("/" in name and p.parent.is_dir()))  # e.g. runs/x when ./runs exists


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")


def has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in TOKENIZER_FILES)


def model_arg_problem(model: str, *, trained: bool) -> str | None:
    """Why a local `--model` value cannot be a model, in words (None when it may be one).

    A value that names a local path must be a directory holding a model: `config.json`,
    weights and tokenizer files (what `save_pretrained` writes). Anything else is left to
    the loader (a built-in policy name, a hub id). `trained`: the command also accepts a run
    directory, a checkpoint or an adapter (eval, credit, export), which the caller checked first.
    """
    path = Path(model).expanduser()
    accepts = ("--model takes a model directory (config.json, weights and tokenizer files, as "
               f"save_pretrained writes them), a built-in policy ({', '.join(RECIPES)}), "
               + ("a run directory (config.yaml + checkpoints/), a checkpoint "
                  "(checkpoints/step-N/), an adapter directory (adapter_config.json) "
                  if trained else "")
               + "or a hub id (org/name)")
    if not path.exists():
        if gone := retired(model):
            return gone
        if model in RECIPES or not _looks_local(model):
            return None
        return f"--model {model!r}: no such local directory. {accepts}."
    if not path.is_dir():
        return f"--model {model!r} is a file, not a model directory. {accepts}."
    if (path / "config.yaml").is_file() and not trained:
        return (f"--model {model!r} is an mrtpo run directory; this command needs a model. Export "
                f"it first (mrtpo export {model} OUT), or give its base model. {accepts}.")
    if (path / "config.yaml").is_file() and not (path / "checkpoints").is_dir():
        return f"--model {model!r} looks like a run directory but has no checkpoints/ yet. {accepts}."
    lacks = [what for what, ok in (
        ("config.json", (path / "config.json").is_file()),
        ("weights (*.safetensors or pytorch_model*.bin)", any(any(path.glob(g)) for g in WEIGHT_PATTERNS)),
        ("tokenizer files (" + ", ".join(TOKENIZER_FILES) + ")", has_tokenizer(path)),
    ) if not ok]
    if lacks:
        return f"--model {model!r} is a directory but not a model: it has no {' and no '.join(lacks)}. {accepts}."
    return None


def check_model_arg(model: str | None) -> None:
    """Fail fast, before any data or weights are read, on a missing or absent --model."""
    if not model:
        raise PolicyLoadError("--model is required: a local directory saved with save_pretrained "
                              "(model + tokenizer with a chat template) or a hub id.")
    problem = model_arg_problem(model, trained=False)
    if problem:
        raise PolicyLoadError(problem)


def load_tokenizer(name: str):
    from mrtpo.loading import Refused, auto_tokenizer

    try:
        tok = auto_tokenizer(name)
    except Refused as exc:
        raise PolicyLoadError(str(exc)) from None
    except Exception as exc:
        raise PolicyLoadError(load_failure(name, "tokenizer", exc)) from exc
    if not getattr(tok, "chat_template", None):
        raise PolicyLoadError(
            f"the tokenizer of {name!r} has no chat template; prompts are rendered as chat "
            "messages. Use an instruct/chat model, or set tokenizer.chat_template and save it "
            "with save_pretrained.")
    if tok.pad_token_id is None:  # generation pads batches; the EOS token is the usual stand-in
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_failure(name: str, what: str, exc: BaseException, role: str = "--model") -> str:
    """One line for a model or tokenizer that transformers could not load from `name` (`role`:
    how the user knows the name, e.g. "--model" or "the adapter's base model")."""
    from mrtpo.textio import one_line

    if Path(name).expanduser().exists():
        if "weights_only" in str(exc):  # torch's message advises weights_only=False: never
            return (f"could not load the {what} from {name}: its weights are a pickle (pytorch_model*.bin) "
                    "that torch's safe loader refuses, since loading it could run code; convert them to "
                    "safetensors where you trust them (save_pretrained(..., safe_serialization=True))")
        broken = _broken_tokenizer_file(Path(name).expanduser()) if what == "tokenizer" else None
        if broken:
            return f"could not load the tokenizer from {name}: {broken}"
        config = _unreadable_config(Path(name).expanduser())  # the tokenizer reads config.json first
        if config:
            return f"could not load {name}: {config}"
        return f"could not load the {what} from {name}: {one_line(exc)}"
    where = ("no such local directory" if _looks_local(name) else
             "no local directory of that name, and it could not be fetched as a hub id")
    return (f"{role} {name!r}: {where} ({one_line(exc, 160)}). Pass a directory saved with "
            "save_pretrained (config.json, weights, tokenizer files) or a reachable hub id.")


def _unreadable_config(path: Path) -> str | None:
    """What is wrong with `path`/config.json when transformers cannot build a config from it (a
    zero or negative size, a field of the wrong type), naming the file; None when it reads."""
    from mrtpo.loading import auto_config
    from mrtpo.textio import one_line

    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        auto_config(path)
    except Exception as exc:  # noqa: BLE001 - whatever transformers raised, said with the file's name
        return (f"{config} does not describe a model transformers can build ({one_line(exc, 200)}); "
                "fix its fields or use the config.json saved with these weights")
    return None


def _broken_tokenizer_file(path: Path) -> str | None:
    """The tokenizer file of directory `path` that is not valid JSON, named with why (None if
    each reads), so a failed load names the file rather than the tokenizers library's words."""
    from mrtpo.textio import loads

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json"):
        file = path / name
        try:
            if file.is_file() and file.stat().st_size <= (256 << 20):
                loads(file.read_bytes())
        except ValueError as exc:
            return f"{file} is not valid JSON ({' '.join(str(exc).split())[:160]}); restore it from a copy"
        except OSError as exc:
            return f"{file} cannot be read ({exc.strerror or exc})"
    return None


def vocabulary_problem(name: str, tokenizer, model) -> str | None:
    """Why `tokenizer` cannot drive `model` (None if it can): a token id past the embedding
    table would index out of range in the first forward pass."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        return (f"{name}: the tokenizer has {len(tokenizer)} tokens but the model's embedding only {rows}; "
                "the tokenizer and the weights do not belong together")
    return None


def adapted_width(net, targets: list[str]) -> int | None:
    """The largest rank LoRA can use on `net`'s adapted layers (`targets`: module names, or
    ["all-linear"]): the most, over those linear layers, of min(in, out) features. None when no
    layer matches (peft then says so itself)."""
    import torch.nn as nn

    output = net.get_output_embeddings() if hasattr(net, "get_output_embeddings") else None
    widths = [min(m.in_features, m.out_features) for name, m in net.named_modules()
              if isinstance(m, nn.Linear) and m is not output
              and (targets == ["all-linear"] or any(name == t or name.endswith("." + t) for t in targets))]
    return max(widths) if widths else None


def load_policy(model: str | None, *, lora: bool = True, lora_r: int = 16, lora_alpha: float = 32.0,
                lora_dropout: float = 0.0, lora_target_modules=("all-linear",), device: str = "auto",
                dtype: str = "auto", gradient_checkpointing: bool = False, keep_reference: bool = False,
                weights_from: str | Path | None = None, base_name: str | None = None,
                sparse_dropout: bool = True, fold_copy: bool = False) -> Policy:
    """Load tokenizer and model, move them to the device, wrap with LoRA when asked.

    `weights_from` (full-weight resume) loads the model weights from a checkpoint directory
    while the frozen reference, if any, still comes from `model`. `base_name`: the base as
    saved adapters name it (`base_model_name_or_path`), e.g. `smollm2-135m` or a hub id.
    A LoRA policy on CPU draws its adapter's dropout masks with `harness.fast.dropout.SparseDropout`
    (torch's distribution, only the dropped positions drawn; the saved adapter is peft's)
    unless `sparse_dropout` is False (peft's `nn.Dropout`: benchmarks time one against the other).
    `fold_copy`: a LoRA policy on bfloat16/float16 weights folds its adapter into a copy for
    no-grad passes (`Policy.merged`; the trainer's --low-precision-fold).
    """
    from mrtpo.harness.fast.attention import prefer_grouped_attention
    from mrtpo.loading import Refused, auto_model

    check_model_arg(model)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    prefer_grouped_attention(dev)  # on CPU: key/value heads read in place, not copied (harness.attention)
    tok = load_tokenizer(model)

    def _load(path):
        try:
            return auto_model(path, dtype=dt).to(dev)
        except Refused as exc:
            raise PolicyLoadError(str(exc)) from None
        except Exception as exc:
            raise PolicyLoadError(load_failure(str(path), "model", exc)) from exc

    net = _load(weights_from or model)
    problem = vocabulary_problem(model, tok, net)
    if problem:
        raise PolicyLoadError(problem)
    reference = None
    if keep_reference and not lora:
        reference = _load(model) if weights_from else copy.deepcopy(net)
        reference.eval().requires_grad_(False)
    if gradient_checkpointing:
        enable = getattr(net, "activation_checkpointing_enable", None)  # transformers >= 5 name
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        from peft import LoraConfig, get_peft_model

        from mrtpo.harness.fast.dropout import use_sparse_dropout

        targets = list(lora_target_modules)
        width = adapted_width(net, targets)
        if width is not None and lora_r > width:  # peft would allocate it, to no use, until memory ran out
            raise PolicyLoadError(f"--lora-r {lora_r} is larger than the layers LoRA adapts in {model} "
                                  f"(the widest is {width} wide: a rank above a layer's width adds "
                                  f"nothing); use --lora-r {width} or less")
        config = LoraConfig(
            r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, bias="none",
            target_modules=targets[0] if targets == ["all-linear"] else targets,
            task_type="CAUSAL_LM",
        )
        try:
            with warnings.catch_warnings():  # peft reads a property transformers deprecated
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
                net = get_peft_model(net, config)
        except ValueError as exc:  # e.g. a target module name that matches nothing
            raise PolicyLoadError(f"--lora-target-modules {targets}: {exc}") from exc
        if sparse_dropout:
            use_sparse_dropout(net)  # on CPU: the dropped positions drawn, not a number per element
        if base_name:  # what saved adapters name as their base (peft would write the local path)
            net.peft_config["default"].base_model_name_or_path = base_name
    return Policy(net, tok, dev, dt, lora, reference, fold_copy=fold_copy)
