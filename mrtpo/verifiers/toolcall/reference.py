"""One correct set of calls from a BFCL possible answer: the reference the `correct` block shows.

Each argument takes its first possible value, skipping the optional marker `""`; an argument
whose only possible value is `""` is left out. Possible values that break the parameter's
JSON schema (BFCL answers sometimes list `None` for an optional argument, or a value outside
the enum) are passed over for the next one, or for leaving the argument out when it is
optional, so the reference also scores on the `schema` reward whenever it can. Dict arguments (and lists of dicts) hold
possible values per key, so the same choice is made key by key, the way the AST check reads
them. The result passes `ast_check` whenever the possible answer itself is satisfiable.
"""
from __future__ import annotations

from typing import Any

from mrtpo.verifiers.toolcall.schema import value_valid


def reference_calls(functions: list[dict], possible_answer: list[dict]) -> list[dict]:
    """[{"name", "arguments"}] in answer order, ready for `ToolCallFormat.render`."""
    by_name = {f["name"]: f for f in functions}
    calls = []
    for answer in possible_answer:
        (name, params), = answer.items()
        props = (by_name.get(name, {}).get("parameters") or {}).get("properties") or {}
        args = {}
        for p, values in params.items():
            spec = props.get(p) or {}
            shaped = [_shape(v, spec) for v in values if not (isinstance(v, str) and v == "")]
            valid = [v for v in shaped if value_valid(spec, v)] if spec else shaped
            if valid:
                args[p] = valid[0]
            elif shaped and "" not in values:
                args[p] = shaped[0]
        calls.append({"name": name, "arguments": args})
    return calls


def _first(values: list) -> tuple[bool, Any]:
    for v in values:
        if not (isinstance(v, str) and v == ""):
            return True, v
    return False, None


def _pick_dict(alt: dict) -> dict:
    out = {}
    for k, vs in alt.items():
        found, v = _first(vs if isinstance(vs, list) else [vs])
        if found:
            out[k] = v
    return out


def _shape(value: Any, spec: dict) -> Any:
    """A possible value as an argument: dicts (and lists of dicts) hold possible values per key."""
    t = spec.get("type")
    if t == "dict" and isinstance(value, dict):
        return _pick_dict(value)
    items = spec.get("items") or {}
    if t in ("array", "tuple") and items.get("type") == "dict" and isinstance(value, list):
        return [_pick_dict(v) if isinstance(v, dict) else v for v in value]
    return value
