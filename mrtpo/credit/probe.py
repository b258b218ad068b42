"""The credit probe: does each reward's distance land on the tokens that reward is about?

For each example the task makes targeted edits of its reference (`Task.probe_edits`), each
about one reward: an argument value (toolcall `correct`), a misspelt column (text2sql
`executes`), an end phrase (an instruct constraint). Each edited response is scored and
replayed under the task's contexts exactly as the trainer does (`task.score`,
`contexts.build_item`, `replay.distances`), and for every reward k:

    mass share  = q[k] on the edited tokens / q[k] on all response tokens
    token share = edited tokens / response tokens
    lift        = mass share / token share      (1: the distance ignores the edit)

An edit's specificity is the lift of the reward it is about divided by the largest lift
among the other rewards: above 1 the reward's own distance goes to the edit more than any
other reward's does. The same figures are also given for the edit's first token alone (the
decision token): q at a position compares the contexts' predictions *of* that token, from
the prefix before it, so it is where the policy decides the edited aspect; the span's later
tokens follow an edited prefix the policy never produced, where every context's prediction
is off its training distribution and every reward's q tends to rise. Per edit kind the
figures are means over the examples (specificity of the means). A random-init model of the
same architecture and tokenizer is the control: its lifts are about 1, which says the probe
itself does not invent specificity.

A second control asks whether a distance reflects what a block says or only that the context
changed: each edited response is also replayed, for each reward k, under P_all with as many
tokens of unrelated text (`TEXT_CONTROL` repeated) as block k has, inserted right after
block k: a change of the prompt of the same size and place as removing the block, without
its information. The own reward's distance at the edit's first token over that control's
("own / text") is about 1 when removing the block moves the policy's prediction of the
edited aspect no more than text about nothing does; a policy that reads its blocks for their
content gives well above 1.

A reward whose block is empty for the edited response (nothing to tell, q = 0) has no lift
for that edit and is left out of the comparison.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from mrtpo.spans import span_token_mask

SPECIFIC = 2.0  # specificity at which an edit kind counts as reward-specific
SOME = 1.25  # ... and at which it counts as showing some specificity
# the text control: a sentence about nothing any task checks (repeated to a block's length, see `filler`)
TEXT_CONTROL = ("The city library opens at nine in the morning and closes at six in the evening on most "
                "weekdays of the year.")


@dataclass
class EditResult:
    """One edited response: which reward it is about and every reward's figures."""

    example_id: str
    kind: str  # the edit kind ("argument value", ...)
    reward: str  # the reward the edit is about
    response: str
    span_text: str
    span_tokens: int  # response tokens that overlap the edited characters
    num_tokens: int  # response tokens (the end-of-turn token included)
    mass_share: dict[str, float]  # reward -> share of its q mass on the edited tokens
    lift: dict[str, float]  # reward -> mass share / token share (NaN: empty block)
    scores: dict[str, float]  # reward -> score of the edited response
    decision_lift: dict[str, float] = field(default_factory=dict)  # the same on the first edited token
    decision_distance: dict[str, float] = field(default_factory=dict)  # reward -> q on the first edited token
    # reward -> on the first edited token, JS(P_all, P_all with as much unrelated text inserted
    # after the reward's block as the block has: the change of removing it, without its information)
    text_control: dict[str, float] = field(default_factory=dict)

    @property
    def token_share(self) -> float:
        return self.span_tokens / max(1, self.num_tokens)


@dataclass
class KindSummary:
    """One edit kind of one task: mean figures over its edits."""

    kind: str
    reward: str
    edits: int
    lift: dict[str, float]  # reward -> mean lift (NaN where no edit gave one)
    mass_share: dict[str, float]
    token_share: float
    decision_lift: dict[str, float] = field(default_factory=dict)  # mean lift on the first edited token
    decision_distance: dict[str, float] = field(default_factory=dict)  # mean q on the first edited token
    text_control: dict[str, float] = field(default_factory=dict)  # mean text control on the first edited token

    @property
    def own_over_text(self) -> float:
        """The own reward's mean distance on the first edited token over its text control's."""
        own = self.decision_distance.get(self.reward, math.nan)
        text = self.text_control.get(self.reward, math.nan)
        if math.isnan(own) or math.isnan(text) or text <= 0:
            return math.nan
        return own / text

    @property
    def own_lift(self) -> float:
        return self.lift.get(self.reward, math.nan)

    @property
    def best_other(self) -> tuple[str, float]:
        return _best_other(self.lift, self.reward)

    @property
    def specificity(self) -> float:
        return _specificity(self.lift, self.reward)

    @property
    def decision_specificity(self) -> float:
        """The specificity on the first edited token alone (the decision token)."""
        return _specificity(self.decision_lift, self.reward)


def _best_other(lift: dict[str, float], reward: str) -> tuple[str, float]:
    others = [(r, v) for r, v in lift.items() if r != reward and not math.isnan(v)]
    return max(others, key=lambda x: x[1]) if others else ("", math.nan)


def _specificity(lift: dict[str, float], reward: str) -> float:
    own, other = lift.get(reward, math.nan), _best_other(lift, reward)[1]
    if math.isnan(own) or math.isnan(other) or other <= 0:
        return math.nan
    return own / other


@dataclass
class ProbeReport:
    """The probe of one task with one model and its random-init control."""

    task: str
    model: str
    examples: int
    kinds: list[KindSummary]
    control: list[KindSummary] | None = None
    edits: list[EditResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # edits that did not lower their reward

    def verdict(self) -> str:
        """One line: is the model's credit reward-specific on this task?"""
        specs = [k.specificity for k in self.kinds if not math.isnan(k.specificity)]
        if not specs:
            return ("no verdict: no edit gave a lift for its reward and another "
                    "(the task has no probe edits, or every block was empty)")
        ok = sum(s >= SPECIFIC for s in specs)
        some = sum(s >= SOME for s in specs)
        ctrl = ""
        if self.control:
            c = [k.specificity for k in self.control if not math.isnan(k.specificity)]
            if c:
                ctrl = f"; random-init control: specificity {min(c):.2f}-{max(c):.2f}"
        if ok == len(specs):
            head = f"reward-specific: specificity >= {SPECIFIC:g} on all {len(specs)} edit kinds"
        elif ok:
            head = (f"partly reward-specific: specificity >= {SPECIFIC:g} on {ok} of {len(specs)} edit kinds, "
                    f">= {SOME:g} on {some}")
        elif some:
            head = (f"barely reward-specific: no edit kind reaches specificity {SPECIFIC:g}, "
                    f"{some} of {len(specs)} reach {SOME:g}")
        else:
            head = (f"not reward-specific: every edit kind below {SOME:g} (the distances follow uncertainty, "
                    "not the reward an edit is about)")
        return f"{head} (lowest {min(specs):.2f}, median {sorted(specs)[len(specs) // 2]:.2f}){ctrl}"

    def to_dict(self) -> dict[str, Any]:
        def kind(k: KindSummary) -> dict[str, Any]:
            return {**asdict(k), "own_lift": k.own_lift, "best_other": k.best_other[0],
                    "best_other_lift": k.best_other[1], "specificity": k.specificity,
                    "decision_specificity": k.decision_specificity, "own_over_text": k.own_over_text}

        return {"task": self.task, "model": self.model, "examples": self.examples,
                "verdict": self.verdict(), "kinds": [kind(k) for k in self.kinds],
                "control": [kind(k) for k in self.control] if self.control is not None else None,
                "edits": [{**asdict(e), "token_share": e.token_share} for e in self.edits],
                "skipped": list(self.skipped)}


# ------------------------------------------------------------------------------ the math
def first_token_mask(in_span: Sequence[bool]) -> list[bool]:
    """Only the first token of a span mask (the decision token)."""
    first = list(in_span).index(True) if any(in_span) else -1
    return [i == first for i in range(len(in_span))]


def edit_figures(q, in_span) -> tuple[list[float], list[float]]:
    """(mass share, lift) per reward for one response: `q` [K, T] distances over the
    response's tokens, `in_span` [T] bool. A reward with no mass (q = 0) gets NaN for both."""
    import torch

    q = torch.as_tensor(q, dtype=torch.float64)  # [K, T]
    m = torch.as_tensor(in_span, dtype=torch.bool)  # [T]
    token_share = float(m.sum()) / max(1, m.numel())
    total = q.sum(-1)  # [K]
    on = (q * m).sum(-1)  # [K]
    shares, lifts = [], []
    for k in range(q.shape[0]):
        if float(total[k]) <= 0 or token_share == 0:
            shares.append(math.nan)
            lifts.append(math.nan)
        else:
            share = float(on[k] / total[k])
            shares.append(share)
            lifts.append(share / token_share)
    return shares, lifts


def summarize(edits: Sequence[EditResult]) -> list[KindSummary]:
    """Mean figures per edit kind (in order of first appearance)."""
    order: dict[str, list[EditResult]] = {}
    for e in edits:
        order.setdefault(e.kind, []).append(e)
    out = []
    for kind, group in order.items():
        rewards = list(dict.fromkeys(r for e in group for r in e.lift))
        own = group[0].reward

        def mean(values):
            vals = [v for v in values if not math.isnan(v)]
            return sum(vals) / len(vals) if vals else math.nan

        # instruct constraints are named per example: compare the edit's own reward with
        # the others by role ("own" vs each other), so the own reward's name is per edit
        by_role = any(e.reward != own for e in group)

        def means(figure: str) -> dict[str, float]:
            per_edit = [getattr(e, figure) for e in group]
            if by_role:
                return {"(own)": mean(f.get(e.reward, math.nan) for e, f in zip(group, per_edit)),
                        "(best other)": mean(_best_other(f, e.reward)[1] for e, f in zip(group, per_edit))}
            return {r: mean(f.get(r, math.nan) for f in per_edit) for r in rewards}

        share = means("mass_share")
        distance, text = means("decision_distance"), means("text_control")
        if by_role:
            for figures in (share, distance, text):
                figures.pop("(best other)")
            own = "(own)"
        out.append(KindSummary(kind, own, len(group), means("lift"), share, mean(e.token_share for e in group),
                               means("decision_lift"), distance, text))
    return out


# ------------------------------------------------------------------------------ running it
def probe_edits(task, model, tokenizer, examples, temperature: float = 1.0) -> tuple[list[EditResult], list[str]]:
    """Replay every verified probe edit of `examples` -> (results, skipped edits with why).

    An edit is kept only when it scores its reward lower than the reference does (else it
    is not about that reward for this example)."""
    replayed = replay_edits(task, model, tokenizer, examples, temperature)
    return edit_results(replayed), replayed.skipped


@dataclass
class ReplayedEdits:
    """The verified edits and their replay: `rows` (example, edit, response ids, verdicts,
    scores, span mask), the replayed `items` (each with its text controls) and `q` [N, 2 K_max,
    T] (rewards, then text controls); `skipped` edits with why."""

    rows: list
    items: list
    q: Any
    skipped: list[str]


def replay_edits(task, model, tokenizer, examples, temperature: float = 1.0) -> ReplayedEdits:
    """The replay half of `probe_edits`: verify every probe edit, replay the kept ones once."""
    from mrtpo.contexts import build_item
    from mrtpo.credit.records import response_ids
    from mrtpo.replay import distances

    from mrtpo.tasks.contract import (USER_CODE_ERRORS, RewardError, checked_reference,
                                      checked_rewards, checked_score)

    rows, skipped = [], []
    for ex in examples:
        ref = checked_reference(task, ex)
        if ref is None:
            continue
        names = [r.name for r in checked_rewards(task, ex)]
        ref_scores = dict(zip(names, (v.score for v in checked_score(task, ex, ref))))
        try:
            edits = list(task.probe_edits(ex))
        except USER_CODE_ERRORS as exc:
            raise RewardError(f"task {task.name!r} on example {ex.id!r}: task.probe_edits(example) "
                              f"raised {type(exc).__name__}: {exc}") from exc
        for edit in edits:
            if edit.reward not in names:
                raise ValueError(f"task {task.name!r}: probe edit {edit.kind!r} of example {ex.id!r} names reward "
                                 f"{edit.reward!r}, which is not one of its rewards {names}")
            s, e = edit.span
            if not (0 <= s < e <= len(edit.response)):
                raise ValueError(f"task {task.name!r}: probe edit {edit.kind!r} of example {ex.id!r} has span "
                                 f"{edit.span} outside its response of {len(edit.response)} characters")
            verdicts = checked_score(task, ex, edit.response)
            scores = dict(zip(names, (v.score for v in verdicts)))
            if not scores[edit.reward] < ref_scores[edit.reward] - 1e-9:
                skipped.append(f"{ex.id}: {edit.kind} ({edit.reward} {scores[edit.reward]:g}, "
                               f"reference {ref_scores[edit.reward]:g})")
                continue
            ids = response_ids(tokenizer, edit.response)
            enc = tokenizer(edit.response, add_special_tokens=False, return_offsets_mapping=True)
            offsets = [tuple(o) for o in enc["offset_mapping"]]
            if list(enc["input_ids"]) != ids[: len(offsets)]:
                raise ValueError("the tokenizer's offsets do not match its encoding; the probe needs a fast tokenizer")
            offsets += [(len(edit.response), len(edit.response))] * (len(ids) - len(offsets))  # EOS
            rows.append((ex, edit, ids, verdicts, scores, span_token_mask(offsets, edit.span)))
    if not rows:
        return ReplayedEdits([], [], None, skipped)
    items = [with_text_control(task, tokenizer, ex, build_item(task, tokenizer, ex, ids, v))
             for ex, _, ids, v, _, _ in rows]
    q = distances(model, items, temperature=temperature).float().cpu()  # [N, 2 K_max, T]: rewards, text controls
    return ReplayedEdits(rows, items, q, skipped)


def edit_results(replayed: ReplayedEdits, weighting=None) -> list[EditResult]:
    """The figures of each replayed edit. `weighting` ([K, T] distances of one response ->
    [K, T] token weights; None: the distances, whose shares equal MRTPO's mean-1 weights')
    turns the distances into what the mass shares and lifts are taken of, so a weighting's
    specificity can be compared with the paper's on the same replay; the decision distances
    and the text controls stay distances."""
    rows, items, q = replayed.rows, replayed.items, replayed.q
    out = []
    for n, (ex, edit, ids, _, scores, mask) in enumerate(rows):
        k = items[n].num_rewards // 2  # then as many text controls
        names = items[n].reward_names[:k]
        w = q[n, :k, : len(ids)] if weighting is None else weighting(q[n, :k, : len(ids)])  # [k, T]
        shares, lifts = edit_figures(w, mask)
        first_mask = first_token_mask(mask)
        _, first = edit_figures(w, first_mask)
        t0 = first_mask.index(True) if any(first_mask) else None
        # rewards with a block (P_without_k != P_all) and a first token to read them on
        read = [t0 is not None and items[n].context_ids[1 + j] != items[n].context_ids[0] for j in range(k)]
        out.append(EditResult(
            example_id=ex.id, kind=edit.kind, reward=edit.reward, response=edit.response,
            span_text=edit.response[edit.span[0]: edit.span[1]], span_tokens=sum(mask), num_tokens=len(ids),
            mass_share=dict(zip(names, shares)), lift=dict(zip(names, lifts)), scores=scores,
            decision_lift=dict(zip(names, first)),
            decision_distance={r: float(q[n, j, t0]) if read[j] else math.nan for j, r in enumerate(names)},
            text_control={r: float(q[n, k + j, t0]) if read[j] else math.nan for j, r in enumerate(names)}))
    return out


def filler(tokenizer, n_tokens: int) -> str:
    """About `n_tokens` tokens of `TEXT_CONTROL` repeated (text about nothing any task checks)."""
    ids = tokenizer(TEXT_CONTROL, add_special_tokens=False)["input_ids"]
    reps = -(-max(1, n_tokens) // max(1, len(ids)))
    ids = tokenizer((" ".join([TEXT_CONTROL] * reps)), add_special_tokens=False)["input_ids"][:max(1, n_tokens)]
    return tokenizer.decode(ids).strip()


def text_control_messages(task, tokenizer, example, blocks: Sequence[str]) -> list:
    """Per reward k, P_all with as many tokens of unrelated text (`filler`) as block k has,
    inserted right after block k's text (None for an empty block): the same size of change
    to the prompt at the same place as removing block k, without its information. `blocks`:
    the response's block texts (`ReplayItem.blocks`)."""
    from mrtpo.contexts import context_messages

    p_all = context_messages(task, example, blocks)[0]
    last = max(i for i, m in enumerate(p_all) if m["role"] == "user")
    text = p_all[last]["content"]
    out = []
    for block in blocks:
        block = block.strip()
        if not block:
            out.append(None)
            continue
        extra = filler(tokenizer, len(tokenizer(block, add_special_tokens=False)["input_ids"]))
        at = text.find(block)  # where removing it cuts (remove_block/remove_sentence: the first)
        cut = at + len(block) if at >= 0 else len(text.rstrip())  # not verbatim there: at the end
        msgs = [dict(m) for m in p_all]
        msgs[last]["content"] = text[:cut] + "\n\n" + extra + text[cut:]
        out.append(msgs)
    return out


def with_text_control(task, tokenizer, example, item):
    """`item` with K more contexts after its P_without_k, `text_control_messages` (pseudo
    rewards named "(text control) <reward>"; an empty block's is P_all, q 0)."""
    from mrtpo.contexts import ReplayItem, render_ids

    controls = [item.context_ids[0] if m is None else render_ids(tokenizer, m)
                for m in text_control_messages(task, tokenizer, example, item.blocks)]
    return ReplayItem(item.context_ids + controls, item.response_ids,
                      item.reward_names + [f"(text control) {r}" for r in item.reward_names],
                      item.blocks + ["(text control)"] * len(controls))


def random_control(model, seed: int = 0):
    """A model of the same architecture with freshly initialised weights (the probe's control)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_config(model.config)
    return net.to(device=model.device, dtype=model.dtype).eval()


def run(task, examples, model, tokenizer, model_name: str = "", control: bool = True,
        temperature: float = 1.0, seed: int = 0) -> ProbeReport:
    """The probe of `task` on `examples` with a loaded model (and its random-init control)."""
    edits, skipped = probe_edits(task, model, tokenizer, examples, temperature)
    ctrl = None
    if control:
        ctrl_edits, _ = probe_edits(task, random_control(model, seed), tokenizer, examples, temperature)
        ctrl = summarize(ctrl_edits)
    return ProbeReport(task.name, model_name, len(examples), summarize(edits), ctrl, edits, skipped)
