"""BFCL v4 single-turn AST check: do the calls a response makes match a possible answer?

This is a re-implementation of `bfcl_eval.eval_checker.ast_eval.ast_checker` (Python
language only) with the same verdict on every input the official checker accepts, and no
exception on inputs it crashes on (those count as a mismatch here). The semantics, in the
order the official checker applies them:

- category: a name containing "parallel" matches every expected call to an unused output call
  (greedily, in answer order: BFCL's `parallel_function_checker_no_order`); else exactly as
  many calls as expected ("multiple": one call, any of several functions; "simple": one call);
- per call: the function name matches; every schema-`required` parameter is present; every
  given parameter is in the schema *and* in the possible answer; its type is right (an int is
  accepted for a float, not the reverse; a tuple is a list where the schema says tuple; a
  value of the possible answer's own type counts as a "variable" and is compared as is);
  its value is among the possible values (strings compared after `standardize_string`,
  lists in order with each string element standardised, dicts key by key, lists of dicts
  position by position); and every answer parameter without `""` among its values is given.

`calls` may be this project's form (`[{"name": f, "arguments": {...}}]`, what
`ToolCallFormat` parses) or BFCL's decoded form (`[{f: {...}}]`). `possible_answer` is BFCL's
`ground_truth`: `[{f: {param: [possible values...]}}]`, where `""` among the values marks the
parameter optional. `functions` are BFCL function documents with BFCL types (string, integer,
float, boolean, array, tuple, dict, any).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: BFCL's PYTHON_TYPE_MAPPING: the Python class a value of each BFCL type must have
PYTHON_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool,
    "array": list, "tuple": list, "dict": dict, "any": str,
}
_NESTED = ("array", "tuple")  # types whose items are type-checked one level deep
_STD_RE = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class AstResult:
    """The AST check's verdict: `valid`, and when not, why (`reason`, for feedback) and
    BFCL's error_type name (e.g. "simple_function_checker:missing_required")."""

    valid: bool
    reason: str = ""
    error_type: str = ""

    def __bool__(self) -> bool:
        return self.valid


_OK = AstResult(True)


def standardize_string(s: str) -> str:
    """BFCL's string normalisation: drop spaces and `,./-_*^`, lowercase, `'` -> `"`."""
    return _STD_RE.sub("", s).lower().replace("'", '"')


def check_mode(category: str) -> str:
    """"parallel", "multiple" or "simple": which BFCL checker a category name selects."""
    if not isinstance(category, str) or not category:
        raise ValueError(f"category must be a non-empty string, got {category!r}")
    if "java" in category:  # covers javascript
        raise ValueError(f"category {category!r}: Java and JavaScript arguments are strings in those "
                         "languages' syntax, which this AST check does not convert; use Python categories")
    if "parallel" in category:
        return "parallel"
    if "multiple" in category:
        return "multiple"
    if "simple" in category:
        return "simple"
    raise ValueError(
        f"unknown category {category!r}: the AST check knows simple, multiple, parallel and "
        "parallel_multiple (optionally live_-prefixed, e.g. live_simple, simple_python)")


def ast_check(functions: list[dict], calls: Any, possible_answer: list[dict], category: str) -> bool:
    """True when `calls` pass BFCL v4's single-turn AST check against `possible_answer`."""
    return ast_check_reason(functions, calls, possible_answer, category).valid


def ast_check_reason(functions: list[dict], calls: Any, possible_answer: list[dict],
                     category: str) -> AstResult:
    """`ast_check` with the reason for a failure (the `correct` reward's feedback).

    Raises ValueError only for bad data (an unknown category, a possible answer naming a
    function that `functions` lacks, an unknown parameter type); bad calls give a failed
    result."""
    mode = check_mode(category)
    expected = [_expected_call(a, i) for i, a in enumerate(possible_answer)]
    if not expected:
        raise ValueError("the possible answer lists no call")
    got, err = normalize_calls(calls)
    if err:
        return AstResult(False, err, "decode:malformed_calls")
    if mode == "simple":
        if len(got) != 1:
            return _wrong_count(got, 1, "simple_function_checker:wrong_count")
        return _check_call(_find(functions, expected[0][0], fallback_first=True), got[0], expected[0][1])
    if mode == "multiple":
        if len(got) != len(expected):
            return _wrong_count(got, len(expected), "multiple_function_checker:wrong_count")
        return _check_call(_find(functions, expected[0][0]), got[0], expected[0][1])
    if len(got) != len(expected):
        return _wrong_count(got, len(expected), "parallel_function_checker_no_order:wrong_count")
    matched: set[int] = set()
    for i, (name, params) in enumerate(expected):
        func = _find(functions, name)
        reasons = []
        for j, call in enumerate(got):
            if j in matched:
                continue
            res = _check_call(func, call, params)
            if res.valid:
                matched.add(j)
                break
            reasons.append(f"call {j + 1}: {res.reason}")
        else:
            why = " | ".join(reasons)
            why = why if len(why) <= 800 else why[:800] + " ..."
            return AstResult(False, f"no call matches expected call {i + 1} ({name}): {why}",
                             "parallel_function_checker_no_order:cannot_find_match")
    return _OK


def normalize_calls(calls: Any) -> tuple[list[tuple[str, Any]], str]:
    """Calls in either accepted form -> [(name, arguments)], or ([], why not)."""
    if calls is None:
        return [], ""
    if not isinstance(calls, (list, tuple)):
        return [], f"the calls are a {type(calls).__name__}, not a list"
    out = []
    for i, c in enumerate(calls, 1):
        if isinstance(c, dict) and isinstance(c.get("name"), str) and set(c) <= {"name", "arguments"}:
            out.append((c["name"], c.get("arguments", {})))
        elif isinstance(c, dict) and len(c) == 1:
            (name, args), = c.items()
            out.append((str(name), args))
        else:
            return [], f"call {i} is not a function call object: {str(c)[:80]}"
    return out, ""


def _expected_call(answer: Any, i: int) -> tuple[str, dict]:
    if not isinstance(answer, dict) or len(answer) != 1:
        raise ValueError(f"possible answer {i + 1} must be an object with one function name, got {answer!r:.80}")
    (name, params), = answer.items()
    if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
        raise ValueError(f"possible answer {i + 1} ({name}) must map each parameter to a list of possible values")
    return name, params


def _find(functions: list[dict], name: str, fallback_first: bool = False) -> dict:
    for f in functions:
        if f.get("name") == name:
            return f
    if fallback_first and functions:
        return functions[0]  # BFCL's simple checker uses the first function whatever its name
    raise ValueError(f"the possible answer calls {name!r}, which is not among the functions "
                     f"({', '.join(str(f.get('name')) for f in functions)})")


def _wrong_count(got: list, n: int, etype: str) -> AstResult:
    return AstResult(False, f"expected {n} function call{'s' * (n != 1)}, got {len(got)}", etype)


def _check_call(func: dict, call: tuple[str, Any], expected: dict) -> AstResult:
    """BFCL's simple_function_checker for one call (Python language)."""
    name = func["name"]
    got_name, args = call
    if got_name != name:
        return AstResult(False, f"function name {name!r} not found in the output (got {got_name!r})",
                         "simple_function_checker:wrong_func_name")
    if not isinstance(args, dict):
        return AstResult(False, f"the arguments of {name} are not an object", "simple_function_checker:wrong_args")
    params = func.get("parameters") or {}
    props = params.get("properties") or {}
    for p in params.get("required") or []:
        if p not in args:
            return AstResult(False, f"missing required parameter {p!r}", "simple_function_checker:missing_required")
    for p, value in args.items():
        if p not in props or p not in expected:
            return AstResult(False, f"unexpected parameter {p!r}", "simple_function_checker:unexpected_param")
        res = _check_param(p, value, props[p], expected[p])
        if not res.valid:
            return res
    for p, values in expected.items():
        if p not in args and "" not in values:
            return AstResult(False, f"parameter {p!r} is not given and is not optional",
                             "simple_function_checker:missing_optional")
    return _OK


def _bfcl_type(p: str, spec: Any) -> str:
    t = spec.get("type") if isinstance(spec, dict) else None
    if t not in PYTHON_TYPES:
        raise ValueError(f"parameter {p!r} has type {t!r}; the AST check knows {', '.join(PYTHON_TYPES)}")
    return t


def _check_param(p: str, value: Any, spec: dict, values: list) -> AstResult:
    tname = _bfcl_type(p, spec)
    cls = PYTHON_TYPES[tname]
    nested = None
    if tname in _NESTED:
        items = spec.get("items")
        if isinstance(items, dict) and items.get("type") is not None:
            nested = PYTHON_TYPES[_bfcl_type(p, items)]
    if tname == "tuple" and type(value) is tuple:
        value = list(value)
    if tname == "float" and type(value) is int:
        value = float(value)
    ok, is_variable = _type_ok(value, values, cls, nested)
    if not ok:
        if type(value) is cls:  # the container is right, an item is not
            return AstResult(False, f"wrong item type in parameter {p!r}: expected {tname} of "
                             f"{spec['items']['type']}, got {value!r:.80}", "type_error:nested")
        return AstResult(False, f"wrong type for parameter {p!r}: expected {tname}, got "
                         f"{type(value).__name__} ({value!r:.80})", "type_error:simple")
    if not is_variable:
        if cls is dict:
            return _dict_check(p, value, values)
        if cls is list and nested is dict:
            return _list_dict_check(p, value, values)
        if cls is str:
            if standardize_string(value) in [standardize_string(v) for v in values if type(v) is str]:
                return _OK
            return _bad_value(p, value, values, "value_error:string")
        if cls is list:
            if _std_list(value) in [_std_list(v) for v in values if isinstance(v, (list, str))]:
                return _OK
            return _bad_value(p, value, values, "value_error:list/tuple")
    if _contains(values, value):
        return _OK
    return _bad_value(p, value, values, "value_error:others")


def _answer_type(values: list) -> type | None:
    for v in values:
        if v != "":
            return type(v)
    return None


def _type_ok(value: Any, values: list, cls: type, nested: type | None) -> tuple[bool, bool]:
    """BFCL's type_checker -> (valid, is_variable)."""
    ans_type = _answer_type(values)
    is_variable = ans_type is not None and ans_type is not cls
    if type(value) is cls:
        if nested is None:
            return True, is_variable
        for alt in values:
            if type(alt) is not list or all(_type_ok(item, alt, nested, None)[0] for item in value):
                return True, is_variable
        return False, is_variable
    if ans_type is not None and type(value) is ans_type:
        return True, True
    return False, is_variable


def _std_list(v: list | str) -> list:
    return [standardize_string(x) if type(x) is str else x for x in v]


def _contains(values: list, value: Any) -> bool:
    try:
        return value in values
    except Exception:  # an exotic == (never from JSON or the Python-call parser)
        return False


def _bad_value(p: str, value: Any, values: list, etype: str) -> AstResult:
    shown = [v for v in values if v != ""]
    opt = " (or leave it out)" if "" in values else ""
    return AstResult(False, f"wrong value for parameter {p!r}: {value!r:.120}; expected one of "
                     f"{shown!r:.200}{opt}", etype)


def _dict_check(p: str, value: dict, values: list) -> AstResult:
    """BFCL's dict_checker: the dict must match one possible dict key by key."""
    result = AstResult(False, f"no possible value for dict parameter {p!r}", "dict_checker:unclear")
    for alt in values:
        if alt == "":
            continue
        if not isinstance(alt, dict):
            result = AstResult(False, f"parameter {p!r}: a possible value is not a dict", "dict_checker:unclear")
            continue
        result = _OK
        for k, v in value.items():
            if k not in alt:
                result = AstResult(False, f"parameter {p!r}: unexpected key {k!r}", "value_error:dict_key")
                break
            key_values = alt[k] if isinstance(alt[k], list) else [alt[k]]
            sv = standardize_string(v) if type(v) is str else v
            if not _contains([standardize_string(a) if type(a) is str else a for a in key_values], sv):
                result = AstResult(False, f"parameter {p!r}: wrong value for key {k!r}: {v!r:.80}; expected "
                                   f"one of {[a for a in key_values if a != '']!r:.160}", "value_error:dict_value")
                break
        missing = [k for k, vs in alt.items()
                   if k not in value and "" not in (vs if isinstance(vs, list) else [vs])]
        if missing:  # BFCL reports a missing key over a wrong value (its error_type is overwritten)
            msg = f"parameter {p!r}: missing key {missing[0]!r}"
            result = AstResult(False, msg if result.valid else f"{result.reason}; {msg}", "value_error:dict_key")
        if result.valid:
            return _OK
    return result


def _list_dict_check(p: str, value: list, values: list) -> AstResult:
    """BFCL's list_dict_checker: same length as a possible list, dicts matched by position."""
    result = AstResult(False, f"no possible value for parameter {p!r}", "list_dict_checker:unclear")
    for alt in values:
        if not isinstance(alt, (list, str)):
            continue
        if len(value) != len(alt):
            result = AstResult(False, f"parameter {p!r}: wrong number of dicts in the list "
                               f"({len(value)}, expected {len(alt)})", "value_error:list_dict_count")
            continue
        for item, alt_item in zip(value, alt):
            result = _dict_check(p, item, [alt_item]) if isinstance(item, dict) else AstResult(
                False, f"parameter {p!r}: an element is not a dict", "type_error:nested")
            if not result.valid:
                break
        else:
            return _OK
    return result
