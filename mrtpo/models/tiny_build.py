"""`mrtpo-tiny`'s recipe run: a seeded toy policy built from scratch on the bundled tasks' text.

No model can be downloaded on a laptop without network, so the project can build its own: a
byte-level BPE tokenizer trained on the bundled tasks' text with a ChatML template, a small
Qwen2 (about 2.4M parameters, `mrtpo.models.tiny`), and a short supervised warm start on the
bundled samples of the three tasks (`mrtpo.models.sft`: some targets carry injected errors so
every reward has room to rise; some prompts are the replay's own contexts, P_all teaching the
reference and each P_without_k an error in reward k's aspect). It reads its blocks no better
than a random initialisation (README), and takes minutes to build on 2 cores; the default
policy is SmolLM2 (`mrtpo.models.packaged`). `mrtpo.models.builds` runs `build_into` into its
cache and names the build by `RECIPE_VERSION` and `data_digest` among the recipe's fields.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

from mrtpo.models.builtin import MANIFEST, Recipe

RECIPE_VERSION = 3  # bump when the recipe's code changes what it builds


def data_digest() -> str:
    """A digest of the bundled data files (a changed sample means a different policy)."""
    root = Path(__file__).resolve().parent.parent / "data"
    h = hashlib.sha256()
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def build_into(recipe: Recipe, out: str | Path, progress: bool = True, *, fingerprint: str) -> dict:
    """Run the recipe and save tokenizer, model and manifest into `out` (the build's
    `fingerprint` goes into the manifest); returns the manifest."""
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
        "fingerprint": fingerprint,
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
