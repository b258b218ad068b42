"""What `mrtpo train` wrote, evaluated and exported.

A 2-step LoRA run on a tiny real model: every checkpoint holds the tokenizer and a portable
`base_model_name_or_path`; `mrtpo eval --model` takes the run dir, a checkpoint and its
adapter dir and scores what the trained weights generate (the same as the merged export);
`mrtpo export` writes an adapter that peft loads onto the base, and a merged model that
plain transformers loads, both giving the trained policy's logits.
"""
from __future__ import annotations

import json
import shutil

import harness_task
import pytest
import torch
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.harness import TrainConfig, train
from mrtpo.harness.run.trained import TrainedModelError, locate
from mrtpo.models.builtin import portable_name

harness_task.register()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SMALL = dict(task="harness-words", batch_prompts=2, num_generations=2, max_new_tokens=8,
             verify_workers=0, lr=5e-2, lora_r=4, log_completions_every=0, save_every=1)


def _invoke(*args):
    return CliRunner().invoke(app, [*map(str, args)], env=ENV, prog_name="mrtpo")


@pytest.fixture(scope="module")
def trained_run(tiny_qwen2_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "run"
    result = train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(out), steps=2, **SMALL))
    return out, result.policy


def _logits(model, tokenizer):
    ids = tokenizer("<answer>select</answer> the singer", return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits  # [1, L, V]


def test_checkpoints_hold_the_tokenizer_and_a_portable_base(trained_run, tiny_qwen2_dir):
    run, _ = trained_run
    for step in (1, 2):
        adapter = run / "checkpoints" / f"step-{step:06d}" / "adapter"
        assert (adapter / "tokenizer_config.json").is_file()
        base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
        assert base == str(tiny_qwen2_dir.resolve())


def test_portable_name_of_builtin_hub_and_local(tiny_qwen2_dir, tmp_path):
    cached = tmp_path / "models" / "smollm2-135m-0123456789ab"  # a built-in build, however it is given
    shutil.copytree(tiny_qwen2_dir, cached)
    (cached / "mrtpo_build.json").write_text(json.dumps({"name": "smollm2-135m"}))
    assert portable_name(str(cached), cached) == "smollm2-135m"
    assert portable_name("smollm2-135m", cached) == "smollm2-135m"
    assert portable_name("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert portable_name(str(tiny_qwen2_dir), tiny_qwen2_dir) == str(tiny_qwen2_dir.resolve())


def test_locate_run_checkpoint_and_adapter(trained_run):
    run, _ = trained_run
    ckpt = run / "checkpoints" / "step-000001"
    assert locate(run).step == 2 and locate(run, step=1).adapter == ckpt / "adapter"
    assert locate(ckpt).step == 1 and locate(ckpt / "adapter").adapter == ckpt / "adapter"
    assert locate(ckpt / "adapter").tokenizer == str(ckpt / "adapter")
    with pytest.raises(TrainedModelError, match="saved steps: 1, 2"):
        locate(run, step=7)


def test_eval_takes_run_dir_checkpoint_and_adapter(trained_run, tmp_path):
    run, _ = trained_run
    ckpt = run / "checkpoints" / "step-000002"
    common = ("--max-new-tokens", 8, "--limit", 4, "--json", "--no-progress")
    summaries = []
    for model in (run, ckpt, ckpt / "adapter"):
        r = _invoke("eval", "harness-words", "--model", model, *common)
        assert r.exit_code == 0, r.output
        summaries.append(json.loads(r.stdout))
    merged = tmp_path / "merged"
    assert _invoke("export", run, merged, "--merge").exit_code == 0
    r = _invoke("eval", "harness-words", "--model", merged, *common)
    assert r.exit_code == 0, r.output
    expected = json.loads(r.stdout)["metrics"]
    for s in summaries:
        assert s["metrics"] == expected


def test_export_adapter_and_merged_load_with_transformers_and_peft(trained_run, tiny_qwen2_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, policy = trained_run
    policy.model.eval()
    want = _logits(policy.model, policy.tokenizer)
    adapter_out, merged_out = tmp_path / "adapter", tmp_path / "merged"

    r = _invoke("export", run, adapter_out)
    assert r.exit_code == 0, r.output
    config = json.loads((adapter_out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_qwen2_dir.resolve())
    assert not (adapter_out / "optimizer.pt").exists()
    tokenizer = AutoTokenizer.from_pretrained(adapter_out)
    assert tokenizer.chat_template
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                      adapter_out).eval()
    assert torch.allclose(_logits(model, tokenizer), want, atol=1e-5)

    r = _invoke("export", run, merged_out, "--merge", "--step", 2, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kind"] == "merged"
    model = AutoModelForCausalLM.from_pretrained(merged_out).eval()
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert torch.allclose(_logits(model, AutoTokenizer.from_pretrained(merged_out)), want, atol=1e-4)

    # the README's snippet, on this export
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    (snippet,) = [b for b in re.findall(r"^```python\n(.*?)^```$", readme, flags=re.S | re.M) if "exported/demo" in b]
    scope: dict = {}
    exec(snippet.replace("exported/demo", str(merged_out)), scope)
    assert torch.allclose(_logits(scope["model"].eval(), scope["tokenizer"]), want, atol=1e-4)

    step1 = tmp_path / "step1"
    assert _invoke("export", run, step1, "--merge", "--step", 1).exit_code == 0
    assert not torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(step1), tokenizer), want, atol=1e-4)


def test_export_refuses_a_used_directory_and_an_unknown_step(trained_run, tmp_path):
    run, _ = trained_run
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    r = _invoke("export", run, tmp_path / "used")
    assert r.exit_code == 2 and "not empty" in r.output
    assert (tmp_path / "used" / "x").read_text() == "mine"
    r = _invoke("export", run, tmp_path / "new", "--step", 9)
    assert r.exit_code == 2 and "no checkpoint of step 9" in r.output
    assert not (tmp_path / "new").exists()


def test_saving_an_adapter_of_a_builtin_base_looks_nothing_up(tiny_qwen2_dir, tmp_path):
    """An adapter whose base is named by the built-in policy's portable name (not a local
    directory, not a hub repository) saves without peft trying to fetch that base's config
    (which warns "Could not find a config file" on every checkpoint), and loads back."""
    import warnings

    import torch

    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.run import checkpoints

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, device="cpu", base_name="smollm2-135m")
    opt = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=1e-3)
    run = tmp_path / "run"
    run.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        final = checkpoints.save(run, 1, policy, opt)
    assert not [w for w in caught if "config file" in str(w.message) or "remote file" in str(w.message)], \
        [str(w.message) for w in caught]
    saved = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == "smollm2-135m"
    assert (final / "adapter" / "adapter_model.safetensors").is_file()
