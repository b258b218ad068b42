"""One step record for both trainers: `mrtpo train` (harness/loop.py) and the TRL integration
write completions.jsonl from the same `TokenCredit` (`mrtpo_step`'s), so with SAW on both log
`reward_weights` as the task's weight times SAW's weight of the step's batch, which is what
harness/run/completions.py documents and `mrtpo credit` shows."""
from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("trl")

import harness_task  # noqa: E402

from mrtpo.advantages import saw_weights  # noqa: E402
from mrtpo.harness import TrainConfig, train  # noqa: E402
from mrtpo.tasks import get_task  # noqa: E402

harness_task.register()


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _expected_weights(rows: list[dict]) -> dict[str, float]:
    """The task's weight times SAW's weight, from the logged scores of the step's whole batch
    (NaN where a completion does not have a reward)."""
    task = get_task("harness-words")
    weight = {r.name: r.weight for ex in task.load() for r in task.rewards(ex)}
    names = sorted({n for r in rows for n in r["reward_names"]})
    scores = torch.tensor([[r["scores"][r["reward_names"].index(n)] if n in r["reward_names"] else math.nan
                            for n in names] for r in rows])  # [N, K]
    return {n: weight[n] * w for n, w in zip(names, saw_weights(scores).tolist())}


def _check(rows: list[dict]) -> int:
    checked = 0
    for step in {r["step"] for r in rows}:
        batch = [r for r in rows if r["step"] == step]
        want = _expected_weights(batch)
        assert len(set(round(w, 4) for w in want.values())) > 1  # SAW moves the weights apart here
        for r in batch:
            for name, w in zip(r["reward_names"], r["reward_weights"]):
                assert w == pytest.approx(want[name], abs=1e-5), (name, w, want)
                checked += 1
    return checked


def test_loop_and_trl_log_saw_weights_alike(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "loop"
    train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(run), task="harness-words", saw="advantage",
                      batch_prompts=2, num_generations=4, max_new_tokens=8, verify_workers=0, lora_r=4,
                      log_completions_every=1, save_every=0, steps=1, seed=1, heldout=0))
    assert _check(_records(run / "completions.jsonl")) > 0

    from mrtpo.integrations.trl import main

    out = tmp_path / "trl"
    main(["--model_name_or_path", str(tiny_qwen2_dir), "--dtype", "float32", "--task", "harness-words",
          "--output_dir", str(out), "--multi_objective_aggregation", "normalize_then_sum", "--saw", "advantage",
          "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "8",
          "--max_steps", "1", "--learning_rate", "5e-3", "--report_to", "none", "--save_strategy", "no",
          "--use_cpu", "--bf16", "false", "--gradient_checkpointing", "false", "--disable_tqdm", "true",
          "--log_completions_every", "1", "--seed", "1"])
    assert _check(_records(out / "completions.jsonl")) > 0
