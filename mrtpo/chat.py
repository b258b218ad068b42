"""The one way a chat template is rendered: `render_chat`, bounded, its failures in one line.

A model's chat template is Jinja code from the model's directory, run by transformers in
Jinja's sandbox. The sandbox stops attribute tricks, not cost: `{{ 'x' * 3000000000 }}` asks for
3 GB and nested loops run without end (issue 40, item 5), and a template that calls
`raise_exception(...)` or trips the sandbox raised a jinja2 traceback from every command
(item 8). `render_chat` calls `tokenizer.apply_chat_template` as before (the same text and ids),
but first reads the template's syntax tree once (cached) and refuses an exponent or a constant
above `MAX_CONSTANT` (the size of what `*` could build), bounds the render's CPU time
(`RENDER_CPU_S`, a profiling timer: the main thread only) and the text it returns
(`MAX_RENDERED_CHARS`), and turns any template error into `ChatTemplateError`, one line naming
the tokenizer.

The syntax tree does not show values that variables carry: `{% set n = 30000 %}{{ 'x' * n * n }}`
holds no large constant, and its repeat is one C call that the CPU timer cannot interrupt (the
signal waits for it to end, 900 MB later). So templates are compiled in `bounded_sandbox()`,
transformers' sandbox with `*`, `**` and `+` checked before they run (`binop_problem`): a text
or list longer than `MAX_RENDERED_CHARS`, or a whole number over `MAX_NUMBER_BITS` bits, is
refused in the same one line as the other refusals (`_use_bounded_sandbox` says how it is put
into transformers, which builds its environment itself).
"""
from __future__ import annotations

import functools
import logging
import signal
import threading
from typing import Any

#: the largest integer constant a template may hold (a repeat count, a width): prompts are KBs
MAX_CONSTANT = 1_000_000
#: CPU seconds one render may take (a real template renders in milliseconds)
RENDER_CPU_S = 10.0
#: characters a rendered prompt may have (far above any model's context); also the longest
#: text or list one operation of a template may build
MAX_RENDERED_CHARS = 16 << 20
#: bits of the largest whole number a product or power in a template may build (about 19,700
#: digits: more than Python prints, and far more than a width or a count needs)
MAX_NUMBER_BITS = 1 << 16

log = logging.getLogger(__name__)


class ChatTemplateError(ValueError):
    """A chat template that fails, or would run without bound, on a prompt; one line."""


def render_chat(tokenizer, messages, **kwargs) -> Any:
    """`tokenizer.apply_chat_template(messages, **kwargs)` within the bounds above."""
    name = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        problem = template_problem(template)
        if problem:
            raise ChatTemplateError(f"{name}: its chat template is refused: {problem}")

    _use_bounded_sandbox()
    try:
        with _cpu_limit(RENDER_CPU_S):
            out = tokenizer.apply_chat_template(messages, **kwargs)
    except _OverTime:
        raise ChatTemplateError(f"{name}: its chat template ran for over {RENDER_CPU_S:g} s of CPU on one "
                                "prompt (a real template takes milliseconds); fix the template") from None
    except _Refused as exc:
        raise ChatTemplateError(f"{name}: its chat template is refused: {exc}") from None
    except (MemoryError, OverflowError, RecursionError) as exc:
        raise ChatTemplateError(f"{name}: its chat template could not be rendered ({type(exc).__name__}); "
                                "fix the template") from None
    except Exception as exc:  # raise_exception(...), a SecurityError (jinja2.TemplateError), an
        # undefined name, and the Python errors a template's own operations raise ({{ 1/0 }}, a
        # bad argument to a filter): the template's fault, said in one line
        text = " ".join(str(exc).split())[:300]
        raise ChatTemplateError(f"{name}: its chat template failed on this conversation "
                                f"({type(exc).__name__}: {text})") from None
    if isinstance(out, str) and len(out) > MAX_RENDERED_CHARS:
        raise ChatTemplateError(f"{name}: its chat template rendered {len(out):,} characters for one prompt "
                                f"(at most {MAX_RENDERED_CHARS:,}); fix the template")
    return out


@functools.lru_cache(maxsize=32)
def template_problem(template: str) -> str | None:
    """Why `template` would run without bound (None if nothing shows): an exponent, or an
    integer constant (alone or as a product of constants) above MAX_CONSTANT. Reads the
    syntax tree only; compiling would fold `'x' * 3000000000` into a 3 GB constant."""
    import jinja2
    from jinja2 import nodes

    try:
        tree = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except jinja2.TemplateSyntaxError:
        return None  # transformers reports it (as a ChatTemplateError through render_chat)
    except RecursionError:
        return "it nests too deeply to read"

    def constant(node) -> float | None:  # a text counts as its length: 'x' * 30000 * 100000 is 3e9
        if isinstance(node, nodes.Const) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return abs(node.value)
        if isinstance(node, nodes.Const) and isinstance(node.value, str):
            return max(1, len(node.value))
        if isinstance(node, nodes.Mul):
            left, right = constant(node.left), constant(node.right)
            if left is not None and right is not None:
                return left * right
        if isinstance(node, nodes.Neg | nodes.Pos):
            return constant(node.node)
        return None

    for node in tree.find_all((nodes.Pow, nodes.Const, nodes.Mul)):
        if isinstance(node, nodes.Pow):
            return f"it raises to a power (line {node.lineno}), which can build values of any size"
        value = constant(node)
        if value is not None and value > MAX_CONSTANT:
            return (f"it holds the number {value:.3g} (line {node.lineno}), more than {MAX_CONSTANT:,}: a repeat "
                    "count or width that large builds gigabytes")
    return None


class _Refused(ValueError):
    """An operation `bounded_sandbox()` does not run, raised from inside a render (the message
    says what it would have built); render_chat turns it into a ChatTemplateError."""


_SEQUENCES = (str, list, tuple)


def binop_problem(operator: str, left: Any, right: Any) -> str | None:
    """Why `left <operator> right` in a template would build too much (None if it would not),
    judged from the operands' sizes before it runs: a repeat (`*`) or concatenation (`+`) of a
    text or list longer than MAX_RENDERED_CHARS, or a product or power (`*`, `**`) of whole
    numbers over MAX_NUMBER_BITS bits."""
    if operator == "*":
        seq, count = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, _SEQUENCES) and isinstance(count, int):
            if len(seq) * count > MAX_RENDERED_CHARS:
                what, unit = ("a text", "character(s)") if isinstance(seq, str) else ("a list", "item(s)")
                return (f"it repeats {what} of {len(seq):,} {unit} {count:,} times, more than the "
                        f"{MAX_RENDERED_CHARS:,} characters a prompt may have")
        elif isinstance(left, int) and isinstance(right, int):
            if abs(left).bit_length() + abs(right).bit_length() > MAX_NUMBER_BITS:
                return f"it multiplies whole numbers into one of over {MAX_NUMBER_BITS:,} bits"
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 \
                and (abs(left).bit_length() - 1) * right > MAX_NUMBER_BITS:
            return f"it raises {left:,} to the power {right:,}: a number of over {MAX_NUMBER_BITS:,} bits"
    elif operator == "+":
        if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES) \
                and len(left) + len(right) > MAX_RENDERED_CHARS:
            return (f"it joins two values into one of {len(left) + len(right):,} characters or items, more "
                    f"than the {MAX_RENDERED_CHARS:,} characters a prompt may have")
    return None


@functools.cache
def bounded_sandbox() -> type:
    """The environment chat templates are compiled in: jinja2's ImmutableSandboxedEnvironment
    (transformers' choice) whose `*`, `**` and `+` call `binop_problem` first and raise
    `_Refused` for what it names; otherwise the same operation, so real templates render the
    same text. (A class made on first use: jinja2 is imported only when a template is rendered.)"""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})

        def call_binop(self, context, operator, left, right):
            problem = binop_problem(operator, left, right)
            if problem is not None:
                raise _Refused(problem)
            return super().call_binop(context, operator, left, right)

    return BoundedSandbox


@functools.cache
def _use_bounded_sandbox() -> bool:
    """Have transformers compile chat templates in `bounded_sandbox()`, once per process; True
    when it does.

    transformers builds its ImmutableSandboxedEnvironment inside a private function
    (`transformers.utils.chat_template_utils._compile_jinja_template`, cached per template) and
    takes no other, so the module's name for the class is pointed at the subclass and that
    cache emptied: templates compile with transformers' own settings, extensions, filters and
    globals, only the three operators checked, and so does every later render in the process
    (a library's too). A transformers laid out otherwise is logged once and renders as before,
    within the syntax-tree check, the CPU timer and the output cap."""
    try:
        from transformers.utils import chat_template_utils as templates
    except ImportError:
        return False
    sandbox = bounded_sandbox()
    compile_template = getattr(templates, "_compile_jinja_template", None)
    if compile_template is not None and isinstance(getattr(templates, "ImmutableSandboxedEnvironment", None), type):
        if templates.ImmutableSandboxedEnvironment is not sandbox:
            templates.ImmutableSandboxedEnvironment = sandbox
            getattr(compile_template, "cache_clear", lambda: None)()
        try:
            if isinstance(compile_template("{{ 1 }}").environment, sandbox):
                return True
        except Exception:  # noqa: BLE001 - a layout this does not know: said below
            pass
    log.warning("chat templates render without the check of repeats through variables: this version "
                "of transformers does not compile them where mrtpo.chat expects")
    return False


class _OverTime(BaseException):
    """Raised by the profiling timer inside a render (a BaseException: templates' `except`
    clauses, if any, do not swallow it)."""


class _cpu_limit:
    """Raise _OverTime in the main thread once the process has used `seconds` more CPU time
    (ITIMER_PROF, so SIGALRM and its real-time timer stay free for others); nothing elsewhere."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = False

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return self

        def over(signum, frame):
            raise _OverTime()
        self.old_handler = signal.signal(signal.SIGPROF, over)
        self.old_timer = signal.setitimer(signal.ITIMER_PROF, self.seconds)
        self.active = True
        return self

    def __exit__(self, *exc) -> bool:
        if self.active:
            signal.setitimer(signal.ITIMER_PROF, *self.old_timer)
            signal.signal(signal.SIGPROF, self.old_handler if self.old_handler is not None else signal.SIG_DFL)
        return False
