"""Credit records: one completion with its rewards, their credit, and where each one lands.

Two sources give the same `CreditRecord`:

- `read_run(run_dir)`: the completions a training run logged (`<run>/completions.jsonl`,
  format in mrtpo.harness.run.completions), one step at a time;
- `compute(...)` / `fresh(...)`: responses scored and replayed now, with a model, through the
  same functions the trainer uses (task verifiers, mrtpo.contexts, mrtpo.replay,
  mrtpo.advantages). Each example's responses form one group: credit comes from the
  estimator over that group (GDPO by default), so a response is credited relative to the
  others of its prompt. Without responses from the user, each example gets the task's
  reference answer and a corrupted copy of it (mrtpo.blocks.samples), which is the smallest
  group in which every reward can disagree.

Fresh responses are tokenised as the policy would have written them: the text's tokens
without special tokens, then the tokenizer's EOS (the end of the assistant turn), since a
sampled response ends with the stop token too and constraints on the ending point at it.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mrtpo import textio
from mrtpo.tasks.files import lines as text_lines
from mrtpo.tasks.files import read_text
from mrtpo.textio import brief

COMPLETIONS = "completions.jsonl"


class CreditError(ValueError):
    """A run directory, completions log or responses file that cannot be shown; says what to do."""


@dataclass
class CreditRecord:
    """One completion: its tokens, each reward's verdict and block, credit, distances, weights."""

    example_id: str
    tokens: list[str]  # each response id decoded on its own
    response_ids: list[int]
    reward_names: list[str]  # K names
    scores: list[float]  # [K]
    credit: list[float]  # [K] each reward's share of the response's advantage
    blocks: list[str]  # [K] Z_k ("" = no information)
    advantage: float
    offset: float = 0.0
    feedback: list[str] = field(default_factory=list)  # [K]
    distances: list[list[float]] | None = None  # [K][T] JS distance; None: MRTPO off in the run
    token_weights: list[list[float]] | None = None  # [K][T] weights (mean 1 over the tokens)
    token_advantages: list[float] | None = None  # [T]
    prompt: str = ""
    response: str = ""
    step: int | None = None
    group: int | None = None
    sample: int | None = None
    source: str = ""
    name: str = ""  # what the response is ("reference", "corrupted", "response 1", ...)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def label(self) -> str:
        """A one-line heading: example, where it came from, step and sample."""
        parts = [f"example {self.example_id}"]
        if self.name:
            parts.append(self.name)
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.group is not None and self.sample is not None:
            parts.append(f"group {self.group} sample {self.sample}")
        parts.append(f"advantage {self.advantage:+.3f}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunView:
    """The records of one logged step of a run, and what is known about the run."""

    run_dir: Path
    records: list[CreditRecord]
    step: int
    steps: list[int]  # every step the log holds
    task: str | None = None
    model: str | None = None
    mrtpo: bool = True


# ------------------------------------------------------------------------------ run logs
_REQUIRED = ("example_id", "response_ids", "tokens", "reward_names", "scores", "credit", "blocks",
             "advantage")


def read_run(run_dir: str | Path, step: int | None = None, limit: int | None = None) -> RunView:
    """The completions of one logged step (default: the last one), at most `limit` of them."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CreditError(f"{run_dir}: no such run directory")
    path = run_dir / COMPLETIONS
    if not path.is_file():
        raise CreditError(f"{run_dir} has no {COMPLETIONS}: the run logged no completions. Train with "
                          "--log-completions-every N (N > 0) to log every completion of every Nth step.")
    config = _read_config(run_dir)
    # a long run's log is large: find each line's step from its opening (the trainer writes
    # `{"step": N, ...`) and parse in full only the lines of the step shown
    lines: list[tuple[int, int, str]] = []  # (line number, step, text)
    for n, line in text_lines(read_text(path, CreditError, "completions log (JSONL)")):
        m = _STEP.match(line)
        lines.append((n, int(m.group(1)) if m else _parse(path, n, line).get("step", 0), line))
    if not lines:
        raise CreditError(f"{path} is empty: no step has been logged yet")
    steps = sorted({s for _, s, _ in lines})
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise CreditError(f"step {step} was not logged in {path}; logged steps: {_ranges(steps)}")
    picked = [(n, text) for n, s, text in lines if s == chosen]
    if limit is not None:
        picked = picked[:limit]
    records = [from_log_row(_parse(path, n, text), f"{path}, line {n}") for n, text in picked]
    return RunView(run_dir, records, chosen, steps, task=config.get("task"), model=config.get("model"),
                   mrtpo=all(r.distances is not None for r in records))


_STEP = re.compile(r'\s*\{"step":\s*(\d+)\s*,')


def _parse(path: Path, n: int, line: str) -> dict[str, Any]:
    try:
        row = textio.loads(line)
    except json.JSONDecodeError as exc:
        raise CreditError(f"{path}, line {n}: not valid JSON ({exc}); a crashed run may have left a "
                          "partial last line: delete it, or resume the run to rewrite it") from None
    if not isinstance(row, dict):
        raise CreditError(f"{path}, line {n}: expected a JSON object, got {type(row).__name__}")
    if not isinstance(row.get("step", 0), int):
        raise CreditError(f"{path}, line {n}: field 'step' must be an integer, got {row['step']!r}")
    return row


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


#: each field of a completions-log line: what it must be, in words, and the check
_FIELD_TYPES: dict[str, tuple[str, Any]] = {
    "example_id": ("text or a number", lambda v: isinstance(v, (str, int)) and not isinstance(v, bool)),
    "tokens": ("a list of texts", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "response_ids": ("a list of token ids", lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)),
    "reward_names": ("a list of texts", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "scores": ("a list of numbers (or null)", lambda v: isinstance(v, list) and all(x is None or _is_number(x) for x in v)),
    "credit": ("a list of numbers", lambda v: isinstance(v, list) and all(_is_number(x) for x in v)),
    "blocks": ("a list of texts", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "feedback": ("a list of texts, or null", lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))),
    "advantage": ("a number", _is_number),
    "offset": ("a number, or null", lambda v: v is None or _is_number(v)),
    "distances": ("a list of lists of numbers, or null",
                  lambda v: v is None or (isinstance(v, list) and all(isinstance(r, list) and all(x is None or _is_number(x) for x in r) for r in v))),
    "token_weights": ("a list of lists of numbers, or null",
                      lambda v: v is None or (isinstance(v, list) and all(isinstance(r, list) and all(x is None or _is_number(x) for x in r) for r in v))),
    "token_advantages": ("a list of numbers, or null", lambda v: v is None or (isinstance(v, list) and all(x is None or _is_number(x) for x in v))),
    "prompt": ("text", lambda v: isinstance(v, str)),
    "response": ("text", lambda v: isinstance(v, str)),
}


def from_log_row(row: dict[str, Any], where: str) -> CreditRecord:
    """A completions-log line as a record; a missing, odd-typed or inconsistent field raises,
    naming it (a text where a list belongs would otherwise be shown character by character)."""
    for key in _REQUIRED:
        if key not in row:
            raise CreditError(f"{where}: field {key!r} is missing; this is not a completions log "
                              "written by `mrtpo train` (see mrtpo/harness/run/completions.py)")
    for key, (what, ok) in _FIELD_TYPES.items():
        if key in row and not ok(row[key]):
            raise CreditError(f"{where}: field {key!r} must be {what}, got {brief(row[key], 80)}; this line "
                              "was not written by `mrtpo train` as it is (see mrtpo/harness/run/completions.py)")
    t = len(row["response_ids"])
    k = len(row["reward_names"])
    if len(row["tokens"]) != t:
        raise CreditError(f"{where}: field 'tokens' has {len(row['tokens'])} entries for {t} response ids")
    for key in ("scores", "credit", "blocks") + (("feedback",) if row.get("feedback") is not None else ()):
        if len(row[key]) != k:
            raise CreditError(f"{where}: field {key!r} has {len(row[key])} entries for {k} rewards")
    for key in ("distances", "token_weights"):
        value = row.get(key)
        if value is None:
            continue
        if len(value) != k or any(len(v) != t for v in value):
            raise CreditError(f"{where}: field {key!r} must be one list of {t} numbers per reward ({k})")
    scores = [math.nan if s is None else float(s) for s in row["scores"]]
    return CreditRecord(
        example_id=str(row["example_id"]), tokens=[str(x) for x in row["tokens"]],
        response_ids=[int(x) for x in row["response_ids"]], reward_names=[str(x) for x in row["reward_names"]],
        scores=scores, credit=[float(x) for x in row["credit"]], blocks=[str(x) for x in row["blocks"]],
        advantage=float(row["advantage"]), offset=float(row.get("offset") or 0.0),
        feedback=[str(x) for x in row.get("feedback") or [""] * k],
        distances=row.get("distances"), token_weights=row.get("token_weights"),
        token_advantages=row.get("token_advantages"), prompt=str(row.get("prompt", "")),
        response=str(row.get("response", "")), step=row.get("step"), group=row.get("group"),
        sample=row.get("sample"), source=str(row.get("source", "")))


def _read_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.yaml"
    if not path.is_file():  # a TRL run (mrtpo.integrations.trl) writes its task here
        path = run_dir / "mrtpo_task.yaml"
    if not path.is_file():
        return {}
    import yaml

    from mrtpo.yamlio import YAMLRefused, read_yaml_file

    try:
        data = read_yaml_file(path)
    except (yaml.YAMLError, YAMLRefused, OSError):
        return {}  # the config only labels the view; a damaged (or hostile) one should not hide the log
    return data if isinstance(data, dict) else {}


def _ranges(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:20]))
    return shown + (f" ... ({len(steps)} in all)" if len(steps) > 20 else "")


# ------------------------------------------------------------------------------ fresh
NamedResponse = tuple[str, str]  # (name, response text)


def responses_for(task, examples, responses_path: str | Path | None) -> dict[str, list[NamedResponse]]:
    """Each example's responses: from the file (JSONL rows {"id", "response" | "responses"}), or
    the task's reference and a corrupted copy. Examples the file does not answer are left out."""
    from mrtpo.blocks.samples import ResponsesFileError, read_responses, sample_responses

    if responses_path is None:
        return {ex.id: sample_responses(task, ex) for ex in examples}
    try:
        return read_responses(responses_path, list(examples))
    except ResponsesFileError as exc:
        raise CreditError(str(exc)) from None


def response_ids(tokenizer, text: str) -> list[int]:
    """A response's token ids as the policy would have sampled them: text, then EOS."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if tokenizer.eos_token_id is not None:
        ids = list(ids) + [int(tokenizer.eos_token_id)]
    return [int(t) for t in ids]


def compute(task, examples, responses: dict[str, list[NamedResponse]], model, tokenizer,
            estimator: str = "gdpo", temperature: float = 1.0, lam: float = 1.0,
            on_progress=None, chunk: int = 16) -> list[CreditRecord]:
    """Score, replay and credit each example's responses (one group per example) -> records.

    The steps are the trainer's: `task.score` for the verdicts, `build_item` for the blocks and
    contexts, `replay.replay_onto_columns` for q [N, K, T], `advantages.estimate` per group for credit,
    `token_weights` and `place` for where it lands. The replay runs `chunk` responses at a
    time and calls `on_progress(done, total)` after each (a progress display; q is the same).
    """
    import torch

    from mrtpo.advantages import estimate, place, token_weights
    from mrtpo.contexts import build_item, model_positions
    from mrtpo.replay import replay_onto_columns
    from mrtpo.tasks.contract import checked_score

    rows: list[tuple[int, Any, str, str, list[int], list]] = []  # (group, example, name, text, ids, verdicts)
    for g, ex in enumerate(e for e in examples if responses.get(e.id)):
        for name, text in responses[ex.id]:
            verdicts = checked_score(task, ex, text)  # the contract, as in training
            rows.append((g, ex, name, text, response_ids(tokenizer, text), verdicts))
    if not rows:
        return []
    items = [build_item(task, tokenizer, ex, ids, v, model_positions(model)) for _, ex, _, _, ids, v in rows]
    k_max = max(it.num_rewards for it in items)
    t_max = max(1, max(len(r[4]) for r in rows))
    q = replay_onto_columns(model, items, [range(it.num_rewards) for it in items], (len(items), k_max, t_max),
                            temperature=temperature, chunk=chunk, on_progress=on_progress)  # [N, K_max, T]
    lengths = torch.tensor([len(r[4]) for r in rows])  # [N]
    mask = torch.arange(q.shape[-1]).unsqueeze(0) < lengths.unsqueeze(1)  # [N, T]

    out: list[CreditRecord] = []
    n = 0
    while n < len(rows):
        end = n
        while end < len(rows) and rows[end][0] == rows[n][0]:
            end += 1
        sel = slice(n, end)
        k = items[n].num_rewards
        scores = torch.tensor([[v.score for v in r[5]] for r in rows[sel]], dtype=torch.float32)  # [G, K]
        weights = [r.weight for r in task.rewards(rows[n][1])]
        credit = estimate(scores, end - n, estimator, weights=weights)
        q_g, m_g = q[sel, :k], mask[sel]  # [G, K, T], [G, T]
        w_g = token_weights(q_g, m_g, lam)  # [G, K, T]
        a_g = place(credit, q_g, m_g, lam)  # [G, T]
        for j, (_, ex, name, text, ids, verdicts) in enumerate(rows[sel]):
            t = len(ids)
            out.append(CreditRecord(
                example_id=ex.id, tokens=[tokenizer.decode([i]) for i in ids], response_ids=ids,
                reward_names=list(items[n + j].reward_names), scores=[float(v.score) for v in verdicts],
                credit=credit.per_reward[j].tolist(), blocks=list(items[n + j].blocks),
                advantage=float(credit.total[j]), offset=float(credit.offset[j]),
                feedback=[v.feedback for v in verdicts],
                distances=q_g[j, :, :t].tolist(), token_weights=w_g[j, :, :t].tolist(),
                token_advantages=a_g[j, :t].tolist(), prompt=_prompt_text(tokenizer, task, ex),
                response=text, group=rows[n][0], sample=j, source=ex.source, name=name))
        n = end
    return out


def fresh(task, examples, model_path: str, responses_path: str | Path | None = None,
          estimator: str = "gdpo", temperature: float = 1.0, device: str = "auto",
          dtype: str = "auto", on_progress=None) -> list[CreditRecord]:
    """Load the model at `model_path` (a directory, a hub id, a built-in policy's name, or a
    training run / checkpoint / adapter directory) and
    `compute` the records of `examples` with the given responses (or reference + corrupted)."""
    from mrtpo.harness.run.trained import load_frozen_policy

    responses = responses_for(task, examples, responses_path)
    policy = load_frozen_policy(model_path, device=device, dtype=dtype)  # also a run dir or adapter
    return compute(task, examples, responses, policy.model, policy.tokenizer, estimator, temperature,
                   on_progress=on_progress)


def _prompt_text(tokenizer, task, example) -> str:
    from mrtpo.chat import render_chat

    out = render_chat(tokenizer, task.messages(example), add_generation_prompt=True, tokenize=False)
    return out if isinstance(out, str) else str(out)
