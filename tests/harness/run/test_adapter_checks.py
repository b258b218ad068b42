"""An adapter is used only whole and finite (issue 61, E): eval, export and credit refuse an
adapter with a NaN tensor or a missing one, in one line naming the file and tensor, instead
of writing NaN weights, generating empty responses or merging a random tensor."""
from __future__ import annotations

import shutil

import pytest
import torch
from cli_runs import clean_error, invoke
from safetensors.torch import load_file, save_file

pytestmark = pytest.mark.timeout(300)


def _bare_adapter(small_run, tmp_path, change) -> str:
    """A copy of the small run's adapter as a directory of its own, its tensors changed by `change`."""
    src = sorted((small_run / "checkpoints").glob("step-*"))[-1] / "adapter"
    dest = tmp_path / "bare"
    shutil.copytree(src, dest)
    tensors = load_file(dest / "adapter_model.safetensors")
    change(tensors)
    save_file(tensors, dest / "adapter_model.safetensors")
    return str(dest)


def _nan(tensors):
    name = sorted(n for n in tensors if "lora_B" in n)[0]
    tensors[name] = torch.full_like(tensors[name], float("nan"))


def _drop_a(tensors):
    del tensors[sorted(n for n in tensors if "lora_A" in n)[0]]


@pytest.mark.parametrize("change, words", [(_nan, "holds NaN or infinite values"), (_drop_a, "lacks 1 tensor")],
                         ids=["nan", "missing-lora_A"])
@pytest.mark.parametrize("command", ["export", "eval", "credit"])
def test_a_broken_adapter_is_refused(small_run, tmp_path, change, words, command):
    import harness_task

    harness_task.register()
    adapter = _bare_adapter(small_run, tmp_path, change)
    args = {"export": ["export", adapter, tmp_path / "out", "--merge"],
            "eval": ["eval", "harness-words", "--model", adapter, "--limit", 1, "--max-new-tokens", 2],
            "credit": ["credit", "harness-words", "--model", adapter, "--limit", 1]}[command]
    result, out = invoke(*args, with_stderr=True)
    clean_error(result, out, words, "adapter_model.safetensors")
    assert not (tmp_path / "out").exists()


def test_an_adapter_tensor_of_the_wrong_shape_is_named(small_run, tmp_path):
    import harness_task

    harness_task.register()

    def reshape(tensors):
        name = sorted(n for n in tensors if "lora_A" in n)[0]
        tensors[name] = torch.zeros(tensors[name].shape[0] + 3, tensors[name].shape[1])

    adapter = _bare_adapter(small_run, tmp_path, reshape)
    result, out = invoke("export", adapter, tmp_path / "out", "--merge", with_stderr=True)
    clean_error(result, out, "size mismatch for", "lora_A", "copying a param with shape")
