"""The `instruct` task: instruction following with one 0/1 reward per verifiable constraint.

A row is a base request plus constraints (IFEval / IFBench / IFTrain instruction ids with kwargs;
`mrtpo.verifiers.ifeval.supported_ids()` lists them, by source). P0 is
the prompt as the policy sees it: the base request with each constraint's sentence in it. Each
constraint is one reward, named by its instruction id ("keywords:existence"; a second use of the
same id in one prompt is "keywords:existence#2"), scoring 1 when the response follows it
(IFEval's strict check) and 0 otherwise. Its block Z_k is the constraint's own sentence exactly
as it appears in P0, so blocks are placed "in_prompt": P_all is P0 and P_without_k is
`InstructTask.prompt_without(example, k)`, P0 with that sentence removed and the seam's
whitespace tidied. A constraint whose sentence cannot be found (woven into hand-written prose,
as in IFEval) has the block "" and is still scored.

Readers (`load`), chosen from the first row's keys:
- IFEval `input_data.jsonl` and IFBench's test JSONL: `key, prompt, instruction_id_list, kwargs`
  (kwargs may carry every key with None for unused ones, integers as floats);
- IF-RLVR training rows: `messages` plus `ground_truth` (a list of `{instruction_id: [...],
  kwargs: [...]}`, possibly as a Python/JSON string), with IFEval's and IFTrain's ids (open-instruct's
  IFEvalG registry, all supported; data_cards/if-rlvr.md);
- the project's own JSONL: `prompt` or `base`, `constraints: [{id, kwargs, sentence}]`,
  optional `reference` and `system` (see data_cards/ and the bundled sample).
A local `.jsonl`/`.json`/`.parquet` file, or a Hugging Face dataset id where the hub is reachable.
"""
from __future__ import annotations

import ast
import json
import logging
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Optional

from mrtpo import textio
from mrtpo.formats import TextFormat, split_think
from mrtpo.tasks.base import Example, ProbeEdit, Reward, Task, Verdict
from mrtpo.tasks.files import UniqueIds, lines, read_json_array, read_lines, read_text, row_id
from mrtpo.tasks.instruct_data import GENERATED_ROWS, IFEVAL, PROMPT_SETS, SAMPLE, fits, generated_rows
from mrtpo.verifiers.ifeval import (
    Evaluation,
    describe,
    normalize_kwargs,
    supported_ids,
    verify,
)
from mrtpo.verifiers.ifeval.split import find_sentence, remove_sentence

log = logging.getLogger(__name__)

LAYOUTS = ("mrtpo", "ifeval", "if-rlvr")


class DataError(ValueError):
    """A dataset row that cannot be read: names the file, the row and the field."""


class UnsupportedInstructions(DataError):
    """The data uses instruction ids that have no checker here (never scored silently)."""

    def __init__(self, message: str, ids: list[str]):
        super().__init__(message)
        self.ids = list(ids)


def compose_prompt(base: str, sentences: Iterable[str]) -> str:
    """P0 for a base request and constraint sentences: the base, a blank line, the sentences."""
    tail = " ".join(s.strip() for s in sentences if s and s.strip())
    base = base.strip()
    return f"{base}\n\n{tail}" if base and tail else (base or tail)


class InstructTask(Task):
    """Instruction following (IFEval/IFBench/IFTrain constraints); one reward and one block per constraint.

    Args:
        think: ask for (and require) a leading `<think>...</think>`; constraints are checked on
            the text after it either way.
        loose: score with IFEval's loose mode instead of strict (evaluation only; training uses
            strict, the default).
        match: how constraint sentences are located in prompts that do not state them: "close"
            (the template verbatim, else a close paraphrase in the prompt's own words),
            "template" (verbatim only) or "none".
        append_missing: for constraints whose sentence is not found, append the checker's own
            description to P0 (training on IFEval-style rows); off by default so benchmark
            prompts stay as published.
        skip_unsupported: drop rows that use instruction ids with no checker (with a warning
            that counts them) instead of refusing to load.
        prompts: the prompt set `load()` reads without a path: "sample" (the bundled 37 rows),
            "generated" (`generated_rows` seeded training prompts from `instruct_data`, drawn
            with `prompts_seed`) or "ifeval" (IFEval's 541 prompts, shipped; also read by the
            path "ifeval" when no such file exists, e.g. `--eval-data ifeval`).
        fit_tokens: keep only the rows whose every constraint can be met inside this many new
            tokens (`instruct_data.fits`; a log line counts the rows left out); None keeps all.
    """

    name = "instruct"
    placement = "in_prompt"
    description = ("Instruction following: one 0/1 reward per IFEval/IFBench/IFTrain constraint; its block is the "
                   "constraint's own sentence in the prompt.")
    reward_names = ("<instruction_id> (one per constraint)",)

    def __init__(self, think: bool = False, loose: bool = False, match: str = "close",
                 append_missing: bool = False, skip_unsupported: bool = False,
                 prompts: Literal["sample", "generated", "ifeval"] = "sample", fit_tokens: Optional[int] = None,
                 generated: int = GENERATED_ROWS, prompts_seed: int = 0):
        if match not in ("close", "template", "none"):
            raise ValueError(f"match must be 'close', 'template' or 'none', got {match!r}")
        if prompts not in PROMPT_SETS:
            raise ValueError(f"prompts={prompts!r}: use one of {', '.join(PROMPT_SETS)}")
        if fit_tokens is not None and fit_tokens < 1:
            raise ValueError(f"fit_tokens must be a positive number of tokens, got {fit_tokens}")
        if generated < 1:
            raise ValueError(f"generated must be >= 1 (rows of -o prompts=generated), got {generated}")
        self.prompts, self.fit_tokens = prompts, fit_tokens
        self.generated, self.prompts_seed = generated, prompts_seed
        self.format = TextFormat(think=think)
        self.loose = loose
        self.match = match
        self.append_missing = append_missing
        self.skip_unsupported = skip_unsupported

    # --- loading ------------------------------------------------------------------------------
    def iter_examples(self, path: str | None = None, split: str | None = None) -> Iterator[Example]:
        """A dataset's examples, one at a time (`load` is their list); the layout is detected
        from the rows, and `path=None` reads the bundled sample. Rows with instruction ids that
        have no checker are refused (or, with `skip_unsupported`, dropped) once all are read."""
        rows, source = self._rows(path, split)
        ids = UniqueIds(lambda: ((ex.id, ex.source) for ex in
                                 self._parsed(self._rows(path, split)[0], Counter(), {})))
        unsupported: Counter[str] = Counter()
        first_row: dict[str, str] = {}
        given = too_long = 0
        for ex in self._parsed(rows, unsupported, first_row):
            first = ids.earlier(ex.id, ex.source)
            if first is not None:
                raise DataError(f"{ex.source}: id {ex.id!r} is already the id of {first}; give each "
                                "row its own id (responses and results are matched to rows by id)")
            if self.fit_tokens is not None and not fits(ex.data["constraints"], self.fit_tokens):
                too_long += 1
                continue
            yield ex
            given += 1
        if too_long:
            log.info("%s: left out %d rows whose constraints need more than fit_tokens=%d new tokens",
                     source, too_long, self.fit_tokens)
        if unsupported:
            listing = ", ".join(f"{i} ({n} rows, first at {first_row[i]})" for i, n in unsupported.most_common())
            msg = (f"{source}: instruction ids with no checker here: {listing}. Supported ids "
                   f"({len(supported_ids())}): {', '.join(supported_ids())}.")
            if not self.skip_unsupported:
                raise UnsupportedInstructions(msg + " Pass skip_unsupported=True to the task to drop those rows "
                                              "(on the command line: -o skip_unsupported=true).",
                                              sorted(unsupported))
            log.warning("%s Dropped %d rows.", msg, sum(unsupported.values()))
        if not given:
            raise DataError(f"{source}: no usable rows")

    def _rows(self, path: str | None, split: str | None) -> tuple[Iterator[tuple[str, Any]], str]:
        """(location, row) of each row of `path` (for None, the prompt set `prompts`), and the
        source's name. The path "ifeval", when no such file exists, is the shipped IFEval copy."""
        prompts = self.prompts
        if path == "ifeval" and not Path(path).exists():
            path, prompts = None, "ifeval"
        if path is not None:
            return _read_rows(path, split)
        if prompts == "generated":
            source = f"generated prompts (seed {self.prompts_seed}, {self.generated} rows)"
            rows = generated_rows(self.generated, self.prompts_seed)
            return ((f"{source} row {i + 1}", r) for i, r in enumerate(rows)), source
        bundled = IFEVAL if prompts == "ifeval" else SAMPLE
        res = resources.files("mrtpo").joinpath(bundled)
        source = f"mrtpo/{bundled}"
        return _jsonl_rows(lines(res.read_text(encoding="utf-8")), source), source

    def _parsed(self, rows: Iterable[tuple[str, Any]], unsupported: Counter[str],
                first_row: dict[str, str]) -> Iterator[Example]:
        """The examples of `rows`, in order: a row whose instruction ids have no checker is left
        out, each such id counted in `unsupported` (its first row in `first_row`)."""
        layout = None
        for where, row in rows:
            if not isinstance(row, dict):
                raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
            layout = layout or _detect_layout(row, where)
            try:
                ex = self._example(row, layout, where)
            except UnsupportedInstructions as exc:
                for i in exc.ids:
                    unsupported[i] += 1
                    first_row.setdefault(i, where)
                continue
            yield ex

    def _example(self, row: dict, layout: str, where: str) -> Example:
        if layout == "mrtpo":
            return self._from_project(row, where)
        if layout == "ifeval":
            prompt = _field(row, "prompt", str, where)
            ids = _field(row, "instruction_id_list", list, where)
            kwargs = row.get("kwargs") or [{} for _ in ids]
            if not isinstance(kwargs, list) or len(kwargs) != len(ids):
                raise DataError(f"{where}: field 'kwargs' must be a list with one object per instruction id "
                                f"({len(ids)}), got {kwargs!r:.80}")
            key = row_id(row, ("key",), where, where, DataError)
            return self._build(key, prompt, None, list(zip(ids, kwargs)), [None] * len(ids), None, where, "ifeval")
        return self._from_rlvr(row, where)

    def _from_project(self, row: dict, where: str) -> Example:
        cons = _field(row, "constraints", list, where)
        pairs, given = [], []
        for j, c in enumerate(cons):
            if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                raise DataError(f"{where}: constraints[{j}] must be an object with a string 'id'")
            pairs.append((c["id"], c.get("kwargs") or {}))
            sent = c.get("sentence")
            if sent is not None and not isinstance(sent, str):
                raise DataError(f"{where}: constraints[{j}].sentence must be a string")
            given.append(sent)
        if isinstance(row.get("prompt"), str):
            prompt = row["prompt"]
            for j, s in enumerate(given):
                if s and s not in prompt:
                    raise DataError(f"{where}: constraints[{j}].sentence {s[:60]!r} is not part of 'prompt'; "
                                    "give the sentence exactly as the prompt states it, or omit it")
        elif isinstance(row.get("base"), str):
            self._check_ids(pairs, where)
            given = [s if s else describe(i, k) for (i, k), s in zip(pairs, given)]
            prompt = compose_prompt(row["base"], given)
        else:
            raise DataError(f"{where}: a row needs a string 'prompt' (the full P0) or 'base' (the request "
                            "without its constraint sentences)")
        key = row_id(row, ("id", "key"), where, where, DataError)
        system = row.get("system")
        reference = row.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise DataError(f"{where}: field 'reference' must be a string or null")
        return self._build(key, prompt, system, pairs, given, reference, where, "mrtpo")

    def _from_rlvr(self, row: dict, where: str) -> Example:
        msgs = _field(row, "messages", list, where)
        system, prompt, reference = None, None, None
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise DataError(f"{where}: every entry of 'messages' needs 'role' and 'content'")
            if m["role"] == "system":
                system = m["content"]
            elif m["role"] == "user":
                prompt, reference = m["content"], None
            elif m["role"] == "assistant" and prompt is not None:
                reference = m["content"]
        if not isinstance(prompt, str):
            raise DataError(f"{where}: 'messages' has no user message")
        pairs = _parse_ground_truth(row.get("ground_truth"), where)
        given: list[str | None] = [None] * len(pairs)
        text = row.get("constraint")
        if len(pairs) == 1 and isinstance(text, str) and text.strip() and text.strip() in prompt:
            given = [text.strip()]  # the row's own constraint text, verbatim in the prompt
        key = row_id(row, ("key", "id"), where, where, DataError)
        return self._build(key, prompt, system, pairs, given, reference, where, "if-rlvr")

    def _check_ids(self, pairs: list[tuple[str, Any]], where: str) -> None:
        known = set(supported_ids())
        bad = sorted({i for i, _ in pairs if i not in known})
        if bad:
            raise UnsupportedInstructions(f"{where}: unsupported instruction ids {bad}", bad)

    def _build(self, key: str, prompt: str, system: str | None, pairs: list[tuple[str, Any]],
               given: list[str | None], reference: str | None, where: str, layout: str) -> Example:
        self._check_ids(pairs, where)
        constraints, taken = [], []
        for j, ((iid, kwargs), sent) in enumerate(zip(pairs, given)):
            try:
                kw = normalize_kwargs(iid, kwargs)
            except ValueError as exc:
                raise DataError(f"{where}: kwargs[{j}] ({iid}): {exc}") from None
            how = "given" if sent else ""
            if not sent and self.match != "none":
                sent, how = find_sentence(prompt, iid, kw, taken)
                if how == "close" and self.match == "template":
                    sent, how = "", ""
            if sent:
                pos = prompt.find(sent)
                taken.append((pos, pos + len(sent)))
            constraints.append({"id": iid, "kwargs": kw, "sentence": sent or "", "match": how})
        if self.append_missing:
            missing = [c for c in constraints if not c["sentence"]]
            for c in missing:
                c["sentence"], c["match"] = describe(c["id"], c["kwargs"]), "generated"
            if missing:
                prompt = compose_prompt(prompt, [c["sentence"] for c in missing])
        data = {"constraints": constraints, "layout": layout, "key": key}
        if reference:
            data["reference"] = reference
        return Example(id=key, prompt=prompt, system=system, data=data, source=where)

    # --- rewards and blocks -------------------------------------------------------------------
    @staticmethod
    def reward_name_list(example: Example) -> list[str]:
        """Reward names for `example`: instruction ids, "#2", "#3"... on repeated ids."""
        seen: Counter[str] = Counter()
        names = []
        for c in example.data["constraints"]:
            seen[c["id"]] += 1
            names.append(c["id"] if seen[c["id"]] == 1 else f"{c['id']}#{seen[c['id']]}")
        return names

    def rewards(self, example: Example) -> list[Reward]:
        return [Reward(name=name, verify=self._verifier(k), block=self._blocker(k))
                for k, name in enumerate(self.reward_name_list(example))]

    def _verifier(self, k: int):
        def verify_constraint(example: Example, response: str) -> Verdict:
            c = example.data["constraints"][k]
            parsed = self.format.parse(response)
            if parsed.answer is None:
                return Verdict(0.0, parsed.error)
            _, body = split_think(response)
            ok, feedback = verify(c["id"], c["kwargs"], body, example.prompt, loose=self.loose)
            return Verdict(1.0 if ok else 0.0, feedback)

        return verify_constraint

    @staticmethod
    def _blocker(k: int):
        def block(example: Example, verdict: Verdict) -> str:
            return example.data["constraints"][k]["sentence"]

        return block

    @staticmethod
    def prompt_without(example: Example, k: int) -> str:
        """P0 with constraint k's sentence removed (whitespace at the seam tidied, nothing else
        changed); P0 itself when constraint k has no sentence."""
        return remove_sentence(example.prompt, example.data["constraints"][k]["sentence"])

    def reference(self, example: Example) -> str | None:
        ref = example.data.get("reference")
        return self.format.render(ref) if ref else None

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """Targeted edits of the reference for the credit probe (see mrtpo.tasks.probe_edits)."""
        from mrtpo.tasks.probe_edits import instruct_edits

        return instruct_edits(self, example)

    def evaluate(self, examples: list[Example], responses: list[str]) -> Evaluation:
        """IFEval's accuracies (prompt/instruction level, strict and loose) with the rewards'
        semantics: a non-letter in `letter_frequency` is counted as asked (IFEval prompts 1122 and
        1129), where the official code draws a random letter. `mrtpo.evaluation.instruct` reports
        the official figures."""
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples but {len(responses)} responses")
        ev = Evaluation()
        for ex, resp in zip(examples, responses):
            body = split_think(resp)[1] if isinstance(resp, str) else resp
            cons = ex.data["constraints"]
            ev.strict.append([verify(c["id"], c["kwargs"], body, ex.prompt)[0] for c in cons])
            ev.loose.append([verify(c["id"], c["kwargs"], body, ex.prompt, loose=True)[0] for c in cons])
        return ev


# --- row reading ------------------------------------------------------------------------------
def _field(row: dict, name: str, typ: type, where: str):
    if name not in row:
        raise DataError(f"{where}: missing field {name!r}")
    if not isinstance(row[name], typ):
        raise DataError(f"{where}: field {name!r} must be a {typ.__name__}, got {type(row[name]).__name__}")
    return row[name]


def _detect_layout(row: dict, where: str) -> str:
    if "constraints" in row:
        return "mrtpo"
    if "instruction_id_list" in row and "prompt" in row:
        return "ifeval"
    if "messages" in row and "ground_truth" in row:
        return "if-rlvr"
    raise DataError(
        f"{where}: unknown row layout (keys: {sorted(row)}). Expected the project's layout "
        "('prompt' or 'base', 'constraints'), IFEval/IFBench ('prompt', 'instruction_id_list', "
        "'kwargs') or IF-RLVR ('messages', 'ground_truth'); see data_cards/."
    )


def _parse_ground_truth(gt: Any, where: str) -> list[tuple[str, Any]]:
    """IF-RLVR's ground truth -> [(instruction_id, kwargs)]; it may be a (Python or JSON) string."""
    if isinstance(gt, str):
        try:
            gt = textio.loads(gt)
        except json.JSONDecodeError:
            try:
                gt = ast.literal_eval(gt)
            except (ValueError, SyntaxError) as exc:
                raise DataError(f"{where}: field 'ground_truth' is neither JSON nor a Python literal: {exc}") from None
    items = gt if isinstance(gt, list) else [gt]
    pairs: list[tuple[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or "instruction_id" not in item:
            raise DataError(f"{where}: field 'ground_truth' must hold objects with 'instruction_id' and "
                            f"'kwargs' lists, got {str(item)[:80]!r}")
        ids = item["instruction_id"]
        kws = item.get("kwargs")
        ids = [ids] if isinstance(ids, str) else ids
        kws = kws if isinstance(kws, list) else [kws] * len(ids)
        if len(kws) != len(ids):
            raise DataError(f"{where}: 'ground_truth' has {len(ids)} instruction ids but {len(kws)} kwargs")
        pairs += [(i, k or {}) for i, k in zip(ids, kws)]
    return pairs


def _jsonl_rows(numbered: Iterable[tuple[int, str]], source: str) -> Iterator[tuple[str, Any]]:
    """(location, JSON value) of each of the numbered lines (`read_lines` of a file, `lines` of a text)."""
    for n, line in numbered:
        try:
            yield f"{source}:{n}", textio.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{source}:{n}: not valid JSON ({exc}); each line must be one JSON object") from None


def _starts_with(p: Path, start: bytes) -> bool:
    """Whether the first bytes of `p` that are not whitespace (after a byte-order mark) are `start`."""
    try:
        with p.open("rb") as f:
            head = f.read(1 << 16).removeprefix(b"\xef\xbb\xbf").lstrip()
    except OSError:
        return False  # the reader that follows names the problem
    return head.startswith(start)


def _json_lines(p: Path) -> bool:
    """Whether `p` holds JSON lines: its first non-blank line is a JSON value on its own and
    another line follows (a pretty-printed object's first line is not a value on its own)."""
    head = read_lines(p, DataError, "JSON or JSONL file")
    try:
        first = [line for _, (_, line) in zip(range(2), head)]
        if len(first) < 2:
            return False
        textio.loads(first[0])
        return True
    except (json.JSONDecodeError, DataError):
        return False
    finally:
        head.close()


def _read_rows(path: str, split: str | None) -> tuple[Iterator[tuple[str, Any]], str]:
    p = Path(path)
    if p.is_file():
        if p.suffix == ".json":
            if _starts_with(p, b"["):  # one JSON array: read row by row
                return ((f"{p}[{i - 1}]", r) for i, r in read_json_array(p, DataError, "JSON file")), str(p)
            if _json_lines(p):  # JSON lines in a .json file
                return _jsonl_rows(read_lines(p, DataError, "JSONL file"), str(p)), str(p)
            text = read_text(p, DataError, "JSON or JSONL file")  # one object, with splits inside
            try:
                data = textio.loads(text)
            except json.JSONDecodeError:  # a .json file holding JSON lines
                return _jsonl_rows(lines(text), str(p)), str(p)
            if isinstance(data, dict):
                data = data.get(split or "train", data.get("data", [data]))
            return ((f"{p}[{i}]", r) for i, r in enumerate(data)), str(p)
        if p.suffix == ".parquet":
            import datasets

            ds = datasets.load_dataset("parquet", data_files=str(p), split="train")
            return ((f"{p}[{i}]", r) for i, r in enumerate(ds)), str(p)
        return _jsonl_rows(read_lines(p, DataError, "JSONL file"), str(p)), str(p)
    if p.exists():
        kind = "a directory" if p.is_dir() else "not a regular file (a device or pipe)"
        raise DataError(f"{path}: is {kind}; pass a .jsonl, .json or .parquet file")
    if path.count("/") == 1 and not path.startswith((".", "/")) and not p.suffix:  # "org/name"
        import datasets

        try:
            ds = datasets.load_dataset(path, split=split or "train")
        except Exception as exc:  # offline, or not a dataset id
            raise DataError(f"{path}: not a local file, and loading it from the Hugging Face hub failed: "
                            f"{type(exc).__name__}: {exc}") from exc
        return ((f"{path}[{i}]", r) for i, r in enumerate(ds)), path
    raise DataError(f"{path}: no such file")
