"""docs/custom-tasks.md stays true: its files, taken from the page as a reader copies them,
are the example package's (examples/custom_task, names aside), and the package they make
imports, registers, loads and lints clean without anything else.

Each file of the walkthrough is the concatenation of the code blocks that follow a
`<!-- file: PATH -->` marker on the page, in order.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mrtpo.blocks.lint import lint_task
from mrtpo.tasks import get_task, register_task, unregister_task

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "custom-tasks.md"
EXAMPLE = ROOT / "examples" / "custom_task"
BLOCK_RE = re.compile(r"<!-- file: (\S+) -->\n(`{3,}|~{3,})[^\n]*\n(.*?)\n\2\n", re.DOTALL)
# the example's names -> the walkthrough's
RENAME = [("mrtpo_example_math", "my_math"), ("mrtpo-example-math", "my-math"), ("math-word", "my-math")]


def doc_files() -> dict[str, str]:
    files: dict[str, list[str]] = {}
    for path, _fence, body in BLOCK_RE.findall(DOC.read_text(encoding="utf-8")):
        files.setdefault(path, []).append(body)
    return {path: "\n\n\n".join(parts) + "\n" for path, parts in files.items()}


def _renamed(text: str) -> str:
    for a, b in RENAME:
        text = text.replace(a, b)
    return text


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def test_the_walkthrough_has_every_file_of_the_example():
    files = doc_files()
    assert set(files) == {"pyproject.toml", "data_card.md", "my_math/__init__.py", "my_math/task.py",
                          "my_math/data/sample.jsonl"}
    for path, text in files.items():
        example = EXAMPLE / path.replace("my_math", "mrtpo_example_math")
        assert _lines(text) == _lines(_renamed(example.read_text(encoding="utf-8"))), path


def test_the_package_the_walkthrough_builds_lints_clean(tmp_path):
    for path, text in doc_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        from my_math.task import MathWordTask

        register_task("my-math")(MathWordTask)
        task = get_task("my-math", max_chars=120)
        examples = task.load()
        assert len(examples) == 10 and examples[0].source == "my_math/data/sample.jsonl:1"
        report = lint_task(task, examples)
        assert report.findings == [], [str(f) for f in report.findings]
        with pytest.raises(ValueError, match="line 1, field 'answer'"):
            bad = tmp_path / "bad.jsonl"
            bad.write_text('{"question": "q", "solution": "s"}\n')
            task.load(str(bad))
    finally:
        unregister_task("my-math")
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "my_math" or m.startswith("my_math.")]:
            del sys.modules[name]
