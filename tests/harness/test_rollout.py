"""mrtpo.harness.rollout: the static cache's length, rounded up for compiled decoding, leaves
the completions as they were (the extra positions stay masked)."""
from __future__ import annotations

import pytest


def test_the_cache_room_holds_the_prompt_and_the_new_tokens_rounded_up_to_the_bucket():
    from mrtpo.harness.rollout import cache_room

    assert cache_room(520, 64) == 585  # 520 cached columns, the last prompt token, 64 new tokens
    assert cache_room(520, 64, 256) == 768
    assert cache_room(191, 64, 256) == 256  # exactly a bucket: not rounded further
    assert cache_room(192, 64, 256) == 512


@pytest.mark.parametrize("model_dir", ["tiny_qwen2_dir", "tiny_llama_dir"])
@pytest.mark.parametrize("cascade", [True, False])
def test_a_bucketed_cache_samples_the_same_completions(model_dir, cascade, request, monkeypatch):
    """On CPU transformers compiles nothing, so `compiled=True` differs from the default only by
    the cache's bucketed length: the same rows, seeds and tokens must come out."""
    from mrtpo.harness import rollout
    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    buckets = []  # what each sample() asked prompt_cache for (the real one runs)
    real = rollout.prompt_cache
    monkeypatch.setattr(rollout, "prompt_cache", lambda *a, **kw: buckets.append(kw.get("bucket")) or real(*a, **kw))

    policy = load_policy(str(request.getfixturevalue(model_dir)), lora=True, lora_r=4, lora_dropout=0.0)
    task = get_task("toolcall")
    examples = task.load()[:2]

    def run(compiled: bool):
        return sample(policy, task, examples, 3, temperature=0.9, max_new_tokens=12, cascade=cascade,
                      compiled=compiled, lean=False,  # generate's path, whose cache the bucket sizes
                      logits_processor=[RowSeededSampling(5, 1, 0, 0.9)]).response_ids

    plain = run(False)
    assert run(True) == plain and any(len(r) > 1 for r in plain)
    assert buckets == [None, rollout.CACHE_BUCKET]


def test_the_prompt_cache_takes_the_bucketed_length(tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from mrtpo.harness.rollout import prompt_cache

    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir))
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 10]]
    with torch.no_grad():
        exact = prompt_cache(model, prompts, 2, 0, max_new_tokens=12).cache
        bucketed = prompt_cache(model, prompts, 2, 0, max_new_tokens=12, bucket=256).cache
    assert exact.layers[0].keys.shape[2] == 5 + 12  # 4 cached columns, the last prompt token, 12 new
    assert bucketed.layers[0].keys.shape[2] == 256
    assert bucketed.layers[0].keys.shape[0] == 4  # each prompt's row repeated for its 2 completions


def test_the_replay_takes_the_beginning_the_rollout_encoded(tiny_qwen2_dir):
    """As the loop runs them (one fold from sampling to the replay): the rollout keeps its
    prompts' common beginning (`Rollout.prompt_start`), the replay feeds the model fewer tokens
    for it and gives the same distances as without it."""
    import torch

    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.scoring import Scorer
    from mrtpo.harness.token_credit import policy_replayer, replay_distances
    from mrtpo.replay.planning import common_prefix
    from mrtpo.replay.plumbing import decoder_of
    from mrtpo.tasks import get_task

    torch.manual_seed(0)
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    with torch.no_grad():  # an adapter away from zero, so that the fold matters
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape) * 0.05)
    task = get_task("toolcall")
    examples = task.load()[:2]
    fed = []
    hook = decoder_of(policy.model).register_forward_pre_hook(
        lambda _m, args, kwargs: fed.append(kwargs["input_ids"].numel()), with_kwargs=True)
    try:
        with torch.no_grad(), policy.merged():
            rollout = sample(policy, task, examples, 2, temperature=0.9, max_new_tokens=8,
                             logits_processor=[RowSeededSampling(5, 1, 0, 0.9)])
            scored = Scorer(task, 0).score(rollout.examples, rollout.responses)
            start = rollout.prompt_start
            assert start.ids == tuple(rollout.prompt_ids[0][:common_prefix([x[:-1] for x in rollout.prompt_ids])])
            fed.clear()
            known, _ = replay_distances(policy_replayer(policy), task, rollout, scored, 0.9)
            fed_known = sum(fed)
            rollout.prompt_start = None
            fed.clear()
            plain, _ = replay_distances(policy_replayer(policy), task, rollout, scored, 0.9)
            fed_plain = sum(fed)
    finally:
        hook.remove()
    assert plain.abs().max() > 0 and (known - plain).abs().max() <= 1e-5
    assert fed_plain - fed_known >= len(start.ids) // 2, (fed_plain, fed_known, len(start.ids))


def test_compiled_decoding_is_on_for_cuda_policies_and_shapes_are_bucketed(tiny_llama_dir):
    """`--compiled-decoding auto` compiles on CUDA only; a compiled rollout names the shape it
    compiled for, and batches whose prompts differ in length share it (the cache's length is
    bucketed), so a compiled shape serves later steps."""
    import torch

    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import CACHE_BUCKET, compiled_decoding, sample
    from mrtpo.tasks import get_task

    assert compiled_decoding("auto", torch.device("cuda")) and compiled_decoding("auto", "cuda:1")
    assert not compiled_decoding("auto", torch.device("cpu")) and not compiled_decoding("off", "cuda")
    assert compiled_decoding("on", "cpu")
    with pytest.raises(ValueError, match="'auto', 'on' or 'off'"):
        compiled_decoding("yes", "cpu")
    policy = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.0)
    task = get_task("toolcall")
    examples = task.load()
    shapes, longest = [], []
    for batch in (examples[:2], examples[2:4]):
        r = sample(policy, task, batch, 2, temperature=0.9, max_new_tokens=8, compiled=True,
                   logits_processor=[RowSeededSampling(5, 1, 0, 0.9)])
        shapes.append(r.compiled_shape)
        longest.append(max(len(x) for x in r.prompt_ids))
    assert longest[0] != longest[1]  # prompts of other lengths...
    assert shapes[0] == shapes[1] and shapes[0][0] == 4 and shapes[0][1] % CACHE_BUCKET == 0  # ...one shape
    eager = sample(policy, task, examples[:2], 2, temperature=0.9, max_new_tokens=8,
                   logits_processor=[RowSeededSampling(5, 1, 0, 0.9)])
    assert eager.compiled_shape is None


def test_the_loop_times_a_new_compiled_shape_apart(tiny_llama_dir, tmp_path):
    """With compiled decoding, the step that compiles a shape books its rollout as
    time/compile (not in time/step); a later step with the same shape does not."""
    import json

    from mrtpo.harness import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig(model=str(tiny_llama_dir), output_dir=str(run), task="toolcall", compiled_decoding="on",
                      steps=2, batch_prompts=2, num_generations=2, max_new_tokens=6, verify_workers=0, lora_r=4,
                      save_every=0, heldout=0, log_completions_every=0))
    first, second = (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    assert first["time/compile"] > 0 and "time/generate" not in first
    assert "time/compile" not in second and second["time/generate"] > 0
