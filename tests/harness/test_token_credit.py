"""`--mrtpo-weights`: where MRTPO's token weights come from, end to end through the loop.

`shuffled` keeps each (completion, reward)'s distances and moves them to other tokens of the
same completion; `spans` puts each reward's weight on the tokens of the task's own reward
spans (toolcall's JSON calls) and needs a task that says them."""
from __future__ import annotations

import json

import harness_task
import pytest
import torch

from mrtpo.harness import ConfigError, TrainConfig, train
from mrtpo.spans import token_offsets
from mrtpo.tasks import get_task
from mrtpo.tasks.toolcall import call_spans

harness_task.register()

ONE_STEP = dict(batch_prompts=2, num_generations=2, max_new_tokens=8, verify_workers=0, lr=5e-3,
                lora_r=4, log_completions_every=1, save_every=0, steps=1, mrtpo=True, seed=3)


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]


def test_shuffled_weights_are_the_replays_moved_within_each_completion(tiny_qwen2_dir, tmp_path):
    for source in ("replay", "shuffled"):
        train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(tmp_path / source), task="harness-words",
                          mrtpo_weights=source, **ONE_STEP))
    replay, shuffled = _rows(tmp_path / "replay"), _rows(tmp_path / "shuffled")
    moved = 0
    for a, b in zip(replay, shuffled):
        assert a["response_ids"] == b["response_ids"] and a["credit"] == b["credit"]  # the same step 1
        for da, db in zip(a["distances"], b["distances"]):
            assert sorted(da) == pytest.approx(sorted(db), abs=1e-6)  # the same values...
            moved += da != pytest.approx(db, abs=1e-6)  # ...on other tokens
        mean = sum(b["token_advantages"]) / len(b["token_advantages"])
        assert mean == pytest.approx(b["advantage"], abs=1e-5)  # placement only
    assert moved > 0


def test_span_weights_sit_on_each_rewards_spans(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "spans"
    train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(run), task="toolcall", max_new_tokens=24,
                      mrtpo_weights="spans", **{k: v for k, v in ONE_STEP.items() if k != "max_new_tokens"}))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_qwen2_dir))
    for row in _rows(run):
        offsets = token_offsets(tok, row["response_ids"])
        spans = call_spans(row["response"])
        for k, name in enumerate(row["reward_names"]):
            on = [any(a < e and b > s for s, e in spans[name]) or (name == "format" and a == b)
                  for a, b in offsets]
            w = row["token_weights"][k]
            if any(on):  # weight 1 / share on the span's tokens, 0 elsewhere
                assert [x > 0 for x in w] == on, (name, row["response"])
                assert sum(w) / len(w) == pytest.approx(1.0, abs=1e-5)
            else:  # no spans on this completion: uniform
                assert w == pytest.approx([1.0] * len(w))


def test_spans_need_a_task_that_says_them(tiny_qwen2_dir, tmp_path):
    with pytest.raises(ConfigError, match="cannot say which tokens each reward is about"):
        train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(tmp_path / "r"), task="harness-words",
                          mrtpo_weights="spans", **ONE_STEP))


def test_an_unknown_weight_source_is_refused():
    with pytest.raises(ConfigError, match="--mrtpo-weights must be one of replay, shuffled, spans, single"):
        TrainConfig(task="toolcall", mrtpo_weights="random")


def test_toolcall_reward_spans_are_the_tasks_own():
    task = get_task("toolcall")
    ex = task.load()[0]
    ref = task.reference(ex)
    assert task.reward_spans(ex, ref) == call_spans(ref)
    assert get_task("text2sql").reward_spans(get_task("text2sql").load()[0], "SELECT 1") is None


def test_shuffle_draws_from_the_seed():
    from mrtpo.advantages import shuffle_within

    q = torch.rand(2, 3, 6)
    mask = torch.ones(2, 6)
    a = shuffle_within(q, mask, torch.Generator().manual_seed(1))
    b = shuffle_within(q, mask, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.equal(a, q)


def test_single_weights_are_one_replay_of_p_none_for_every_reward(tiny_qwen2_dir, tmp_path):
    """`mrtpo train --mrtpo-weights single`: every reward of a completion gets the same
    distances, and they are the JS distance between P_all and the prompt with every block left
    out (for this append task, P0 itself), computed here by a plain full forward of each."""
    from cli_runs import invoke
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrtpo.contexts import context_messages, render_ids
    from mrtpo.replay import distances

    run = tmp_path / "single"
    result, out = invoke("train", "--task", "harness-words", "--model", tiny_qwen2_dir, "--output-dir", run,
                         "--mrtpo-weights", "single", "--steps", 1, "--batch-prompts", 2, "--num-generations", 2,
                         "--max-new-tokens", 8, "--verify-workers", 0, "--lora-r", 4, "--log-completions-every", 1,
                         "--save-every", 0, "--seed", 3, "--temperature", 0.7)
    assert result.exit_code == 0, out
    tok = AutoTokenizer.from_pretrained(str(tiny_qwen2_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen2_dir), torch_dtype=torch.float32)  # step 1: B = 0
    task = get_task("harness-words")
    examples = {ex.id: ex for ex in task.load()}
    rows = _rows(run)
    assert rows and any(any(x > 0 for x in d) for r in rows for d in r["distances"])
    for row in rows:
        ex = examples[row["example_id"]]
        p_all, _ = context_messages(task, ex, row["blocks"])
        from mrtpo.contexts import ReplayItem

        item = ReplayItem([render_ids(tok, p_all), render_ids(tok, task.messages(ex))], row["response_ids"],
                          ["all"], [""])
        want = distances(model, [item], temperature=0.7, shared_prefix=False)[0, 0].tolist()  # [T]
        for d in row["distances"]:  # every reward: the one contrast
            assert d[:len(want)] == pytest.approx(want, abs=2e-5)
        mean = sum(row["token_advantages"]) / len(row["token_advantages"])
        assert mean == pytest.approx(row["advantage"], abs=1e-5)  # placement only
