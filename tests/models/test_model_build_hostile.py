"""`mrtpo model build` on hostile sources and caches, and `eval --model` on broken models.

- a --from file whose size is not the pinned one is refused from its size, before any hashing
  (a 200 GB sparse file starting with GGUF);
- a wheel whose GGUF member is encrypted, or compressed by a method zipfile does not know, is
  refused in one line;
- a cache root that is a file (--cache-dir FILE, MRTPO_CACHE_DIR=/dev/null) is named;
- SIGTERM during a build leaves nothing in the cache, and a later build removes what a builder
  killed outright left;
- `eval --model` load failures are one line; a config that does not describe its weights is
  refused before building."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from limits import time_limit
from mrtpo.cli import app
from mrtpo.models import builds as dm
from tiny_gguf import packaged_recipe, wheel_with
from tiny_gguf import write_tiny_gguf

pytest.importorskip("gguf")
pytestmark = pytest.mark.timeout(300)
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


@pytest.fixture(scope="module")
def gguf_file(tiny_tokenizer, tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "Tiny-Test.F32.gguf", tiny_tokenizer)


@pytest.fixture
def recipe(gguf_file, monkeypatch):
    r = packaged_recipe(gguf_file)
    monkeypatch.setitem(dm.RECIPES, r.name, r)
    return r


def _build(recipe, *args, env=None):
    result = CliRunner().invoke(app, ["model", "build", recipe.name, *map(str, args)], env={**ENV, **(env or {})})
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    return result, " ".join(out.split())


def _clean_error(result, out, *words):
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert "Traceback" not in out and (result.exception is None or isinstance(result.exception, SystemExit)), out
    for w in words:
        assert w in out, (w, out)


# --- size before hash -----------------------------------------------------------------------
def test_a_huge_sparse_gguf_is_refused_from_its_size_at_once(recipe, tmp_path):
    huge = tmp_path / "huge.gguf"
    with open(huge, "wb") as f:
        f.write(b"GGUF")
        f.truncate(200 << 30)  # 200 GB, sparse: nothing on disk, everything to hash
    with time_limit(10, "model build --from a 200 GB file"):
        result, out = _build(recipe, "--cache-dir", tmp_path / "cache", "--from", huge)
    _clean_error(result, out, str(huge), "214,748,364,800 bytes")


# --- wheels zipfile cannot read ------------------------------------------------------------
def _patch_member(wheel: Path, member: str, *, flag: int | None = None, method: int | None = None) -> None:
    """Set the general-purpose flag or the compression method of `member` in both its local
    header and its central-directory entry (what an encrypted or exotic wheel has)."""
    data = bytearray(wheel.read_bytes())
    name = member.encode()
    for sig, flag_at, method_at, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        start = 0
        while (i := data.find(sig, start)) >= 0:
            start = i + 4
            if data[i + name_at:i + name_at + len(name)] != name:
                continue
            if flag is not None:
                data[i + flag_at:i + flag_at + 2] = struct.pack("<H", struct.unpack_from("<H", data, i + flag_at)[0] | flag)
            if method is not None:
                data[i + method_at:i + method_at + 2] = struct.pack("<H", method)
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, words", [("encrypted", "encrypted"), ("method", "compression")])
def test_a_wheel_member_zipfile_cannot_read_is_one_line(recipe, gguf_file, tmp_path, damage, words):
    wheel = wheel_with(recipe, gguf_file, tmp_path)
    member = f"{recipe.module}/{recipe.gguf}"
    _patch_member(wheel, member, **({"flag": 0x1} if damage == "encrypted" else {"method": 99}))
    cache = tmp_path / "cache"
    result, out = _build(recipe, "--cache-dir", cache, "--from", wheel)
    _clean_error(result, out, str(wheel), words, "Fetch it again")
    assert not any((cache / "models").iterdir()) if (cache / "models").exists() else True


def test_a_wheel_without_the_gguf_says_so_once(recipe, tmp_path):
    """Its own error, not wrapped again as an encrypted or oddly compressed member (issue 61, F)."""
    import zipfile

    wheel = tmp_path / f"{recipe.module}-{recipe.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{recipe.module}/__init__.py", "")
    result, out = _build(recipe, "--cache-dir", tmp_path / "cache", "--from", wheel)
    _clean_error(result, out, str(wheel), f"this wheel has no {recipe.module}/{recipe.gguf}")
    assert "neither encrypted" not in out and "cannot be read" not in out, out


def test_a_wheel_member_whose_compressed_data_is_corrupt_is_one_line(recipe, gguf_file, tmp_path):
    """A deflated GGUF member whose stream does not decompress (was zlib.error, a traceback)."""
    import zipfile

    wheel = tmp_path / f"{recipe.module}-{recipe.version}-py3-none-any.whl"
    member = f"{recipe.module}/{recipe.gguf}"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(member, gguf_file.read_bytes())
    data = bytearray(wheel.read_bytes())
    start = data.find(b"PK\x03\x04")
    name_len, extra_len = struct.unpack_from("<HH", data, start + 26)
    data[start + 30 + name_len + extra_len] = 0xFF  # the first deflate block: a reserved block type
    wheel.write_bytes(bytes(data))
    result, out = _build(recipe, "--cache-dir", tmp_path / "cache", "--from", wheel)
    _clean_error(result, out, str(wheel), "does not decompress", "Fetch it again")


# --- a cache root that is a file -------------------------------------------------------------
@pytest.mark.parametrize("how", ["flag", "env-file", "env-dev-null"])
def test_a_cache_root_that_is_a_file_is_named(recipe, gguf_file, tmp_path, how):
    root = tmp_path / "afile"
    root.write_text("not a directory")
    if how == "flag":
        result, out = _build(recipe, "--cache-dir", root, "--from", gguf_file)
    else:
        where = "/dev/null" if how == "env-dev-null" else str(root)
        result, out = _build(recipe, "--from", gguf_file, env={"MRTPO_CACHE_DIR": where})
        root = Path(where)
    _clean_error(result, out, f"{root} is a file, not a directory", "--cache-dir")


# --- SIGTERM mid-build ---------------------------------------------------------------------
SLOW_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path[:0] = [{helpers!r}]
    from mrtpo.models import builds as dm, packaged
    from tiny_gguf import packaged_recipe

    recipe = packaged_recipe(Path({gguf!r}))

    def slow_convert(gguf_path, out):  # the conversion of a 98 MB GGUF takes a while
        Path({ready!r}).write_text("converting")
        time.sleep(60)

    packaged.convert_gguf = slow_convert
    dm.build(recipe, cache_dir={cache!r}, progress=False, source={wheel!r})
""")


def test_sigterm_during_a_build_leaves_nothing(recipe, gguf_file, tmp_path):
    wheel = wheel_with(recipe, gguf_file, tmp_path)
    cache, ready = tmp_path / "cache", tmp_path / "ready"
    helpers = Path(__file__).resolve().parent.parent / "helpers"  # tests/helpers: tiny_gguf
    code = SLOW_BUILD.format(helpers=str(helpers), gguf=str(gguf_file), ready=str(ready),
                             cache=str(cache), wheel=str(wheel))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the build never reached the conversion"
        fetched = list((cache / "models").glob("*.fetch/*"))
        assert fetched, "the GGUF was not extracted into a .fetch folder"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) != 0
    finally:
        proc.kill()
    assert list((cache / "models").iterdir()) == []


def test_a_later_build_removes_what_a_killed_builder_left(recipe, gguf_file, tmp_path):
    models = tmp_path / "cache" / "models"
    dead = models / f".{dm.model_dir(recipe, tmp_path / 'cache').name}.building-999999999-0000abcd"
    (Path(f"{dead}.fetch")).mkdir(parents=True)
    (Path(f"{dead}.fetch") / recipe.gguf).write_bytes(b"GGUF partial")
    dead.mkdir()
    alive = models / f".other.building-{os.getpid()}-0000abcd"  # a live builder's: kept
    alive.mkdir()
    result, out = _build(recipe, "--cache-dir", tmp_path / "cache", "--from", gguf_file)
    assert result.exit_code == 0, out
    left = sorted(p.name for p in models.iterdir())
    assert left == sorted([alive.name, dm.model_dir(recipe, tmp_path / "cache").name]), left


# --- eval --model load failures are one line ---------------------------------------------------
class _Payload:
    def __reduce__(self):
        return (print, ("a pickle ran",))


def _broken_model(tiny_llama_dir, tmp_path, case) -> tuple[Path | str, str]:
    """(--model value, a word the error names) for each way a model fails to load."""
    import json
    import pickle
    import shutil

    if case == "hub-unreachable":
        return "mrtpo-test-org/no-such-model", "mrtpo-test-org/no-such-model"
    path = tmp_path / case
    shutil.copytree(tiny_llama_dir, path)
    if case == "pickle-bin":
        (path / "model.safetensors").unlink()
        (path / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload()}))
    elif case == "vocabulary":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        tok.add_tokens([f"extra_token_{i}" for i in range(200)])
        tok.save_pretrained(path)
    elif case == "negative-dimension":
        config = json.loads((path / "config.json").read_text())
        config["intermediate_size"] = -64
        (path / "config.json").write_text(json.dumps(config))
    elif case == "adapter-base-unreachable":
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llama_dir),
                               LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
        shutil.rmtree(path)
        model.save_pretrained(path)
        config = json.loads((path / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = "mrtpo-test-org/no-such-base"
        (path / "adapter_config.json").write_text(json.dumps(config))
        return path, "mrtpo-test-org/no-such-base"
    return path, str(path)


@pytest.mark.parametrize("case", ["pickle-bin", "vocabulary", "negative-dimension", "hub-unreachable",
                                  "adapter-base-unreachable"])
def test_eval_model_load_failures_are_one_line(tiny_llama_dir, tmp_path, case, capfd):
    model, names = _broken_model(tiny_llama_dir, tmp_path, case)
    result = CliRunner().invoke(app, ["eval", "toolcall", "--model", str(model), "--limit", "1", "--no-progress",
                                      "--max-new-tokens", "2"], env=ENV)
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    _clean_error(result, " ".join(out.split()), names)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) >= 1 and all(len(e) < 600 for e in errors), out
    assert "a pickle ran" not in capfd.readouterr().out


# --- a config that does not describe its weights ------------------------------------------------
@pytest.mark.parametrize("change, words", [({"num_hidden_layers": 1_000_000}, "num_hidden_layers is 1000000"),
                                           ({"hidden_size": 4096}, "hidden_size is 4096"),
                                           ({"intermediate_size": 10 ** 9}, "parameters"),
                                           ({"vocab_size": 10 ** 9}, "parameters"),
                                           ({"head_dim": 500_000}, "q_proj.weight as [2000000, 32], but the weights "
                                                                   "hold [32, 32]")])
@pytest.mark.parametrize("command", ["eval", "train"])
def test_a_config_that_does_not_fit_its_weights_is_refused_before_building(tiny_llama_dir, tmp_path, change,
                                                                           words, command):
    import json
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **change}))
    args = {"eval": ["eval", "toolcall", "--model", model, "--limit", 1, "--no-progress"],
            "train": ["train", "--task", "toolcall", "--model", model, "--output-dir", tmp_path / "run", "--steps", 1]}
    with time_limit(30, "loading a config over weights it does not describe"):
        result = CliRunner().invoke(app, [str(a) for a in args[command]], env=ENV)
    out = " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())
    _clean_error(result, out, str(model / "config.json"), words, "does not belong to these weights")


@pytest.mark.parametrize("command", ["eval", "train", "credit", "probe"])
def test_a_cache_root_that_is_a_file_is_named_by_every_command_that_builds(tmp_path, command):
    root = tmp_path / "afile"
    root.write_text("not a directory")
    args = {"eval": ["eval", "toolcall", "--model", "smollm2-135m", "--limit", "1"],
            "train": ["train", "--output-dir", tmp_path / "run", "--steps", "1"],
            "credit": ["credit", "toolcall", "--model", "smollm2-135m", "--limit", "1"],
            "probe": ["probe", "toolcall", "--model", "smollm2-135m", "--limit", "1"]}[command]
    result = CliRunner().invoke(app, [str(a) for a in args], env={**ENV, "MRTPO_CACHE_DIR": str(root)})
    out = " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())
    _clean_error(result, out, f"{root} is a file, not a directory", "MRTPO_CACHE_DIR")
