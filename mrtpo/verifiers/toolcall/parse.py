"""Responses -> function calls, never raising.

Two syntaxes are read:
- the task's format (`mrtpo.formats.ToolCallFormat`): one JSON object
  `{"name": ..., "arguments": {...}}` per `<tool_call>...</tool_call>` tag;
- BFCL's Python-call text `[f(a=1), g(b="x")]` (what BFCL asks prompting models for), read
  with `ast.parse` and a whitelist of literal forms. Nothing is ever evaluated: arithmetic
  on number literals is computed by hand, names become strings (BFCL's "variables").

A call is `{"name": str, "arguments": dict}`, the form `ToolCallFormat` parses and renders.
"""
from __future__ import annotations

import ast
import math
import operator
import warnings
from dataclasses import dataclass
from typing import Any

from mrtpo.formats import Format, ToolCallFormat, split_think

MAX_PYTHON_CHARS = 20_000  # longer Python-call text is not parsed (ast.parse cost, recursion)


@dataclass(frozen=True)
class ParsedCalls:
    """The calls found in a response, whether it follows the format exactly, and why not.

    `syntax` says how the calls were read: "tool_call" (the format), "python" (BFCL's
    Python-call text) or "" (nothing could be read: `calls` is empty)."""

    calls: list[dict]
    strict: bool
    error: str = ""
    syntax: str = ""


def parse_calls(response: Any, fmt: Format | None = None) -> ParsedCalls:
    """Read the calls of `response` with `fmt` (ToolCallFormat by default), falling back to
    Python-call text when the format finds none. Never raises."""
    fmt = fmt or ToolCallFormat()
    parsed = fmt.parse(response)
    answer = parsed.answer
    if isinstance(answer, list) and all(isinstance(c, dict) for c in answer):
        return ParsedCalls(list(answer), parsed.strict, parsed.error, "tool_call")
    if not isinstance(response, str):
        return ParsedCalls([], False, parsed.error)
    text = answer if isinstance(answer, str) else split_think(response)[1]
    calls, err = parse_python_calls(text)
    if calls and isinstance(answer, str):  # a text format: the Python calls are its answer
        return ParsedCalls(calls, parsed.strict and not err, err, "python")
    if calls:
        why = [parsed.error or "not the requested format", "the calls were read as Python call syntax", err]
        return ParsedCalls(calls, False, "; ".join(w for w in why if w), "python")
    return ParsedCalls([], False, parsed.error or err)


def parse_python_calls(text: Any) -> tuple[list[dict], str]:
    """BFCL's Python-call text (`[f(a=1), mod.g(b="x")]` or a bare `f(a=1)`) -> (calls, error).

    Follows BFCL's `default_decode_ast_prompting`: surrounding backticks, newlines and
    spaces are stripped and brackets added when missing; keyword arguments only (positional
    ones are reported in the error and dropped, as BFCL drops them); names become strings,
    a call with no keyword arguments becomes its source text, with keywords a nested
    `{name: {...}}`. Returns ([], why) when the text is not a list of calls."""
    if not isinstance(text, str):
        return [], f"the response is {type(text).__name__}, not text"
    src = text.strip("`\n ")
    if src.startswith("python\n"):  # a ```python fence
        src = src[len("python\n"):].strip()
    if not src:
        return [], "the response is empty"
    if len(src) > MAX_PYTHON_CHARS:
        return [], f"the response is longer than {MAX_PYTHON_CHARS} characters"
    if not src.startswith("["):
        src = "[" + src
    if not src.endswith("]"):
        src = src + "]"
    try:
        with warnings.catch_warnings():  # model output: "1if" is a SyntaxWarning, not our news
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [], f"not a list of Python function calls ({type(exc).__name__}: {exc})"
    body = tree.body
    elts = [body] if isinstance(body, ast.Call) else getattr(body, "elts", None)
    if elts is None:
        return [], "not a list of Python function calls"
    calls, notes = [], []
    try:
        for i, elt in enumerate(elts, 1):
            if not isinstance(elt, ast.Call):
                return [], f"element {i} is not a function call: {_src(elt)}"
            name, args = _call(elt)
            if elt.args:
                notes.append(f"call {i} ({name}) has positional arguments, which are ignored")
            calls.append({"name": name, "arguments": args})
    except _Unsupported as exc:
        return [], str(exc)
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError) as exc:
        return [], f"could not read the calls ({type(exc).__name__}: {exc})"
    return calls, "; ".join(notes)


class _Unsupported(Exception):
    pass


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:80]
    except Exception:
        return type(node).__name__


def _call_name(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        raise _Unsupported(f"not a function name: {_src(func)}")
    parts.append(func.id)
    return ".".join(reversed(parts))


def _call(node: ast.Call) -> tuple[str, dict]:
    name = _call_name(node.func)
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise _Unsupported(f"{name}: **-unpacking is not a literal argument")
        args[kw.arg] = _value(kw.value)
    return name, args


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}


def _value(node: ast.AST) -> Any:
    """A literal argument value, the way BFCL's resolve_ast_by_type reads it, without eval."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        if isinstance(v, (int, float, complex)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
        raise _Unsupported(f"unsupported value: {_src(node)}")
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unsupported(f"unsupported value: {_src(node)}")
        return {_hashable(_value(k), node): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _arith(node)
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node)
        name, args = _call(node)
        return {name: args}
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise _Unsupported(f"unsupported value: {_src(node)}")


def _hashable(key: Any, node: ast.AST) -> Any:
    try:
        hash(key)
    except TypeError:
        raise _Unsupported(f"unhashable dict key in {_src(node)}") from None
    return key


def _arith(node: ast.BinOp) -> Any:
    """Arithmetic on literals (what BFCL evals), bounded so it cannot eat time or memory."""
    a, b = _value(node.left), _value(node.right)
    op = type(node.op)
    if isinstance(a, str) and isinstance(b, str) and op is ast.Add and len(a) + len(b) <= MAX_PYTHON_CHARS:
        return a + b
    nums = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if not nums:
        raise _Unsupported(f"unsupported expression: {_src(node)}")
    if op is ast.Pow and (abs(b) > 64 or abs(a) > 10**12):
        raise _Unsupported(f"exponent too large to compute: {_src(node)}")
    if op is ast.Mult and (abs(a) > 10**300 or abs(b) > 10**300):
        raise _Unsupported(f"product too large to compute: {_src(node)}")
    try:
        out = _BINOPS[op](a, b)
    except ZeroDivisionError:
        raise _Unsupported(f"division by zero: {_src(node)}") from None
    if isinstance(out, complex) or (isinstance(out, float) and not math.isfinite(out)):
        raise _Unsupported(f"not a real number: {_src(node)}")
    return out
