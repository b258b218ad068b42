"""benchmarks/lib/setting.py: the speed benchmarks' random policies get a tokenizer trained here,
whatever the cache holds (it no longer comes from a built toy policy)."""
from __future__ import annotations


def test_the_random_policies_tokenizer_is_trained_here_with_a_chat_template(tmp_path, monkeypatch):
    from benchmarks.lib.setting import TOKENIZER_VOCAB, tokenizer

    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path))  # a cache with no policy built in it
    tok, where = tokenizer()
    assert where == "trained here on the bundled tasks' text"
    assert 1000 < len(tok) <= TOKENIZER_VOCAB and tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    text = tok.apply_chat_template([{"role": "user", "content": "SELECT name FROM singer"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.decode(tok("SELECT name FROM singer")["input_ids"]) == "SELECT name FROM singer"
    assert not (tmp_path / "models").exists()  # nothing built (the bundled databases may be cached)
