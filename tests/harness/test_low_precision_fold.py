"""--low-precision-fold: a LoRA policy on bfloat16 weights samples and replays with a copy whose
adapted weights hold round(W + BA), refreshed at every fold, while the adapter trains in float32
and the update corrects for the copy's rounding (Policy.merged, Policy.refresh_folded_copy), on
a tiny real Llama in bfloat16 on CPU and through `mrtpo train`."""
from __future__ import annotations

import json

import harness_task
import pytest
import torch
from cli_runs import invoke

harness_task.register()

IDS = torch.tensor([[3, 5, 6, 7, 8, 9, 10, 11]])


def _bf16_policy(model_dir, fold_copy=True):
    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(model_dir), lora=True, lora_r=4, lora_dropout=0.0, device="cpu", dtype="bfloat16",
                         fold_copy=fold_copy)
    with torch.no_grad():  # an adapter that changes the outputs
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    policy.model.eval()
    return policy


def _lora_layers(policy):
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in policy.model.named_modules() if isinstance(m, LoraLayer)]


def _expected(layer):
    """round(W + BA) from float32: what the copy's weight must hold."""
    w = layer.get_base_layer().weight
    return (w.float() + layer.get_delta_weight("default").float()).to(w.dtype)


def test_the_fold_goes_into_a_copy_refreshed_in_place_and_leaves_the_weights(tiny_llama_dir):
    policy = _bf16_policy(tiny_llama_dir)
    assert policy.folds_a_copy and policy.dtype == torch.bfloat16
    layers = _lora_layers(policy)
    assert layers and all(m.lora_A["default"].weight.dtype == torch.float32 for _, m in layers)  # fp32 masters
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    with torch.no_grad():
        own = policy.model(input_ids=IDS).logits.float()
        with policy.merged() as folded:
            assert folded is not policy.model and not any("lora" in n for n, _ in folded.named_parameters())
            with policy.merged() as inner:  # nested: the same copy, not another fold
                assert inner is folded
            got = folded(input_ids=IDS).logits.float()
            weights = {name: folded.get_submodule(name.removeprefix("base_model.model.")).weight
                       for name, _ in layers}
            for name, m in layers:
                assert torch.equal(weights[name], _expected(m)), name
            pointers = {name: w.data_ptr() for name, w in weights.items()}
        with policy.model.disable_adapter():
            base = policy.model(input_ids=IDS).logits.float()
    # the copy gives the adapter's outputs to bf16 rounding, and the adapter matters
    assert (own - base).abs().max() > 0.05
    assert (got - own).abs().max() < 0.25 * (own - base).abs().max()
    for key, value in policy.model.state_dict().items():  # the policy's own weights are untouched
        assert torch.equal(value, before[key]), key

    with torch.no_grad():  # the adapter moves (a training step): the next fold holds the new W + BA
        for _, m in layers:
            m.lora_B["default"].weight.add_(0.1)
        with policy.merged() as again:
            assert again is folded  # made once
            for name, m in layers:
                w = again.get_submodule(name.removeprefix("base_model.model.")).weight
                assert torch.equal(w, _expected(m)) and w.data_ptr() == pointers[name], name
    with policy.merged() as model:  # with gradients on (the update): the model itself
        assert model is policy.model


def test_a_fold_with_gradients_on_inside_it_is_refused_and_the_copy_is_let_go(tiny_llama_dir):
    policy = _bf16_policy(tiny_llama_dir)
    with torch.no_grad(), policy.merged():
        with torch.enable_grad(), pytest.raises(RuntimeError, match="no gradient"):
            with policy.merged():
                pass
    with pytest.raises(KeyError), torch.no_grad(), policy.merged():
        raise KeyError("inside")
    assert policy._folded is None  # let go: a pass with gradients on gets the model itself
    with policy.merged() as model:
        assert model is policy.model
    with torch.no_grad(), policy.merged() as model:  # a fold after an error is a fold again
        assert model is not policy.model


def test_without_the_fold_or_in_float32_nothing_changes(tiny_llama_dir):
    from mrtpo.harness.policy import load_policy

    plain = _bf16_policy(tiny_llama_dir, fold_copy=False)
    assert not plain.folds_a_copy
    with torch.no_grad(), plain.merged() as model:  # three products per projection, as before
        assert model is plain.model and not any(getattr(m, "merged", False) for m in model.modules())
    full = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, device="cpu", dtype="float32", fold_copy=True)
    assert not full.folds_a_copy
    with torch.no_grad(), full.merged() as model:  # float32 folds in place, exactly, as before
        assert model is full.model and any(getattr(m, "merged", False) for m in model.modules())
    assert "folded" not in full._copies and "folded" not in plain._copies


def test_the_fold_is_on_by_default_for_cuda_only():
    from mrtpo.harness.policy import low_precision_fold

    assert low_precision_fold("auto", torch.device("cuda")) and low_precision_fold("auto", "cuda:1")
    assert not low_precision_fold("auto", "cpu") and not low_precision_fold("off", "cuda")
    assert low_precision_fold("on", "cpu")
    with pytest.raises(ValueError, match="'auto', 'on' or 'off'"):
        low_precision_fold("yes", "cpu")


def test_mrtpo_train_samples_from_the_folded_copy_and_corrects_for_it(tiny_llama_dir, tmp_path):
    """Through the CLI on bfloat16 weights: the sampler's log-probs are recorded and compared
    with the weights' (TRL's sampling/* metrics), and the run trains; without the fold nothing
    is recorded, as the sampler is then the weights themselves."""
    runs = {}
    for fold in ("on", "off"):
        out = tmp_path / fold
        result, text = invoke("train", "--model", tiny_llama_dir, "--task", "harness-words", "--steps", "2",
                              "--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "8",
                              "--verify-workers", "0", "--lora-r", "4", "--heldout", "0", "--save-every", "0",
                              "--dtype", "bfloat16", "--low-precision-fold", fold, "--output-dir", out)
        assert result.exit_code == 0, text
        runs[fold] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert f"low_precision_fold: '{fold}'" in (out / "config.yaml").read_text() \
            or f"low_precision_fold: {fold}" in (out / "config.yaml").read_text()
    assert len(runs["on"]) == 2
    for r in runs["on"]:
        assert 0 <= r["sampling/sampling_logp_difference/mean"] <= r["sampling/sampling_logp_difference/max"] < 1.0
        assert 0 < r["sampling/importance_sampling_ratio/min"] <= r["sampling/importance_sampling_ratio/max"] <= 3.0
    # step 1's adapter is peft's zero start (the copy is the weights then); after one update the
    # copy's rounding shows: the sampler really was the copy
    assert runs["on"][-1]["sampling/sampling_logp_difference/max"] > 0
    assert not any(k.startswith("sampling/") for r in runs["off"] for k in r)


def test_an_adapted_embedding_tied_to_the_head_leaves_the_head_alone(tiny_llama_dir):
    """An adapter on the embedding of a model whose head is tied to it: the copy's embedding
    holds W + BA and its head W, as the weights' own path computes them."""
    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.0, device="cpu", dtype="bfloat16",
                         fold_copy=True, lora_target_modules=["q_proj", "embed_tokens"])
    base = policy.model.get_base_model()
    assert base.lm_head.weight is base.model.embed_tokens.get_base_layer().weight  # tied
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name or "lora_embedding" in name:  # peft starts an embedding's A at 0
                p.normal_(0, 0.3)
        head = base.lm_head.weight.clone()
        with policy.merged() as folded:
            embedding = [m for n, m in _lora_layers(policy) if n.endswith("embed_tokens")][0]
            assert torch.equal(folded.model.embed_tokens.weight, _expected(embedding))
            assert not torch.equal(folded.model.embed_tokens.weight, head)
            assert torch.equal(folded.lm_head.weight, head)
            own = policy.model(input_ids=IDS).logits.float()
            got = folded(input_ids=IDS).logits.float()
    assert (got - own).abs().max() < 0.05 * own.abs().max()
