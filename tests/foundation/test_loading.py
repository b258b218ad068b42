"""mrtpo/loading.py: no path a user gives makes mrtpo import code from a model directory,
whatever stdin says. A copy of a tiny Llama whose config.json has an unknown model_type and an
auto_map naming a configuration_evil.py that writes a marker file: eval, probe, credit, train and
export (as --model, and as a run's or adapter's recorded base), and the TRL launcher, refuse it in
one line; every transformers load goes through the one loader."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app

pytestmark = pytest.mark.timeout(300)
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
EVIL_CONFIG = '''import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import LlamaConfig


class EvilConfig(LlamaConfig):
    model_type = "evilmodel"
'''


def _invoke(*args, stdin="y\n" * 20):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo", input=stdin)
    return result, " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())


@pytest.fixture
def evil(tiny_llama_dir, tmp_path):
    """(directory, marker): a tiny Llama whose config asks to run configuration_evil.py."""
    path = tmp_path / "evil"
    shutil.copytree(tiny_llama_dir, path)
    marker = tmp_path / "MARKER"
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="evilmodel", auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                    "AutoModelForCausalLM": "configuration_evil.EvilConfig"})
    (path / "config.json").write_text(json.dumps(config))
    (path / "configuration_evil.py").write_text(EVIL_CONFIG.format(marker=str(marker)))
    return path, marker


def _refused(result, out, marker):
    assert not marker.exists(), "the model directory's code ran"
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert "Traceback" not in out and (result.exception is None or isinstance(result.exception, SystemExit)), out
    assert "refused to load" in out and "evilmodel" in out and "own code" in out, out


@pytest.mark.parametrize("command", ["eval", "probe", "credit", "train"])
def test_a_model_directory_with_its_own_code_is_refused_whatever_stdin_says(evil, tmp_path, command):
    path, marker = evil
    args = {"eval": ["eval", "toolcall", "--model", path, "--limit", 1, "--no-progress"],
            "probe": ["probe", "toolcall", "--model", path, "--limit", 1],
            "credit": ["credit", "toolcall", "--model", path],
            "train": ["train", "--task", "toolcall", "--model", path, "--output-dir", tmp_path / "run",
                      "--steps", 1]}[command]
    result, out = _invoke(*args)
    _refused(result, out, marker)


@pytest.fixture
def evil_adapter(tiny_llama_dir, evil, tmp_path):
    """An adapter directory whose recorded base is the evil directory."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llama_dir),
                           LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(evil[0])
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    return adapter


@pytest.mark.parametrize("command", ["eval", "credit", "export"])
def test_an_adapters_recorded_base_with_its_own_code_is_refused(evil, evil_adapter, tmp_path, command):
    args = {"eval": ["eval", "toolcall", "--model", evil_adapter, "--limit", 1, "--no-progress"],
            "credit": ["credit", "toolcall", "--model", evil_adapter],
            "export": ["export", evil_adapter, tmp_path / "out", "--merge"]}[command]
    result, out = _invoke(*args)
    _refused(result, out, evil[1])


def test_a_tokenizer_naming_its_own_class_is_not_run(tiny_llama_dir, tmp_path):
    """A known model_type, but tokenizer_config.json names the directory's own tokenizer code:
    transformers' own classes are used or the load fails; the code never runs."""
    path = tmp_path / "tok"
    shutil.copytree(tiny_llama_dir, path)
    marker = tmp_path / "MARKER"
    (path / "tokenization_evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="EvilTokenizer", auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]})
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    result, out = _invoke("eval", "toolcall", "--model", path, "--limit", 1, "--no-progress", "--max-new-tokens", 2)
    assert not marker.exists()
    assert "Traceback" not in out


def test_the_trl_launcher_refuses_custom_code_unless_asked(evil, tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    import io

    from mrtpo.integrations.trl import main

    path, marker = evil
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 20))
    with pytest.raises(SystemExit) as exit_:
        main(["--model_name_or_path", str(path), "--task", "toolcall", "--output_dir", str(tmp_path / "out"),
              "--use_cpu", "--max_steps", "1", "--report_to", "none"])
    assert exit_.value.code == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "refused to load" in err and "--trust_remote_code" in err, err


def test_every_transformers_load_goes_through_the_one_loader():
    """No module but mrtpo.loading calls `from_pretrained` (peft's adapter load, which
    runs no model code, excepted): a new load cannot forget trust_remote_code=False."""
    import ast

    root = Path(__file__).resolve().parents[2] / "mrtpo"
    offenders = []
    for path in root.rglob("*.py"):
        if path == root / "loading.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "from_pretrained" \
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "PeftModel"):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders


# --- a config.json that does not describe its weights (issue 40 item 6) ----------------------
# config_weights_problem builds the model config.json describes on the meta device (shapes, no
# memory) and compares it with the safetensors headers before transformers builds anything.
MISMATCHES = {
    "hostile-head-dim": ({"head_dim": 500_000}, "model.layers.0.self_attn.q_proj.weight as [2000000, 32], "
                                                "but the weights hold [32, 32]"),
    "intermediate-size": ({"intermediate_size": 200}, "model.layers.0.mlp.gate_proj.weight as [200, 32], "
                                                      "but the weights hold [128, 32]"),
    "hostile-intermediate-size": ({"intermediate_size": 10 ** 7}, "parameters"),
    "kv-heads": ({"num_key_value_heads": 4}, "k_proj.weight as [32, 32], but the weights hold [16, 32]"),
    "extra-layer": ({"num_hidden_layers": 3}, "num_hidden_layers is 3, but the weights hold 2 layers"),
    "untied-head-missing": ({"tie_word_embeddings": False}, "lm_head.weight [283, 32], which the weights do not hold"),
}


def _with_config(model_dir: Path, tmp_path: Path, change: dict) -> Path:
    path = tmp_path / "changed"
    shutil.copytree(model_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    return path


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_config_that_does_not_describe_its_weights_names_the_first_tensor(request, tmp_path, arch, case):
    from mrtpo.loading import config_weights_problem

    change, words = MISMATCHES[case]
    if "[283, 32]" in words:  # the tiny tokenizer's vocabulary, padded as build_model pads it
        vocab = json.loads((request.getfixturevalue(f"tiny_{arch}_dir") / "config.json").read_text())["vocab_size"]
        words = words.replace("283", str(vocab))
    model = _with_config(request.getfixturevalue(f"tiny_{arch}_dir"), tmp_path, change)
    problem = config_weights_problem(model)
    assert problem is not None and str(model / "config.json") in problem and words in problem, problem
    assert "does not belong to these weights" in problem and "\n" not in problem, problem


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_config_that_describes_its_weights_passes(request, arch):
    """The tiny models (their lm_head tied to the embedding, absent from the file) load as before."""
    from mrtpo.loading import auto_model, config_weights_problem, meta_shapes

    model_dir = request.getfixturevalue(f"tiny_{arch}_dir")
    shapes, count, shared = meta_shapes(model_dir)
    assert shared == {"lm_head.weight"} and count > 0
    assert config_weights_problem(model_dir) is None
    assert auto_model(model_dir).config.num_hidden_layers == 2


def test_a_hostile_head_dim_is_refused_before_anything_is_built(tiny_llama_dir, tmp_path):
    """`"head_dim": 500000` over a tiny Llama: refused from the headers, in a process that stays
    small (transformers built 1.9 GB of it before failing on the mismatch)."""
    from limits import peak_rss_mb

    model = _with_config(tiny_llama_dir, tmp_path, {"head_dim": 500_000})
    code = ("from mrtpo.loading import ConfigMismatch, auto_model\n"
            f"try:\n    auto_model({str(model)!r})\nexcept ConfigMismatch as exc:\n    print('REFUSED', exc)\n")
    peak, out = peak_rss_mb(code, timeout=120)
    assert "REFUSED" in out and "q_proj.weight" in out, out
    assert peak < 700, (peak, out)
