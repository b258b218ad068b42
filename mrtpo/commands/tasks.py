"""`mrtpo tasks ls`: the tasks that can be asked for, where each comes from, its rewards."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    tasks_app = typer.Typer(help="List and inspect registered tasks.", no_args_is_help=True)

    @tasks_app.command("ls")
    def ls(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object (schema mrtpo.tasks/1)."),
        timeout: float = typer.Option(30.0, "--timeout", min=0.001, max=86400.0,
                                      help="Seconds a plugin's task may take to load; one that takes "
                                           "longer (or dies) is listed with its error."),
    ) -> None:
        """Print each task's name, origin (built-in or dist==version) and reward names."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from mrtpo.tasks import available_tasks, get_task
        from mrtpo.tasks.runner import run_bounded

        def names(name: str) -> list[str]:
            return [str(n) for n in get_task(name).reward_names]

        rows = []
        for name, origin in available_tasks().items():
            try:  # a plugin's code is loaded in a child of its own, with a deadline (it may hang or exit)
                rewards = names(name) if origin == "built-in" else run_bounded(lambda: names(name), timeout)
                rows.append({"name": name, "origin": origin, "rewards": rewards, "error": None})
            except Exception as exc:  # show a broken plugin in the list instead of dying
                rows.append({"name": name, "origin": origin, "rewards": [], "error": f"failed to load: {exc}"})
        if as_json:
            from mrtpo.commands.jsonout import emit, tasks_document
            from mrtpo.textio import strict_json as dumps

            emit(dumps(tasks_document(rows), indent=2))
            return
        table = Table("task", "origin", "rewards", box=None, pad_edge=False)
        for row in rows:
            rewards = f"[red]{escape(row['error'])}[/red]" if row["error"] else escape(", ".join(row["rewards"]) or "-")
            table.add_row(escape(row["name"]), escape(row["origin"]), rewards)  # a plugin's names, as they are
        Console().print(table)

    app.add_typer(tasks_app, name="tasks")
