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


# --- what the syntax tree cannot show: sizes carried by variables ---------------------------
# One C-level repeat, concatenation or product that the CPU timer cannot interrupt; each is
# refused before it runs, from its operands' sizes (mrtpo.chat.binop_problem).
THROUGH_VARIABLES = {
    "text-repeat": ("{% set n = 30000 %}{{ 'x' * n * n }}", "repeats a text of 30,000 character(s) 30,000 times"),
    "count-first": ("{% set n = 30000 %}{{ n * ('x' * n) }}", "repeats a text"),
    "list-repeat": ("{% set n = 5000 %}{{ ([0, 1] * n * n)|length }}", "repeats a list of 10,000 item(s) 5,000 times"),
    "doubling": ("{% set ns = namespace(s='x' * 1000) %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}"
                 "{% endfor %}{{ ns.s|length }}", "joins two values"),
    "squaring": ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
                 "{% endfor %}{{ ns.x > 0 }}", "multiplies whole numbers"),
}


@pytest.fixture()
def templated(tiny_tokenizer):
    """The tiny tokenizer with a chat template set for one test (the session's is put back)."""
    kept = tiny_tokenizer.chat_template

    def use(template: str):
        tiny_tokenizer.chat_template = template
        return tiny_tokenizer
    yield use
    tiny_tokenizer.chat_template = kept


@pytest.mark.parametrize("case", list(THROUGH_VARIABLES))
def test_a_size_carried_by_variables_is_refused_before_it_is_built(templated, case):
    import time

    from mrtpo.chat import ChatTemplateError, render_chat, template_problem

    template, words = THROUGH_VARIABLES[case]
    assert template_problem(template) is None  # nothing the syntax tree shows
    tok = templated(template)
    start = time.perf_counter()
    with pytest.raises(ChatTemplateError) as caught:
        render_chat(tok, [{"role": "user", "content": "hi"}], tokenize=False)
    assert time.perf_counter() - start < 5
    message = str(caught.value)
    assert "its chat template is refused: it " in message and words in message, message
    assert "\n" not in message and len(message) < 300, message


def test_a_power_past_the_syntax_tree_check_is_bounded_in_the_sandbox_too(templated):
    """The syntax-tree check refuses any `**`; behind it, transformers' own render (which any
    library in the process calls) refuses a power too large to build."""
    from mrtpo import chat

    tok = templated("{% set b, e = 10, 30000 %}{{ (b ** e) > 0 }}")
    assert chat._use_bounded_sandbox()
    with pytest.raises(chat._Refused, match="raises 10 to the power 30,000"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def _pristine_render(tok, messages, **kwargs):
    """What transformers renders in its own sandbox, without mrtpo's checks."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils import chat_template_utils as templates

    bounded = templates.ImmutableSandboxedEnvironment
    templates.ImmutableSandboxedEnvironment = ImmutableSandboxedEnvironment
    templates._compile_jinja_template.cache_clear()
    try:
        return tok.apply_chat_template(messages, **kwargs)
    finally:
        templates.ImmutableSandboxedEnvironment = bounded
        templates._compile_jinja_template.cache_clear()


# a template with the operators the bound checks, used as real templates use them
ARITHMETIC = ("{% for m in messages %}{{ '=' * 3 + ' ' + m['role'] * 2 + ' ' }}{{ [m['content']] * 2 }}"
              "{{ loop.index * 2 }}{{ (m['content'] + '!') * loop.index }}\n"
              "{% endfor %}")


@pytest.mark.parametrize("template", ["chatml", "arithmetic"])
def test_real_templates_render_as_transformers_own_sandbox_does(templated, tiny_tokenizer, template):
    from mrtpo import chat
    from mrtpo.chat import render_chat

    tok = tiny_tokenizer if template == "chatml" else templated(ARITHMETIC)
    conversations = [
        [{"role": "user", "content": "Hi * 3"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"},
         {"role": "assistant", "content": "4"}, {"role": "user", "content": "And x * 3?"}],
    ]
    assert chat._use_bounded_sandbox()
    for messages in conversations:
        for kwargs in ({"tokenize": False, "add_generation_prompt": True}, {"tokenize": False},
                       {"tokenize": True, "add_generation_prompt": True}):
            assert render_chat(tok, messages, **kwargs) == _pristine_render(tok, messages, **kwargs)
