"""Experiment trackers for `mrtpo train --report-to`: tensorboard, wandb, trackio.

`--report-to` takes TRL's / transformers' `report_to` values: `none` (the default, as in
transformers >= 5), `tensorboard`, `wandb`, `trackio`, comma-separated or repeated, or
`all` (every one of them that is installed). Each tracker gets the same records as
`metrics.jsonl`, one per step, under the same names (`reward`, `rewards/format/mean`,
`completions/mean_length`, `num_tokens`, ...), at the step's number; values that are None
(a reward absent from a step) are left out. The run's config goes along (wandb/trackio
config, a tensorboard text summary).

Where they write, and how they are set up, is each library's own convention:
- tensorboard: event files in `<run>/tensorboard/` (`$TENSORBOARD_LOGGING_DIR` moves them);
  `tensorboard --logdir runs/` shows every run;
- wandb: project `$WANDB_PROJECT` (default "mrtpo"), run name = the run directory's name,
  files under `<run>/wandb/`, a resumed run continuing its wandb run (id in
  `<run>/.wandb_run_id`); `WANDB_MODE=offline` logs without network (`wandb sync` later);
- trackio: project `$TRACKIO_PROJECT` (default "mrtpo"), run name as above, stored where
  trackio stores runs (`$TRACKIO_DIR`, else the HF cache); `trackio show` opens the dashboard.

Each library is imported only when asked for; a missing one is a `ConfigError` that names
the package to install (`pip install "mrtpo[trackers]"` installs all three).
"""
from __future__ import annotations

import math
import os
import uuid
from pathlib import Path
from typing import Any

KNOWN = ("tensorboard", "wandb", "trackio")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def parse_report_to(values: list[str] | str | None) -> list[str]:
    """['tensorboard,wandb'] -> ['tensorboard', 'wandb']; 'none' -> []; 'all' -> the installed ones.
    Unknown names raise ConfigError."""
    import importlib.util

    from mrtpo.harness.errors import ConfigError

    items = [values] if isinstance(values, str) else list(values or [])
    names = [n.strip().lower() for v in items for n in str(v).split(",") if n.strip()]
    unknown = sorted(set(names) - set(KNOWN) - {"none", "all"})
    if unknown:
        raise ConfigError(f"--report-to {', '.join(unknown)}: not a tracker; use none, all or any of "
                          f"{', '.join(KNOWN)} (comma-separated)")
    if "all" in names:
        return [n for n in KNOWN if importlib.util.find_spec(PACKAGES[n]) is not None]
    return list(dict.fromkeys(n for n in names if n != "none"))


def check_installed(names: list[str]) -> None:
    """Fail before anything is loaded when a named tracker's package is absent (no import)."""
    import importlib.util

    for name in names:
        if importlib.util.find_spec(PACKAGES[name]) is None:
            raise _missing(name, ImportError(f"no module named {PACKAGES[name]!r}"))


def _missing(name: str, exc: ImportError):
    from mrtpo.harness.errors import ConfigError

    return ConfigError(f"--report-to {name} needs the {PACKAGES[name]} package, which is not installed "
                       f"({exc}): pip install {PACKAGES[name]}  (or pip install \"mrtpo[trackers]\")")


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's numeric values (bools and None left out), as the trackers take them."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and v is not None and math.isfinite(float(v))}


def _require(name: str):
    """The tracker's package, imported now, or a ConfigError naming what to install."""
    import importlib

    try:
        return importlib.import_module(PACKAGES[name])
    except ImportError as exc:
        raise _missing(name, exc) from exc


class _TensorBoard:
    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        _require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        log_dir = os.environ.get("TENSORBOARD_LOGGING_DIR") or str(run_dir / "tensorboard")
        self.writer = SummaryWriter(log_dir=os.path.expanduser(log_dir))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()), 0)

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # a log read while the run goes on is up to date

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        from mrtpo.textio import write_atomic

        wandb = _require("wandb")
        id_file = run_dir / ".wandb_run_id"  # a resumed run continues its wandb run
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
        write_atomic(id_file, run_id)  # never through a link (mrtpo.harness.run.files)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "mrtpo"), name=name, dir=str(run_dir),
                              id=run_id, config=config, resume="allow", reinit="finish_previous")

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class _Trackio:
    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]):
        self.trackio = trackio = _require("trackio")
        trackio.init(project=os.environ.get("TRACKIO_PROJECT", "mrtpo"), name=name, config=config,
                     resume="allow", embed=False)

    def log(self, values: dict[str, float], step: int) -> None:
        self.trackio.log(values, step=step)

    def close(self) -> None:
        self.trackio.finish()


_CLASSES = {"tensorboard": _TensorBoard, "wandb": _WandB, "trackio": _Trackio}


class Trackers:
    """The trackers `--report-to` names, opened on the run; `log(record)` sends one
    metrics.jsonl record to each, `close()` finishes them. With no names it does nothing."""

    def __init__(self, names: list[str], run_dir: Path | None = None, config: dict[str, Any] | None = None):
        self.names = list(names)
        self._open: list[Any] = []
        name = Path(run_dir).name if run_dir is not None else "mrtpo"
        try:
            for n in self.names:
                self._open.append(_CLASSES[n](Path(run_dir), name, dict(config or {})))
        except BaseException:
            self.close()
            raise

    def log(self, record: dict[str, Any]) -> None:
        if self._open:
            values, step = _scalars(record), int(record["step"])
            for tracker in self._open:
                tracker.log(values, step)

    def close(self) -> None:
        while self._open:
            self._open.pop().close()
