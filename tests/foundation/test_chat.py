"""mrtpo/chat.py: a chat template (model-directory code too) is rendered within bounds of time
and size; one that fails is one line in every command; real templates render as before."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app

pytestmark = pytest.mark.timeout(300)
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args, stdin="y\n" * 20):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo", input=stdin)
    return result, " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())
# --- hostile chat templates are bounded, failing ones one line -------------------------------
HOSTILE_TEMPLATES = {
    "raise": ("{{ raise_exception('this template takes no system message') }}", "takes no system message"),
    "sandbox": ("{% set l = [] %}{{ l.append(1) }}", "SecurityError"),
    "huge-repeat": ("{{ 'x' * 3000000000 }}", "3e+09"),
    "repeat-product": ("{{ 'x' * 30000 * 100000 }}", "3e+09"),
    "power": ("{{ 'x' * 10 ** 9 }}", "power"),
    "nested-loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "CPU"),
    "repeat-through-variables": ("{% set n = 30000 %}{{ 'x' * n * n }}", "repeats a text"),
    "division-by-zero": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "type-error": ("{{ messages | sum(start='x') }}", "TypeError"),
    "format-width": ("{{ '{:>300000000}'.format('x') }}", "a str.format would build 300,000,"),
    "tilde-doubling": ("{% set ns = namespace(s='x' * 100) %}{% for i in range(19) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}{{ ns.s|length }}", "a ~ join would build"),
}


def _with_template(tiny_qwen2_dir, tmp_path, template: str) -> Path:
    path = tmp_path / "templated"
    shutil.copytree(tiny_qwen2_dir, path)
    (path / "chat_template.jinja").write_text(template)
    return path


@pytest.mark.parametrize("case", list(HOSTILE_TEMPLATES))
def test_a_hostile_chat_template_is_bounded_and_one_line_in_eval(tiny_qwen2_dir, tmp_path, monkeypatch, case):
    import time

    monkeypatch.setattr("mrtpo.chat.RENDER_CPU_S", 1.0)
    template, words = HOSTILE_TEMPLATES[case]
    model = _with_template(tiny_qwen2_dir, tmp_path, template)
    start = time.perf_counter()
    result, out = _invoke("eval", "toolcall", "--model", model, "--limit", 1, "--no-progress", stdin=None)
    assert time.perf_counter() - start < 30, out
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert "Traceback" not in out and (result.exception is None or isinstance(result.exception, SystemExit)), out
    assert "chat template" in out and words in out and str(model) in out, out


@pytest.mark.parametrize("command", ["train", "credit", "probe"])
def test_a_raising_chat_template_is_one_line_in_every_command(tiny_qwen2_dir, tmp_path, command):
    model = _with_template(tiny_qwen2_dir, tmp_path, HOSTILE_TEMPLATES["raise"][0])
    args = {"train": ["train", "--task", "toolcall", "--model", model, "--output-dir", tmp_path / "run",
                      "--steps", 1, "--batch-prompts", 1, "--num-generations", 2, "--max-new-tokens", 2,
                      "--verify-workers", 0],
            "credit": ["credit", "toolcall", "--model", model, "--limit", 1],
            "probe": ["probe", "toolcall", "--model", model, "--limit", 1, "--no-control"]}[command]
    result, out = _invoke(*args, stdin=None)
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert "Traceback" not in out and (result.exception is None or isinstance(result.exception, SystemExit)), out
    assert "chat template" in out and "takes no system message" in out, out


def test_real_templates_render_as_before(tiny_qwen2_dir):
    """The bounded render is transformers' render: the same text, and no refusal of a real template."""
    from transformers import AutoTokenizer

    from mrtpo.chat import render_chat, template_problem

    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi * 3"}]
    assert template_problem(tok.chat_template) is None
    assert render_chat(tok, messages, tokenize=False, add_generation_prompt=True) == \
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
