"""Task registry: decorator, did-you-mean, entry points (written for real under tmp_path)."""
from __future__ import annotations

import sys
import textwrap

import pytest
from typer.testing import CliRunner

from mrtpo.tasks import (
    Example, Reward, Task, TaskLoadError, TaskNotFound, Verdict, available_tasks, get_task,
    register_task, unregister_task,
)


class EchoTask(Task):
    name = "echo_test"
    reward_names = ("nonempty",)

    def load(self, path=None, split=None):
        return [Example(id="0", prompt="Say something.")]

    def rewards(self, example):
        return [Reward("nonempty", lambda ex, r: Verdict(float(bool(r.strip()))), lambda ex, v: "")]


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A real installed-looking distribution: a module plus *.dist-info/entry_points.txt."""
    (tmp_path / "acme_tasks.py").write_text(textwrap.dedent("""
        from mrtpo.tasks import Example, Reward, Task, Verdict

        class AcmeTask(Task):
            name = "acme"
            reward_names = ("length",)
            def load(self, path=None, split=None):
                return [Example(id="a", prompt="Write a word.")]
            def rewards(self, example):
                return [Reward("length", lambda ex, r: Verdict(min(len(r), 5) / 5), lambda ex, v: "")]
    """))
    (tmp_path / "acme_broken.py").write_text("raise ImportError('libacme.so not found')\n")
    info = tmp_path / "acme_tasks-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tasks\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(
        "[mrtpo.tasks]\nacme = acme_tasks:AcmeTask\nacme_broken = acme_broken:Task\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in ("acme_tasks", "acme_broken"):
        sys.modules.pop(mod, None)
    for name in ("acme", "acme_broken"):
        unregister_task(name)


def test_decorator_registers_and_get_task_builds():
    register_task()(EchoTask)
    try:
        task = get_task("echo_test")
        assert isinstance(task, EchoTask)
        assert task.score(task.load()[0], "hi") == [Verdict(1.0)]
        register_task()(EchoTask)  # same object again: harmless
        with pytest.raises(ValueError, match="already registered"):
            register_task("echo_test")(type("Other", (EchoTask,), {}))
    finally:
        unregister_task("echo_test")


def test_unknown_task_did_you_mean():
    with pytest.raises(TaskNotFound) as err:
        get_task("text2sq")
    msg = str(err.value)
    assert "did you mean 'text2sql'" in msg.lower() and "Known tasks:" in msg and "toolcall" in msg


def test_builtin_name_cannot_be_taken():
    with pytest.raises(ValueError, match="built-in"):
        register_task("text2sql")(EchoTask)


def test_entry_point_loaded_lazily_with_origin(plugin_path):
    tasks = available_tasks()
    assert tasks["acme"] == "acme-tasks==1.2.3"
    assert "acme_tasks" not in sys.modules  # listing imports nothing
    task = get_task("acme")
    assert type(task).__name__ == "AcmeTask"
    assert "acme_broken" not in sys.modules  # only the task asked for was imported


def test_broken_plugin_names_distribution_and_error(plugin_path):
    with pytest.raises(TaskLoadError) as err:
        get_task("acme_broken")
    msg = str(err.value)
    assert "acme-tasks==1.2.3" in msg and "libacme.so not found" in msg and "ImportError" in msg


def test_entry_point_clashing_with_registered_object_rejected(plugin_path):
    register_task("acme")(EchoTask)
    try:
        with pytest.raises(TaskLoadError, match="already registered"):
            get_task("acme")
    finally:
        unregister_task("acme")


def test_factory_must_return_a_task():
    register_task("not_a_task")(lambda: object())
    try:
        with pytest.raises(TaskLoadError, match="not a mrtpo Task"):
            get_task("not_a_task")
    finally:
        unregister_task("not_a_task")


def test_cli_tasks_ls_shows_origin_and_rewards(plugin_path):
    from mrtpo.cli import app

    result = CliRunner().invoke(app, ["tasks", "ls"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "acme-tasks==1.2.3" in result.output and "length" in result.output
    assert "built-in" in result.output and "text2sql" in result.output
    assert "failed to load" in result.output  # the broken plugin is shown, not fatal
