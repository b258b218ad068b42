"""mrtpo/models/builds.py: the build cache (atomic, reused, rebuilt when asked), `resolve_model`,
`mrtpo model build|ls`, and a retired built-in name answered in words.

SmolLM2 (93 MB) is never built here: a tiny Llama GGUF under a recipe that pins its own hash,
'installed' as its package would be (tests/helpers/tiny_gguf.py), goes through the same code in
a second.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.models import builtin
from mrtpo.models import builds as dm
from mrtpo.models.packaged import PackagedModelError
from tiny_gguf import packaged_default, packaged_recipe

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MRTPO_PROGRESS_SECONDS": "0"}


def test_build_is_cached_and_reused(tiny_gguf_file, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = packaged_default(tiny_gguf_file, tmp_path / "site", "test-cached", monkeypatch)
    path = dm.resolve_model(recipe.name, cache_dir=tmp_path, progress=False)
    assert path == str(dm.model_dir(recipe, tmp_path)) and dm.is_built(path)
    manifest = dm.read_manifest(path)
    assert manifest["fingerprint"] == dm.fingerprint(recipe) and manifest["name"] == recipe.name
    assert manifest["source"] == f"installed package {recipe.package}"
    stamp = (tmp_path / path / builtin.MANIFEST).stat().st_mtime_ns
    # reused: the same directory, not rebuilt
    assert dm.resolve_model(recipe.name, cache_dir=tmp_path, progress=False) == path
    assert (tmp_path / path / builtin.MANIFEST).stat().st_mtime_ns == stamp
    # no temporary directories left behind
    assert [p.name for p in (tmp_path / "models").iterdir()] == [f"{recipe.name}-{dm.fingerprint(recipe)}"]
    # a user's model would load the same way
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert model.config.vocab_size == len(tok)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_force_rebuilds_in_place(tiny_gguf_file, tmp_path):
    recipe = packaged_recipe(tiny_gguf_file)
    path = dm.build(recipe, cache_dir=tmp_path, progress=False, source=tiny_gguf_file)
    first = json.loads((path / builtin.MANIFEST).read_text())
    (path / "stale.txt").write_text("from the old build")
    again = dm.build(recipe, cache_dir=tmp_path, progress=False, force=True, source=tiny_gguf_file)
    assert again == path and dm.is_built(path) and not (path / "stale.txt").exists()
    assert json.loads((path / builtin.MANIFEST).read_text())["fingerprint"] == first["fingerprint"]
    assert [p.name for p in (tmp_path / "models").iterdir()] == [path.name]


def test_a_failed_build_leaves_nothing(tiny_gguf_file, tmp_path):
    recipe = packaged_recipe(tiny_gguf_file, sha256="0" * 64)  # the file is not the one pinned
    with pytest.raises(PackagedModelError, match="SHA-256"):
        dm.build(recipe, cache_dir=tmp_path, progress=False, source=tiny_gguf_file)
    assert not any((tmp_path / "models").iterdir())


def test_a_build_without_a_recipe_builds_the_default_policy(tiny_gguf_file, tmp_path):
    """`build()` with no recipe is the default policy's build (SmolLM2's pinned GGUF): a file
    that is not that one is refused by its size before anything is converted, and nothing stays."""
    with pytest.raises(PackagedModelError, match=f"{builtin.SMOLLM2.size:,}|{builtin.SMOLLM2.size}"):
        dm.build(cache_dir=tmp_path, progress=False, source=tiny_gguf_file)
    assert [p.name for p in (tmp_path / "models").iterdir()] == []
    assert dm.model_dir(builtin.RECIPES[builtin.DEFAULT_MODEL], tmp_path).name.startswith("smollm2-135m-")


def test_fingerprint_follows_the_recipe_and_nothing_else(tiny_gguf_file, monkeypatch):
    import mrtpo

    a = packaged_recipe(tiny_gguf_file)
    assert dm.fingerprint(a) == dm.fingerprint(packaged_recipe(tiny_gguf_file))
    assert dm.fingerprint(a) != dm.fingerprint(replace(a, convert_version=2))
    assert dm.fingerprint(a) != dm.fingerprint(replace(a, sha256="0" * 64))
    # SmolLM2's build keeps its directory across mrtpo versions (and across the retirement of
    # mrtpo-tiny, which changed this module): a cached build is never rebuilt for nothing
    monkeypatch.setattr(mrtpo, "__version__", "99.0")
    assert dm.model_dir(builtin.SMOLLM2).name == "smollm2-135m-5be756f1b53f"


def test_resolve_leaves_paths_and_hub_ids_alone(tmp_path):
    assert dm.resolve_model(str(tmp_path), cache_dir=tmp_path) == str(tmp_path)
    assert dm.resolve_model("Qwen/Qwen2.5-0.5B-Instruct", cache_dir=tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert not (tmp_path / "models").exists()


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "c"))
    assert dm.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MRTPO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert dm.default_cache_dir() == tmp_path / "x" / "mrtpo"


def test_databases_and_policies_share_one_cache_root(monkeypatch, tmp_path):
    from mrtpo.tasks import text2sql_data

    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path))
    assert text2sql_data.cache_dir() == dm.default_cache_dir() == tmp_path


def test_cli_model_build(tiny_gguf_file, tmp_path, monkeypatch):
    recipe = packaged_default(tiny_gguf_file, tmp_path / "site", "test-cli", monkeypatch)
    runner = CliRunner()
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path)], env=ENV)
    assert res.exit_code == 0, res.output
    path = dm.model_dir(recipe, tmp_path)
    assert dm.is_built(path) and res.stdout.strip().splitlines()[-1] == str(path)
    assert f"converted from {recipe.gguf} (installed package {recipe.package})" in res.stderr
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path)], env=ENV)
    assert res.exit_code == 0 and "cached" in res.output
    res = runner.invoke(app, ["model", "ls", "--cache-dir", str(tmp_path)], env=ENV)
    assert res.exit_code == 0 and recipe.name in res.stdout and "smollm2-135m (default)" in res.stdout
    assert "134.5M" in res.stdout and recipe.parameters in res.stdout
    res = runner.invoke(app, ["model", "build", "no-such-model", "--cache-dir", str(tmp_path)], env=ENV)
    assert res.exit_code == 2 and "built-in policies: smollm2-135m" in res.output


@pytest.mark.parametrize("command", ["build", "train", "eval", "credit", "probe"])
def test_a_retired_policy_says_what_became_of_it(command, tmp_path):
    """`mrtpo-tiny` was a built-in policy until it was retired: every command that takes a
    model says so in one line with what to use instead, and builds nothing."""
    args = {"build": ["model", "build", "mrtpo-tiny", "--cache-dir", str(tmp_path)],
            "train": ["train", "--model", "mrtpo-tiny", "--steps", "1", "--output-dir", str(tmp_path / "run")],
            "eval": ["eval", "toolcall", "--model", "mrtpo-tiny", "--limit", "1"],
            "credit": ["credit", "toolcall", "--model", "mrtpo-tiny", "--limit", "1"],
            "probe": ["probe", "toolcall", "--model", "mrtpo-tiny", "--limit", "1"]}[command]
    res = CliRunner().invoke(app, args, env={**ENV, "MRTPO_CACHE_DIR": str(tmp_path)})
    assert res.exit_code == 2, res.output
    said = " ".join(res.stderr.split())
    assert "mrtpo-tiny, a 2.4M-parameter toy built from a seeded recipe, is no longer a built-in policy" in said
    assert "Use --model smollm2-135m (the default)" in said and "Traceback" not in res.output
    assert not (tmp_path / "models").exists() and not (tmp_path / "run").exists()


def test_an_adapter_on_the_retired_policy_is_refused_in_words(tmp_path):
    from mrtpo.harness.run.trained import TrainedModelError, locate

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "mrtpo-tiny"}))
    with pytest.raises(TrainedModelError, match="adapter_config.json: its base model: mrtpo-tiny, a 2.4M"):
        locate(adapter)
    res = CliRunner().invoke(app, ["eval", "toolcall", "--model", str(adapter), "--limit", "1"],
                             env={**ENV, "MRTPO_CACHE_DIR": str(tmp_path / "cache")})
    said = " ".join(res.stderr.split())
    assert res.exit_code == 2 and "its base model: mrtpo-tiny, a 2.4M-parameter toy" in said, res.output
    assert "Traceback" not in res.output and not (tmp_path / "cache" / "models").exists()


def test_a_local_directory_named_like_the_retired_policy_is_a_model(tiny_qwen2_dir, tmp_path, monkeypatch):
    """The retired name answers only for itself: a user's own model directory called
    `mrtpo-tiny` loads as any directory does."""
    import shutil

    from mrtpo.harness.policy import model_arg_problem

    assert builtin.retired("mrtpo-tiny") and builtin.retired("smollm2-135m") is None
    shutil.copytree(tiny_qwen2_dir, tmp_path / "mrtpo-tiny")
    monkeypatch.chdir(tmp_path)
    assert builtin.retired("mrtpo-tiny") is None and model_arg_problem("mrtpo-tiny", trained=False) is None


def test_train_without_model_uses_the_builtin_policy_and_its_settings():
    from mrtpo.harness.config import resolve

    cfg = resolve(None, {"lora": True})
    assert cfg.model == builtin.DEFAULT_MODEL and cfg.lora
    for key, value in builtin.TRAIN_DEFAULTS[builtin.DEFAULT_MODEL].items():
        assert getattr(cfg, key) == value
    cfg = resolve(None, {"steps": 3, "task": "instruct"})  # flags given win
    assert (cfg.model, cfg.steps, cfg.task) == (builtin.DEFAULT_MODEL, 3, "instruct")
    cfg = resolve(None, {"model": "some/model", "task": "toolcall"})  # another model: trainer defaults
    assert cfg.lr != builtin.TRAIN_DEFAULTS[builtin.DEFAULT_MODEL]["lr"]


def test_the_trainer_loads_a_builtin_name_from_the_cache(tiny_gguf_file, tmp_path, monkeypatch):
    """`train(model="<built-in name>")` resolves the name to its cached build and trains it."""
    from mrtpo.harness import TrainConfig, train

    recipe = packaged_default(tiny_gguf_file, tmp_path / "site", "test-train", monkeypatch)
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TrainConfig(model=recipe.name, task="toolcall", steps=1, batch_prompts=1, num_generations=2,
                      max_new_tokens=4, output_dir=str(tmp_path / "run"), verify_workers=0,
                      log_completions_every=0, save_every=0)
    result = train(cfg)
    assert dm.is_built(dm.model_dir(recipe)) and len(result.history) == 1
