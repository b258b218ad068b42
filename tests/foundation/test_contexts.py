"""P_all / P_without_k construction: block order, separators, in-prompt removal, token ids."""
from __future__ import annotations

import pytest

from mrtpo.contexts import ReplayItem, block_texts, build_item, context_messages, remove_sentence, render_ids
from mrtpo.tasks.base import Example, Verdict
from replay_task import EX, FORMAT, ConstraintTask, SQLishTask


def _user(messages):
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def test_append_puts_response_independent_blocks_first_separated_by_blank_lines():
    task = SQLishTask()
    blocks = block_texts(task, EX, task.score(EX, "SELECT nme FROM singer"))
    assert blocks == [FORMAT, "SQLite error: no such column: nme", "A correct query: " + EX.data["gold"]]
    p_all, without = context_messages(task, EX, blocks)
    assert p_all[0] == {"role": "system", "content": EX.system}
    assert _user(p_all) == "\n\n".join([EX.prompt, blocks[0], blocks[2], blocks[1]])
    assert _user(without[0]) == "\n\n".join([EX.prompt, blocks[2], blocks[1]])
    assert _user(without[1]) == "\n\n".join([EX.prompt, blocks[0], blocks[2]])
    assert _user(without[2]) == "\n\n".join([EX.prompt, blocks[0], blocks[1]])
    assert all(w[0] == p_all[0] for w in without)
    assert task.messages(EX)[-1]["content"] == EX.prompt  # P0 itself is untouched


def test_empty_block_gives_p_without_equal_to_p_all(tiny_tokenizer):
    task = SQLishTask()
    verdicts = task.score(EX, "```sql\nSELECT name FROM singer\n```")
    blocks = block_texts(task, EX, verdicts)
    assert blocks[1] == ""
    p_all, without = context_messages(task, EX, blocks)
    assert without[1] == p_all
    assert without[0] != p_all and without[2] != p_all
    item = build_item(task, tiny_tokenizer, EX, [5, 6, 7], verdicts)
    assert item.context_ids[2] == item.context_ids[0]
    assert item.context_ids[1] != item.context_ids[0]


def test_build_item_renders_chat_template_and_keeps_sampled_ids(tiny_tokenizer):
    task = SQLishTask()
    text = "```sql\nSELECT nme FROM singer\n```"
    canonical = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    # a non-canonical split of the same text (as a sampler can produce): must survive unchanged
    sampled = [i for ch in text for i in tiny_tokenizer(ch, add_special_tokens=False)["input_ids"]]
    assert sampled != canonical and tiny_tokenizer.decode(sampled) == text
    verdicts = task.score(EX, text)
    item = build_item(task, tiny_tokenizer, EX, sampled, verdicts)
    assert isinstance(item, ReplayItem)
    assert item.response_ids == sampled
    assert item.reward_names == ["format", "execution", "reference"]
    assert item.blocks == block_texts(task, EX, verdicts)
    p_all, without = context_messages(task, EX, item.blocks)
    for ids, messages in zip(item.context_ids, [p_all] + without):
        expected = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
        assert ids == list(expected)
        assert tiny_tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert render_ids(tiny_tokenizer, p_all) == item.context_ids[0]


def test_verdicts_must_match_rewards():
    with pytest.raises(ValueError, match="2 verdicts for 3 rewards"):
        block_texts(SQLishTask(), EX, [Verdict(1.0), Verdict(1.0)])


def test_in_prompt_removes_one_constraint_and_tidies_whitespace():
    c = ["Your answer must contain at least 3 paragraphs.", "Answer in all lowercase letters.",
         "End your response with the phrase 'Is there anything else?'"]
    ex = Example(id="if1", prompt=f"Write a short poem about the sea. {c[0]} {c[1]}\n\n{c[2]}",
                 data={"constraints": c})
    task = ConstraintTask()
    p_all, without = context_messages(task, ex, c)
    assert p_all == task.messages(ex)
    assert _user(without[0]) == f"Write a short poem about the sea. {c[1]}\n\n{c[2]}"
    assert _user(without[1]) == f"Write a short poem about the sea. {c[0]}\n\n{c[2]}"
    assert _user(without[2]) == f"Write a short poem about the sea. {c[0]} {c[1]}"
    # an empty block leaves the prompt as it is
    _, without = context_messages(task, ex, [c[0], "", c[2]])
    assert without[1] == p_all


@pytest.mark.parametrize("text, sentence, expected", [
    ("A b. Drop me. C d.", "Drop me.", "A b. C d."),
    ("Drop me. C d.", "Drop me.", "C d."),
    ("A b. Drop me.", "Drop me.", "A b."),
    ("A b.\nDrop me.\nC d.", "Drop me.", "A b.\nC d."),
    ("A b.\n\nDrop me.\n\nC d.", "Drop me.", "A b.\n\nC d."),
    ("A b.\n- Drop me.\n- C d.", "Drop me.", "A b.\n- C d."),
    ("A b.\n1. C d.\n2. Drop me.", "Drop me.", "A b.\n1. C d."),
    ("- Drop me.\n- C d.", "Drop me.", "- C d."),
    ("A b. Drop me.\n\nC d.", "Drop me.", "A b.\n\nC d."),
])
def test_remove_sentence(text, sentence, expected):
    assert remove_sentence(text, sentence) == expected


def test_in_prompt_block_must_occur_in_prompt():
    ex = Example(id="if2", prompt="Write a poem.", data={"constraints": ["Use no commas."]}, source="if.jsonl:7")
    with pytest.raises(ValueError, match=r"c0.*if\.jsonl:7.*Use no commas"):
        context_messages(ConstraintTask(), ex, ["Use no commas."])


def test_in_prompt_uses_task_prompt_without_when_given():
    class WithOwnRemoval(ConstraintTask):
        def prompt_without(self, example, k):
            return example.prompt.replace(example.data["constraints"][k], "[removed]")

    c = ["Use no commas."]
    ex = Example(id="if3", prompt="Write a poem. Use no commas.", data={"constraints": c})
    _, without = context_messages(WithOwnRemoval(), ex, c)
    assert _user(without[0]) == "Write a poem. [removed]"


def test_instruct_task_contexts(tiny_tokenizer):
    """The built-in instruction task: P_all is P0, P_without_k drops exactly one sentence."""
    from mrtpo.tasks.instruct import InstructTask

    task = InstructTask()
    ex = next(e for e in task.load() if len(task.rewards(e)) >= 2)
    blocks = block_texts(task, ex, task.score(ex, "a response"))
    p_all, without = context_messages(task, ex, blocks)
    assert p_all == task.messages(ex)
    for k, block in enumerate(blocks):
        if block:
            assert block in _user(p_all) and _user(without[k]) == task.prompt_without(ex, k)
            assert block not in _user(without[k])
        else:
            assert without[k] == p_all
    item = build_item(task, tiny_tokenizer, ex, [7, 8, 9], task.score(ex, "a response"))
    assert item.context_ids[0] == render_ids(tiny_tokenizer, task.messages(ex))


@pytest.mark.parametrize("name, options", [("text2sql", {"demo": True}), ("instruct", {}), ("toolcall", {})])
def test_p_none_leaves_every_block_out(name, options):
    """`--mrtpo-weights single`'s context: no block's text is left in it; with one block left
    it is that block's P_without_k; every block empty gives P_all."""
    from mrtpo.contexts import none_messages
    from mrtpo.tasks import get_task

    task = get_task(name, **options)
    several = 0  # examples with two or more blocks to leave out (the test needs some)
    for ex in task.load()[:8]:
        blocks = block_texts(task, ex, task.score(ex, (task.reference(ex) or "") + " x"))
        several += sum(bool(b.strip()) for b in blocks) >= 2
        p0 = "\n".join(m["content"] for m in task.messages(ex))
        left = "\n".join(m["content"] for m in none_messages(task, ex, blocks))
        for reward, b in zip(task.rewards(ex), blocks):
            in_p0 = task.placement == "in_prompt" or reward.in_prompt
            for line in (x.strip() for x in b.splitlines() if x.strip()):
                if in_p0 or line not in p0:  # an appended line that P0 also holds stays, with P0
                    assert line not in left, (name, ex.id, reward.name, line)
        for k in range(len(blocks)):
            only = ["" if j != k else b for j, b in enumerate(blocks)]
            assert none_messages(task, ex, only) == context_messages(task, ex, only)[1][k], (name, ex.id, k)
        empty = ["" for _ in blocks]
        assert none_messages(task, ex, empty) == context_messages(task, ex, empty)[0]
    assert several >= 2, name

def test_single_item_is_p_all_against_p_none(tiny_tokenizer):
    from mrtpo.contexts import SINGLE, none_messages

    task = SQLishTask()
    verdicts = task.score(EX, "SELECT nme FROM singer")
    item = build_item(task, tiny_tokenizer, EX, [5, 6, 7], verdicts, single=True)
    blocks = block_texts(task, EX, verdicts)
    assert item.reward_names == [SINGLE] and item.blocks == blocks
    assert item.context_ids == [render_ids(tiny_tokenizer, context_messages(task, EX, blocks)[0]),
                                render_ids(tiny_tokenizer, none_messages(task, EX, blocks))]
    assert _user(none_messages(task, EX, blocks)) == EX.prompt
