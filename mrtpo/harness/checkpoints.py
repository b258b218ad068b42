"""Checkpoints: weights (adapter or full model), optimizer, RNG states and step, written atomically.

Layout: `<run>/checkpoints/step-000010/` with
- `adapter/` (peft `save_pretrained` + tokenizer: loadable with `PeftModel.from_pretrained`;
  its `base_model_name_or_path` is portable, see mrtpo.models.trained) or `model/`
  (full weights + tokenizer, loadable with `from_pretrained`) for --no-lora runs;
- `optimizer.pt` (AdamW state), `rng.pt` (torch CPU/CUDA, python, numpy states);
- `state.json` (`{"step": 10, "run": <run fingerprint>, "files": {name: [bytes, sha256]}}`),
  written last inside the directory.
A checkpoint is written into a hidden temporary directory next to the final one and renamed
into place, and `checkpoints/latest` (the newest complete directory's name) is replaced
atomically after that, so a run killed mid-write never leaves a half checkpoint that resume
could pick up. Restoring the RNG states makes a resumed run sample exactly what the
uninterrupted run would have.

Before resuming, `resume_point` validates checkpoints newest first (`problems`): state.json
must parse and name the step of its directory and this run's fingerprint (`checkpoints/run-id`,
made at the run's first save), and every file must have the size and SHA-256 that state.json
records (so a truncated, emptied, garbled or swapped-in file, an optimizer.pt from another run
included, is caught before torch reads it). A bad checkpoint is skipped with a warning naming
the file and what is wrong with it, and the run resumes from the newest intact one.
`clean_leftovers` removes what a crash mid-save left (`.tmp-step-*`, `.latest-*`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path

import torch

from mrtpo.harness.config import ConfigError

log = logging.getLogger(__name__)

LATEST = "latest"
RUN_ID = "run-id"
_STEP_DIR = re.compile(r"step-(\d+)")


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed from; the message names the file and the problem."""


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": _py_state(random.getstate())}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [name, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached]
    except ImportError:
        pass
    return state


def _py_state(state):  # python's (version, tuple of ints, gauss) as plain lists for weights_only
    return [state[0], list(state[1]), state[2]]


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def save(run_dir: Path, step: int, policy, optimizer: torch.optim.Optimizer,
         keep_last: int = 0) -> Path:
    """Write checkpoint `step` atomically; keep only the newest `keep_last` (0 = all)."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step-{step:06d}-", dir=root))
    try:
        with warnings.catch_warnings():  # peft reads a property transformers deprecated
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            if policy.lora:  # with the tokenizer, so the adapter directory loads on its own
                # the trainer never resizes the embeddings, so there are none to save; peft's
                # "auto" would look the base's config up on the hub at every save (for the
                # built-in policy's portable name, a lookup that fails with a warning)
                policy.model.save_pretrained(tmp / "adapter", save_embedding_layers=False)
                policy.tokenizer.save_pretrained(tmp / "adapter")
            else:
                policy.model.save_pretrained(tmp / "model")
                policy.tokenizer.save_pretrained(tmp / "model")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "run": run_fingerprint(run_dir),
                                                    "files": _manifest(tmp)}))
        if final.exists():  # the same step saved again (e.g. the final save): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_atomic(root / LATEST, final.name)
    if keep_last > 0:
        for old in complete_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_fingerprint(run_dir: Path) -> str:
    """This run's fingerprint (`checkpoints/run-id`), made at its first save."""
    path = checkpoint_dir(run_dir) / RUN_ID
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, uuid.uuid4().hex)
    return path.read_text().strip()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manifest(ckpt: Path) -> dict[str, list]:
    """{relative path: [bytes, sha256]} of every file in a checkpoint directory."""
    return {p.relative_to(ckpt).as_posix(): [p.stat().st_size, _sha256(p)]
            for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name != "state.json"}


def _read_state(ckpt: Path) -> dict:
    path = ckpt / "state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(state, dict) or isinstance(state.get("step"), bool) \
            or not isinstance(state.get("step"), int):
        raise CheckpointError(f"{path} does not hold a step number ({str(state)[:80]})")
    return state


def problems(ckpt: Path, run_dir: Path | None = None) -> str:
    """Why checkpoint directory `ckpt` cannot be resumed from ("" when it is intact)."""
    ckpt = Path(ckpt)
    try:
        state = _read_state(ckpt)
    except CheckpointError as exc:
        return str(exc)
    m = _STEP_DIR.fullmatch(ckpt.name)
    if m and int(m.group(1)) != state["step"]:
        return (f"{ckpt / 'state.json'} says step {state['step']}, but it is the checkpoint of "
                f"step {int(m.group(1))}")
    run_id = checkpoint_dir(run_dir or ckpt.parent.parent) / RUN_ID
    if "run" in state and run_id.is_file() and state["run"] != run_id.read_text().strip():
        return f"{ckpt} belongs to another run (its fingerprint is not this run's {run_id})"
    files = state.get("files")
    if not isinstance(files, dict):  # written before checkpoints had a manifest
        return _legacy_problems(ckpt)
    for name, entry in files.items():
        path = ckpt / name
        if not path.is_file():
            return f"{path} is missing"
        size, digest = entry
        if path.stat().st_size != size:
            return f"{path} is {path.stat().st_size} bytes, {size} were written (truncated or replaced)"
        if _sha256(path) != digest:
            return f"{path} does not hold what was written (its SHA-256 differs: corrupted or replaced)"
    for name in ("optimizer.pt", "rng.pt"):
        if name not in files:
            return f"{ckpt / name} is missing"
    return ""


def _legacy_problems(ckpt: Path) -> str:
    for name in ("optimizer.pt", "rng.pt"):
        path = ckpt / name
        if not path.is_file():
            return f"{path} is missing"
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":  # torch.save writes a zip archive
                return f"{path} is empty or not a file torch.save wrote"
    adapter = ckpt / "adapter" / "adapter_model.safetensors"
    if not adapter.is_file() and not (ckpt / "model").is_dir():
        return f"{ckpt} has neither adapter/adapter_model.safetensors nor model/"
    return ""


def recorded_step(ckpt: Path) -> int:
    """The step a checkpoint's state.json records (0 when it cannot be read)."""
    try:
        return _read_state(Path(ckpt))["step"]
    except CheckpointError:
        return 0


def resume_point(run_dir: Path) -> Path | None:
    """The newest intact checkpoint of a run (see the module docstring), or None if it has none.

    Bad checkpoints are skipped with a warning that names the bad file; if there are
    checkpoints but none is intact, CheckpointError lists what is wrong with each.
    """
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return None
    found = sorted((p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)),
                   key=lambda p: int(p.name[5:]), reverse=True)
    bad = []
    for ckpt in found:
        why = problems(ckpt, run_dir)
        if not why:
            if bad:
                log.warning("resuming from %s, the newest intact checkpoint", ckpt.name)
            return ckpt
        log.warning("skipping checkpoint %s: %s", ckpt.name, why)
        bad.append(why)
    if bad:
        raise CheckpointError("no intact checkpoint to resume from: " + "; ".join(bad)
                              + ". Restore the files, or start a new run in another --output-dir.")
    return None


def clean_leftovers(run_dir: Path) -> list[Path]:
    """Remove what a crash mid-save left (`.tmp-step-*` directories, `.latest-*` files).

    Only call it while holding the run's lock (mrtpo.harness.runlock): a live run's
    temporaries look the same."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    gone = sorted(list(root.glob(".tmp-step-*")) + list(root.glob(f".{LATEST}-*"))
                  + list(root.glob(f".{RUN_ID}-*")))
    for p in gone:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if gone:
        log.info("removed %d leftover(s) of an interrupted save in %s", len(gone), root)
    return gone


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint directories with their state.json, oldest first (temporaries ignored)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if (p / "state.json").is_file())


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (per `latest`, else the highest step), or None."""
    root = checkpoint_dir(run_dir)
    pointer = root / LATEST
    if pointer.is_file():
        path = root / pointer.read_text().strip()
        if (path / "state.json").is_file():
            return path
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def load(path: Path, policy, optimizer: torch.optim.Optimizer) -> int:
    """Restore weights (adapter; full weights are read by load_policy), optimizer, RNG; return the step.

    Validates first (`problems`); a file that passes but still cannot be used (weights of
    another shape) raises CheckpointError naming it."""
    path = Path(path)
    why = problems(path)
    if why:
        raise CheckpointError(f"cannot resume from {path}: {why}")
    if policy.lora:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = path / "adapter" / "adapter_model.safetensors"
        with _reading(adapter):
            weights = load_file(str(adapter), device=str(policy.device))
            result = set_peft_model_state_dict(policy.model, weights)
        missing = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
        if missing:
            raise CheckpointError(f"{adapter}: adapter weights do not fit the model ({missing[:3]}...)")
    with _reading(path / "optimizer.pt"):
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=True))
    with _reading(path / "rng.pt"):
        set_rng_state(torch.load(path / "rng.pt", weights_only=True))
    return _read_state(path)["step"]


class _reading:
    """Turn any error while reading `path` into a CheckpointError that names it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is not None and isinstance(exc, Exception) and not isinstance(exc, CheckpointError):
            raise CheckpointError(f"{self.path} cannot be used to resume: {type(exc).__name__}: "
                                  f"{str(exc)[:300]}") from exc
        return False
