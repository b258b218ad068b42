"""What `mrtpo train` wrote, as something to load: a run directory, a checkpoint, an adapter.

`--model` of `mrtpo eval` and `mrtpo credit`, and `mrtpo export`, accept (lm-eval's `peft=`
idea, without a second flag):

- a run directory (`config.yaml` + `checkpoints/`): its latest checkpoint, or `step`;
- a checkpoint (`checkpoints/step-000040/`): its `adapter/` (LoRA runs) or `model/` (--no-lora);
- an adapter directory (`adapter_config.json`): peft weights on the base its config names;
- anything else: a model directory, a hub id or a built-in policy's name, unchanged.

An adapter's base is `base_model_name_or_path` from its `adapter_config.json`. Checkpoints
write it portable (`portable_name`): the built-in policy's name (`mrtpo-tiny`, rebuilt from
its recipe on another machine), the hub id the user gave, or a local directory's absolute
path; a built-in name is resolved (built on first use) when loading. The tokenizer comes
from the adapter directory when it holds one (checkpoints save it since issue 19), else
from the base.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class TrainedModelError(ValueError):
    """A run directory, checkpoint or adapter that cannot be loaded; the message says why."""


@dataclass(frozen=True)
class Located:
    """Where the pieces of one model are: load `base`, put `adapter` on it, tokenizer from `tokenizer`."""

    base: str  # a directory or hub id from_pretrained loads (built-in names already resolved)
    adapter: Path | None  # peft adapter directory, or None for a plain model
    tokenizer: str  # directory or hub id holding the tokenizer files
    base_name: str  # the base as the adapter (or the user) names it: portable
    step: int | None = None  # the checkpoint's step, when it came from a run
    what: str = ""  # one line for logs: "run runs/x, step 40: LoRA adapter on mrtpo-tiny"


def portable_name(given: str, resolved: str | Path) -> str:
    """The base model's name as another machine can load it: a built-in policy's name when
    `resolved` is its cached build (however it was given), the hub id as given, or a local
    directory's absolute path."""
    from mrtpo.models.default import builtin_name

    name = builtin_name(resolved) or builtin_name(given)
    if name is not None:
        return name
    if Path(given).expanduser().exists():
        return str(Path(given).expanduser().resolve())
    return given


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "checkpoints").is_dir()


def is_checkpoint(path: Path) -> bool:
    return (path / "state.json").is_file() and ((path / "adapter").is_dir() or (path / "model").is_dir())


def _has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in TOKENIZER_FILES)


WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")


def model_arg_problem(model: str, *, trained: bool) -> str | None:
    """Why a local `--model` value cannot be a model, in words (None when it may be one).

    A value that names a local path must be a directory holding a model: `config.json`,
    weights and tokenizer files (what `save_pretrained` writes). Anything else is left to
    the loader (a built-in policy name, a hub id). `trained`: the command also accepts a run
    directory, a checkpoint or an adapter (eval, credit, export), which the caller checked first.
    """
    from mrtpo.harness.policy import _looks_local
    from mrtpo.models.default import RECIPES

    path = Path(model).expanduser()
    accepts = ("--model takes a model directory (config.json, weights and tokenizer files, as "
               f"save_pretrained writes them), a built-in policy ({', '.join(RECIPES)}), "
               + ("a run directory (config.yaml + checkpoints/), a checkpoint "
                  "(checkpoints/step-N/), an adapter directory (adapter_config.json) "
                  if trained else "")
               + "or a hub id (org/name)")
    if not path.exists():
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
        ("tokenizer files (" + ", ".join(TOKENIZER_FILES) + ")", _has_tokenizer(path)),
    ) if not ok]
    if lacks:
        return f"--model {model!r} is a directory but not a model: it has no {' and no '.join(lacks)}. {accepts}."
    return None


def locate(name_or_path: str | Path, step: int | None = None, build: bool = True) -> Located:
    """Resolve a `--model` value (see the module docstring); `step` picks a run's checkpoint.

    `build=False` leaves a built-in base unresolved (its name), for callers that only copy files.
    """
    from mrtpo.harness import checkpoints

    path = Path(name_or_path).expanduser()
    if is_run_dir(path):
        done = checkpoints.complete_checkpoints(path)
        if not done:
            raise TrainedModelError(f"{path}: this run has no complete checkpoint yet "
                                    "(checkpoints/step-*/state.json); let it reach --save-every or its last step")
        if step is None:
            chosen = checkpoints.latest(path)
        else:
            chosen = next((c for c in done if _step(c) == step), None)
            if chosen is None:
                raise TrainedModelError(f"{path}: no checkpoint of step {step}; saved steps: "
                                        f"{', '.join(str(_step(c)) for c in done)}")
        located = _checkpoint(chosen, build, run_config=path / "config.yaml")
        return _with(located, what=f"run {path}, step {located.step}: {located.what}")
    if step is not None:
        raise TrainedModelError(f"--step picks a checkpoint of a run directory; {name_or_path} is not one "
                                "(no config.yaml and checkpoints/)")
    if is_checkpoint(path):
        run = path.parent.parent / "config.yaml"
        return _checkpoint(path, build, run_config=run if run.is_file() else None)
    if (path / ADAPTER_CONFIG).is_file():
        return _adapter(path, build)
    from mrtpo.models.default import resolve_model

    problem = model_arg_problem(str(name_or_path), trained=True)
    if problem:
        raise TrainedModelError(problem)
    base = resolve_model(str(name_or_path)) if build else str(name_or_path)
    return Located(base, None, base, str(name_or_path), what=f"model {name_or_path}")


def _step(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / "state.json").read_text())["step"])


def _with(located: Located, **changes) -> Located:
    from dataclasses import replace

    return replace(located, **changes)


def _checkpoint(path: Path, build: bool, run_config: Path | None) -> Located:
    step = _step(path)
    if (path / "model").is_dir():  # --no-lora: full weights and tokenizer
        model = str(path / "model")
        return Located(model, None, model, model, step, what=f"checkpoint {path.name} (full weights)")
    fallback = None
    if run_config is not None:  # older checkpoints: the run's config names the base
        import yaml

        fallback = (yaml.safe_load(run_config.read_text()) or {}).get("model")
    located = _adapter(path / "adapter", build, fallback_base=fallback)
    return _with(located, step=step, what=f"checkpoint {path.name}: {located.what}")


def _adapter(path: Path, build: bool, fallback_base: str | None = None) -> Located:
    from mrtpo.models.default import RECIPES, resolve_model

    try:
        config = json.loads((path / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise TrainedModelError(f"{path / ADAPTER_CONFIG}: not a readable adapter config ({exc})") from exc
    name = config.get("base_model_name_or_path") or fallback_base
    if not name:
        raise TrainedModelError(f"{path / ADAPTER_CONFIG} names no base_model_name_or_path; set it to the base "
                                "model's hub id or directory")
    if Path(name).is_absolute() and not Path(name).exists() and fallback_base:
        name = fallback_base  # a path from another machine (older checkpoints): the run's own setting
    if Path(name).is_absolute() and not Path(name).exists() and name not in RECIPES:
        raise TrainedModelError(f"{path}: its base model {name} does not exist on this machine; edit "
                                f"base_model_name_or_path in {path / ADAPTER_CONFIG} to the base's directory or hub id")
    base = resolve_model(name) if build else name
    tokenizer = str(path) if _has_tokenizer(path) else base
    return Located(base, path, tokenizer, name, what=f"LoRA adapter on {name}")


def load(located: Located, dtype=None, device: str | None = None, merge: bool = True):
    """(model, tokenizer): the base with the adapter on it (merged into the weights when
    `merge`, so generation runs at the plain model's speed), in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(located.tokenizer)
    model = AutoModelForCausalLM.from_pretrained(located.base, **({"dtype": dtype} if dtype is not None else {}))
    if located.adapter is not None:
        import warnings

        from peft import PeftModel

        with warnings.catch_warnings():  # peft reads a property transformers deprecated
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            model = PeftModel.from_pretrained(model, str(located.adapter))
        if merge:
            model = model.merge_and_unload()
    if device is not None:
        model = model.to(device)
    model.eval()
    return model, tokenizer


def load_frozen_policy(name_or_path: str, device: str = "auto", dtype: str = "auto"):
    """A `mrtpo.harness.policy.Policy` (no LoRA of its own) for anything `locate` accepts:
    what `mrtpo credit TASK --model` replays with. The tokenizer passes the same checks as in
    training (a chat template, a pad token)."""
    from mrtpo.harness.policy import Policy, load_policy, load_tokenizer, resolve_device, resolve_dtype

    located = locate(name_or_path)
    if located.adapter is None:
        return load_policy(located.base, lora=False, device=device, dtype=dtype)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tokenizer = load_tokenizer(located.tokenizer)
    model, _ = load(located, dtype=dt, device=str(dev))
    return Policy(model, tokenizer, dev, dt, lora=False)
