"""Checkpoints: weights (adapter or full model), optimizer, RNG states and step, written atomically.

Layout: `<run>/checkpoints/step-000010/` with
- `adapter/` (peft `save_pretrained` + tokenizer: loadable with `PeftModel.from_pretrained`;
  its `base_model_name_or_path` is portable, see mrtpo.harness.run.trained) or `model/`
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
must be what `read_state` accepts and name the step of its directory and this run's
fingerprint (`checkpoints/run-id`, made at the run's first save), and every file must have the
size and SHA-256 that state.json records (so a truncated, emptied, garbled or swapped-in file,
an optimizer.pt from another run included, is caught before torch reads it). A bad checkpoint
is skipped with a warning naming the file and what is wrong with it, and the run resumes from
the newest intact one. `mrtpo export`, `eval --model` and `credit --model` make the same check
of the weights (`problems(..., resume=False)`: no optimizer, RNG or fingerprint needed).
If `checkpoints/run-id` was deleted, `restore_run_id` takes it back from the newest intact
checkpoint, so the run's own checkpoints stay its own; `reached_step` counts only those.
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
import uuid
import warnings
from pathlib import Path

import torch

from mrtpo.harness.config import ConfigError
from mrtpo.harness.run.files import check_entry
from mrtpo.textio import new_temp_dir, no_room, write_atomic

log = logging.getLogger(__name__)

LATEST = "latest"
RUN_ID = "run-id"
_STEP_DIR = re.compile(r"step-(\d+)")


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed from; the message names the file and the problem."""


class SaveError(RuntimeError):
    """A checkpoint that could not be written (a full disk): what happened and the last
    checkpoint there is to resume from. The earlier checkpoints are untouched."""


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
    check_entry(root, "directory")  # never save through a link
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = new_temp_dir(root, f".tmp-step-{step:06d}-")  # the usual permissions, not mkdtemp's 0700
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
        if final.is_symlink():  # a link planted in the run: drop the link, not what it points to
            final.unlink()
        elif final.exists():  # the same step saved again (e.g. the final save): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        why = no_room(exc, root) if isinstance(exc, Exception) else None
        if why is None:
            raise
        raise SaveError(_no_room_message(run_dir, root, step, why)) from None
    try:
        write_atomic(root / LATEST, final.name)
    except OSError as exc:
        why = no_room(exc, root)
        if why is None:
            raise
        raise SaveError(_no_room_message(run_dir, root, step, why)) from None
    if keep_last > 0:
        for old in complete_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _no_room_message(run_dir: Path, root: Path, step: int, why: str) -> str:
    """One line for a save that found no room, naming the last checkpoint to resume from."""
    last = latest(run_dir)
    last_step = recorded_step(last) if last is not None else None
    where = f"no space left on {root}" if "no space" in why else f"cannot write into {root} ({why})"
    resume = (f"the last checkpoint is step {last_step} ({last}); free space, then continue with --resume"
              if last_step else "no checkpoint was saved yet; free space and train again")
    return f"{where} while saving the checkpoint of step {step}; {resume}"


def where_to_resume(run_dir: Path, steps: int) -> str:
    """Where a run that stopped can go on from, in words: its last checkpoint and the command
    that resumes it, or that it saved none yet."""
    last = latest(run_dir)
    last_step = recorded_step(last) if last is not None else None
    if not last_step:
        return f"no checkpoint was saved yet in {run_dir}; start the run again"
    return (f"the last checkpoint is step {last_step} ({last}); continue with: mrtpo train --resume "
            f"--output-dir {run_dir} --steps {steps}")


def run_fingerprint(run_dir: Path) -> str:
    """This run's fingerprint (`checkpoints/run-id`), made at its first save."""
    found = _recorded_run_id(run_dir)
    if found is None:
        path = checkpoint_dir(run_dir) / RUN_ID
        path.parent.mkdir(parents=True, exist_ok=True)
        found = uuid.uuid4().hex
        write_atomic(path, found)
    return found


def _recorded_run_id(run_dir: Path) -> str | None:
    """The fingerprint in `checkpoints/run-id`, or None when there is none (deleted, empty)."""
    path = checkpoint_dir(run_dir) / RUN_ID
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def restore_run_id(run_dir: Path) -> str | None:
    """If `checkpoints/run-id` is gone, write back the fingerprint of the newest checkpoint that
    is otherwise intact (with a warning), so resuming keeps the run's own checkpoints its own
    instead of starting a new fingerprint that would call them another run's. Returns the
    fingerprint restored, or None when nothing was done."""
    if _recorded_run_id(run_dir) is not None:
        return None
    for ckpt in reversed(step_dirs(run_dir)):
        if problems(ckpt, run_dir):
            continue
        run = read_state(ckpt).get("run")
        if run is None:  # written before checkpoints had a fingerprint
            return None
        write_atomic(checkpoint_dir(run_dir) / RUN_ID, run)
        log.warning("%s was missing: restored the run's fingerprint from %s",
                    checkpoint_dir(run_dir) / RUN_ID, ckpt.name)
        return run
    return None


def belongs(state: dict, run_dir: Path) -> bool:
    """Whether a checkpoint's state.json (`read_state`) is of the run in `run_dir`: its
    fingerprint is the run's, or one of the two is not recorded (older checkpoints)."""
    mine = _recorded_run_id(run_dir)
    return "run" not in state or mine is None or state["run"] == mine


def reached_step(run_dir: Path) -> int:
    """The highest step saved by this run's own checkpoints (another run's copied in, or one
    whose state.json cannot be read, does not count); 0 when there is none."""
    done = 0
    for ckpt in complete_checkpoints(run_dir):
        try:
            state = read_state(ckpt)
        except CheckpointError:
            continue
        if belongs(state, run_dir):
            done = max(done, state["step"])
    return done


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


_SHA256 = re.compile(r"[0-9a-f]{64}")
_RESUME_ONLY = ("optimizer.pt", "rng.pt")  # what resuming needs besides the weights


def read_state(ckpt: Path) -> dict:
    """A checkpoint's state.json, checked: a JSON object with a step number (an int >= 0), a
    fingerprint string `run` if any, and `files` if any mapping each relative path inside the
    checkpoint to [bytes, sha256]. Anything else raises CheckpointError naming the file and
    what is wrong with it (the one reader of state.json: resume, export, eval and credit)."""
    path = Path(ckpt) / "state.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} cannot be read ({exc})") from None
    if not text.strip():
        raise CheckpointError(f"{path} is empty (the checkpoint was not completely written)")
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
    why = _state_problem(state)
    if why:
        raise CheckpointError(f"{path} {why}")
    return state


def _state_problem(state) -> str:
    """What is wrong with a parsed state.json ("" if nothing): see read_state."""
    if not isinstance(state, dict):
        return f"does not hold a JSON object ({str(state)[:80]})"
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"does not hold a step number (its \"step\" is {str(step)[:80]!r})"
    if "run" in state and not isinstance(state["run"], str):
        return f"holds a \"run\" fingerprint that is not a string ({str(state['run'])[:80]})"
    files = state.get("files")
    if files is None:
        return ""
    if not isinstance(files, dict):
        return f"holds a \"files\" entry that is not an object of {{name: [bytes, sha256]}} ({str(files)[:80]})"
    for name, entry in files.items():
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts:
            return f"names a file outside the checkpoint ({name[:80]!r})"
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                and not isinstance(entry[0], bool) and entry[0] >= 0
                and isinstance(entry[1], str) and _SHA256.fullmatch(entry[1])):
            return f"records {name!r} as {str(entry)[:80]}, not [bytes, sha256]"
    return ""


def problems(ckpt: Path, run_dir: Path | None = None, resume: bool = True) -> str:
    """Why checkpoint directory `ckpt` cannot be resumed from ("" when it is intact).

    `resume=False`: why its weights cannot be used (export, eval, credit): the same checks
    without the optimizer, the RNG states and the run's fingerprint."""
    ckpt = Path(ckpt)
    try:
        state = read_state(ckpt)
    except CheckpointError as exc:
        return str(exc)
    m = _STEP_DIR.fullmatch(ckpt.name)
    if m and int(m.group(1)) != state["step"]:
        return (f"{ckpt / 'state.json'} says step {state['step']}, but it is the checkpoint of "
                f"step {int(m.group(1))}")
    run_dir = Path(run_dir or ckpt.parent.parent)
    if resume and not belongs(state, run_dir):
        return (f"{ckpt} belongs to another run (its fingerprint is not this run's "
                f"{checkpoint_dir(run_dir) / RUN_ID})")
    files = state.get("files")
    if files is None:  # written before checkpoints had a manifest
        return _legacy_problems(ckpt, resume)
    for name, (size, digest) in files.items():
        path = ckpt / name
        if not resume and name in _RESUME_ONLY:
            continue
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != size:
            return f"{path} is {path.stat().st_size} bytes, {size} were written (truncated or replaced)"
        if _sha256(path) != digest:
            return f"{path} does not hold what was written (its SHA-256 differs: corrupted or replaced)"
    for name in _RESUME_ONLY if resume else ():
        if name not in files:
            return f"{ckpt / name} is missing"
    if not any(name.startswith(("adapter/", "model/")) for name in files):
        return f"{ckpt / 'state.json'} records no weights (adapter/ or model/)"
    return ""


def _legacy_problems(ckpt: Path, resume: bool = True) -> str:
    for name in _RESUME_ONLY if resume else ():
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
        return read_state(Path(ckpt))["step"]
    except CheckpointError:
        return 0


def resume_point(run_dir: Path) -> Path | None:
    """The newest intact checkpoint of a run (see the module docstring), or None if it has none.

    Bad checkpoints are skipped with a warning that names the bad file; if there are
    checkpoints but none is intact, CheckpointError lists what is wrong with each.
    """
    found = step_dirs(run_dir)[::-1]
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
        hint = ""
        if all("belongs to another run" in why for why in bad):  # the fingerprint file is what changed
            hint = (f" None matches {checkpoint_dir(run_dir) / RUN_ID}: if it was edited or copied "
                    "from another run, delete it and it is restored from the newest checkpoint.")
        raise CheckpointError("no intact checkpoint to resume from: " + "; ".join(bad) + "." + hint
                              + " Restore the files, or start a new run in another --output-dir.")
    return None


def step_dirs(run_dir: Path) -> list[Path]:
    """The run's `checkpoints/step-N` directories, oldest (lowest N) first, whatever their state."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)),
                  key=lambda p: int(p.name[5:]))


def clean_leftovers(run_dir: Path) -> list[Path]:
    """Remove what a crash mid-save left (`.tmp-step-*` directories, `.latest-*` files).

    Only call it while holding the run's lock (mrtpo.harness.run.lock): a live run's
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
        name = pointer.read_text(encoding="utf-8", errors="replace").strip()
        if _STEP_DIR.fullmatch(name) and (root / name / "state.json").is_file():
            return root / name
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
        load_adapter(path, policy)
    with _reading(path / "optimizer.pt"):
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=True))
    with _reading(path / "rng.pt"):
        set_rng_state(torch.load(path / "rng.pt", weights_only=True))
    return read_state(path)["step"]


def load_adapter(path: Path, policy) -> None:
    """Put checkpoint `path`'s adapter weights into `policy`'s LoRA (of the same rank and
    modules); the rest of the checkpoint (optimizer, RNG) is not read. Raises CheckpointError
    naming the file when the weights do not fit."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = Path(path) / "adapter" / "adapter_model.safetensors"
    with _reading(adapter):
        weights = load_file(str(adapter), device=str(policy.device))
        result = set_peft_model_state_dict(policy.model, weights)
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
    if missing:
        raise CheckpointError(f"{adapter}: adapter weights do not fit the model ({missing[:3]}...)")


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
