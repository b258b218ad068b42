"""`mrtpo tasks ls`: the tasks that can be asked for, where each comes from, its rewards."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    tasks_app = typer.Typer(help="List and inspect registered tasks.", no_args_is_help=True)

    @tasks_app.command("ls")
    def ls() -> None:
        """Print each task's name, origin (built-in or dist==version) and reward names."""
        from rich.console import Console
        from rich.table import Table

        from mrtpo.tasks import available_tasks, get_task

        table = Table("task", "origin", "rewards", box=None, pad_edge=False)
        for name, origin in available_tasks().items():
            try:
                task = get_task(name)
                rewards = ", ".join(task.reward_names) or "-"
            except Exception as exc:  # show a broken plugin in the list instead of dying
                rewards = f"[red]failed to load: {exc}[/red]"
            table.add_row(name, origin, rewards)
        Console().print(table)

    app.add_typer(tasks_app, name="tasks")
