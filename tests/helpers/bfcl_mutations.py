"""Differential testing against BFCL's official AST checker: its import, its data, and mutated
model outputs built from the possible answers.

`official_checker()` imports `bfcl_eval`'s `ast_checker` with the model registry stubbed (the
registry imports every model handler and their SDKs; the checker only asks it whether a model
turns dots in function names into underscores, which no model here does).

`mutants(entry, rng, n)` yields outputs in BFCL's decoded form `[{name: {arg: value}}]`: a
random choice among the possible values (optional arguments sometimes left out), then 0 to 3
edits of the kinds models make (a dropped, extra or renamed argument; a value of the wrong
type, case or punctuation; lists reordered or cut; dict keys dropped or added; calls
dropped, duplicated, reordered or renamed). Roughly half stay correct, so both verdicts are
exercised.
"""
from __future__ import annotations

import collections
import copy
import json
import random
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterator

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
              "live_multiple", "live_parallel", "live_parallel_multiple")


def official_checker() -> Callable[..., dict]:
    """BFCL's `ast_checker(func_description, model_output, possible_answer, language,
    test_category, model_name)`, imported without its model registry."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)

        class _Config:
            underscore_to_dot = False

        stub.MODEL_CONFIG_MAPPING = collections.defaultdict(_Config)
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    def check(functions, output, possible_answer, category):
        return ast_checker(functions, output, possible_answer, Language.PYTHON, category, "stub-model")

    return check


def official_decoder() -> Callable[[str], list[dict]]:
    """BFCL's `default_decode_ast_prompting` (Python-call text -> [{name: args}]), imported with
    the Java/JavaScript parsers (tree-sitter) and tenacity stubbed: the Python path uses neither."""
    official_checker()

    class _Stub(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return lambda *a, **k: None

    for mod in ("tenacity", "bfcl_eval.model_handler.parser.java_parser",
                "bfcl_eval.model_handler.parser.js_parser"):
        sys.modules.setdefault(mod, _Stub(mod))
    from bfcl_eval.model_handler.utils import default_decode_ast_prompting

    return default_decode_ast_prompting


def python_text(output: list[dict]) -> str:
    """[{name: args}] as BFCL's Python-call text: `[f(a=1), g(b='x')]`."""
    return "[" + ", ".join(f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
                           for call in output for name, args in call.items()) + "]"


def bfcl_entries(data_dir: Path, categories=CATEGORIES) -> Iterator[tuple[str, dict, list]]:
    """(category, question entry, ground_truth) for every entry of the given categories."""
    for cat in categories:
        answers = {}
        with open(data_dir / "possible_answer" / f"BFCL_v4_{cat}.json", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                answers[row["id"]] = row["ground_truth"]
        with open(data_dir / f"BFCL_v4_{cat}.json", encoding="utf-8") as fh:
            for line in fh:
                entry = json.loads(line)
                yield cat, entry, answers[entry["id"]]


# --- a random correct-looking output -------------------------------------------------------------
def _choose(rng: random.Random, values: list) -> tuple[bool, Any]:
    if not values:
        return False, None
    v = rng.choice(values)
    if isinstance(v, str) and v == "":
        return False, None
    return True, copy.deepcopy(v)


def _pick_dict(rng: random.Random, alt: dict) -> dict:
    out = {}
    for k, vs in alt.items():
        ok, v = _choose(rng, vs) if isinstance(vs, list) and vs else (True, vs)
        if ok:
            out[k] = v
    return out


def sample_output(rng: random.Random, functions: list[dict], ground_truth: list[dict]) -> list[dict]:
    by_name = {f["name"]: f for f in functions}
    out = []
    for call in ground_truth:
        (name, params), = call.items()
        props = by_name.get(name, {}).get("parameters", {}).get("properties", {})
        args = {}
        for p, values in params.items():
            ok, v = _choose(rng, values)
            if not ok:
                continue
            spec = props.get(p, {})
            if spec.get("type") == "dict" and isinstance(v, dict):
                v = _pick_dict(rng, v)
            elif spec.get("type") == "array" and isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                v = [_pick_dict(rng, x) for x in v]
            args[p] = v
        out.append({name: args})
    return out


# --- edits -------------------------------------------------------------------------------------
_PUNCT = [" ", ",", ".", "/", "-", "_", "*", "^"]


def _edit_string(rng: random.Random, s: str) -> str:
    k = rng.randrange(6)
    if k == 0:
        return s.upper()
    if k == 1:
        return s.lower() if s != s.lower() else s.title()
    if k == 2:
        i = rng.randrange(len(s) + 1)
        return s[:i] + rng.choice(_PUNCT) + s[i:]
    if k == 3:
        return s + rng.choice(["x", "s", " 2", "!"])
    if k == 4:
        return s.replace("'", '"') if "'" in s else s[::-1]
    return s[: max(0, len(s) - 1)]


def _edit_value(rng: random.Random, v: Any, props: dict) -> Any:
    if isinstance(v, bool):
        return rng.choice([not v, str(v).lower(), int(v), None])
    if isinstance(v, int):
        return rng.choice([float(v), v + 1, -v, str(v), [v], None, True])
    if isinstance(v, float):
        return rng.choice([int(v) if v.is_integer() else round(v), v * 2, str(v), v + 0.5, [v]])
    if isinstance(v, str):
        return rng.choice([_edit_string(rng, v), _edit_string(rng, v), [v], v.split(" ")[0] if v else "x", 0, None])
    if isinstance(v, list):
        k = rng.randrange(7)
        if not v or k == 0:
            return v + [rng.choice(v) if v else "x"]
        if k == 1:
            return list(reversed(v))
        if k == 2:
            return v[:-1]
        if k == 3:
            return tuple(v)
        if k == 4:
            i = rng.randrange(len(v))
            return v[:i] + [_edit_value(rng, v[i], props)] + v[i + 1:]
        if k == 5:
            return json.dumps(v)
        return v[0]
    if isinstance(v, dict):
        k = rng.randrange(4)
        if v and k == 0:
            v = dict(v)
            v.pop(rng.choice(list(v)))
            return v
        if v and k == 1:
            v = dict(v)
            key = rng.choice(list(v))
            v[key] = _edit_value(rng, v[key], props)
            return v
        if k == 2:
            return dict(v, extra_key="x")
        return json.dumps(v)
    if v is None:
        return rng.choice(["None", "", 0])
    return v


def _edit(rng: random.Random, out: list[dict], functions: list[dict]) -> list[dict]:
    by_name = {f["name"]: f for f in functions}
    out = copy.deepcopy(out)
    if not out:
        return out
    i = rng.randrange(len(out))
    (name, args), = out[i].items()
    props = by_name.get(name, {}).get("parameters", {}).get("properties", {})
    k = rng.randrange(12)
    if k <= 3 and args:  # change a value (the most common model error)
        p = rng.choice(list(args))
        args[p] = _edit_value(rng, args[p], props)
    elif k == 4 and args:
        args.pop(rng.choice(list(args)))
    elif k == 5:
        missing = [p for p in props if p not in args]
        if missing:
            p = rng.choice(missing)
            spec = props[p]
            args[p] = spec.get("default", {"integer": 1, "float": 1.5, "boolean": True, "array": [],
                                           "dict": {}}.get(spec.get("type"), "x"))
        else:
            args["unexpected_argument"] = 1
    elif k == 6:
        renamed = rng.choice([name + "_v2", name.replace(".", "_"), name.split(".")[-1], name.upper()])
        out[i] = {renamed: args}
    elif k == 7 and len(out) > 1:
        rng.shuffle(out)
    elif k == 8:
        out.pop(i)
    elif k == 9:
        out.append(copy.deepcopy(out[i]))
    elif k == 10 and len(functions) > 1:
        other = rng.choice([f for f in functions if f["name"] != name])
        out[i] = {other["name"]: args}
    elif k == 11 and len(out) > 1:
        j = rng.randrange(len(out))
        (name_j, args_j), = out[j].items()
        out[i] = {name: copy.deepcopy(args_j)}
    return out


def mutants(entry: dict, ground_truth: list[dict], rng: random.Random, n: int) -> Iterator[list[dict]]:
    """`n` outputs: random picks among the possible values, each with 0 to 3 edits."""
    for _ in range(n):
        out = sample_output(rng, entry["function"], ground_truth)
        for _ in range(rng.choice([0, 0, 1, 1, 1, 2, 3])):
            out = _edit(rng, out, entry["function"])
        yield out


def to_project_form(output: list[dict]) -> list[dict]:
    """BFCL's decoded form [{name: args}] -> this project's [{"name", "arguments"}]."""
    return [{"name": name, "arguments": args} for call in output for name, args in call.items()]
