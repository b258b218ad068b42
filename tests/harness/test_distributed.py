"""Data-parallel `mrtpo train`: two real processes (gloo, CPU) compute what one process does.

The end-to-end test launches `accelerate launch --multi_gpu --num_processes 2 -m mrtpo train`
on a tiny model (on a machine without GPUs accelerate's torchrun launcher starts CPU processes
that talk over gloo; `--cpu` would start a single process) and compares its first step with
`train(...)` in this process on the same global batch and seed: the completions, every token's advantage, the logged loss and gradient norm
and the trained adapter must be equal. The seed is chosen so that the two processes see
different reward sets (only one of them has the `word` reward), which exercises the column
alignment of the gathered scores. The other tests check the per-row seeded sampling that
makes completions independent of how the batch is split.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness_task
from mrtpo.advantages import estimate
from mrtpo.harness import TrainConfig, train
from mrtpo.harness.distributed import (Distributed, DistributedError, RowSeededSampling, leave_process_group,
                                      row_seed)

harness_task.register()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from intra-op threads; on a shared, loaded machine they thrash."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

ROOT = Path(__file__).resolve().parents[2]
# seed 7 puts an example without the `word` reward on process 0 and one with it on process 1
RUN = dict(task="harness-words", batch_prompts=2, num_generations=4, max_new_tokens=8, verify_workers=0,
           lr=5e-3, lora_r=4, lora_dropout=0.0, log_completions_every=1, save_every=0, steps=1, seed=7,
           advantage="gdpo", saw="advantage", num_iterations=2)


def _flags(values: dict) -> list[str]:
    out = []
    for key, value in values.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plugin_dir(tmp_path: Path) -> Path:
    """The test task as an installed plugin (entry point), so the real CLI can find it by name."""
    site = tmp_path / "site"
    info = site / "mrtpo_testtasks-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mrtpo_testtasks\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[mrtpo.tasks]\nharness-words = harness_task:WordTask\n")
    return site


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _adapter(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    (path,) = run.glob("checkpoints/step-*/adapter/adapter_model.safetensors")
    return load_file(path)


@pytest.mark.slow
def test_two_processes_equal_one_process(tiny_qwen2_dir, tmp_path):
    dp_run = tmp_path / "dp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_plugin_dir(tmp_path)), str(ROOT / "tests" / "helpers"), str(ROOT)]),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()),
           "-m", "mrtpo", "train", "--model", str(tiny_qwen2_dir), "--output-dir", str(dp_run), *_flags(RUN)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("run directory:") == 1  # one summary: process 1 trained quietly

    one = train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(tmp_path / "one"), **RUN))

    (dp_metrics,) = _read(dp_run / "metrics.jsonl")  # one line: one process wrote the logs
    one_metrics = one.history[0]
    for key, value in one_metrics.items():
        if isinstance(value, float) and not key.startswith("time/"):
            assert dp_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert abs(one_metrics["loss"]) > 1e-3 and one_metrics["grad_norm"] > 1e-3  # a real signal, not 0 == 0

    dp_rows, one_rows = _read(dp_run / "completions.jsonl"), _read(tmp_path / "one" / "completions.jsonl")
    assert len(dp_rows) == len(one_rows) == 8  # 16 would mean two processes each ran the whole batch
    for a, b in zip(dp_rows, one_rows):
        assert a["response_ids"] == b["response_ids"]  # per-row seeded sampling: same completions
        assert a["reward_names"] == b["reward_names"]
        assert a["advantage"] == pytest.approx(b["advantage"], abs=2e-6)  # the log keeps 6 decimals
        assert a["credit"] == pytest.approx(b["credit"], abs=2e-6)
        # replay pads each process's batch to its own length: distances agree to float rounding
        assert a["token_advantages"] == pytest.approx(b["token_advantages"], abs=2e-5)
    # the processes saw different reward sets (process 0 has no `word` reward)
    assert "word" not in dp_rows[0]["reward_names"] and "word" in dp_rows[-1]["reward_names"]

    # the test can fail: advantages from process 0's share alone are not the whole batch's
    names = list(dict.fromkeys(n for r in one_rows for n in r["reward_names"]))
    table = torch.full((4, len(names)), float("nan"))
    for i, row in enumerate(one_rows[:4]):
        for name, score in zip(row["reward_names"], row["scores"]):
            table[i, names.index(name)] = score
    share_only = estimate(table[:, :3], 4, "gdpo", weights=[1.0, 0.5, 1.0], saw="advantage").total
    assert not torch.allclose(share_only, torch.tensor([r["advantage"] for r in one_rows[:4]]), atol=1e-3)

    # gradients were averaged: both runs took the same two AdamW steps (the first moves each
    # weight by about lr = 5e-3 whatever the gradient's size, so a process stepping with its
    # own share's gradient would be off by ~1e-3 wherever the signs differ)
    a, b = _adapter(dp_run), _adapter(tmp_path / "one")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=2e-5)
    assert any(float(v.abs().max()) > 0 for k, v in a.items() if "lora_B" in k)


# ---------------------------------------------------------------------------------- sampling
LEAVER = """
import os, sys, torch
from mrtpo.harness.distributed import leave_process_group
torch.distributed.init_process_group("gloo")
t = torch.ones(1)
torch.distributed.all_reduce(t)
leave_process_group()
with open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"]), "w") as f:
    f.write(f"{t.item()} {torch.distributed.is_initialized()}")
"""


@pytest.mark.slow
def test_a_launched_process_leaves_its_group(tmp_path):
    """Two launched gloo processes that leave the group exit cleanly; one that ended without it
    could abort at interpreter exit (SIGABRT, "terminate called without an active exception"),
    as `mrtpo train` and the TRL launcher once did after training. Outside a launch it is a no-op."""
    leave_process_group()  # nothing to leave in this process
    (tmp_path / "leaver.py").write_text(LEAVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), str(tmp_path / "leaver.py"), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [(tmp_path / f"rank{i}").read_text() for i in range(2)] == ["2.0 False"] * 2


def test_a_rows_completion_does_not_depend_on_its_batch(tiny_qwen2_dir):
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    policy = load_policy(str(tiny_qwen2_dir), lora=False, device="cpu")
    task = get_task("harness-words")
    examples = task.load()[:4]

    def run(exs, first_row, step=1):
        return sample(policy, task, exs, 2, temperature=0.9, top_p=0.95, max_new_tokens=6,
                      logits_processor=[RowSeededSampling(0, step, first_row, 0.9, 0.95)]).response_ids

    whole = run(examples, 0)  # rows 0..7
    assert run(examples[2:], 4) == whole[4:]  # rows 4..7 sampled on their own (another process)
    assert run(examples[:1], 0) == whole[:2]
    assert whole[0] != whole[1]  # a group's rows have their own generators
    assert run(examples, 0, step=2) != whole  # and the next step draws afresh


def test_row_seeded_sampling_draws_from_the_tempered_nucleus():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])  # [V]
    n = 6000
    scores = logits.expand(n, -1).clone()  # [n, V]
    out = RowSeededSampling(3, 1, 0, temperature=0.7)(torch.zeros(n, 1, dtype=torch.long), scores)  # [n, V]
    assert ((out == 0).sum(-1) == 1).all() and torch.isinf(out).sum() == n * 4  # one token left per row
    freq = torch.bincount(out.argmax(-1), minlength=5).double() / n  # [V]
    expected = torch.softmax(logits.double() / 0.7, -1)  # [V]
    assert torch.allclose(freq, expected, atol=0.02), (freq, expected)

    # top-p 0.8 keeps the smallest set of tokens holding 80% of the (tempered) mass
    nucleus = RowSeededSampling(3, 1, 0, temperature=0.7, top_p=0.8)(torch.zeros(n, 1, dtype=torch.long), scores)
    picked = set(nucleus.argmax(-1).tolist())
    cumulative = expected.cumsum(0)
    keep = int((cumulative < 0.8).sum()) + 1
    assert picked == set(range(keep))


def test_row_uniforms_drawn_in_blocks_equal_one_draw_per_step():
    """Blocks of BLOCK uniforms per row are the numbers successive torch.rand(1) calls give."""
    steps = RowSeededSampling.BLOCK * 2 + 5
    sampler = RowSeededSampling(7, 3, 10)
    got = torch.stack([sampler._uniforms(3, "cpu") for _ in range(steps)], 1)  # [3, steps]
    for i in range(3):
        g = torch.Generator().manual_seed(row_seed(7, 3, 10 + i))
        one_by_one = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for _ in range(steps)])
        assert torch.equal(got[i], one_by_one)


@pytest.mark.parametrize("lora,static_cache,common_prefix", [(False, True, True), (True, True, True),
                                                           (True, False, True), (True, True, False),
                                                           (True, False, False)])
def test_sampling_fast_paths_give_the_plain_completions(tiny_qwen2_dir, lora, static_cache, common_prefix):
    """rollout.sample (each prompt encoded once for its G rows, the prompts' shared beginning
    once for all, a static KV cache, LoRA folded into the weights, greedy pick of the row-seeded
    token) samples what plain `generate` does: every row's prompt encoded, a dynamic cache, the
    adapter applied as a side branch, transformers' multinomial draw."""
    from transformers import GenerationConfig

    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import prompt_token_ids, render_prompt, sample
    from mrtpo.tasks import get_task

    policy = load_policy(str(tiny_qwen2_dir), lora=lora, lora_r=4, device="cpu")
    with torch.no_grad():  # an adapter that changes the outputs
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    task = get_task("harness-words")
    examples = task.load()[:3]
    fast = sample(policy, task, examples, 4, temperature=0.9, top_p=0.95, max_new_tokens=12,
                  logits_processor=[RowSeededSampling(0, 1, 0, 0.9, 0.95)],
                  static_cache=static_cache, common_prefix=common_prefix).response_ids
    for key, value in policy.model.state_dict().items():  # the weights are exactly restored
        assert torch.equal(value, before[key]), key

    ids = [prompt_token_ids(policy.tokenizer, render_prompt(policy.tokenizer, task, ex)) for ex in examples]
    p = max(map(len, ids))
    input_ids = torch.tensor([[policy.pad_id] * (p - len(x)) + x for x in ids]).repeat_interleave(4, 0)
    attn = (torch.arange(p)[None] >= torch.tensor([p - len(x) for x in ids])[:, None]).long().repeat_interleave(4, 0)
    gen = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=0.9, top_p=0.95, top_k=None,
                           eos_token_id=policy.stop_ids, pad_token_id=policy.pad_id)
    policy.model.eval()
    with torch.no_grad():
        out = policy.model.generate(input_ids=input_ids, attention_mask=attn, generation_config=gen,
                                    logits_processor=[RowSeededSampling(0, 1, 0, 0.9, 0.95)])[:, p:].tolist()
    stops = set(policy.stop_ids)
    plain = [row[:next((j + 1 for j, t in enumerate(row) if t in stops), len(row))] for row in out]
    assert fast == plain
    assert len({tuple(r) for r in fast}) > 6  # rows really differ


def test_row_seeds_are_distinct_and_pure():
    seeds = {row_seed(0, step, row) for step in range(1, 50) for row in range(64)}
    assert len(seeds) == 49 * 64
    assert row_seed(5, 3, 7) == row_seed(5, 3, 7)


def test_prompts_must_split_evenly():
    dist = Distributed(rank=1, world_size=2)
    assert dist.shard([10, 11, 12, 13]) == [12, 13]
    assert dist.rows(8) == slice(8, 16)
    with pytest.raises(DistributedError, match="--batch-prompts 3 does not split over 2 processes"):
        dist.shard([1, 2, 3])
    one = Distributed()
    assert one.shard([1, 2, 3]) == [1, 2, 3] and one.rows(6) == slice(0, 6)
