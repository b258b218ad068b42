"""`mrtpo export RUN_DIR OUT [--step N] [--merge]`: a checkpoint as a directory `from_pretrained` loads.

    mrtpo export runs/demo exported/demo-adapter            # LoRA adapter + tokenizer
    mrtpo export runs/demo exported/demo --merge --step 40  # merged: a plain transformers model

The library side is mrtpo.harness.run.export.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(
        source: Annotated[str, typer.Argument(metavar="RUN_DIR", help="A run directory (its latest checkpoint, or --step), a checkpoint, or an adapter directory.")],
        out: Annotated[Path, typer.Argument(metavar="OUT", help="New directory to write (must not exist or be empty).")],
        step: Annotated[Optional[int], typer.Option("--step", min=1, help="The run's checkpoint of this step; default: the latest.")] = None,
        merge: Annotated[bool, typer.Option("--merge", help="Merge the LoRA adapter into the base weights: a plain model, no peft needed to load it.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
    ) -> None:
        """Write a trained checkpoint as a directory that `from_pretrained` loads on another machine."""
        from mrtpo.harness.run.export import export
        from mrtpo.harness.run.trained import TrainedModelError

        try:
            info = export(source, out, step=step, merge=merge)
        except TrainedModelError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2)
        info["out"] = str(out)
        if as_json:
            from mrtpo.commands.jsonout import emit
            from mrtpo.textio import strict_json as dumps

            emit(dumps({"schema": "mrtpo.export/1", **info}, indent=2))
            return
        step_text = f" step {info['step']}" if info["step"] is not None else ""
        load = ("AutoModelForCausalLM.from_pretrained" if info["kind"] != "adapter" else
                f"PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({info['base_model']!r}), ...)")
        typer.echo(f"exported{step_text} ({info['kind']}, base {info['base_model']}) to {out}; load it with {load}")
        from mrtpo.models.builtin import RECIPES

        if info["kind"] == "adapter" and info["base_model"] in RECIPES:
            typer.echo(f"note: the base {info['base_model']} is mrtpo's built-in policy, not a hub model: "
                       "`mrtpo model build` prints its directory on another machine, `mrtpo eval --model "
                       f"{out}` resolves it, and --merge writes a model that needs neither", err=True)
