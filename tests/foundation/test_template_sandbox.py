"""mrtpo/template_sandbox.py: the sandbox chat templates compile in refuses, before building it, any
text or list over the cap (operators, str methods, filters, formats, `~`, the output) and more than
MAX_BUILT_CHARS in one render; real templates render byte-identically to transformers' own sandbox."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


# --- what the syntax tree cannot show: sizes carried by variables ---------------------------
# One C-level repeat, concatenation or product that the CPU timer cannot interrupt; each is
# refused before it runs, from its operands' sizes (mrtpo.template_sandbox.binop_problem).
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
    from mrtpo import template_sandbox

    tok = templated("{% set b, e = 10, 30000 %}{{ (b ** e) > 0 }}")
    assert template_sandbox.use_bounded_sandbox()
    with pytest.raises(template_sandbox.TemplateRefused, match="raises 10 to the power 30,000"):
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
    from mrtpo import template_sandbox
    from mrtpo.chat import render_chat

    tok = tiny_tokenizer if template == "chatml" else templated(ARITHMETIC)
    conversations = [
        [{"role": "user", "content": "Hi * 3"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"},
         {"role": "assistant", "content": "4"}, {"role": "user", "content": "And x * 3?"}],
    ]
    assert template_sandbox.use_bounded_sandbox()
    for messages in conversations:
        for kwargs in ({"tokenize": False, "add_generation_prompt": True}, {"tokenize": False},
                       {"tokenize": True, "add_generation_prompt": True}):
            assert render_chat(tok, messages, **kwargs) == _pristine_render(tok, messages, **kwargs)


# --- sizes set by arguments, formats and loops: refused before they are built (issue 40 item 5) ---
# Each builds ~20-300 million characters in one C call or one final join that neither the
# operator checks above nor the CPU timer see; each is refused from its arguments' sizes first.
SIZE_CLASSES = {
    "percent-star-width": ("{% set n = 20000 %}{{ '%*s' % (n * 10000, 'x') }}", "a %-format would build 200,000,"),
    "percent-width": ("{{ '%300000000s' % 'x' }}", "a %-format would build 300,000,"),
    "percent-precision": ("{{ '%.300000000f' % 1.0 }}", "a %-format would build 300,000,"),
    "format-width": ("{{ '{:>300000000}'.format('x') }}", "a str.format would build 300,000,"),
    "format-nested-width": ("{% set n = 20000 %}{{ '{0:>{1}}'.format('x', n * 15000) }}", "a str.format would build"),
    "format-map": ("{% set n = 20000 %}{{ '{a:>{w}}'.format_map({'a': 'x', 'w': n * 15000}) }}", "a str.format would build"),
    "format-many-fields": ("{% set s = 'x' * 1000000 %}{{ ('{0}' * 100).format(s)|length }}",
                           "a str.format would build"),
    "ljust": ("{% set n = 20000 %}{{ 'x'.ljust(n * 10000) }}", "a call of ljust would build 200,000,000"),
    "rjust": ("{% set n = 20000 %}{{ 'x'.rjust(n * 10000) }}", "a call of rjust"),
    "center-method": ("{% set n = 20000 %}{{ 'x'.center(n * 10000) }}", "a call of center"),
    "zfill": ("{% set n = 20000 %}{{ '1'.zfill(n * 10000) }}", "a call of zfill"),
    "expandtabs": ("{% set n = 20000 %}{{ ('\t' * 1000).expandtabs(n * 10) }}", "a call of expandtabs"),
    "replace": ("{% set s = 'x' * 10000 %}{{ s.replace('x', s)|length }}", "a call of replace would build 100,000,000"),
    "join-method": ("{% set s = 'x' * 10000 %}{{ s.join([s] * 3000)|length }}", "a call of join"),
    "join-method-lazy": ("{% set s = 'x' * 10000 %}{{ s.join(([s] * 3000)|map('upper'))|length }}", "a join"),
    "translate": ("{% set s = 'x' * 10000 %}{{ s.translate({120: s})|length }}", "a call of translate"),
    "center-filter": ("{% set n = 20000 %}{{ 'x'|center(n * 10000) }}", "the center filter"),
    "indent-filter": ("{% set s = 'x\n' * 100000 %}{{ s|indent(width=1000) }}", "the indent filter"),
    "wordwrap-filter": ("{% set s = 'x ' * 100000 %}{{ s|wordwrap(2, wrapstring='y' * 1000) }}",
                        "the wordwrap filter"),
    "format-filter": ("{% set n = 20000 %}{{ '%*s'|format(n * 10000, 'x') }}", "the format filter"),
    "join-filter": ("{% set s = 'x' * 10000 %}{{ ([s] * 3000)|join(s) }}", "the join filter"),
    "tojson-indent": ("{% set l = [[[[1] * 100] * 100] * 100] %}{{ l|tojson(indent=100) }}", "the tojson filter"),
    "list-of-new-texts": ("{% set s = 'x' * 1000000 %}{{ ([s] * 100)|map('upper')|list|length }}",
                          "the list filter's input"),
    "doubling-with-tilde": ("{% set ns = namespace(s='x' * 100) %}{% for i in range(19) %}"
                            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "a ~ join would build"),
    "output-accumulation": ("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}",
                            "its output would build"),
    "macro-accumulation": ("{% set s = 'x' * 1000000 %}{% macro m() %}{% for i in range(100) %}{{ s }}"
                           "{% endfor %}{% endmacro %}{{ m()|length }}", "its output would build"),
    "list-printed": ("{% set s = 'x' * 1000000 %}{{ [s] * 100 }}", "an output would build"),
    # each text under the cap, kept together: 80 new texts of 10M characters in a dict (800M)
    "many-kept-in-a-dict": ("{% set n = 1000 %}{% set s = 'x' * (n * 10000) %}{% set ns = namespace(d={}) %}{% for i in range(80) %}"
                            "{% set ns.d = dict(ns.d, **{i|string: s ~ i}) %}{% endfor %}{{ ns.d|length }}",
                            "over the 67,108,864 one render may build"),
    "many-kept-in-a-list": ("{% set n = 1000 %}{% set s = 'x' * (n * 10000) %}{% set ns = namespace(l=[]) %}{% for i in range(80) %}"
                            "{% set ns.l = ns.l + [s|upper] %}{% endfor %}{{ ns.l|length }}",
                            "over the 67,108,864 one render may build"),
}


@pytest.mark.parametrize("case", list(SIZE_CLASSES))
def test_a_size_set_by_arguments_or_loops_is_refused_in_one_line(templated, case):
    import time

    from mrtpo.chat import ChatTemplateError, render_chat

    template, words = SIZE_CLASSES[case]
    tok = templated(template)
    start = time.perf_counter()
    with pytest.raises(ChatTemplateError) as caught:
        render_chat(tok, [{"role": "user", "content": "hi"}], tokenize=False)
    assert time.perf_counter() - start < 5
    message = str(caught.value)
    assert "its chat template is refused: " in message and words in message, message
    assert "fix the template" in message and "\n" not in message and len(message) < 300, message


# the size each would have built with nothing in the way: gigabytes (run in a child process)
ALLOCATING = {
    "percent-star-width": "{% set n = 100000 %}{{ '%*s' % (n * 15000, 'x') }}",
    "doubling-with-tilde": ("{% set ns = namespace(s='x' * 100) %}{% for i in range(23) %}"
                            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"),
}


@pytest.mark.parametrize("case", list(ALLOCATING))
def test_a_refused_size_is_not_allocated_first(tiny_qwen2_dir, case):
    """The refusal comes before the allocation: the render's process stays small (it would
    build 0.8-1.5 GB otherwise)."""
    from limits import peak_rss_mb

    code = (f"from transformers import AutoTokenizer\nfrom mrtpo.chat import ChatTemplateError, render_chat\n"
            f"tok = AutoTokenizer.from_pretrained({str(tiny_qwen2_dir)!r})\n"
            f"tok.chat_template = {ALLOCATING[case]!r}\n"
            "try:\n    render_chat(tok, [{'role': 'user', 'content': 'hi'}], tokenize=False)\n"
            "except ChatTemplateError as exc:\n    print('REFUSED', exc)\n")
    peak, out = peak_rss_mb(code, timeout=120)
    assert "REFUSED" in out and "would build" in out, out
    assert peak < 700, (peak, out)


TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "A city."},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi * 3 ~ {{ x }} %s"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
         "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
     {"role": "tool", "name": "get_weather", "content": '{"temperature": 21}'},
     {"role": "assistant", "content": "It is 21 °C."}, {"role": "user", "content": "And\ttomorrow?\n"}],
]


def _realistic_templates() -> dict[str, str]:
    """The project's tiny tokenizers' template, SmolLM2's and Qwen2.5's (with tools), and the
    templates TRL ships when it is installed (Llama 3.x, Qwen3, gpt-oss, Gemma, DeepSeek, ...)."""
    from mrtpo.models.tiny import CHATML_TEMPLATE

    found = {"tiny-chatml": CHATML_TEMPLATE, "arithmetic": ARITHMETIC}
    found.update({p.stem: p.read_text() for p in sorted(TEMPLATES.glob("*.jinja"))})
    try:
        import importlib.resources

        shipped = importlib.resources.files("trl") / "chat_templates"
        found.update({f"trl-{p.name[:-6]}": p.read_text() for p in sorted(shipped.iterdir(), key=str)
                      if p.name.endswith(".jinja")})
    except (ImportError, FileNotFoundError, NotADirectoryError):
        pass
    return found


def _render_all(environment_class, cases: list[tuple[str, list, dict]]) -> list:
    """transformers' render of each (template, messages, kwargs) case with templates compiled
    in `environment_class` (each template compiled once: transformers' compile cache, emptied
    before and after): its (text, spans), or the error it raised (type and text), so two
    environments' outcomes compare."""
    from transformers.utils import chat_template_utils as templates

    kept = templates.ImmutableSandboxedEnvironment
    templates.ImmutableSandboxedEnvironment = environment_class
    templates._compile_jinja_template.cache_clear()
    outcomes = []
    try:
        for template, messages, kwargs in cases:
            try:
                outcomes.append(templates.render_jinja_template(conversations=[messages], chat_template=template,
                                                                **kwargs))
            except Exception as exc:  # noqa: BLE001 - the outcome compared
                outcomes.append((type(exc).__name__, str(exc)))
        return outcomes
    finally:
        templates.ImmutableSandboxedEnvironment = kept
        templates._compile_jinja_template.cache_clear()


def test_realistic_templates_render_byte_identically_in_the_bounded_sandbox():
    """Every realistic template renders the same text (and the same assistant spans, through
    generate()) in the bounded sandbox as in jinja2's plain ImmutableSandboxedEnvironment."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from mrtpo.template_sandbox import bounded_sandbox

    templates = _realistic_templates()
    assert {"tiny-chatml", "smollm2", "qwen2_5"} <= set(templates)
    named = [(name, (template, messages, kwargs)) for name, template in templates.items()
             for messages in CONVERSATIONS
             for kwargs in ({"add_generation_prompt": True, "tools": TOOLS}, {"add_generation_prompt": False},
                            {"return_assistant_tokens_mask": "{% generation %}" in template})]
    cases = [case for _, case in named]
    plain, bounded = _render_all(ImmutableSandboxedEnvironment, cases), _render_all(bounded_sandbox(), cases)
    for (name, (_, messages, kwargs)), a, b in zip(named, plain, bounded, strict=True):
        assert b == a, (name, messages, kwargs)
    rendered = sum(isinstance(a[0], list) for a in plain)
    assert rendered >= 3 * len(CONVERSATIONS) * 2, rendered
