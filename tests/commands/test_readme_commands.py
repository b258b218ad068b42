"""Every command the README and docs/reference.md (its fine print) show parses against the real argument parsers.

Commands come from the README's ```bash blocks (continuation lines joined, comments dropped,
`&&` chains and pipes split, redirections dropped) and from its inline code spans that start with `mrtpo `,
`python benchmarks/` or `python -m benchmarks.` (synopses too:
`[optional]` parts kept, the first of `(A | B)`, placeholders such as TASK or FILE filled in).
Each is parsed, not run, by the parser that would read it:
- `mrtpo ...` / `python -m mrtpo ...`: the typer app's click commands (types, choices, ranges);
- `accelerate launch ...` and `torchrun ...`: accelerate's and torch's own launcher parsers,
  then the module they launch with its own parser;
- `python -m mrtpo.integrations.trl` / `-m mrtpo.integrations.trl` under a launcher: TRL's
  `TrlParser` over the launcher's dataclasses (argparse level: flags, values and types; the
  dataclasses' GPU checks, e.g. bf16 on a CPU-only machine, are the machine's, not the command's);
- `python -m benchmarks.learning.learning ...` (a benchmark script, run as a module of the
  `benchmarks` package) and `python benchmarks/results_page.py ...` (the one run by its path):
  the script's argparse parser, its `parser()`; `tensorboard ...`: its own.
Setup commands (pip, venv, pytest, `.`) are recognised and skipped; any other command fails
the test, so a new kind of command in the README gets a parser here.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SKIP = ("pip ", "python3 -m venv", ". ", "python -m pytest", "cd ")
PLACEHOLDERS = {"TASK": "toolcall", "PATH": "smollm2-135m", "RUN_DIR": "runs/demo", "N": "2", "FILE": "out.jsonl",
                "KEY=VALUE": "think=true", "NAME": "toolcall", "OUT": "exported/demo", "NAME=W": "format=1",
                "FILE.yaml": "train.yaml", "DIR": "runs/demo", "LIST": "tensorboard"}


def _bash_commands(text: str) -> list[str]:
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            command: list[str] = []
            redirect = False
            for w in words + ["&&"]:
                if redirect:  # the file of a redirection
                    redirect = False
                elif w in (">", ">>", "<", "2>"):
                    redirect = True
                elif w in ("2>&1",):
                    continue
                elif w in ("&&", ";", "||", "|"):
                    if command:
                        out.append(shlex.join(command))
                    command = []
                else:
                    command.append(w)
    return out


def _inline_commands(text: str) -> list[str]:
    out = []
    for span in re.findall(r"`(mrtpo [^`]+|python benchmarks/[^\s`]+(?: [^`]+)?|python -m benchmarks\.[^\s`]+(?: [^`]+)?)`",
                           text):
        span = span.replace("\\|", "|")
        span = re.sub(r"\(([^()|]+)\|[^()]*\)", r"\1", span)  # (A | B) -> A
        span = span.replace("[", " ").replace("]", " ")
        if "..." in span or "|" in span:
            continue
        out.append(" ".join(PLACEHOLDERS.get(w, w) for w in span.split()))
    return out


REFERENCE = README.parent / "docs" / "reference.md"  # the README's fine print: its commands too


def readme_commands() -> list[str]:
    found = []
    for doc in (README, REFERENCE):
        text = doc.read_text()
        found += _bash_commands(text) + _inline_commands(text)
    return list(dict.fromkeys(found))


def _parse_mrtpo(args: list[str]) -> None:
    import typer

    from mrtpo.cli import app

    def rest(ctx) -> list[str]:  # a group's unparsed words (click >= 8.2 keeps the first apart)
        return list(getattr(ctx, "_protected_args", None) or []) + list(ctx.args)

    command = typer.main.get_command(app)
    ctx = command.make_context("mrtpo", list(args))
    words = rest(ctx)
    while hasattr(command, "resolve_command") and words:  # a group (typer vendors its own click)
        name, command, words = command.resolve_command(ctx, words)
        ctx = command.make_context(name, words, parent=ctx)
        words = rest(ctx) if hasattr(command, "resolve_command") else []


def _parse_trl(args: list[str]) -> None:
    from trl import GRPOConfig, ModelConfig, TrlParser

    from mrtpo.integrations.trl import MRTPOScriptArguments

    parser = TrlParser((MRTPOScriptArguments, GRPOConfig, ModelConfig))
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"TRL's parser refused: {shlex.join(args)}") from exc


def _parse_module(module: str, args: list[str]) -> None:
    if module == "mrtpo":
        _parse_mrtpo(args)
    elif module == "mrtpo.integrations.trl":
        pytest.importorskip("trl")
        _parse_trl(args)
    else:
        raise AssertionError(f"no parser for module {module}")


def parse(command: str) -> str:
    """Parse one README command; returns what parsed it ('skip' for setup commands)."""
    words = shlex.split(command)
    if words[0] == "time":
        words = words[1:]
    words = [w for w in words if w not in ("...", "--help")]  # "the rest as above"; help would print and exit
    line = shlex.join(words)
    if any(line.startswith(s) for s in SKIP):
        return "skip"
    if words[0] == "mrtpo":
        _parse_mrtpo(words[1:])
        return "mrtpo"
    if len(words) >= 3 and words[:2] == ["python", "-m"] and re.fullmatch(r"benchmarks(\.\w+)+", words[2]):
        import importlib

        module = importlib.import_module(words[2])
        assert hasattr(module, "parser"), f"{words[2]} has no parser() for this test to check the README's command with"
        module.parser().parse_args(words[3:])
        return "benchmark"
    if words[:3] in (["python", "-m", "mrtpo"], ["python3", "-m", "mrtpo"]):
        _parse_mrtpo(words[3:])
        return "mrtpo"
    if words[:3] == ["python", "-m", "mrtpo.integrations.trl"]:
        _parse_module("mrtpo.integrations.trl", words[3:])
        return "trl"
    if words[:2] == ["accelerate", "launch"]:
        from accelerate.commands.launch import launch_command_parser

        ns = launch_command_parser().parse_args(words[2:])
        assert ns.module, f"{line}: the README launches modules with -m"
        _parse_module(ns.training_script, ns.training_script_args)
        return "accelerate"
    if words[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        ns = get_args_parser().parse_args(words[1:])
        assert ns.module, f"{line}: the README launches modules with -m"
        _parse_module(ns.training_script, ns.training_script_args)
        return "torchrun"
    if words[0] == "tensorboard":
        program = pytest.importorskip("tensorboard.program")
        program.TensorBoard().configure(argv=words)  # its own argparse; exits on a bad flag
        return "tensorboard"
    if len(words) >= 2 and words[0] == "python" and re.fullmatch(r"benchmarks/(\w+/)*\w+\.py", words[1]):
        import importlib.util

        path = README.parent / words[1]
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert hasattr(module, "parser"), f"{words[1]} has no parser() for this test to check the README's command with"
        module.parser().parse_args(words[2:])
        return "benchmark"
    raise AssertionError(f"the README shows a command this test has no parser for: {line}")


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    kinds = {parse(c) for c in COMMANDS}
    assert {"mrtpo", "accelerate", "torchrun", "benchmark"} <= kinds
    assert any(c.startswith("mrtpo train --lora") for c in COMMANDS)  # the first command at the top


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_parses(command):
    parse(command)


def test_a_bad_command_fails_to_parse():
    """The parsers really parse: a misspelt flag, a bad value, a bare TRL bool flag are refused."""
    for bad, why in (("mrtpo train --stepz 3", "No such option"), ("mrtpo train --steps many", "valid integer"),
                     ("mrtpo credit runs/x --limit 0", "greater than or equal to 1"), ("mrtpo tasks lss", "No such command")):
        with pytest.raises(Exception, match=why):
            parse(bad)
    pytest.importorskip("trl")
    with pytest.raises(AssertionError, match="TRL's parser refused"):
        parse("accelerate launch -m mrtpo.integrations.trl --model_name_or_path m --task toolcall --bf16 --use_peft")


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_runs(index, tmp_path, monkeypatch):
    """The README's Python snippets run as shown (the export one runs in tests/harness/run/test_export.py,
    on a real export: this machine has no `exported/demo`)."""
    code = _python_blocks()[index]
    if "exported/" in code:
        pytest.skip("run by tests/harness/run/test_export.py on a real export")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "readme"})
