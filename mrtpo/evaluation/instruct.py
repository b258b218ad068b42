"""Instruction-following metrics: IFEval's prompt- and instruction-level accuracy, strict and loose.

As IFEval (and IFBench, which reuses its scheme) defines them
(`evaluation_lib.py`; lm-eval's `ifeval/utils.py` agrees):
- an instruction is followed *strictly* when its checker passes on the response as written,
  *loosely* when it passes on any of eight variants (the response, without its first line,
  without its last line, without both, each also with every `*` removed);
- prompt-level accuracy: the share of prompts whose instructions are all followed;
- instruction-level accuracy: followed instructions over all instructions (a micro-average).
Names are lm-eval's: `prompt_level_strict_acc`, `inst_level_strict_acc`, `prompt_level_loose_acc`,
`inst_level_loose_acc`.

Each constraint is checked with `mrtpo.verifiers.ifeval.verify` on the text after a leading
`<think>...</think>` block (as the task's reward does; IFEval's responses have none, so this
changes nothing there) with the example's prompt, the way `InstructTask` scores it.
Per-instruction accuracies (`groups`) show which instruction types fail.

For IF-RLVR training rows (`layout` "if-rlvr"), two more figures sit beside IFEval's:
`mean_constraint_reward`, the per-prompt mean of this project's per-constraint rewards (strict;
each record's `rewards`), and `open_instruct_reward`, open-instruct's single reward (the
fraction of constraints followed by the answer after `remove_thinking_section`;
`mrtpo.verifiers.ifeval.open_instruct`), each averaged over prompts; each record carries its
`open_instruct_reward`. data_cards/if-rlvr.md says how the two relate.

One deliberate difference from the task's reward: IFEval's `letter_frequency` checker replaces
a `letter` that is not an ASCII letter (IFEval prompts 1122 and 1129 ask for `#` and `!`) by
a random letter, so the official outcome does not depend on the response. The reward counts
the character the prompt names (what the prompt asks); the benchmark metric scores such an
instruction as not followed, as the official published results have it, and the record says
why (`nondeterministic`), so the figures printed are the official evaluator's.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.report import EvalReport, mean
from mrtpo.formats import split_think
from mrtpo.tasks.base import Example, Task
from mrtpo.verifiers.ifeval import verify
from mrtpo.verifiers.ifeval.iftrain_checks import reference_is_random
from mrtpo.verifiers.ifeval.open_instruct import open_instruct_reward

OPTIONS: tuple[str, ...] = ()


def per_example(records: Sequence[dict]) -> dict[str, list[float]]:
    """The prompt-level accuracies on each example (`evaluate`'s records, in order), each metric
    the mean of its list; the instruction-level ones are means over instructions, not over
    examples, and have none."""
    return {"prompt_level_strict_acc": [float(r["follow_all_instructions"]) for r in records],
            "prompt_level_loose_acc": [float(r["follow_all_instructions_loose"]) for r in records]}


def evaluate(task: Task, examples: Sequence[Example], responses: Sequence[str]) -> EvalReport:
    records = []
    for ex, response in zip(examples, responses):
        cons = ex.data.get("constraints")
        if not isinstance(cons, list):
            raise ValueError(f"example {ex.id!r} ({ex.source}) has no 'constraints' list in its data; "
                             "instruct evaluation needs each constraint's id and kwargs")
        body = split_think(response)[1] if isinstance(response, str) else response
        strict, loose, feedback = [], [], []
        nondeterministic = []
        for c in cons:
            if _official_is_random(c["id"], c["kwargs"]):
                nondeterministic.append(c["id"])
                strict.append(False)
                loose.append(False)
                feedback.append(f"{c['id']}: the letter {c['kwargs'].get('letter')!r} is not an ASCII "
                                "letter; IFEval's checker draws a random letter here, scored as not followed"
                                if "letter" in c["kwargs"] else
                                f"{c['id']}: open-instruct's checker replaces a zero or negative kwarg "
                                f"({c['kwargs']}) by a random value, scored as not followed")
                continue
            ok, why = verify(c["id"], c["kwargs"], body, ex.prompt)
            ok_loose = ok or verify(c["id"], c["kwargs"], body, ex.prompt, loose=True)[0]
            strict.append(ok)
            loose.append(ok_loose)
            feedback.append(why)
        extra = {}
        if ex.data.get("layout") == "if-rlvr":  # the task's rewards (the value given, always) and open-instruct's
            extra["rewards"] = [float(verify(c["id"], c["kwargs"], body, ex.prompt)[0]) for c in cons]
            extra["open_instruct_reward"] = open_instruct_reward([(c["id"], c["kwargs"]) for c in cons], response)
        records.append({
            "id": ex.id, "prompt": ex.prompt, "response": response,
            "instruction_id_list": [c["id"] for c in cons],
            "follow_instruction_list": strict, "follow_instruction_list_loose": loose,
            "follow_all_instructions": all(strict), "follow_all_instructions_loose": all(loose),
            "feedback": feedback,
            **({"nondeterministic": nondeterministic} if nondeterministic else {}), **extra,
        })
    flat = [(iid, s, lo) for r in records for iid, s, lo in
            zip(r["instruction_id_list"], r["follow_instruction_list"], r["follow_instruction_list_loose"])]
    metrics = {
        "prompt_level_strict_acc": mean(r["follow_all_instructions"] for r in records),
        "inst_level_strict_acc": mean(s for _, s, _ in flat),
        "prompt_level_loose_acc": mean(r["follow_all_instructions_loose"] for r in records),
        "inst_level_loose_acc": mean(lo for _, _, lo in flat),
    }
    rlvr = [r for r in records if "open_instruct_reward" in r]
    if rlvr:
        metrics["mean_constraint_reward"] = mean(mean(r["rewards"]) for r in rlvr)
        metrics["open_instruct_reward"] = mean(r["open_instruct_reward"] for r in rlvr)
    groups = {}
    for iid in sorted({i for i, _, _ in flat}):
        hits = [(s, lo) for i, s, lo in flat if i == iid]
        groups[iid] = {"strict": mean(s for s, _ in hits), "loose": mean(lo for _, lo in hits), "n": len(hits)}
    return EvalReport("instruct", len(records), metrics, groups, records,
                      settings={"instructions": len(flat)})


def _official_is_random(instruction_id: str, kwargs: dict) -> bool:
    """True where the official checker ignores the response (it draws a random letter or value)."""
    return reference_is_random(instruction_id, kwargs)
