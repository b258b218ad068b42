"""The built-in default policy, `mrtpo-tiny`: built here, on first use, from a seeded recipe.

No model can be downloaded on a laptop without network, so the project builds its own: a
byte-level BPE tokenizer trained on the bundled tasks' text with a ChatML template, a small
Qwen2 (about 2.4M parameters), and a short supervised warm start on the bundled samples of the
three tasks (`mrtpo.models.sft`: some targets carry injected errors so every reward has room
to rise; some prompts are the replay's own contexts, P_all teaching the reference and each
P_without_k an error in reward k's aspect, so that removing block k moves the distribution
where reward k is decided).

The build goes into a cache directory (`$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`, else
`~/.cache/mrtpo`) under `models/<name>-<fingerprint>`, where the fingerprint covers the
recipe, the package version and the bundled data: a changed recipe builds a new directory
and never reuses a stale one. It is written into a temporary directory next to its final
place and renamed when complete, so an interrupted build leaves nothing that looks finished.
`resolve_model` turns a `--model` value into a path, building the default when asked for it;
it is the function `mrtpo.harness.train` and `mrtpo train` give the trainer, which asks it once
for the path to load and imports nothing of this module.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

from mrtpo.cache import cache_dir, ensure_dir
from mrtpo.harness import builtin
from mrtpo.harness.builtin import (DEFAULT_MODEL, MANIFEST, TRAIN_DEFAULTS, builtin_name,  # noqa: F401
                                   with_train_defaults)
from mrtpo.models.packaged import SMOLLM2, PackagedRecipe
from mrtpo.models.sft import SFTConfig

RECIPE_VERSION = 3  # bump when the recipe's code changes what it builds


@dataclass(frozen=True)
class Recipe:
    """How the built-in policy is made. Every field enters the fingerprint."""

    name: str = DEFAULT_MODEL  # what `--model` accepts
    tasks: tuple[str, ...] = ("toolcall", "text2sql", "instruct")  # bundled samples it learns from
    examples_per_task: int | None = None  # None: every example of each bundled sample
    vocab_size: int = 4096  # byte-level BPE merges learnt on the tasks' text
    arch: Literal["qwen2", "llama"] = "qwen2"
    # about 2.4M parameters: for ~5 minutes of 2 CPU cores a smaller model that takes more
    # steps learns more than a larger one (a 5.5M, 6-layer, 256-wide model given the same
    # CPU time could not yet tell one prompt's tool call from another's)
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 576
    max_positions: int = 2048  # longest prompt + response the policy can attend over
    seed: int = 0  # model initialisation, error injection and data order
    sft: SFTConfig = field(default_factory=SFTConfig)


#: every built-in policy by name: `mrtpo-tiny` is built here from a recipe; `smollm2-135m` is a
#: pretrained model converted from the GGUF a registry package ships (`mrtpo.models.packaged`)
#: (the dict is `mrtpo.harness.builtin.RECIPES`, which names them for the trainer: the names, their
#: train defaults and the build manifest are all the trainer knows of them)
RECIPES: dict[str, Recipe | PackagedRecipe] = builtin.RECIPES
RECIPES.update({DEFAULT_MODEL: Recipe(), SMOLLM2.name: SMOLLM2})


def defaults_line(given: dict, model: str | None) -> str:
    """One line for the start of `mrtpo train`: whose defaults fill the settings not `given`."""
    name = builtin_name(model or DEFAULT_MODEL)
    if name is not None:
        used = {k: v for k, v in TRAIN_DEFAULTS.get(name, {}).items() if k not in given}
        if not used:
            return f"settings: every setting that {name} brings was given; the rest are the trainer's defaults"
        listed = ", ".join(f"{k}={v}" for k, v in used.items())
        return (f"settings: the built-in policy {name}'s defaults for {listed} (given settings win); "
                "the rest are the trainer's defaults")
    from mrtpo.harness.config import field_default

    keys = sorted({k for d in TRAIN_DEFAULTS.values() for k in d} - set(given) - {"task"})
    listed = ", ".join(f"{k}={field_default(k)}" for k in keys)
    return (f"settings: the trainer's defaults, meant for pretrained models ({listed}); a built-in policy's "
            "own defaults apply only to it (`mrtpo model ls`)")


def default_cache_dir() -> Path:
    """Where built policies live unless `--cache-dir` says otherwise: the project's cache
    root (`mrtpo.cache`: `$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`, else `~/.cache/mrtpo`)."""
    return cache_dir()


def _data_digest() -> str:
    """A digest of the bundled data files (a changed sample means a different policy)."""
    root = Path(__file__).resolve().parent.parent / "data"
    h = hashlib.sha256()
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def fingerprint(recipe: Recipe | PackagedRecipe) -> str:
    """12 hex digits naming one build: recipe fields, recipe version, package version, data
    (a packaged policy: its pinned file and the conversion's version, nothing of this package)."""
    from mrtpo import __version__

    if isinstance(recipe, PackagedRecipe):
        payload = json.dumps({"packaged": asdict(recipe)}, sort_keys=True)
    else:
        payload = json.dumps({"recipe": asdict(recipe), "recipe_version": RECIPE_VERSION,
                              "mrtpo": __version__, "data": _data_digest()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def model_dir(recipe: Recipe | PackagedRecipe, cache_dir: str | Path | None = None) -> Path:
    """Where `recipe`'s build lives (whether built or not)."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "models" / f"{recipe.name}-{fingerprint(recipe)}"


def is_built(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def get_recipe(name: str) -> Recipe | PackagedRecipe:
    if name not in RECIPES:
        raise KeyError(f"no built-in policy named {name!r}; built-in policies: {', '.join(RECIPES)}")
    return RECIPES[name]


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None, progress: bool = True) -> str:
    """A `--model` value as something `from_pretrained` loads: a built-in policy's name is
    built on first use (or found in the cache) and becomes its directory; anything else (a
    local path, a hub id) is returned unchanged."""
    if name_or_path in RECIPES and not Path(name_or_path).exists():
        return str(build(RECIPES[name_or_path], cache_dir=cache_dir, progress=progress))
    return name_or_path


def build(recipe: Recipe | PackagedRecipe | None = None, cache_dir: str | Path | None = None,
          force: bool = False, progress: bool = True, dest: str | Path | None = None,
          source: str | Path | None = None) -> Path:
    """Build `recipe` (default: the built-in policy) unless its build is already cached, and
    return its directory. `force` rebuilds; `dest` overrides the cache location; `source` is
    a packaged policy's wheel or GGUF file (else the installed package or the registry)."""
    recipe = recipe or RECIPES[DEFAULT_MODEL]
    dest = Path(dest) if dest else model_dir(recipe, cache_dir)
    if is_built(dest) and not force:
        return dest
    ensure_dir(dest.parent)
    _remove_dead_builds(dest.parent)
    tmp = dest.parent / f".{dest.name}.building-{os.getpid()}-{random.randrange(1 << 30):08x}"
    with _terminate_as_exit():
        return _build_at(recipe, dest, tmp, progress, source)


def _build_at(recipe, dest: Path, tmp: Path, progress: bool, source) -> Path:
    """Build into `tmp` (and `tmp`.fetch for a packaged policy), then rename it to `dest`;
    nothing of `tmp` is left whatever happens."""
    try:
        if isinstance(recipe, PackagedRecipe):
            build_packaged_into(recipe, tmp, progress=progress, source=source)
        else:
            if source is not None:
                raise ValueError(f"{recipe.name} is built from a recipe; it takes no source file")
            build_into(recipe, tmp, progress=progress)
        if dest.exists():  # a forced rebuild, or an incomplete leftover: move it aside first
            old = dest.parent / f".{dest.name}.old-{os.getpid()}-{random.randrange(1 << 30):08x}"
            os.replace(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, dest)
        except OSError:
            if not is_built(dest):  # another process finished first: keep theirs, else re-raise
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


class _terminate_as_exit:
    """While a build runs (main thread), SIGTERM raises SystemExit(143) instead of ending the
    process at once, so the build's `finally` removes its partial files as it does on Ctrl-C
    (issue 40, item 14: a killed build left a .fetch/ folder with up to 98 MB in the cache)."""

    def __enter__(self):
        import signal
        import threading

        self.installed, self.old = False, None
        if threading.current_thread() is threading.main_thread():
            def stop(signum, frame):
                raise SystemExit(128 + signum)
            self.old = signal.signal(signal.SIGTERM, stop)
            self.installed = True
        return self

    def __exit__(self, *exc) -> bool:
        import signal

        if self.installed:
            signal.signal(signal.SIGTERM, self.old if self.old is not None else signal.SIG_DFL)
        return False


def _remove_dead_builds(models: Path) -> None:
    """Remove what builders that were killed outright (SIGKILL, a power cut) left in the cache:
    `.<name>.building-<pid>-<rand>` (and its `.fetch` folder) and `.<name>.old-<pid>-<rand>`
    whose process is gone."""
    from mrtpo.cache import pid_alive

    for leftover in [*models.glob(".*.building-*"), *models.glob(".*.old-*")]:
        marker = ".building-" if ".building-" in leftover.name else ".old-"
        pid_text = leftover.name.split(marker, 1)[1].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or pid_alive(int(pid_text)):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            try:
                leftover.unlink()
            except OSError:
                pass


def build_packaged_into(recipe: PackagedRecipe, out: str | Path, progress: bool = True,
                        source: str | Path | None = None) -> dict:
    """Convert a packaged policy into `out` (`mrtpo.models.packaged`) and write its manifest last."""
    from mrtpo.models import packaged

    facts = packaged.build_into(recipe, out, progress=progress, source=source)
    manifest = {"name": recipe.name, "fingerprint": fingerprint(recipe), "recipe": asdict(recipe), **facts}
    (Path(out) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def build_into(recipe: Recipe, out: str | Path, progress: bool = True) -> dict:
    """Run the recipe and save tokenizer, model and manifest into `out`; returns the manifest."""
    import torch
    import transformers

    from mrtpo import __version__
    from mrtpo.models import sft
    from mrtpo.models.tiny import build_model, save_policy, train_tokenizer
    from mrtpo.tasks import get_task

    t0 = time.perf_counter()
    out = Path(out)
    rng = random.Random(recipe.seed)
    with _Progress(progress, recipe.name) as bar:
        data: list[sft.ExampleData] = []
        counts = {}
        for name in recipe.tasks:
            task = get_task(name)
            examples = task.load()
            if recipe.examples_per_task is not None:
                examples = examples[: recipe.examples_per_task]
            bar.phase(f"injecting errors ({name})", len(examples))
            prepared = sft.prepare_examples(task, examples, recipe.sft, rng, on_example=bar.advance)
            counts[name] = {"examples": len(prepared),
                            "errors_per_reward": _errors_per_reward(prepared)}
            data += prepared
        bar.phase("training the tokenizer", 1)
        tokenizer = train_tokenizer(sft.texts_for_tokenizer(data), vocab_size=recipe.vocab_size)
        sft.tokenize(data, tokenizer)
        bar.advance()
        model = build_model(tokenizer, arch=recipe.arch, hidden_size=recipe.hidden_size,
                            num_layers=recipe.num_layers, num_heads=recipe.num_heads,
                            num_kv_heads=recipe.num_kv_heads, intermediate_size=recipe.intermediate_size,
                            max_positions=recipe.max_positions, seed=recipe.seed)
        copy_losses = []
        if recipe.sft.copy_steps:
            bar.phase("span copying", recipe.sft.copy_steps)
            copy_losses = sft.train_copy(model, data, recipe.sft,
                                         on_step=lambda step, loss: bar.advance(f"loss {loss:.3f}"))
        bar.phase("supervised warm start", recipe.sft.steps)
        losses = sft.train(model, tokenizer, data, recipe.sft,
                           on_step=lambda step, loss: bar.advance(f"loss {loss:.3f}"))
        out.mkdir(parents=True, exist_ok=True)
        save_policy(model, tokenizer, out)
    tenth = max(1, len(losses) // 10)
    manifest = {
        "name": recipe.name,
        "fingerprint": fingerprint(recipe),
        "recipe": asdict(recipe),
        "recipe_version": RECIPE_VERSION,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "data": counts,
        "copy_loss_last": copy_losses[-1] if copy_losses else None,
        "sft_loss_first_tenth": sum(losses[:tenth]) / tenth,
        "sft_loss_last_tenth": sum(losses[-tenth:]) / tenth,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "torch_threads": torch.get_num_threads(),
        "versions": {"mrtpo": __version__, "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(path: str | Path) -> dict:
    return json.loads((Path(path) / MANIFEST).read_text())


def _errors_per_reward(data: Sequence) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in data:
        for name, idx in d.errors_by_reward().items():
            counts[name] = counts.get(name, 0) + len(idx)
    return dict(sorted(counts.items()))


class _Progress:
    """A rich progress bar on stderr, one row per phase; plain lines when stderr is not a
    terminal (mrtpo.progress); silent when `enabled` is False."""

    def __init__(self, enabled: bool, name: str):
        self.enabled, self.name = enabled, name
        self._progress = None
        self._task = None
        self._lines = None  # (PlainProgress, count) of the phase, in a log

    def __enter__(self):
        from mrtpo.progress import lines_wanted

        if self.enabled and lines_wanted():
            self._lines = ()
        elif self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self._progress = Progress(
                TextColumn(f"[bold]building {self.name}[/bold] {{task.description}}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"), console=Console(stderr=True), transient=False)
            self._progress.__enter__()
        return self

    def phase(self, description: str, total: int) -> None:
        if self._lines is not None:
            from mrtpo.progress import PlainProgress

            lines = PlainProgress(f"building {self.name}: {description}", total, unit="it")
            lines.update(0)
            self._lines = (lines, 0)
        if self._progress is not None:
            if self._task is not None:
                self._progress.update(self._task, completed=self._progress.tasks[self._task].total)
            self._task = self._progress.add_task(description, total=total, note="")

    def advance(self, note: str | None = None) -> None:
        if self._lines:
            lines, done = self._lines
            self._lines = (lines, done + 1)
            lines.update(done + 1, note or "")
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, **({"note": note} if note else {}))

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False


def with_overrides(recipe: Recipe, sft_overrides: dict | None = None, **overrides) -> Recipe:
    """A copy of `recipe` with some fields changed (tests and benchmarks use small ones)."""
    if sft_overrides:
        overrides["sft"] = replace(recipe.sft, **sft_overrides)
    return replace(recipe, **overrides)
