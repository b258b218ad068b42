"""Read a responses file and pair each row with the example it answers.

A responses file is JSONL (or one JSON array) whose rows carry a response text and either an
identifier (`id`, `key` or `question_id`) or the prompt it answers (`prompt`). IFEval's
`gpt4_responses.jsonl` has `prompt` and `response`; BFCL-style files have `id`. The response
text is read from `response` (or `completion`, `output`, `result`, in that order).

Pairing, per row: by identifier when the row has one that names an example; otherwise by
prompt text, first exactly, then with whitespace collapsed, then, for rows still unpaired,
by the single closest unpaired prompt when it is nearly identical. The last step exists
because the official IFEval response file answers one prompt ("Shinto shrines", key 2785)
worded slightly differently from the input file, and the official evaluator scored that
response against the input prompt. Its cost is bounded in characters compared
(`FUZZY_MAX_WORK`), not in pairs (a few long prompts cost more than many short ones): when the
budget runs out, the rows not yet matched are ignored, with a warning that says so. Every
inexact pairing is reported as a warning. Bad rows raise `ResponsesError` naming the file,
the row and the field.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Sequence

from mrtpo.tasks import files
from mrtpo.tasks.base import Example

ID_FIELDS = ("id", "key", "question_id")
RESPONSE_FIELDS = ("response", "completion", "output", "result")
PROMPT_FIELDS = ("prompt",)
#: example.data keys that may hold the original prompt text (when P0 adds instructions to it)
_DATA_PROMPT_KEYS = ("prompt", "raw_prompt", "original_prompt", "question")
_DATA_ID_KEYS = ("id", "key", "question_id")
FUZZY_MIN_RATIO = 0.9  # how similar an inexact prompt must be to its example's prompt
#: characters near matching may compare over one file: a full similarity costs up to the product
#: of the two prompts' lengths, its quick bounds their sum, at ~20-40 ns each, so this many take
#: 1-2 s at worst (a file for other data otherwise crawls: 600 rows x 400 examples of ~4 KB
#: prompts once took ~21 hours)
FUZZY_MAX_WORK = 50_000_000

Missing = Literal["error", "zero", "skip"]


class ResponsesError(ValueError):
    """The responses file is malformed or does not cover the data."""


@dataclass(frozen=True)
class ResponseRow:
    """One row of a responses file: its 1-based line/position, identifier, prompt and text."""

    row: int
    response: str
    id: str | None = None
    prompt: str | None = None


@dataclass
class Pairing:
    """`responses[i]` answers `examples[i]` (None: no row answers it); `warnings` lists every
    inexact pairing and every row that answered nothing."""

    responses: list[str | None]
    warnings: list[str] = field(default_factory=list)


def read_responses(path: str | Path) -> list[ResponseRow]:
    """Rows of a JSONL (or JSON array) responses file; raises `ResponsesError` on a bad row."""
    return list(iter_responses(path))


def iter_responses(path: str | Path) -> Iterator[ResponseRow]:
    """The rows of a responses file as they are read (one in memory at a time; `pair_responses`
    keeps only what pairs); `ResponsesError` on a bad row, and at the end for a file with none."""
    path = Path(path)
    if not path.exists():
        raise ResponsesError(f"{path}: no such responses file")
    count = 0
    for n, rec in read_records(path):
        count += 1
        yield _row(path, n, rec)
    if not count:
        raise ResponsesError(f"{path}: the file holds no responses (it is empty); write one JSON "
                             f"object per line with an id and a {RESPONSE_FIELDS[0]!r}")


def read_records(path: Path, error: type[Exception] = ResponsesError, where: str = "line",
                 hint: str = "") -> Iterator[tuple[int, Any]]:
    """`mrtpo.tasks.files.read_records` (the one JSONL / JSON-array reader), raising ResponsesError."""
    return files.read_records(path, error, where, hint)


def _row(path: Path, n: int, rec: Any) -> ResponseRow:
    where = f"{path}, row {n}"
    if not isinstance(rec, dict):
        raise ResponsesError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    key = next((k for k in RESPONSE_FIELDS if k in rec), None)
    if key is None:
        raise ResponsesError(f"{where}: no response field; give the model's text as "
                             f"{' or '.join(repr(k) for k in RESPONSE_FIELDS)}")
    response = rec[key]
    if response is None:
        response = ""  # a model that produced nothing: scores 0 like any empty text
    if not isinstance(response, str):
        raise ResponsesError(f"{where}, field {key!r}: expected the response text (a string), got "
                             f"{type(response).__name__}; write the model's raw output text")
    rid = next((rec[k] for k in ID_FIELDS if rec.get(k) is not None), None)
    prompt = next((rec[k] for k in PROMPT_FIELDS if isinstance(rec.get(k), str)), None)
    if rid is None and prompt is None:
        raise ResponsesError(f"{where}: the row has neither an identifier "
                             f"({', '.join(ID_FIELDS)}) nor a 'prompt' to match it to an example")
    if rid is not None and not isinstance(rid, (str, int)):
        raise ResponsesError(f"{where}: the identifier must be a string or an integer, got {rid!r}")
    return ResponseRow(n, response, None if rid is None else str(rid), prompt)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _example_ids(ex: Example) -> list[str]:
    ids = [ex.id]
    ids += [str(ex.data[k]) for k in _DATA_ID_KEYS if isinstance(ex.data.get(k), (str, int))]
    return ids


def _example_prompts(ex: Example) -> list[str]:
    texts = [ex.prompt]
    texts += [ex.data[k] for k in _DATA_PROMPT_KEYS if isinstance(ex.data.get(k), str)]
    return texts


def pair_responses(examples: Sequence[Example], rows: Iterable[ResponseRow], *,
                   source: str = "responses file") -> Pairing:
    """Pair rows with examples (see the module docstring); raises on two rows for one example.

    `rows` is read once, as it comes (`iter_responses` streams a file): a row is kept only while
    it may still pair (by its prompt, nearly); one that pairs nothing is counted, not held."""
    by_id: dict[str, int] = {}
    exact: dict[str, list[int]] = {}
    loose: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        for rid in _example_ids(ex):
            by_id.setdefault(rid, i)
        for p in dict.fromkeys(_example_prompts(ex)):
            exact.setdefault(p, []).append(i)
            loose.setdefault(_norm(p), []).append(i)
    out: list[str | None] = [None] * len(examples)
    taken: dict[int, int] = {}  # example index -> row number
    warnings: list[str] = []
    unpaired: list[ResponseRow] = []  # rows with a prompt, for near matching
    ignored = _Ignored()

    def take(i: int, row: ResponseRow) -> None:
        if i in taken:
            raise ResponsesError(f"{source}: rows {taken[i]} and {row.row} both answer example "
                                 f"{examples[i].id!r}; keep one response per example")
        taken[i] = row.row
        out[i] = row.response

    def free(cands: list[int]) -> int | None:
        return next((i for i in cands if i not in taken), None)

    for row in rows:
        if row.id is not None and row.id in by_id:
            take(by_id[row.id], row)
            continue
        cands = []
        if row.prompt is not None:
            cands = exact.get(row.prompt) or loose.get(_norm(row.prompt)) or []
        if not cands:
            if row.prompt is not None:
                unpaired.append(row)
            else:
                ignored.add(row)
        else:  # examples sharing one prompt take rows in order; one row too many is a duplicate
            take(free(cands) if free(cands) is not None else cands[-1], row)
    near = _NearMatcher(examples)
    for row in unpaired:
        i, ratio = near.closest(row, taken)
        if i is None:
            ignored.add(row)
            continue
        take(i, row)
        warnings.append(f"{source}, row {row.row}: prompt paired with example {examples[i].id!r} by "
                        f"near match (similarity {ratio:.3f}); check that it answers that prompt")
    if near.exhausted:
        warnings.append(f"{source}: near matching of prompts stopped after comparing "
                        f"{FUZZY_MAX_WORK:,} characters; rows whose prompt is not exactly an example's "
                        "were left unpaired from there on: give each row its example's id")
    if ignored.count:
        first = ignored.first
        what = f"id {first.id!r}" if first.prompt is None else f"prompt {first.prompt[:60]!r}"
        more = f" and {ignored.count - 1} more" if ignored.count > 1 else ""
        warnings.append(f"{source}: {ignored.count} row(s) match no example and are ignored: row "
                        f"{first.row} ({what}){more}")
    return Pairing(out, warnings)


class _Ignored:
    """The rows that pair with no example: how many, and the first in the file (the one the
    warning names), without holding the others."""

    def __init__(self) -> None:
        self.count, self.first = 0, None

    def add(self, row: ResponseRow) -> None:
        self.count += 1
        if self.first is None or row.row < self.first.row:
            self.first = row


class _NearMatcher:
    """Finds the unpaired example whose prompt is nearly identical to a row's, within a budget of
    `FUZZY_MAX_WORK` characters compared over all rows.

    Each example prompt's `SequenceMatcher` is built once (it indexes its second sequence) and
    compared with each row's prompt: the length and character-count bounds first (cost: the
    row's length), the full similarity only where both pass (cost: the product of the lengths).
    Once the budget is spent, `closest` finds nothing and `exhausted` is set.
    """

    def __init__(self, examples: Sequence[Example]):
        self.examples = examples
        self.matchers: dict[int, list[difflib.SequenceMatcher]] = {}
        self.work = 0
        self.exhausted = False

    def _charge(self, cost: int) -> bool:
        """Spend `cost` from the budget; False (and `exhausted`) when it does not fit."""
        if self.work + cost > FUZZY_MAX_WORK:
            self.exhausted = True
            return False
        self.work += cost
        return True

    def _matchers(self, i: int) -> list[difflib.SequenceMatcher]:
        if i not in self.matchers:
            prompts = dict.fromkeys(_norm(p) for p in _example_prompts(self.examples[i]))
            self.matchers[i] = [difflib.SequenceMatcher(None, "", p, autojunk=False) for p in prompts]
        return self.matchers[i]

    def _similarity(self, target: str, i: int) -> float:
        best = 0.0
        for sm in self._matchers(i):
            if self.exhausted or not self._charge(len(target) + len(sm.b)):
                return 0.0
            sm.set_seq1(target)
            if sm.real_quick_ratio() >= FUZZY_MIN_RATIO and sm.quick_ratio() >= FUZZY_MIN_RATIO:
                if not self._charge(len(target) * len(sm.b)):
                    return 0.0
                best = max(best, sm.ratio())
        return best

    def closest(self, row: ResponseRow, taken: dict[int, int]) -> tuple[int | None, float]:
        """(example index, similarity) of the one nearly identical unpaired prompt, else (None, 0)."""
        if row.prompt is None or self.exhausted:
            return None, 0.0
        target = _norm(row.prompt)
        scored = []
        for i in range(len(self.examples)):
            if i in taken:
                continue
            best = self._similarity(target, i)
            if self.exhausted:
                return None, 0.0
            if best >= FUZZY_MIN_RATIO:
                scored.append((best, i))
        scored.sort(reverse=True)
        if not scored or (len(scored) > 1 and scored[1][0] >= scored[0][0] - 0.01):
            return None, 0.0  # none, or ambiguous
        return scored[0][1], scored[0][0]


def resolve_missing(examples: Sequence[Example], responses: list[str | None], missing: Missing,
                    source: str) -> tuple[list[Example], list[str], list[str]]:
    """Apply the missing-response policy: "error" raises naming the examples, "zero" scores them
    as empty responses, "skip" leaves them out. Returns (examples, responses, warnings)."""
    absent = [ex.id for ex, r in zip(examples, responses) if r is None]
    if not absent:
        return list(examples), [r for r in responses if r is not None], []
    shown = ", ".join(repr(a) for a in absent[:5]) + (" ..." if len(absent) > 5 else "")
    if missing == "error":
        raise ResponsesError(
            f"{source}: no response for {len(absent)} of {len(examples)} examples ({shown}); "
            "add them, or pass --missing zero (score them as empty) or --missing skip (leave them out)")
    if missing == "zero":
        return (list(examples), [r if r is not None else "" for r in responses],
                [f"{len(absent)} examples have no response and score as empty: {shown}"])
    if missing == "skip":
        kept = [(ex, r) for ex, r in zip(examples, responses) if r is not None]
        return ([e for e, _ in kept], [r for _, r in kept],
                [f"{len(absent)} examples have no response and are left out: {shown}"])
    raise ValueError(f"unknown missing-response policy {missing!r}; use error, zero or skip")
