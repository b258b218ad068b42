"""MRTPO inside TRL's GRPOTrainer (mrtpo.integrations.trl) on a tiny model, on CPU.

- With replay off, the token advantages handed to TRL are TRL's own advantages on every
  token, for GDPO (`normalize_then_sum`) and GRPO (`sum_then_normalize`, batch scaling).
- With replay on, a few steps train the LoRA adapter only; each response's token advantages
  average to TRL's response-level advantage; TRL logs every task reward and MRTPO's
  concentration metric; TRL's loss on the [B, T] advantages is the [B, T] aggregation (a
  [B, B, T] broadcast would give another number).
- use_liger_kernel and TRL-side reward functions are refused with clear messages; the shape
  guard catches the broadcast older TRLs made.
- `mrtpo_weights` reaches MRTPO's step (mrtpo.harness.token_credit.mrtpo_step, shared with `mrtpo
  train` and tested there: zero-credit pairs, logging steps).

Skipped when TRL is not installed (`pip install -e ".[trl]"`).
"""
from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("trl")

import harness_task  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from mrtpo.integrations.trl import MRTPOGRPOTrainer, _AdvantageShapeGuard, task_rewards  # noqa: E402
from mrtpo.tasks import get_task  # noqa: E402

harness_task.register()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from intra-op threads; on a shared, loaded machine they thrash."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _args(tmp_path, **kw) -> GRPOConfig:
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                max_completion_length=8, max_steps=1, learning_rate=5e-3, logging_steps=1, report_to="none",
                save_strategy="no", bf16=False, use_cpu=True, seed=0, gradient_checkpointing=False,
                dataloader_num_workers=0, disable_tqdm=True)
    return GRPOConfig(**{**base, **kw})


def _lora():
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


@pytest.mark.parametrize("aggregation, scale", [("normalize_then_sum", "group"), ("sum_then_normalize", "batch")])
def test_replay_off_gives_trls_own_advantages(tiny_qwen2_dir, tmp_path, aggregation, scale):
    trainer = MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", mrtpo=False, peft_config=_lora(),
                               args=_args(tmp_path, multi_objective_aggregation=aggregation, scale_rewards=scale))
    trainer.train()
    batch = trainer.last_batch
    assert batch.advantages.shape == batch.mask.shape and batch.distances is None
    assert batch.trl_advantages.abs().max() > 0.1  # a real spread, not 0 == 0
    # every sampled token carries TRL's advantage for its response
    expected = batch.trl_advantages.unsqueeze(-1) * batch.mask  # [B, T]
    torch.testing.assert_close(batch.advantages, expected, atol=2e-5, rtol=1e-5)
    # the batch had examples with and without the `word` reward (K varies per prompt: None -> NaN)
    word = trainer.reward_func_names.index("word")
    assert torch.isnan(batch.scores[:, word]).any() and (~torch.isnan(batch.scores[:, word])).any()
    from mrtpo.integrations.trl import startup_line

    line = startup_line(trainer)  # the launcher says which estimator it trains with
    assert ("estimator GRPO" in line and "`mrtpo train` defaults to GDPO" in line) == (aggregation == "sum_then_normalize")


class _OneReward(harness_task.WordTask):
    """harness-words with its graded length reward only: K = 1."""

    name = "harness-one-reward"

    def rewards(self, example):
        return [r for r in super().rewards(example) if r.name == "short"]


def test_replay_off_gives_trls_own_advantages_with_one_reward(tiny_qwen2_dir, tmp_path):
    """GDPO with K = 1 is TRL's normalize_then_sum (group z-score, then batch z-score), not GRPO."""
    trainer = MRTPOGRPOTrainer(str(tiny_qwen2_dir), task=_OneReward(), mrtpo=False, peft_config=_lora(),
                               args=_args(tmp_path, multi_objective_aggregation="normalize_then_sum"))
    trainer.train()
    batch = trainer.last_batch
    assert batch.scores.shape[1] == 1 and batch.trl_advantages.abs().max() > 0.1
    expected = batch.trl_advantages.unsqueeze(-1) * batch.mask  # [B, T]
    torch.testing.assert_close(batch.advantages, expected, atol=2e-5, rtol=1e-5)


def _check_completions_log(out, batch, trainer):
    """The TRL run logged its completions as `mrtpo train` does: `mrtpo credit` reads them, and
    the last step's rows carry the batch's own advantages, credit and token advantages."""
    import json

    from typer.testing import CliRunner

    from mrtpo.cli import app
    from mrtpo.credit.records import read_run

    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in rows}) == [1, 2] and len(rows) == 32
    last = [r for r in rows if r["step"] == 2]
    view = read_run(out)  # the same reader `mrtpo credit` uses
    assert view.step == 2 and view.task == "harness-words" and view.mrtpo and len(view.records) == 16
    for i, row in enumerate(last):
        n = int(batch.mask[i].sum())
        assert (row["group"], row["sample"]) == divmod(i, trainer.num_generations)
        assert len(row["response_ids"]) == len(row["tokens"]) == n
        assert row["advantage"] == pytest.approx(float(batch.trl_advantages[i]), abs=1e-4)
        assert row["token_advantages"] == pytest.approx(batch.advantages[i, :n].tolist(), abs=1e-5)
        assert sum(row["credit"]) + row["offset"] == pytest.approx(row["advantage"], abs=1e-4)
        assert len(row["distances"]) == len(row["reward_names"]) == len(row["blocks"])
    r = CliRunner().invoke(app, ["credit", str(out), "--json", "--limit", "2"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["task"] == "harness-words"


def test_mrtpo_trains_lora_and_keeps_response_advantages(tiny_qwen2_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", peft_config=_lora(), log_completions_every=1,
                               args=_args(tmp_path, max_steps=2,
                                          multi_objective_aggregation="normalize_then_sum"))
    trainer.train()
    batch = trainer.last_batch
    assert batch.distances is not None and batch.distances.shape[:2] == (16, 4)
    _check_completions_log(tmp_path / "out", batch, trainer)
    n_tok = batch.mask.sum(-1)  # [B]
    live = n_tok > 0
    means = (batch.advantages * batch.mask).sum(-1)[live] / n_tok[live]  # [B]
    torch.testing.assert_close(means, batch.trl_advantages[live], atol=2e-5, rtol=1e-5)
    # MRTPO moved credit between tokens: not every response is flat
    spread = ((batch.advantages - batch.trl_advantages.unsqueeze(-1)) * batch.mask).abs().amax(-1)  # [B]
    assert spread.max() > 1e-3

    logged = {k for record in trainer.state.log_history for k in record}
    for name in ("format", "short", "letters", "word"):
        assert f"rewards/{name}/mean" in logged
    assert "mrtpo/short/top80_token_share" in logged

    # only the adapter moved
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).state_dict()
    moved = 0
    for name, p in trainer.model.named_parameters():
        if "lora_" in name:
            moved += "lora_B" in name and bool(p.detach().abs().sum() > 0)
        else:
            key = name.replace("base_model.model.", "", 1).replace(".base_layer", "")
            assert torch.equal(p.detach(), base[key]), name
    assert moved > 0

    # TRL's loss on the buffered [B, T] advantages is the [B, T] dapo aggregation; the policy
    # ratio is exactly 1 on a fresh pass (old log-probs = current ones, detached)
    inputs = trainer._buffered_inputs[0]
    adv, mask = inputs["advantages"], inputs["completion_mask"].float()  # [B, T]
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
    normalizer = normalizer * trainer.current_gradient_accumulation_steps / trainer.args.steps_per_generation
    expected = -(adv * mask).sum() / normalizer
    broadcast = -(adv.unsqueeze(1) * mask).sum() / normalizer  # what a [B, B, T] loss would give
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    assert trainer._shape_checked  # the first loss ran under the [B, T] guard
    assert not math.isclose(float(expected), float(broadcast), rel_tol=1e-3)


def test_refusals(tiny_qwen2_dir, tmp_path):
    with pytest.raises(ValueError, match="use_liger_kernel=True is not supported with MRTPO"):
        MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", args=_args(tmp_path, use_liger_kernel=True))
    with pytest.raises(TypeError, match="takes its rewards from the task"):
        MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", args=_args(tmp_path), reward_funcs=[len])
    with pytest.raises(ValueError, match="saw='advantage' with normalize_then_sum"):
        MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", saw="reward",
                         args=_args(tmp_path, multi_objective_aggregation="normalize_then_sum"))


def test_shape_guard_catches_the_old_broadcast():
    adv = torch.randn(3, 5)  # [B, T]
    coef = torch.ones(3, 5)  # [B, T]
    with _AdvantageShapeGuard(adv):
        assert (coef * adv).shape == (3, 5)  # TRL >= 0.26: [B, T]
        assert (adv < 0).shape == (3, 5)
        with pytest.raises(AssertionError, match=r"per-token loss must stay \[B, T\]"):
            coef * adv.unsqueeze(1)  # TRL <= 0.25: unsqueeze -> [B, 1, T] -> [B, B, T]


def test_task_rewards_return_none_where_a_reward_does_not_apply():
    task = get_task("harness-words")
    examples = task.load()  # even rows have a target word, odd rows do not
    funcs, weights, floors = task_rewards(task, examples)
    assert [f.__name__ for f in funcs] == ["format", "short", "letters", "word"]
    assert weights == [1.0, 0.5, 1.0, 1.0] and floors == [0.0] * 4
    word = funcs[3]
    completions = ["<answer>select</answer>", "<answer>hello</answer>"]
    assert word(prompts=["", ""], completions=completions, mrtpo_index=[0, 1]) == [1.0, None]
    assert funcs[0](prompts=["", ""], completions=completions, mrtpo_index=[0, 1]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="needs the dataset column 'mrtpo_index'"):
        word(prompts=[""], completions=["x"])


def test_launcher_reads_trl_flags(tiny_qwen2_dir, tmp_path):
    """`python -m mrtpo.integrations.trl` (what the README launches with accelerate) on one process."""
    from mrtpo.integrations.trl import main, startup_line

    out = tmp_path / "launched"
    trainer = main([
        "--model_name_or_path", str(tiny_qwen2_dir), "--dtype", "float32", "--task", "harness-words",
        "--task_args", "n=8", "--output_dir", str(out), "--multi_objective_aggregation", "normalize_then_sum",
        "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "8",
        "--max_steps", "1", "--learning_rate", "5e-3", "--report_to", "none", "--save_strategy", "no",
        "--use_cpu", "--bf16", "false", "--gradient_checkpointing", "false", "--disable_tqdm", "true",
        "--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "all-linear",
    ])
    assert trainer.mrtpo_enabled and trainer.mrtpo_estimator == "gdpo"
    assert startup_line(trainer).startswith("mrtpo: task harness-words, estimator GDPO (multi_objective_aggregation=normalize_then_sum)")
    assert trainer.last_batch is not None and trainer.last_batch.distances is not None
    assert (out / "adapter_model.safetensors").is_file()  # LoRA via TRL's ModelConfig flags
    assert json.loads((out / "adapter_config.json").read_text())["lora_dropout"] == 0.0  # mrtpo train's default


def test_launcher_lora_dropout_is_zero_unless_given():
    from trl import TrlParser

    from mrtpo.integrations.trl import model_config_class

    parser = TrlParser((model_config_class(),))
    assert parser.parse_args_into_dataclasses(args=["--model_name_or_path", "m"])[0].lora_dropout == 0.0
    given = parser.parse_args_into_dataclasses(args=["--model_name_or_path", "m", "--lora_dropout", "0.05"])[0]
    assert given.lora_dropout == 0.05


WORKER = '''
import json, os, sys
import torch
from mrtpo.integrations.trl import main

trainer = main(sys.argv[1:])
batch, rank = trainer.last_batch, trainer.accelerator.process_index
n_tok = batch.mask.sum(-1).clamp(min=1)
lora_b = torch.cat([p.detach().flatten() for n, p in trainer.model.named_parameters() if "lora_B" in n])
out = dict(rank=rank, processes=trainer.accelerator.num_processes, n=batch.scores.shape[0],
           rows=[batch.rows.start, batch.rows.stop], shape=list(batch.advantages.shape),
           token_means=((batch.advantages * batch.mask).sum(-1) / n_tok).tolist(),
           trl=batch.trl_advantages.tolist(), credit=batch.credit.total[batch.rows].tolist(),
           lora_b=lora_b.tolist(), group_left=not torch.distributed.is_initialized())
with open(os.path.join(os.environ["WORKER_OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
'''


@pytest.mark.slow
def test_two_processes_with_accelerate(tiny_qwen2_dir, tmp_path):
    """The README's TRL launch on two CPU processes (gloo): rows split, scores gathered."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    site = tmp_path / "site" / "mrtpo_testtasks-0.1.dist-info"  # the test task as an installed plugin
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: mrtpo_testtasks\nVersion: 0.1\n")
    (site / "entry_points.txt").write_text("[mrtpo.tasks]\nharness-words = harness_task:WordTask\n")
    (tmp_path / "worker.py").write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WORKER_OUT": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(site.parent), str(root / "tests" / "helpers"), str(root)])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(port), str(tmp_path / "worker.py"),
           "--model_name_or_path", str(tiny_qwen2_dir), "--dtype", "float32", "--task", "harness-words",
           "--output_dir", str(tmp_path / "out"), "--multi_objective_aggregation", "normalize_then_sum",
           "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "8",
           "--max_steps", "2", "--learning_rate", "5e-3", "--report_to", "none", "--save_strategy", "no",
           "--use_cpu", "--bf16", "false", "--gradient_checkpointing", "false", "--disable_tqdm", "true",
           "--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "all-linear"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    assert r0["processes"] == r1["processes"] == 2
    assert r0["group_left"] and r1["group_left"]  # main() left the process group: no abort at exit
    assert r0["n"] == r1["n"] == 16 and r0["rows"] == [0, 8] and r1["rows"] == [8, 16]
    for r in (r0, r1):
        assert r["shape"][0] == 8
        assert r["token_means"] == pytest.approx(r["trl"], abs=2e-5)  # TRL's own advantage per response
        assert r["credit"] == pytest.approx(r["trl"], abs=2e-5)  # our credit on the gathered batch, our rows
    assert r0["lora_b"] == pytest.approx(r1["lora_b"], abs=1e-7)  # DDP kept the adapters in step
    assert max(abs(x) for x in r0["lora_b"]) > 0


def test_weight_sources_reach_trl(tiny_qwen2_dir, tmp_path):
    """`--mrtpo_weights` goes through the step `mrtpo train` takes (mrtpo.harness.token_credit,
    where the rules themselves are tested): `spans` puts toolcall's reward spans, 1 on their
    tokens and 0 elsewhere, on the completions TRL sampled; an unknown source is refused."""
    from mrtpo.integrations.trl import startup_line

    trainer = MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="toolcall", peft_config=_lora(), mrtpo_weights="spans",
                               log_completions_every=0,
                               args=_args(tmp_path, multi_objective_aggregation="normalize_then_sum",
                                          max_completion_length=24))
    trainer.train()
    batch = trainer.last_batch
    assert "weights spans" in startup_line(trainer)
    assert batch.distances.shape[-1] == batch.mask.shape[-1] and set(batch.distances.unique().tolist()) <= {0.0, 1.0}
    assert batch.distances.sum() > 0  # the format's end-of-turn token at least
    with pytest.raises(ValueError, match="mrtpo_weights must be one of replay, shuffled, spans, single"):
        MRTPOGRPOTrainer(str(tiny_qwen2_dir), task="harness-words", args=_args(tmp_path), mrtpo_weights="random")
