"""`mrtpo export`: a trained checkpoint as a directory that `from_pretrained` loads anywhere.

- LoRA run, default: the adapter (`adapter_config.json`, `adapter_model.safetensors`) and
  the tokenizer. `base_model_name_or_path` is portable (mrtpo.models.builtin.portable_name),
  so `AutoPeftModelForCausalLM.from_pretrained(OUT)` loads it where the base is a hub id,
  and `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), OUT)` anywhere.
- LoRA run with `merge`: the adapter merged into the base's weights (peft
  `merge_and_unload`), saved with the tokenizer and generation config: a plain model that
  `AutoModelForCausalLM.from_pretrained(OUT)` loads with no peft and no mrtpo installed.
- Full-weight run (--no-lora): the checkpoint's `model/` as it is (`merge` changes nothing).

Every export also holds `mrtpo_export.json` (run, step, base, merged). It is written into a
temporary directory next to OUT and renamed into place, so a failed export leaves nothing.
The source is checked first, as resume checks it: a checkpoint's state.json and the sizes
and SHA-256 of its weights (mrtpo.harness.run.trained), so a damaged checkpoint is refused naming
the file instead of being exported. OUT and its new parents get the usual permissions
(0777 less the umask); an OUT that cannot be written is refused with the reason.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from mrtpo.harness.run.trained import ADAPTER_CONFIG, TrainedModelError, check_weights, load, locate
from mrtpo.textio import new_temp_dir, no_room, unwritable

INFO = "mrtpo_export.json"
_NOT_COPIED = {"optimizer.pt", "rng.pt", "state.json"}


def export(source: str | Path, out: str | Path, step: int | None = None, merge: bool = False) -> dict:
    """Export `source` (a run dir, a checkpoint or an adapter dir) into `out`; returns the info written."""
    out = Path(out)
    _check_out(out)
    located = locate(source, step=step, build=merge)  # a built-in base is only built to merge
    check_weights(located, base=merge or located.adapter is None)  # what is copied or loaded
    tmp = _new_dir_beside(out)
    try:
        if located.adapter is None:  # full weights: the checkpoint's model/ or a plain model dir
            if not Path(located.base).is_dir():
                raise TrainedModelError(f"{source} is not a run, checkpoint or adapter directory; nothing to export")
            _copy_files(Path(located.base), tmp)
            kind = "full weights"
        elif merge:
            import warnings

            model, tokenizer = load(located, merge=True)
            with warnings.catch_warnings():  # transformers reads its own deprecated property
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
                model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            kind = "merged"
        else:
            _copy_files(located.adapter, tmp)
            if not (tmp / "tokenizer_config.json").is_file():  # an older checkpoint: the base's tokenizer
                from mrtpo.loading import auto_tokenizer

                auto_tokenizer(locate(located.base_name).tokenizer).save_pretrained(tmp)
            config = json.loads((tmp / ADAPTER_CONFIG).read_text())
            config["base_model_name_or_path"] = located.base_name
            (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            kind = "adapter"
        info = {"source": str(source), "step": located.step, "base_model": located.base_name,
                "kind": kind, "merged": kind == "merged"}
        (tmp / INFO).write_text(json.dumps(info, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except Exception as exc:
        why = no_room(exc, out.parent)  # a full disk, also as torch's or safetensors' wrapper of it
        shutil.rmtree(tmp, ignore_errors=True)
        if why is not None:
            where = f"no space left on {out.parent}" if "no space" in why else f"cannot write {out} ({why})"
            raise TrainedModelError(f"{where}; nothing was written. Free space, or choose an OUT on "
                                    "another disk") from None
        if not isinstance(exc, OSError):
            raise
        if exc.filename is not None and not str(exc.filename).startswith((str(tmp), str(out))):
            raise TrainedModelError(f"cannot export {source}: reading {exc.filename} failed "
                                    f"({exc.strerror or exc}); nothing was written") from None
        raise TrainedModelError(f"cannot write {out}: {unwritable(out, exc, directory=True)}; nothing "
                                "was written. Choose another OUT") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def _check_out(out: Path) -> None:
    """Refuse an OUT that exists and is not an empty directory, or cannot be listed."""
    try:
        taken = out.exists() and (not out.is_dir() or any(out.iterdir()))
    except OSError as exc:
        raise TrainedModelError(f"cannot write {out}: {unwritable(out, exc, directory=True)}; "
                                "choose another OUT") from None
    if taken:
        raise TrainedModelError(f"{out} already exists and is not empty; choose a new directory")


def _new_dir_beside(out: Path) -> Path:
    """A new empty hidden directory next to `out` (creating `out`'s parents), with the usual
    permissions (runfiles.new_temp_dir: OUT keeps them after the rename); TrainedModelError
    saying why when it cannot be made."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return new_temp_dir(out.parent, f".{out.name}.export-")
    except OSError as exc:
        raise TrainedModelError(f"cannot write {out}: {unwritable(out, exc, directory=True)}; "
                                "choose an OUT in a directory you can write") from None


def _copy_files(src: Path, dest: Path) -> None:
    for item in src.iterdir():
        if item.name in _NOT_COPIED or item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name)
        else:
            shutil.copy2(item, dest / item.name)
