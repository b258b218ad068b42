"""Checkpoints: weights (adapter or full model), optimizer, RNG states and step, written atomically.

Layout: `<run>/checkpoints/step-000010/` with
- `adapter/` (peft `save_pretrained` + tokenizer: loadable with `PeftModel.from_pretrained`;
  its `base_model_name_or_path` is portable, see mrtpo.models.trained) or `model/`
  (full weights + tokenizer, loadable with `from_pretrained`) for --no-lora runs;
- `optimizer.pt` (AdamW state), `rng.pt` (torch CPU/CUDA, python, numpy states);
- `state.json` (`{"step": 10}`), written last inside the directory.
A checkpoint is written into a hidden temporary directory next to the final one and renamed
into place, and `checkpoints/latest` (the newest complete directory's name) is replaced
atomically after that, so a run killed mid-write never leaves a half checkpoint that resume
could pick up. Restoring the RNG states makes a resumed run sample exactly what the
uninterrupted run would have.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

LATEST = "latest"


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
                policy.model.save_pretrained(tmp / "adapter")
                policy.tokenizer.save_pretrained(tmp / "adapter")
            else:
                policy.model.save_pretrained(tmp / "model")
                policy.tokenizer.save_pretrained(tmp / "model")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step}))
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
    """Restore weights (adapter; full weights are read by load_policy), optimizer, RNG; return the step."""
    path = Path(path)
    if policy.lora:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(path / "adapter" / "adapter_model.safetensors"), device=str(policy.device))
        result = set_peft_model_state_dict(policy.model, weights)
        missing = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
        if missing:
            raise RuntimeError(f"{path}: adapter weights do not fit the model ({missing[:3]}...)")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=True))
    set_rng_state(torch.load(path / "rng.pt", weights_only=True))
    return int(json.loads((path / "state.json").read_text())["step"])
