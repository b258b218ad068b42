"""Readers for the tool-calling task: BFCL v4's layout and the project's own JSONL.

Both give `ToolCallRow`s: the conversation (system text, user text), the functions in BFCL
types, BFCL's `ground_truth` (possible answers) and the category that picks the AST check.

- BFCL v4 (`data_cards/bfcl.md`): `BFCL_v4_<category>.json` (JSON lines: id, question,
  function) with answers in `possible_answer/BFCL_v4_<category>.json` (id, ground_truth),
  matched by id. A directory reads every supported category present (or those `split` names);
  `"bfcl_eval"` names the data directory of the installed `bfcl-eval` package.
- Project JSONL (`data_cards/toolcall-jsonl.md`): one self-contained row per line with
  question, functions, ground_truth and an optional category and split.

Rows are read with `json` line by line rather than through `datasets`: Arrow would unify the
differing nested schemas into one struct, filling absent keys with null, and the meaning of
these rows lies in which keys are present (a parameter's possible values, `""` optional).
Rows are given one at a time (`iter_toolcall`; `read_toolcall` is its list), a JSONL file read
line by line: BFCL's possible answers, in their own file, are held by id while its questions
stream. Bad rows raise `ToolCallDataError` naming the file, the line and the field, when reached.
"""
from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from mrtpo import textio
from mrtpo.tasks.files import UniqueIds, read_lines, row_id
from mrtpo.verifiers.toolcall import FunctionSpecError, check_mode, normalize_function

#: BFCL v4 categories this task reads (single-turn, with possible answers, Python types)
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
                   "live_multiple", "live_parallel", "live_parallel_multiple")
_BFCL_FILE = re.compile(r"^BFCL_v\d+_(.+)\.json$")


class ToolCallDataError(ValueError):
    """A dataset row that cannot be used; the message names file, line, field and the fix."""


@dataclass(frozen=True)
class ToolCallRow:
    id: str
    user: str
    system: str | None
    functions: list[dict]
    ground_truth: list[dict]
    category: str
    source: str


def read_toolcall(path: str | Path, split: str | None = None) -> list[ToolCallRow]:
    """Every row of `iter_toolcall`, read before the first is returned."""
    return list(iter_toolcall(path, split))


def iter_toolcall(path: str | Path, split: str | None = None) -> Iterator[ToolCallRow]:
    """Rows from a BFCL directory or question file, or from a project JSONL file, one at a time."""
    if str(path) == "bfcl_eval":
        path = bfcl_eval_data_dir()
    p = Path(path)
    if p.is_dir():
        yield from read_bfcl_dir(p, split)
        return
    problem = textio.not_a_file(p)  # a FIFO or a device is said as what it is, not "no such file"
    if problem:
        missing = problem.startswith("no such file")  # neither a file nor a directory (it may name either)
        raise (FileNotFoundError if missing else ToolCallDataError)(
            f"{p}: {problem.replace('no such file', 'no such file or directory', 1) if missing else problem} "
            "(give a BFCL v4 data directory, a BFCL_v4_<category>.json question file, or a project .jsonl file)")
    first = _first_row(p)
    if isinstance(first, dict) and "question" in first and "function" in first and "ground_truth" not in first:
        if split is not None and split != _bfcl_category(p, first):
            raise ToolCallDataError(f"{p}: split {split!r} does not match this file's category "
                                    f"{_bfcl_category(p, first)!r}; leave split out for a single file")
        yield from read_bfcl_file(p)
        return
    yield from read_jsonl(p, split)


def bfcl_eval_data_dir() -> Path:
    """The data directory shipped in the `bfcl-eval` package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the bfcl-eval package is not installed: `pip install --no-deps bfcl-eval` "
                                "brings BFCL's data (or give the path of a BFCL v4 data directory)")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def read_bfcl_dir(root: Path, split: str | None = None) -> Iterator[ToolCallRow]:
    """Every supported category in a BFCL v4 data directory, or the comma-separated `split`."""
    present = {m.group(1): f for f in sorted(root.iterdir()) if (m := _BFCL_FILE.match(f.name))}
    supported = [c for c in BFCL_CATEGORIES if c in present]
    if split is None:
        wanted = supported
        if not wanted:
            raise ToolCallDataError(f"{root}: no BFCL_v4_<category>.json file of a supported category "
                                    f"({', '.join(BFCL_CATEGORIES)})")
    else:
        wanted = [s.strip() for s in split.split(",") if s.strip()]
        for c in wanted:
            if c not in present:
                raise ToolCallDataError(f"{root}: no file for category {c!r}; present: {', '.join(present)}")
            if c not in BFCL_CATEGORIES:
                raise ToolCallDataError(f"{root}: category {c!r} is not supported (single-turn Python "
                                        f"categories with possible answers only: {', '.join(BFCL_CATEGORIES)})")
    for c in wanted:
        yield from read_bfcl_file(present[c])


def read_bfcl_file(qfile: Path) -> Iterator[ToolCallRow]:
    """One BFCL question file with its possible_answer file, matched by id."""
    m = _BFCL_FILE.match(qfile.name)
    if m and m.group(1) not in BFCL_CATEGORIES:
        raise ToolCallDataError(f"{qfile}: category {m.group(1)!r} is not supported (single-turn Python "
                                f"categories with possible answers only: {', '.join(BFCL_CATEGORIES)})")
    afile = qfile.parent / "possible_answer" / qfile.name
    if not afile.is_file():
        raise ToolCallDataError(f"{qfile}: no possible-answer file at {afile}; BFCL v4 keeps the answers "
                                "of each question file in possible_answer/<same file name>")
    answers: dict[str, Any] = {}
    for line_no, row in _json_lines(afile):
        if not isinstance(row, dict) or "id" not in row or "ground_truth" not in row:
            raise ToolCallDataError(f"{afile}:{line_no}: a possible-answer row needs \"id\" and \"ground_truth\"")
        answers[row_id(row, ("id",), "", f"{afile}:{line_no}", ToolCallDataError)] = row["ground_truth"]
    for line_no, q in _json_lines(qfile):
        where = f"{qfile}:{line_no}"
        if not isinstance(q, dict) or "id" not in q:
            raise ToolCallDataError(f"{where}: a question row needs an \"id\"")
        qid = row_id(q, ("id",), "", where, ToolCallDataError)
        if qid not in answers:
            raise ToolCallDataError(f"{where}: id {qid!r} has no row in {afile}; add its ground_truth there "
                                    "or remove the question")
        category = _bfcl_category(qfile, q)
        yield _make_row(qid, q.get("question"), q.get("function"), answers[qid], category, where,
                        check_params=False)


#: split names a JSONL file's error lists when no row has the asked one (a bound, not a rule)
_MAX_SPLITS_NAMED = 50


def read_jsonl(path: Path, split: str | None = None, unique: bool = True) -> Iterator[ToolCallRow]:
    """The project's own JSONL: question, functions, ground_truth, optional category/split.
    `unique=False` leaves out the check that ids are unique (which reads the rows again, so, to
    name a repeated id's first row)."""
    given, splits = 0, set()
    ids = UniqueIds(lambda: ((r.id, r.source) for r in read_jsonl(path, split, unique=False)))
    for line_no, r in _json_lines(path):
        where = f"{path}:{line_no}"
        if not isinstance(r, dict):
            raise ToolCallDataError(f"{where}: each line must be a JSON object")
        if len(splits) < _MAX_SPLITS_NAMED:
            splits.add(r.get("split"))
        if split is not None and r.get("split") != split:
            continue
        rid = row_id(r, ("id",), f"{path.stem}-{line_no}", where, ToolCallDataError)
        if unique and (first := ids.earlier(rid, where)) is not None:
            raise ToolCallDataError(f"{where}: id {rid!r} is used twice (first at {first}); ids must be unique")
        funcs = r.get("functions", r.get("function"))
        if "ground_truth" not in r:
            raise ToolCallDataError(f"{where}: field \"ground_truth\" is missing: list the expected calls as "
                                    '[{"<function>": {"<param>": [<possible values>]}}]')
        yield _make_row(rid, r.get("question"), funcs, r["ground_truth"], r.get("category"), where,
                        check_params=True)
        given += 1
    if split is not None and not given:
        known = sorted(str(s) for s in splits if s is not None)
        raise ToolCallDataError(f"{path}: no row has split {split!r}; splits present: {', '.join(known) or 'none'}")
    if not given:
        raise ToolCallDataError(f"{path}: the file holds no rows")


def _make_row(rid: str, question: Any, functions: Any, gt: Any, category: Any, where: str,
              check_params: bool) -> ToolCallRow:
    system, user = _conversation(question, where)
    if not isinstance(functions, list) or not functions:
        raise ToolCallDataError(f"{where}: field \"functions\" must be a non-empty list of function documents")
    try:
        funcs = [normalize_function(f, f"{where}: functions[{i}]") for i, f in enumerate(functions)]
    except FunctionSpecError as exc:
        raise ToolCallDataError(str(exc)) from None
    by_name = {f["name"]: f for f in funcs}
    if len(by_name) != len(funcs):
        raise ToolCallDataError(f"{where}: two functions share a name; names must be unique")
    _check_ground_truth(gt, by_name, where, check_params)
    category = _category(category, gt, funcs, where)
    return ToolCallRow(rid, user, system, funcs, gt, category, where)


def _conversation(question: Any, where: str) -> tuple[str | None, str]:
    """(system text, user text) from a string, a message list, or BFCL's [[messages]]."""
    if isinstance(question, str) and question.strip():
        return None, question
    msgs = question
    if isinstance(msgs, list) and msgs and all(isinstance(t, list) for t in msgs):
        if len(msgs) != 1:
            raise ToolCallDataError(f"{where}: field \"question\" has {len(msgs)} turns; only single-turn "
                                    "entries are supported")
        msgs = msgs[0]
    ok = isinstance(msgs, list) and msgs and all(
        isinstance(m, dict) and m.get("role") in ("system", "user") and isinstance(m.get("content"), str)
        for m in msgs)
    if not ok:
        raise ToolCallDataError(f"{where}: field \"question\" must be a string or a list of "
                                '{"role": "system"|"user", "content": <text>} messages')
    system = "\n\n".join(m["content"] for m in msgs if m["role"] == "system") or None
    user = "\n\n".join(m["content"] for m in msgs if m["role"] == "user")
    if not user.strip():
        raise ToolCallDataError(f"{where}: field \"question\" has no user message")
    return system, user


def _check_ground_truth(gt: Any, by_name: dict[str, dict], where: str, check_params: bool) -> None:
    shape = '[{"<function>": {"<param>": [<possible values>, ...]}}, ...]'
    if not isinstance(gt, list) or not gt:
        raise ToolCallDataError(f"{where}: field \"ground_truth\" must be a non-empty list {shape}")
    for i, call in enumerate(gt):
        at = f"{where}: ground_truth[{i}]"
        if not isinstance(call, dict) or len(call) != 1:
            raise ToolCallDataError(f"{at} must be an object with exactly one function name, as in {shape}")
        (name, params), = call.items()
        if name not in by_name:
            raise ToolCallDataError(f"{at} calls {name!r}, which is not among the functions "
                                    f"({', '.join(by_name)})")
        if not isinstance(params, dict):
            raise ToolCallDataError(f"{at} ({name}) must map parameter names to lists of possible values")
        props = by_name[name]["parameters"].get("properties", {})
        for p, values in params.items():
            if not isinstance(values, list):
                raise ToolCallDataError(f"{at}.{p}: possible values must be a list, e.g. [{json.dumps(values)}] "
                                        '(add "" to the list to make the parameter optional)')
            if check_params and p not in props:
                raise ToolCallDataError(f"{at}.{p}: function {name!r} has no parameter {p!r}")


def _category(category: Any, gt: list, funcs: list[dict], where: str) -> str:
    if category is None:
        if len(gt) == 1:
            return "simple" if len(funcs) == 1 else "multiple"
        return "parallel" if len({next(iter(c)) for c in gt}) == 1 else "parallel_multiple"
    try:
        mode = check_mode(str(category))
    except ValueError as exc:
        raise ToolCallDataError(f"{where}: field \"category\": {exc}") from None
    if mode != "parallel" and len(gt) != 1:
        raise ToolCallDataError(f"{where}: category {category!r} expects one call but ground_truth lists "
                                f"{len(gt)}; use a parallel category or leave \"category\" out")
    return str(category)


def _bfcl_category(qfile: Path, row: dict) -> str:
    m = _BFCL_FILE.match(qfile.name)
    if m:
        return m.group(1)
    return str(row.get("id", "")).rsplit("_", 1)[0]


def _first_row(path: Path) -> Any:
    for _, row in _json_lines(path):
        return row
    return None


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    for line_no, line in read_lines(path, ToolCallDataError, "JSONL file"):
        try:
            yield line_no, textio.loads(line)
        except json.JSONDecodeError as exc:
            raise ToolCallDataError(f"{path}:{line_no}: not valid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno}); "
                                    "each line must hold one JSON object") from None
