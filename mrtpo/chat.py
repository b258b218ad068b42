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

The text-size bounds of one render's operations live in `mrtpo.template_sandbox`, which
transformers compiles chat templates in (`use_bounded_sandbox`); a refusal from inside a
render (`TemplateRefused`) becomes the same one-line ChatTemplateError.
"""
from __future__ import annotations

import functools
import signal
import threading
from typing import Any

from mrtpo.template_sandbox import MAX_RENDERED_CHARS, TemplateRefused, use_bounded_sandbox

#: the largest integer constant a template may hold (a repeat count, a width): prompts are KBs
MAX_CONSTANT = 1_000_000
#: CPU seconds one render may take (a real template renders in milliseconds)
RENDER_CPU_S = 10.0



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

    use_bounded_sandbox()
    try:
        with _cpu_limit(RENDER_CPU_S):
            out = tokenizer.apply_chat_template(messages, **kwargs)
    except _OverTime:
        raise ChatTemplateError(f"{name}: its chat template ran for over {RENDER_CPU_S:g} s of CPU on one "
                                "prompt (a real template takes milliseconds); fix the template") from None
    except TemplateRefused as exc:
        raise ChatTemplateError(f"{name}: its chat template is refused: {exc}; fix the template") from None
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
