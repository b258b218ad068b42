"""`mrtpo model build`: build the built-in policy into the cache (what `--model mrtpo-tiny`
does on first use), and `mrtpo model ls`: the built-in policies and where they are cached."""
from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(help="Build and list the built-in small policies.", no_args_is_help=True)

    @model_app.command("build")
    def build_cmd(
        name: str = typer.Argument("mrtpo-tiny", help="Built-in policy to build (see `mrtpo model ls`)."),
        force: bool = typer.Option(False, "--force", help="Rebuild even when a finished build is cached."),
        cache_dir: Optional[str] = typer.Option(
            None, "--cache-dir",
            help="Cache root; default $MRTPO_CACHE_DIR, else $XDG_CACHE_HOME/mrtpo, else ~/.cache/mrtpo."),
    ) -> None:
        """Build the built-in policy (tokenizer, model, supervised warm start) and print its directory."""
        from mrtpo.models.default import build, get_recipe, is_built, model_dir, read_manifest

        try:
            recipe = get_recipe(name)
        except KeyError as exc:
            typer.echo(str(exc.args[0]), err=True)
            raise typer.Exit(2)
        cached = is_built(model_dir(recipe, cache_dir)) and not force
        path = build(recipe, cache_dir=cache_dir, force=force, progress=True)
        m = read_manifest(path)
        state = "cached" if cached else f"built in {m['build_seconds']:.0f} s"
        typer.echo(f"{name}: {m['parameters'] / 1e6:.1f}M parameters, vocabulary {m['vocab_size']}, "
                   f"{state}; supervised loss {m['sft_loss_first_tenth']:.2f} -> {m['sft_loss_last_tenth']:.2f}",
                   err=True)
        typer.echo(str(path))

    @model_app.command("ls")
    def ls_cmd(
        cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="Cache root (as for build)."),
    ) -> None:
        """Each built-in policy, whether its current build is cached, and its directory."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from mrtpo.models.default import RECIPES, is_built, model_dir

        table = Table("name", "parameters", "built", "directory", box=None, pad_edge=False)
        for name, recipe in RECIPES.items():
            path = model_dir(recipe, cache_dir)
            table.add_row(name, _approx_params(recipe), "yes" if is_built(path) else "no", escape(str(path)))
        Console().print(table)

    app.add_typer(model_app, name="model")


def _approx_params(recipe) -> str:
    """Parameter count from the recipe's shape (tied embeddings), without building anything."""
    h, inter, layers, v = recipe.hidden_size, recipe.intermediate_size, recipe.num_layers, recipe.vocab_size
    kv = h * recipe.num_kv_heads // recipe.num_heads
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter + 2 * h
    return f"~{(layers * per_layer + v * h) / 1e6:.1f}M"
