"""What `mrtpo train` wrote, as something to load: a run directory, a checkpoint, an adapter.

`--model` of `mrtpo eval` and `mrtpo credit`, and `mrtpo export`, accept (lm-eval's `peft=`
idea, without a second flag):

- a run directory (`config.yaml` + `checkpoints/`): its latest checkpoint, or `step`;
- a checkpoint (`checkpoints/step-000040/`): its `adapter/` (LoRA runs) or `model/` (--no-lora);
- an adapter directory (`adapter_config.json`): peft weights on the base its config names;
- anything else: a model directory, a hub id or a built-in policy's name, unchanged.

An adapter's base is `base_model_name_or_path` from its `adapter_config.json`. Checkpoints
write it portable (`portable_name`): the built-in policy's name (`smollm2-135m`, built
from its package on another machine), the hub id the user gave, or a local directory's absolute
path; a built-in name is resolved (built on first use) when loading. The tokenizer comes
from the adapter directory when it holds one (checkpoints save it since issue 19), else
from the base.

Nothing is loaded or exported from a damaged checkpoint: its state.json is read by the one
validated reader (mrtpo.harness.run.checkpoints.read_state) and its weight files must have the
sizes and SHA-256 it records (`problems(..., resume=False)`), so a truncated adapter or
model is refused naming the file, and the newest intact checkpoint is suggested. Weight
files outside a checkpoint (an exported adapter, a model directory) are checked for a
complete safetensors layout (`check_weight_files`) before anything reads them.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from mrtpo.harness.policy import has_tokenizer, model_arg_problem

ADAPTER_CONFIG = "adapter_config.json"


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


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "checkpoints").is_dir()


def is_checkpoint(path: Path) -> bool:
    return (path / "state.json").is_file() and ((path / "adapter").is_dir() or (path / "model").is_dir())


def locate(name_or_path: str | Path, step: int | None = None, build: bool = True) -> Located:
    """Resolve a `--model` value (see the module docstring); `step` picks a run's checkpoint.

    `build=False` leaves a built-in base unresolved (its name), for callers that only copy files.
    """
    from mrtpo.harness.run import checkpoints

    path = Path(name_or_path).expanduser()
    if is_run_dir(path):
        done = checkpoints.complete_checkpoints(path)
        if not done:
            raise TrainedModelError(f"{path}: this run has no complete checkpoint yet "
                                    "(checkpoints/step-*/state.json); let it reach --save-every or its last step")
        if step is None:
            chosen = checkpoints.latest(path)
        else:
            chosen = next((c for c in done if _dir_step(c) == step), None)
            if chosen is None:
                raise TrainedModelError(f"{path}: no checkpoint of step {step}; saved steps: "
                                        f"{', '.join(str(_dir_step(c)) for c in done)}")
        located = _checkpoint(chosen, build, run_config=path / "config.yaml")
        return _with(located, what=f"run {path}, step {located.step}: {located.what}")
    if step is not None:
        raise TrainedModelError(f"--step picks a checkpoint of a run directory; {name_or_path} is not one "
                                "(no config.yaml and checkpoints/)")
    if path.name.startswith("step-") and not (path / "state.json").is_file() \
            and ((path / "adapter").is_dir() or (path / "model").is_dir()):
        raise TrainedModelError(f"{path / 'state.json'} is missing, so {path} is not a complete checkpoint "
                                "(a save was interrupted, or the file was deleted); restore it, or use "
                                "another checkpoint of the run")
    if is_checkpoint(path):
        run = path.parent.parent / "config.yaml"
        return _checkpoint(path, build, run_config=run if run.is_file() else None)
    if (path / ADAPTER_CONFIG).is_file():
        return _adapter(path, build)
    from mrtpo.models.builds import resolve_model

    problem = model_arg_problem(str(name_or_path), trained=True)
    if problem:
        raise TrainedModelError(problem)
    base = resolve_model(str(name_or_path)) if build else str(name_or_path)
    return Located(base, None, base, str(name_or_path), what=f"model {name_or_path}")


def _dir_step(checkpoint: Path) -> int:
    """The step a checkpoint directory is named for (`step-000040`), else the one it records."""
    from mrtpo.harness.run import checkpoints

    name = checkpoint.name
    if name.startswith("step-") and name[5:].isdigit():
        return int(name[5:])
    return checkpoints.recorded_step(checkpoint)


def _verified_step(checkpoint: Path) -> int:
    """The step of a checkpoint whose state.json and weight files are intact (resume's check,
    without the optimizer and RNG); else TrainedModelError naming the bad file and the newest
    intact checkpoint of the same run to use instead."""
    from mrtpo.harness.run import checkpoints

    why = checkpoints.problems(checkpoint, resume=False)
    if not why:
        return checkpoints.read_state(checkpoint)["step"]
    others = [c for c in reversed(checkpoints.step_dirs(checkpoint.parent.parent))
              if c != checkpoint and (c / "state.json").is_file()]
    intact = next((c for c in others if not checkpoints.problems(c, resume=False)), None)
    advice = ("restore the file from a copy, or use another checkpoint" if intact is None else
              f"restore the file from a copy, or use the newest intact checkpoint, step "
              f"{_dir_step(intact)} ({intact}; `mrtpo export` takes --step {_dir_step(intact)})")
    raise TrainedModelError(f"checkpoint {checkpoint} is damaged: {why}; {advice}")


def _with(located: Located, **changes) -> Located:
    from dataclasses import replace

    return replace(located, **changes)


def _checkpoint(path: Path, build: bool, run_config: Path | None) -> Located:
    step = _verified_step(path)
    if (path / "model").is_dir():  # --no-lora: full weights and tokenizer
        model = str(path / "model")
        return Located(model, None, model, model, step, what=f"checkpoint {path.name} (full weights)")
    fallback = None
    if run_config is not None:  # older checkpoints: the run's config names the base
        import yaml

        from mrtpo.yamlio import YAMLRefused, read_yaml_file

        try:
            saved = read_yaml_file(run_config) or {}
        except (yaml.YAMLError, YAMLRefused, OSError):
            saved = {}  # only a fallback: an adapter that names its base needs none
        fallback = saved.get("model") if isinstance(saved, dict) else None
        fallback = fallback if isinstance(fallback, str) else None
    located = _adapter(path / "adapter", build, fallback_base=fallback, verified=True)
    return _with(located, step=step, what=f"checkpoint {path.name}: {located.what}")


def _adapter(path: Path, build: bool, fallback_base: str | None = None, verified: bool = False) -> Located:
    from mrtpo.models.builtin import RECIPES, retired
    from mrtpo.models.builds import resolve_model

    if not verified and path.name == "adapter" and is_checkpoint(path.parent):  # given alone
        _verified_step(path.parent)
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
    if gone := retired(name):
        raise TrainedModelError(f"{path / ADAPTER_CONFIG}: its base model: {gone}")
    base = resolve_model(name) if build else name
    tokenizer = str(path) if has_tokenizer(path) else base
    return Located(base, path, tokenizer, name, what=f"LoRA adapter on {name}")


def load(located: Located, dtype=None, device: str | None = None, merge: bool = True):
    """(model, tokenizer): the base with the adapter on it (merged into the weights when
    `merge`, so generation runs at the plain model's speed), in eval mode. Whatever fails to
    load (a refused pickle, a config transformers rejects, an unreachable hub id or base, a
    tokenizer larger than the embedding) is a TrainedModelError in one line, naming what."""
    from mrtpo.harness.policy import vocabulary_problem
    from mrtpo.loading import auto_model, auto_tokenizer

    check_weights(located)
    base_role = "--model" if located.adapter is None else f"the base model of {located.adapter}"
    tokenizer = _loading(located.tokenizer, "tokenizer", base_role if located.tokenizer == located.base else "--model",
                         lambda: auto_tokenizer(located.tokenizer))
    model = _loading(located.base, "model", base_role,
                     lambda: auto_model(located.base, **({"dtype": dtype} if dtype is not None else {})))
    if located.adapter is not None:
        import warnings

        from peft import PeftModel

        def _peft():
            with warnings.catch_warnings():  # peft reads a property transformers deprecated
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
                return PeftModel.from_pretrained(model, str(located.adapter))
        model = _loading(str(located.adapter), "adapter", "--model", _peft)
        if merge:
            model = model.merge_and_unload()
    problem = vocabulary_problem(located.what or located.base, tokenizer, model)
    if problem:
        raise TrainedModelError(problem)
    if device is not None:
        model = model.to(device)
    model.eval()
    return model, tokenizer


def _loading(name: str, what: str, role: str, load):
    """`load()`, its failure a TrainedModelError in one line naming `name` (mrtpo's own errors,
    such as a refusal of custom code, pass through as their message)."""
    from mrtpo.harness.policy import load_failure
    from mrtpo.loading import Refused

    with _reading(name):
        try:
            return load()
        except Refused as exc:
            raise TrainedModelError(str(exc)) from None
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception as exc:
            from safetensors import SafetensorError

            if isinstance(exc, SafetensorError):
                raise
            raise TrainedModelError(load_failure(name, what, exc, role=role)) from exc


def load_frozen_policy(name_or_path: str, device: str = "auto", dtype: str = "auto"):
    """A `mrtpo.harness.policy.Policy` (no LoRA of its own) for anything `locate` accepts:
    what `mrtpo credit TASK --model` replays with. The tokenizer passes the same checks as in
    training (a chat template, a pad token)."""
    from mrtpo.harness.policy import Policy, load_policy, load_tokenizer, resolve_device, resolve_dtype

    located = locate(name_or_path)
    if located.adapter is None:
        check_weights(located)
        return load_policy(located.base, lora=False, device=device, dtype=dtype)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tokenizer = load_tokenizer(located.tokenizer)
    model, _ = load(located, dtype=dt, device=str(dev))
    return Policy(model, tokenizer, dev, dt, lora=False)


# ------------------------------------------------------------------------------ weight files
def check_weights(located: Located, base: bool = True) -> None:
    """Check the safetensors files of `located`'s adapter and (with `base`, when it is a local
    directory) its base before anything reads them: TrainedModelError naming the first one
    that is truncated or not safetensors, and an adapter with a tensor missing or not finite
    (`check_adapter_tensors`)."""
    for directory in (located.adapter, located.base if base else None):
        if directory is not None and Path(directory).is_dir():
            check_weight_files(Path(directory))
    if located.adapter is not None and Path(located.adapter).is_dir():
        check_adapter_tensors(Path(located.adapter))


ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_adapter_tensors(directory: Path) -> None:
    """TrainedModelError unless the adapter in `directory` is whole and finite: every LoRA
    layer has both its `lora_A` and `lora_B` tensors (peft would put a random one in place of a
    missing one, with only a warning), and no tensor holds NaN or an infinity (training refuses
    those; eval, export and credit must not use them either). An adapter is small: this reads
    it once."""
    from safetensors import SafetensorError, safe_open

    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.is_file():
        if (Path(directory) / "adapter_model.bin").is_file():
            return  # peft's older format: read (and checked by shape) by peft itself
        raise TrainedModelError(f"{directory}: no {ADAPTER_WEIGHTS}, so there is no adapter to load; "
                                "restore it from a copy (or export the checkpoint again from its run directory)")
    try:
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            for name in names:
                tensor = f.get_tensor(name)
                if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
                    raise TrainedModelError(f"{path}: tensor {name} holds NaN or infinite values; this adapter "
                                            "cannot be used. Take an earlier checkpoint of its run (--step)")
    except SafetensorError as exc:
        raise TrainedModelError(f"{path}: its weights cannot be read ({exc}); restore it from a copy") from exc
    if not names:
        raise TrainedModelError(f"{path} holds no tensors; restore it from a copy")
    missing = _unpaired(names)
    if missing:
        raise TrainedModelError(f"{path} lacks {len(missing)} tensor(s), e.g. {missing[0]}: the adapter is "
                                "incomplete (peft would fill it in at random); restore it from a copy")


def _unpaired(names: list[str]) -> list[str]:
    """The LoRA tensors whose partner is missing: for each `...lora_A...` the `...lora_B...` of
    the same layer, and the other way round (names of the partners that are not there)."""
    have = set(names)
    out = []
    for name in names:
        for mine, other in ((".lora_A.", ".lora_B."), (".lora_B.", ".lora_A.")):
            if mine in name and name.replace(mine, other) not in have:
                out.append(name.replace(mine, other))
    return sorted(out)


def check_weight_files(directory: Path) -> None:
    """TrainedModelError naming the first `*.safetensors` file in `directory` whose layout is
    incomplete: shorter than its header says (truncated), or no safetensors header at all."""
    for path in sorted(Path(directory).glob("*.safetensors")):
        why = _safetensors_problem(path)
        if why:
            raise TrainedModelError(f"{path} {why}; restore it from a copy (or export the checkpoint "
                                    "again from its run directory)")


def _safetensors_problem(path: Path) -> str:
    """Why `path` is not a complete safetensors file ("" if its size is what its header says).

    The format: an 8-byte little-endian header length n, n bytes of JSON naming each
    tensor's `data_offsets` [begin, end], then the data; so the file must hold exactly
    8 + n + the largest end bytes."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"is {size} bytes: too short to hold weights (empty or truncated)"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"is {size} bytes, shorter than its own header says (truncated, or not a safetensors file)"
        try:
            header = json.loads(f.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "does not start with a safetensors header (corrupted, or not a safetensors file)"
    if 8 + n + end != size:
        return (f"is {size} bytes, but its header describes {8 + n + end} "
                f"({'truncated' if size < 8 + n + end else 'extra bytes at its end'})")
    return ""


class _reading:
    """Turn a safetensors error while loading from `where` into a TrainedModelError naming it
    (a file damaged in a way `check_weight_files` cannot see)."""

    def __init__(self, where) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        from safetensors import SafetensorError

        if isinstance(exc, SafetensorError):
            raise TrainedModelError(f"{self.where}: its weights cannot be read ({exc}); restore the "
                                    "*.safetensors file from a copy") from exc
        return False
