"""Function documents: BFCL types <-> JSON Schema, the tool JSON the prompt shows, and the
`jsonschema` check of a call's arguments.

Functions are kept in BFCL's form (types string, integer, float, boolean, array, tuple, dict,
any), which the AST check needs (float and integer differ there). They are shown to the
policy, and validated, as JSON Schema, the way chat templates present tools:
`{"type": "function", "function": {"name", "description", "parameters": {...}}}` with
dict -> object, float -> number, tuple -> array and any -> no type (no constraint).
Validation also rejects arguments the function does not declare (top level only: nested
objects stay open unless their schema says otherwise), and admits null where the declared
default is null.
"""
from __future__ import annotations

import copy
import functools
import json
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

#: JSON Schema type -> BFCL type, for function documents written in JSON Schema
FROM_JSON_SCHEMA = {"object": "dict", "number": "float"}
#: BFCL type -> JSON Schema type (None: no type constraint)
TO_JSON_SCHEMA: dict[str, str | None] = {
    "string": "string", "integer": "integer", "float": "number", "boolean": "boolean",
    "array": "array", "tuple": "array", "dict": "object", "any": None,
}
BFCL_TYPES = tuple(TO_JSON_SCHEMA)


class FunctionSpecError(ValueError):
    """A function document that cannot be used; the message says where and what to do."""


def normalize_function(func: Any, where: str = "function") -> dict:
    """A function document in BFCL types, from BFCL's form, a JSON-Schema-typed one, or an
    OpenAI-style tool wrapper `{"type": "function", "function": {...}}`.

    Raises FunctionSpecError naming `where` and the field when the document is unusable."""
    if isinstance(func, dict) and func.get("type") == "function" and isinstance(func.get("function"), dict):
        func = func["function"]
    if not isinstance(func, dict):
        raise FunctionSpecError(f"{where}: a function must be a JSON object, got {type(func).__name__}")
    name = func.get("name")
    if not isinstance(name, str) or not name:
        raise FunctionSpecError(f"{where}: the function has no \"name\" string")
    out = copy.deepcopy(func)
    where = f"{where} ({name})"
    params = out.get("parameters", {"type": "dict", "properties": {}})
    if not isinstance(params, dict):
        raise FunctionSpecError(f"{where}: \"parameters\" must be an object")
    out["parameters"] = _normalize_object(params, f"{where}.parameters", top=True)
    out.setdefault("description", "")
    problem = _schema_problem(json.dumps(to_json_schema(out["parameters"]), sort_keys=True))
    if problem:
        raise FunctionSpecError(f"{where}: its parameters are not a valid JSON Schema once converted: {problem}")
    return out


@functools.lru_cache(maxsize=8192)
def _schema_problem(schema_json: str) -> str:
    """"" when the schema is valid JSON Schema, else the first problem. Cached: BFCL repeats
    functions across entries, and the meta-schema check is the slow part of loading. Checked
    against draft 7's meta-schema, four times faster than 2020-12's and the same for the
    keywords function documents use (items is a single schema: the normaliser ensures it)."""
    err = best_match(_meta_validator().iter_errors(json.loads(schema_json)))
    if err is None:
        return ""
    return f"{err.message} (at {'/'.join(map(str, err.absolute_path)) or 'top'})"


@functools.lru_cache(maxsize=1)
def _meta_validator() -> jsonschema.Draft7Validator:
    cls = jsonschema.Draft7Validator
    return cls(cls.META_SCHEMA)


def _normalize_object(spec: dict, where: str, top: bool = False) -> dict:
    t = FROM_JSON_SCHEMA.get(spec.get("type", "dict"), spec.get("type", "dict"))
    if t != "dict":
        raise FunctionSpecError(f"{where}: \"type\" must be \"dict\" or \"object\", got {spec.get('type')!r}")
    props = spec.get("properties", {})
    if not isinstance(props, dict):
        raise FunctionSpecError(f"{where}.properties must be an object mapping names to schemas")
    out = dict(spec, type="dict", properties={p: _normalize_param(s, f"{where}.properties.{p}")
                                              for p, s in props.items()})
    required = spec.get("required", [])
    if top or "required" in spec:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise FunctionSpecError(f"{where}.required must be a list of parameter names")
        out["required"] = list(required)
    return out


def _normalize_param(spec: Any, where: str) -> dict:
    if not isinstance(spec, dict):
        raise FunctionSpecError(f"{where}: a parameter schema must be an object")
    t = spec.get("type", "any")
    t = FROM_JSON_SCHEMA.get(t, t) if isinstance(t, str) else t
    if t not in BFCL_TYPES:
        raise FunctionSpecError(
            f"{where}: type {spec.get('type')!r} is not supported; use one of "
            f"{', '.join(BFCL_TYPES)} (or JSON Schema's object/number), or leave \"type\" out for any value")
    out = dict(spec, type=t)
    if t == "dict" and "properties" in spec:
        out = _normalize_object(out, where)
    if "items" in spec:
        out["items"] = _normalize_param(spec["items"], f"{where}.items")
    return out


def to_json_schema(spec: dict, null_default: bool = False) -> dict:
    """A BFCL-typed schema (parameters object or one parameter) as JSON Schema.

    `null_default=True` (validation only) also admits null where the declared default is
    null: passing the default is the same call as leaving the argument out."""
    out = {}
    for k, v in spec.items():
        if k == "type":
            t = TO_JSON_SCHEMA.get(v, v)
            if t is not None:
                out["type"] = [t, "null"] if null_default and "default" in spec and spec["default"] is None else t
        elif k == "properties" and isinstance(v, dict):
            out[k] = {p: to_json_schema(s, null_default) for p, s in v.items()}
        elif k == "items" and isinstance(v, dict):
            out[k] = to_json_schema(v, null_default)
        elif k == "required" and not isinstance(v, list):
            continue  # BFCL's occasional per-parameter flag; JSON Schema wants a list of names
        else:
            out[k] = v
    if out.get("type") == "array" and isinstance(out.get("enum"), list) \
            and not any(isinstance(e, list) for e in out["enum"]):
        # BFCL puts the allowed *item* values of an array on the array; JSON Schema wants them on items
        items = dict(out.get("items") or {})
        items.setdefault("enum", out.pop("enum"))
        out["items"] = items
    if null_default and isinstance(out.get("type"), list) and isinstance(out.get("enum"), list) \
            and None not in out["enum"]:
        out["enum"] = out["enum"] + [None]
    return out


def tool_json(func: dict) -> dict:
    """The function as a chat-template tool: {"type": "function", "function": {...}}."""
    body = {"name": func["name"], "description": func.get("description", ""),
            "parameters": to_json_schema(func.get("parameters", {"type": "dict", "properties": {}}))}
    return {"type": "function", "function": body}


def render_tools(functions: list[dict]) -> str:
    """One JSON line per function, as Qwen/Hermes chat templates list tools inside <tools>."""
    return "\n".join(json.dumps(tool_json(f), ensure_ascii=False) for f in functions)


@functools.lru_cache(maxsize=4096)
def _validator(schema_json: str, closed: bool = True) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_json)
    if closed:
        schema["additionalProperties"] = False
    return jsonschema.Draft202012Validator(schema)


def value_valid(spec: dict, value: Any) -> bool:
    """Whether one argument value validates against its parameter's (BFCL-typed) schema."""
    try:
        schema = json.dumps(to_json_schema(spec, null_default=True), sort_keys=True)
        return _validator(schema, closed=False).is_valid(value)
    except (RecursionError, ValueError, TypeError):
        return False


def validator_for(func: dict) -> jsonschema.Draft202012Validator:
    """A cached validator for the arguments of `func` (undeclared top-level arguments rejected)."""
    return _validator(json.dumps(to_json_schema(func["parameters"], null_default=True), sort_keys=True))


def schema_check(functions: list[dict], calls: list[dict]) -> tuple[bool, str]:
    """(True, "") when there is a call, every call names one of `functions` and its arguments
    validate against that function's schema; else (False, the first problem found, with
    the validator's message)."""
    if not calls:
        return False, "no function call was found"
    by_name = {f["name"]: f for f in functions}
    for i, call in enumerate(calls, 1):
        name = call.get("name") if isinstance(call, dict) else None
        if name not in by_name:
            return False, (f"call {i} names {name!r}, which is not one of the provided functions "
                           f"({', '.join(by_name)})")
        args = call.get("arguments", {})
        try:
            err = best_match(validator_for(by_name[name]).iter_errors(args))
        except (RecursionError, ValueError, TypeError) as exc:  # pathological model output
            return False, f"call {i} ({name}): the arguments could not be validated ({type(exc).__name__})"
        if err is not None:
            at = "/".join(map(str, err.absolute_path))
            return False, f"call {i} ({name}): {err.message}" + (f" (at {at})" if at else "")
    return True, ""
