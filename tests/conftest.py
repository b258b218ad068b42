"""Shared fixtures: seeded runs, a tiny real tokenizer and tiny Qwen2/Llama models saved to disk."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

# A small corpus covering the three tasks' vocabulary, so the trained BPE has useful merges.
CORPUS = [
    "SELECT name, age FROM singer WHERE age > 30 ORDER BY age DESC",
    "SELECT count(*) FROM concert JOIN stadium ON concert.stadium_id = stadium.stadium_id",
    "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER)",
    "no such column: nme",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
    "Write a short poem about the sea. Your answer must contain at least 3 paragraphs.",
    "Answer in all lowercase letters. End your response with the phrase 'Is there anything else?'",
    "Give the final answer as a single SQL statement inside one ```sql code block.",
    "The quick brown fox jumps over the lazy dog. How many singers are there?",
] * 20


@pytest.fixture(autouse=True)
def _seed_everything():
    import torch

    random.seed(0)
    torch.manual_seed(0)
    try:
        from langdetect import DetectorFactory

        DetectorFactory.seed = 0
    except ImportError:
        pass


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    return SHARED


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from mrtpo.models.tiny import train_tokenizer

    return train_tokenizer(CORPUS, vocab_size=400)


def _tiny_model_dir(tmp_path_factory, tokenizer, arch: str) -> Path:
    from mrtpo.models.tiny import build_model, save_policy

    path = tmp_path_factory.mktemp(f"tiny-{arch}")
    save_policy(build_model(tokenizer, arch=arch, hidden_size=32, num_layers=2, num_heads=4,
                            num_kv_heads=2, seed=0), tokenizer, path)
    return path


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """A tiny random Qwen2 with a real ChatML tokenizer, saved as a user's model would be."""
    return _tiny_model_dir(tmp_path_factory, tiny_tokenizer, "qwen2")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return _tiny_model_dir(tmp_path_factory, tiny_tokenizer, "llama")


@pytest.fixture(scope="session")
def tiny_gguf_file(tmp_path_factory, tiny_tokenizer) -> Path:
    """A tiny Llama GGUF (tests/helpers/tiny_gguf.py): what a packaged built-in policy converts."""
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "Tiny-Test.F32.gguf", tiny_tokenizer)


@pytest.fixture(scope="session")
def small_run(tiny_qwen2_dir, tmp_path_factory) -> Path:
    """One step of a small run (the harness-words task) with a checkpoint, completions logged."""
    import harness_task
    from small_runs import small_config

    from mrtpo.harness import train

    harness_task.register()
    out = tmp_path_factory.mktemp("small-run") / "run"
    train(small_config(tiny_qwen2_dir, out, steps=1))
    return out


@pytest.fixture
def run_copy(small_run, tmp_path) -> Path:
    """A copy of `small_run` that a test may change."""
    import shutil

    return Path(shutil.copytree(small_run, tmp_path / "run"))
