"""Word and sentence splitting without NLTK data: behaviour IFEval relies on, and (when NLTK is
installed) a differential test against NLTK's own Punkt and Treebank tokenizers."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo.verifiers.ifeval.text import (
    count_capital_words,
    count_sentences,
    count_words,
    split_sentences,
    word_tokenize,
)

SHARED = Path(__file__).resolve().parents[3] / "shared"


def test_abbreviations_do_not_end_sentences():
    assert split_sentences("Dr. Smith went home. He was tired.") == ["Dr. Smith went home.", "He was tired."]
    assert count_sentences("Mr. and Mrs. Jones live in the U.S. with their cat.") == 1


def test_sentence_ends_and_closing_quotes():
    assert split_sentences('He said "stop." Then he left!') == ['He said "stop."', "Then he left!"]
    assert count_sentences("Really? Yes! Fine.") == 3
    assert count_sentences("") == 0
    assert count_sentences("no final stop") == 1


def test_numbered_list_items_are_not_split_at_their_numbers():
    # "1." before a lower-case word is an ordinal, not a sentence end (Punkt's ortho heuristic)
    assert count_sentences("Steps: 1. mix the flour 2. add water") == 1


def test_count_words_is_word_character_runs():
    assert count_words("Hello, world! It's 2024.") == 5  # Hello world It s 2024


def test_word_tokenize_splits_contractions_and_punctuation():
    assert word_tokenize("HELLO, DON'T go.") == ["HELLO", ",", "DO", "N'T", "go", "."]
    assert count_capital_words("I LOVE NYC, DON'T YOU?") == 6  # I LOVE NYC DO N'T YOU


# --- differential tests against NLTK (optional `oracle` extra) ----------------------------------
def _nltk_tokenizers():
    pytest.importorskip("nltk")
    return _build_nltk_tokenizers()


@functools.lru_cache(maxsize=1)
def _build_nltk_tokenizers():
    import collections

    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


_PIECES = ["Dr.", "Mr.", "U.S.", "the", "The", "cat", "It", "e.g.", "3.", "1.5", "...", "!", "?", "?!",
           ".", ",", ";", ":", '"', "'", "\u201c", "\u201d", "(", ")", "--", "\u2014", "\n", "\n\n", "A.",
           "DON'T", "can't", "Hello", "*", "#", "$5", "Inc.", "i.e.", "No.", "J.", "Smith", "'s",
           "gonna", "cannot", "\u2018", "\u2019", "x"]


@pytest.mark.oracle
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(_PIECES), st.booleans()), min_size=1, max_size=30))
def test_matches_nltk_on_generated_text(parts):
    sent_tok, word_tok = _nltk_tokenizers()
    text = "".join(p + (" " if space else "") for p, space in parts)
    expected = sent_tok.tokenize(text)
    assert split_sentences(text) == expected
    assert word_tokenize(text) == [w for s in expected for w in word_tok.tokenize(s)]


@pytest.mark.oracle
def test_matches_nltk_on_ifeval_texts():
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    sent_tok, word_tok = _nltk_tokenizers()
    data = SHARED / "data" / "ifeval"
    texts = [json.loads(line)["response"] for line in open(data / "gpt4_responses.jsonl")]
    texts += [json.loads(line)["prompt"] for line in open(data / "input_data.jsonl")]
    bad = [t for t in texts if split_sentences(t) != sent_tok.tokenize(t)]
    assert not bad, f"{len(bad)} of {len(texts)} texts split differently, e.g. {bad[0][:200]!r}"
    bad = [t for t in texts[:300]
           if word_tokenize(t) != [w for s in sent_tok.tokenize(t) for w in word_tok.tokenize(s)]]
    assert not bad, f"{len(bad)} texts tokenised differently, e.g. {bad[0][:200]!r}"
