"""Word counting and word tokenisation as IFEval does them, without NLTK.

- `count_words`: IFEval's `RegexpTokenizer(r"\\w+")` token count.
- `word_tokenize`: NLTK's `word_tokenize` (Punkt sentences, then `NLTKWordTokenizer`, the
  improved Treebank tokenizer), ported from NLTK 3.10 (Apache-2.0). IFEval only uses it to count
  all-capital words, so what matters is where tokens split (``DON'T`` -> ``DO``, ``N'T``).
- `split_sentences` / `count_sentences`: see `sentences.py`.
"""
from __future__ import annotations

import re

from mrtpo.verifiers.ifeval.sentences import count_sentences, split_sentences

__all__ = ["count_words", "words", "word_tokenize", "count_sentences", "split_sentences"]

_WORD_RE = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """`\\w+` tokens, as IFEval's word counter sees them."""
    return _WORD_RE.findall(text)


def count_words(text: str) -> int:
    """IFEval's word count (`length_constraints:number_words`)."""
    return len(_WORD_RE.findall(text))


# --- NLTKWordTokenizer (nltk/tokenize/destructive.py) ---------------------------------------
_STARTING_QUOTES = [
    (re.compile("([«“‘„]|[`]+)", re.U), r" \1 "),
    (re.compile(r"^\""), r"``"),
    (re.compile(r"(``)"), r" \1 "),
    (re.compile(r"([ \(\[{<])(\"|\'{2})"), r"\1 `` "),
    (re.compile(r"(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", re.U), r"\1 "),
]
_ENDING_QUOTES = [
    (re.compile("([»”’])", re.U), r" \1 "),
    (re.compile(r"''"), " '' "),
    (re.compile(r'"'), " '' "),
    (re.compile(r"\s+"), " "),
    (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
_PUNCTUATION = [
    (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*)\s*$", re.U), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}", re.U), r" \g<0> "),
    (re.compile(r"[;@#$%&]"), r" \g<0> "),
    (re.compile(r"[\u2012-\u2015]", re.U), r" \g<0> "),  # figure, en and em dashes, horizontal bar
    (re.compile(r'([^\.])(\.)([\]\)}>"\']*)\s*$'), r"\1 \2\3 "),
    (re.compile(r"[?!]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"[*]", re.U), r" \g<0> "),
]
_PARENS_BRACKETS = (re.compile(r"[\]\[\(\)\{\}\<\>]"), r" \g<0> ")
_DOUBLE_DASHES = (re.compile(r"--"), r" -- ")
_CONTRACTIONS2 = [re.compile(p) for p in (
    r"(?i)\b(can)(?#X)(not)\b", r"(?i)\b(d)(?#X)('ye)\b", r"(?i)\b(gim)(?#X)(me)\b",
    r"(?i)\b(gon)(?#X)(na)\b", r"(?i)\b(got)(?#X)(ta)\b", r"(?i)\b(lem)(?#X)(me)\b",
    r"(?i)\b(more)(?#X)('n)\b", r"(?i)\b(wan)(?#X)(na)(?=\s)",
)]
_CONTRACTIONS3 = [re.compile(r"(?i) ('t)(?#X)(is)\b"), re.compile(r"(?i) ('t)(?#X)(was)\b")]


def treebank_tokenize(text: str) -> list[str]:
    """NLTK's `NLTKWordTokenizer().tokenize` on one sentence."""
    for regexp, sub in _STARTING_QUOTES:
        text = regexp.sub(sub, text)
    for regexp, sub in _PUNCTUATION:
        text = regexp.sub(sub, text)
    text = _PARENS_BRACKETS[0].sub(_PARENS_BRACKETS[1], text)
    text = _DOUBLE_DASHES[0].sub(_DOUBLE_DASHES[1], text)
    text = " " + text + " "
    for regexp, sub in _ENDING_QUOTES:
        text = regexp.sub(sub, text)
    for regexp in _CONTRACTIONS2:
        text = regexp.sub(r" \1 \2 ", text)
    for regexp in _CONTRACTIONS3:
        text = regexp.sub(r" \1 \2 ", text)
    return text.split()


def word_tokenize(text: str) -> list[str]:
    """NLTK's `word_tokenize(text)`: Punkt sentences, then the Treebank-style tokenizer."""
    return [tok for sent in split_sentences(text) for tok in treebank_tokenize(sent)]


def count_capital_words(text: str) -> int:
    """IFEval's count of all-capital tokens (`change_case:capital_word_frequency`)."""
    return sum(1 for tok in word_tokenize(text) if tok.isupper())
