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
# Each step is NLTK's `regexp.sub(repl, text)`, in NLTK's order. A step is skipped when the text
# holds none of the characters every match contains: a sub costs microseconds even when nothing
# matches, and a response may hold 25,000 sentences.
def _regex_step(pattern: str, repl: str, needs: str = "", flags: int = 0):
    """One tokenizer step, `re.sub(pattern, repl, text, flags)`, run only when `text` contains
    one of the characters in `needs` (when given, every match contains one of them)."""
    regexp = re.compile(pattern, flags)
    if not needs:
        return lambda text: regexp.sub(repl, text)
    hint = re.compile("[" + re.escape(needs) + "]")
    return lambda text: regexp.sub(repl, text) if hint.search(text) else text


def _final_period(closers: str, spaced: bool):
    r"""NLTK's final-period rule `([^\.])(\.)([<closers>]*)\s*$`, replaced by `\1 \2 \3 `
    (`spaced`) or `\1 \2\3 `, in linear time and with the same result.

    The regex backtracks: when the closers include a space, `[ ]*` and `\s*` share every space
    after the period, and a run of spaces followed by a word costs its length squared
    ("a." + 49,000 spaces + "x" took seconds). Its match is fully determined, so it is found
    directly: no '.' may follow the match's period, so that period is the text's last one, and
    it must not follow another '.'; the closers group takes the longest run of closers after it
    (greedy), and only whitespace may remain, which the replacement drops.
    """

    def apply(text: str) -> str:
        dot = text.rfind(".")
        if dot < 1 or text[dot - 1] == ".":
            return text
        tail = text[dot + 1:]
        group = tail[:len(tail) - len(tail.lstrip(closers))]
        rest = tail[len(group):]
        if rest and not rest.isspace():  # str.isspace is exactly re's \s
            return text
        return text[:dot] + (" . " if spaced else " .") + group + " "

    return apply


_STARTING_QUOTES = [
    _regex_step("([«“‘„]|[`]+)", r" \1 ", "«“‘„`"),
    _regex_step(r"^\"", r"``", '"'),
    _regex_step(r"(``)", r" \1 ", "`"),
    _regex_step(r"([ \(\[{<])(\"|\'{2})", r"\1 `` ", "\"'"),
    _regex_step(r"(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 ", "'"),
]
_PUNCTUATION = [
    _final_period("])}>\"'" "»”’ ", spaced=True),  # NLTK: ([^\.])(\.)([\]\)}>"\'»”’ ]*)\s*$
    _regex_step(r"([:,])([^\d])", r" \1 \2", ":,"),
    _regex_step(r"([:,])$", r" \1 ", ":,"),
    _regex_step(r"\.{2,}", r" \g<0> ", "."),
    _regex_step(r"[;@#$%&]", r" \g<0> ", ";@#$%&"),
    _regex_step("[\u2012-\u2015]", r" \g<0> ", "\u2012\u2013\u2014\u2015"),  # figure, en and em dashes, bar
    _final_period("])}>\"'", spaced=False),  # NLTK: ([^\.])(\.)([\]\)}>"\']*)\s*$
    _regex_step(r"[?!]", r" \g<0> ", "?!"),
    _regex_step(r"([^'])' ", r"\1 ' ", "'"),
    _regex_step(r"[*]", r" \g<0> ", "*"),
]
_PARENS_BRACKETS = _regex_step(r"[\]\[\(\)\{\}\<\>]", r" \g<0> ", "[](){}<>")
_DOUBLE_DASHES = _regex_step(r"--", r" -- ", "-")
_ENDING_QUOTES = [
    _regex_step("([»”’])", r" \1 ", "»”’"),
    _regex_step(r"''", " '' ", "'"),
    _regex_step(r'"', " '' ", '"'),
    _regex_step(r"\s+", " "),
    _regex_step(r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 ", "'"),
    _regex_step(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", "'"),
]
_CONTRACTIONS = [re.compile(p) for p in (
    r"(?i)\b(can)(?#X)(not)\b", r"(?i)\b(d)(?#X)('ye)\b", r"(?i)\b(gim)(?#X)(me)\b",
    r"(?i)\b(gon)(?#X)(na)\b", r"(?i)\b(got)(?#X)(ta)\b", r"(?i)\b(lem)(?#X)(me)\b",
    r"(?i)\b(more)(?#X)('n)\b", r"(?i)\b(wan)(?#X)(na)(?=\s)",  # NLTK's CONTRACTIONS2
    r"(?i) ('t)(?#X)(is)\b", r"(?i) ('t)(?#X)(was)\b",  # CONTRACTIONS3
)]
_BEFORE_PADDING = _STARTING_QUOTES + _PUNCTUATION + [_PARENS_BRACKETS, _DOUBLE_DASHES]
#: what every contraction match contains (same case folding), to skip all ten at once
_CONTRACTION_HINT = re.compile(r"(?i)cannot|d'ye|gimme|gonna|gotta|lemme|more'n|wanna|'tis|'twas")


def treebank_tokenize(text: str) -> list[str]:
    """NLTK's `NLTKWordTokenizer().tokenize` on one sentence."""
    for step in _BEFORE_PADDING:
        text = step(text)
    text = " " + text + " "
    for step in _ENDING_QUOTES:
        text = step(text)
    if _CONTRACTION_HINT.search(text):
        for regexp in _CONTRACTIONS:
            text = regexp.sub(r" \1 \2 ", text)
    return text.split()


def word_tokenize(text: str) -> list[str]:
    """NLTK's `word_tokenize(text)`: Punkt sentences, then the Treebank-style tokenizer."""
    tokens: list[str] = []
    seen: dict[str, list[str]] = {}  # a repeated sentence is tokenized once
    for sent in split_sentences(text):
        if sent not in seen:
            seen[sent] = treebank_tokenize(sent)
        tokens.extend(seen[sent])
    return tokens


def count_capital_words(text: str) -> int:
    """IFEval's count of all-capital tokens (`change_case:capital_word_frequency`)."""
    return sum(1 for tok in word_tokenize(text) if tok.isupper())
