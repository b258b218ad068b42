"""The replay contexts of one sampled response: P_all and each P_without_k, as token ids.

Sampling always uses P0 (`task.messages(example)`). For the replay, each reward k writes its
block Z_k (text from the example and the response's verdict). With "append" placement the
non-empty blocks go after P0's user text, separated by a blank line like the rest of the
prompt, response-independent blocks first so that all responses of a prompt share the
longest possible token prefix; P_without_k drops block k. With "in_prompt" placement the
information is already in P0 (an instruction constraint): P_all is P0 and P_without_k is P0
with that sentence removed. A reward of an "append" task can follow the in-prompt rule on its
own (`Reward.in_prompt`, e.g. the tool schema that P0 lists): its block is not appended and
P_without_k is P_all with the block's text (line by line) removed from the prompt. An empty
block gives P_without_k == P_all, hence q = 0.

Every context is bounded (docs/writing-blocks.md, "How long a block may be"): a block built
from a verifier's feedback or the model's output can be any length, so an appended block
longer than MAX_BLOCK_CHARS is cut with a visible marker, and when the model's positions are
known (`build_item(..., max_positions=...)`) the appended blocks are cut further until
P_all plus the response fits. A prompt P0 that does not fit is a data problem; the rollout
refuses it (mrtpo.harness.rollout).

Contexts are rendered through the tokenizer's chat template with `add_generation_prompt=True`
and the response ids are carried exactly as sampled, never re-tokenised: decoding and
re-encoding a response can change its tokens, and the replay must score the tokens the
policy actually produced.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from mrtpo.tasks.base import Example, Task, Verdict
from mrtpo.tasks import runner
from mrtpo.tasks.contract import checked_block
from mrtpo.textio import scrub_all

Messages = list[dict[str, str]]
MAX_BLOCK_CHARS = 16_000  # an appended block longer than this is cut, with CUT_MARKER at the end
CUT_MARKER = " [... {n:,} more characters cut]"
SINGLE = "*every block*"  # the one "reward" of a single-contrast item: P_all against P_none
_BULLET = re.compile(r"\s*(?:[-*\u2022]|\d+[.)])")  # a list marker with nothing after it


@dataclass
class ReplayItem:
    """One sampled response with its K+1 contexts (token ids, ready for the replay)."""

    context_ids: list[list[int]]  # K+1 prompts: [0] = P_all, [1 + k] = P_without_k (reward k)
    response_ids: list[int]  # the sampled ids, exactly as sampled
    reward_names: list[str]  # K names, in task.rewards(example) order
    blocks: list[str]  # K block texts ("" = no information -> P_without_k == P_all -> q = 0)

    @property
    def num_rewards(self) -> int:
        return len(self.reward_names)


def block_texts(task: Task, example: Example, verdicts: Sequence[Verdict]) -> list[str]:
    """Each reward's block Z_k for this response, in `task.rewards(example)` order (the
    builders run by the task's runner, mrtpo.tasks.runner, when one is active)."""
    rewards = runner.rewards(task, example)
    if len(verdicts) != len(rewards):
        raise ValueError(f"{len(verdicts)} verdicts for {len(rewards)} rewards of task {task.name!r} "
                         f"(example {example.id!r}); pass task.score(example, response) unchanged")
    texts = [checked_block(task, reward, example, verdict) for reward, verdict in zip(rewards, verdicts)]
    return [cut_block(t) if _appended(task, r) else t for r, t in zip(rewards, texts)]


def _appended(task: Task, reward) -> bool:
    """Whether the reward's block is appended to P0 (and so may be cut): in-prompt blocks are
    text of P0 itself, which must be removable verbatim."""
    return task.placement == "append" and not reward.in_prompt


def cut_block(text: str, limit: int = MAX_BLOCK_CHARS) -> str:
    """`text` if it has at most `limit` characters, else its start with CUT_MARKER saying how
    much was cut (so the cut is visible in previews, logs and the replayed context)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(CUT_MARKER.format(n=len(text))))
    return text[:keep].rstrip() + CUT_MARKER.format(n=len(text) - keep)


def model_positions(model) -> int | None:
    """The longest sequence `model` attends over (its config's position count), or None."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _rewards_for(task: Task, example: Example, blocks: Sequence[str]) -> list:
    """The example's rewards, refusing a list of blocks that is not one per reward."""
    rewards = task.rewards(example)
    if len(blocks) != len(rewards):
        raise ValueError(f"{len(blocks)} blocks for {len(rewards)} rewards of task {task.name!r} "
                         f"(example {example.id!r})")
    return rewards


def context_messages(task: Task, example: Example, blocks: Sequence[str]) -> tuple[Messages, list[Messages]]:
    """(P_all messages, [P_without_k messages for each reward k]) for one response's blocks."""
    rewards = _rewards_for(task, example, blocks)
    p0 = task.messages(example)
    user = _last_user(p0, task, example)
    if task.placement == "append":
        late = [r.response_dependent for r in rewards]
        appended = [k for k in range(len(blocks)) if not rewards[k].in_prompt]
        order = [k for k in appended if not late[k]] + [k for k in appended if late[k]]

        def render(skip: int | None) -> Messages:
            parts = [blocks[k].strip() for k in order if k != skip and blocks[k].strip()]
            text = p0[user]["content"]
            if parts:
                text = "\n\n".join([text.rstrip()] + parts)
            return _with_user(p0, user, text)

        def without(k: int) -> Messages:
            if not rewards[k].in_prompt:
                return render(k)
            text = remove_block(p_all[user]["content"], blocks[k].strip(),
                                where=f"{example.source or example.id}", reward=rewards[k].name)
            return task.without_messages(example, rewards[k].name, _with_user(p_all, user, text))

        p_all = render(None)
        return p_all, [without(k) if blocks[k].strip() else p_all for k in range(len(blocks))]
    if task.placement == "in_prompt":
        without = []
        for k, block in enumerate(blocks):
            if not block.strip():
                without.append(p0)
                continue
            custom = getattr(task, "prompt_without", None)
            if custom is not None:
                out = custom(example, k)
                without.append(out if isinstance(out, list) else _with_user(p0, user, out))
            else:
                without.append(_with_user(p0, user, remove_sentence(p0[user]["content"], block.strip(),
                                                                    where=f"{example.source or example.id}",
                                                                    reward=rewards[k].name)))
        return p0, without
    raise ValueError(f"task {task.name!r} has placement {task.placement!r}; use 'append' or 'in_prompt'")


def none_messages(task: Task, example: Example, blocks: Sequence[str]) -> Messages:
    """P_none: the prompt with every block left out (`--mrtpo-weights single`, one contrast for
    all rewards, as CoRT rescoring under a rubric prompt against a criteria-free one). Appended
    blocks are not appended; each in-prompt block leaves the prompt as it does for its own
    P_without_k (`remove_block` then `task.without_messages` for an "append" task; the
    sentence removed from P0 for an "in_prompt" task: a task whose sentences are not verbatim
    gives itself a `prompt_none(example)`). Every block empty: P_none is P_all."""
    rewards = _rewards_for(task, example, blocks)
    messages = task.messages(example)
    user = _last_user(messages, task, example)
    where = f"{example.source or example.id}"
    if task.placement == "append":
        for reward, block in zip(rewards, blocks):
            if reward.in_prompt and block.strip():
                text = remove_block(messages[user]["content"], block.strip(), where=where, reward=reward.name)
                messages = task.without_messages(example, reward.name, _with_user(messages, user, text))
                user = _last_user(messages, task, example)
        return messages
    if task.placement == "in_prompt":
        custom = getattr(task, "prompt_none", None)
        if custom is not None:
            out = custom(example)
            return out if isinstance(out, list) else _with_user(messages, user, out)
        text = messages[user]["content"]
        for reward, block in zip(rewards, blocks):
            if block.strip():
                text = remove_sentence(text, block.strip(), where=where, reward=reward.name)
        return _with_user(messages, user, text)
    raise ValueError(f"task {task.name!r} has placement {task.placement!r}; use 'append' or 'in_prompt'")


def remove_block(text: str, block: str, where: str = "", reward: str = "") -> str:
    """`text` without `block`: the block as a whole where it occurs verbatim, else each of its
    lines in turn (a schema block lists the called tools, which the prompt may list apart)."""
    if block in text or "\n" not in block:
        return remove_sentence(text, block, where, reward)
    for line in (x for x in block.splitlines() if x.strip()):
        text = remove_sentence(text, line.strip(), where, reward)
    return text


def remove_sentence(text: str, sentence: str, where: str = "", reward: str = "") -> str:
    """`text` without the first occurrence of `sentence`, whitespace tidied at the cut.

    Spaces around an inline cut collapse to one; a list item ("- ", "* ", "1. ") holding only
    the sentence loses its whole line; when the sentence stood on its own line(s),
    the surrounding line breaks keep the larger of the two separations (so no blank line is
    doubled and no paragraph is glued to the next). The rest of the text is left as it is.
    """
    i = text.find(sentence)
    if i < 0:
        raise ValueError(f"block of reward {reward!r} does not occur verbatim in the prompt of {where}: "
                         f"{sentence!r}; in_prompt blocks must be the constraint text as written in the "
                         "prompt (or give the task a prompt_without(example, k) method)")
    left = text[:i].rstrip(" \t")
    right = text[i + len(sentence):].lstrip(" \t")
    line_start = left.rfind("\n") + 1
    line_end = right.find("\n") if "\n" in right else len(right)
    if _BULLET.fullmatch(left[line_start:]) and not right[:line_end].strip():
        # the sentence was a whole list item: drop its line, marker included
        left, right = left[:line_start], right[line_end + 1:]
        if not right.strip():
            return left.rstrip()
        return left + right if left.strip() else right
    if not left.strip():  # the sentence opened the text
        return right.lstrip()
    if not right.strip():  # the sentence closed the text
        return left.rstrip()
    nl_left = len(left) - len(left.rstrip("\n"))
    nl_right = len(right) - len(right.lstrip("\n"))
    if nl_left or nl_right:
        return left.rstrip("\n") + "\n" * max(nl_left, nl_right) + right.lstrip("\n")
    return left + " " + right


def build_item(task: Task, tokenizer, example: Example, response_ids: Sequence[int],
               verdicts: Sequence[Verdict], max_positions: int | None = None,
               single: bool = False) -> ReplayItem:
    """Blocks, contexts and token ids of one sampled response (ids kept exactly as sampled).

    `max_positions` (the model's, see `model_positions`): the appended blocks are cut (with
    CUT_MARKER) until P_all plus the response fits in it. `single`: one contrast for every
    reward, [P_all, P_none] (`none_messages`), named SINGLE (its q is every reward's weight).
    """
    response = [int(t) for t in (response_ids.tolist() if hasattr(response_ids, "tolist") else response_ids)]
    blocks = block_texts(task, example, verdicts)
    rendered: dict[str, list[int]] = {}

    def ids(messages: Messages) -> list[int]:
        key = repr(messages)
        if key not in rendered:
            rendered[key] = render_ids(tokenizer, messages)
        return rendered[key]

    p_all, without = context_messages(task, example, blocks)
    if max_positions is not None:
        blocks, p_all, without = _fit(task, example, blocks, ids, p_all, without,
                                      max_positions - len(response))
    if single:
        return ReplayItem(context_ids=[ids(p_all), ids(none_messages(task, example, blocks))],
                          response_ids=response, reward_names=[SINGLE], blocks=list(blocks))
    return ReplayItem(
        context_ids=[ids(p_all)] + [ids(m) for m in without],
        response_ids=response,
        reward_names=[r.name for r in task.rewards(example)],
        blocks=list(blocks),
    )


def _fit(task: Task, example: Example, blocks: list[str], ids, p_all: Messages,
         without: list[Messages], budget: int):
    """(blocks, P_all, P_without) with the appended blocks cut until P_all has at most `budget`
    tokens. Each round shrinks every cuttable block by the share of tokens over budget (and a
    margin); after a few rounds the blocks are cut to their markers. The prompt P0 itself is
    never cut: a P0 that does not fit is refused by the rollout."""
    rewards = task.rewards(example)
    cuttable = [k for k, r in enumerate(rewards) if _appended(task, r) and blocks[k]]
    original, limits = list(blocks), [len(b) for b in blocks]
    for round_ in range(6):
        n = len(ids(p_all))
        if n <= budget or not cuttable:
            break
        block_tokens = max(1, n - len(ids(task.messages(example))))
        keep = max(0.0, 1.0 - (n - budget) / block_tokens) * 0.9 if round_ < 5 else 0.0
        blocks = list(blocks)
        for k in cuttable:  # cut from the original text, so each marker counts what it hides
            limits[k] = int(limits[k] * keep)
            blocks[k] = cut_block(original[k], limits[k])
        p_all, without = context_messages(task, example, blocks)
    return blocks, p_all, without


def only_rewards(item: ReplayItem, keep: Sequence[bool]) -> ReplayItem:
    """`item` with P_without_k set to P_all for every reward k not in `keep`, so the replay
    skips those contexts and their q is 0 (as for an empty block). The trainer drops the
    rewards whose credit on this response is exactly 0 (a group that scored a reward alike):
    weight times zero credit is zero, so the token advantages do not change (up to the float
    rounding of the replay's other batching)."""
    if len(keep) != item.num_rewards:
        raise ValueError(f"keep has {len(keep)} entries for {item.num_rewards} rewards")
    contexts = [item.context_ids[0]] + [ctx if k else item.context_ids[0]
                                        for ctx, k in zip(item.context_ids[1:], keep)]
    return ReplayItem(contexts, item.response_ids, item.reward_names, item.blocks)


def render_ids(tokenizer, messages: Messages) -> list[int]:
    """Chat-template token ids of a prompt, ending with the assistant turn's opening. Lone
    surrogates (a block may quote model output or data holding one) become U+FFFD: tokenizers
    raise an opaque TypeError on them."""
    from mrtpo.chat import render_chat

    out = render_chat(tokenizer, scrub_all(messages), add_generation_prompt=True, tokenize=True)
    if not isinstance(out, list):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(t) for t in out]


def _last_user(messages: Messages, task: Task, example: Example) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    raise ValueError(f"task {task.name!r} rendered no user message for example {example.id!r}")


def _with_user(messages: Messages, index: int, text: str) -> Messages:
    out = [dict(m) for m in messages]
    out[index]["content"] = text
    return out

