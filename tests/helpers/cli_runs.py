"""The CLI as tests run it in-process (typer's CliRunner), and the checks of a refused command.

`invoke` returns the result and its output as one line without colour codes; `refused` and
`clean_error` check that a command stopped with a one-line message, no traceback."""
from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from mrtpo.cli import app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
NOWHERE = "/nonexistent/model"  # a model that cannot load: a setting refused later would say so


def invoke(*args, with_stderr: bool = False):
    """(result, output as one line): `mrtpo ARGS...`; `with_stderr` adds a separate stderr."""
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    out = result.output
    if with_stderr and result.stderr_bytes is not None:
        out += result.stderr
    return result, " ".join(ANSI.sub("", out).split())


def refused(result, out, *words):
    """Exit 2 with every one of `words`, no traceback, and before the model was looked at."""
    assert result.exit_code == 2, out
    for w in words:
        assert w in out, out
    assert "Traceback" not in out
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "nonexistent" not in out  # refused before the model was looked at


def clean_error(result, out, *words, codes=(2,)):
    """An exit code of `codes`, every one of `words`, no traceback, a short message."""
    assert result.exit_code in codes, (result.exit_code, out, result.exception)
    assert "Traceback" not in out and (result.exception is None or isinstance(result.exception, SystemExit)), out
    for w in words:
        assert w in out, (w, out)
    assert len(out) < 2000, out[:3000]


def yaml_file(tmp_path, text: str | bytes) -> Path:
    p = tmp_path / "c.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p
