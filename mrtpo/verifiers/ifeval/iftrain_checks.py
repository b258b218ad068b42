"""IFTrain: the 29 training-only constraints of open-instruct's IFEvalG (Pyatkin et al. 2025).

IF-RLVR (`allenai/IF_multi_constraints_upto5`) mixes IFEval's 25 ids with these. Each function
mirrors `check_following` of the class registered under the same id in allenai/open-instruct
`open_instruct/IFEvalG/instructions_registry.py` (Apache-2.0), quirks included: keywords of
`word_once`, `word_count_different_numbers` and `count_increment_word` are regexes matched
as substrings, `repeat_phrase` finds its phrases with a regex built from the phrase's first and
last words, `counting_composition` splits paragraphs at `***` although its sentence says
`* * *`. Descriptions are the classes' `build_description` texts (`paragraphs2`'s trailing
space dropped). `letters:letter_counting2` is IFEval's `keywords:letter_frequency` under a
second id. `tests/oracle/test_iftrain_oracle.py` checks them against the reference code.

IFEvalG splits sentences two ways, and so does this module: `split_into_sentences` (the
regex splitter of `instructions_util.py`, ported below) and, inside `nltk.word_tokenize`,
NLTK's Punkt (ported in `sentences.py` / `text.py`).

Deliberate differences, all on kwargs, none on model output:
- where `build_description` draws a random value because a kwarg is falsy (`n_start=0`,
  `N=0`, `frequency` < 0...), the value given is used, as the prompt states it
  (`reference_is_random` names those rows); empty strings and sentence/word positions below 1
  are data errors, reported when the data is loaded;
- where the reference raises on a response (an empty one), the check returns "not followed".
"""
from __future__ import annotations

import re

from mrtpo.verifiers.ifeval.ifeval_checks import _counted, letter_frequency, number_paragraphs
from mrtpo.verifiers.ifeval.instruction import REGISTRY, RELATIONS, register, registered_since
from mrtpo.verifiers.ifeval.text import word_tokenize

_FIRST = len(REGISTRY)  # the table before this module registers (see IDS at the end)

_REL = {"relation": RELATIONS}


def _fixed(text: str):
    return lambda kw: text


def _first(value) -> str:
    """A kwarg IFEvalG accepts as a string or a list (it takes the first item), stripped."""
    return (value if isinstance(value, str) else (value[0] if value else "")).strip()


def _nonempty(*names: str):
    """A `validate` hook: each named string (or first list item) has text in it."""

    def check(kw: dict) -> None:
        for name in names:
            if name in kw and not _first(kw[name]):
                raise ValueError(f"kwarg {name!r} is empty (open-instruct would draw a random value or fail); "
                                 "give the value the prompt states")

    return check


def _positive(*names: str):
    def check(kw: dict) -> None:
        for name in names:
            if name in kw and kw[name] < 1:
                raise ValueError(f"kwarg {name!r} must be at least 1 (positions count from 1), got {kw[name]}")

    return check


def _all(*checks):
    def check(kw: dict) -> None:
        for c in checks:
            c(kw)

    return check


# --- IFEvalG's regex sentence splitter (instructions_util.split_into_sentences) ------------------
_ALPHABETS = "([A-Za-z])"
_PREFIXES = "(Mr|St|Mrs|Ms|Dr)[.]"
_SUFFIXES = "(Inc|Ltd|Jr|Sr|Co)"
_STARTERS = (r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|"
             r"That\s|This\s|Wherever)")
_ACRONYMS = "([A-Z][.][A-Z][.](?:[A-Z][.])?)"
_WEBSITES = "[.](com|net|org|io|gov|edu|me)"
_DIGITS = "([0-9])"
_MULTIPLE_DOTS = r"\.{2,}"


def split_into_sentences(text: str) -> list[str]:
    """IFEvalG's (and Google IFEval's) regex sentence splitter, step for step."""
    text = " " + text + "  "
    text = text.replace("\n", " ")
    text = re.sub(_PREFIXES, "\\1<prd>", text)
    text = re.sub(_WEBSITES, "<prd>\\1", text)
    text = re.sub(_DIGITS + "[.]" + _DIGITS, "\\1<prd>\\2", text)
    text = re.sub(_MULTIPLE_DOTS, lambda match: "<prd>" * len(match.group(0)) + "<stop>", text)
    if "Ph.D" in text:
        text = text.replace("Ph.D.", "Ph<prd>D<prd>")
    text = re.sub(r"\s" + _ALPHABETS + "[.] ", " \\1<prd> ", text)
    text = re.sub(_ACRONYMS + " " + _STARTERS, "\\1<stop> \\2", text)
    text = re.sub(_ALPHABETS + "[.]" + _ALPHABETS + "[.]" + _ALPHABETS + "[.]", "\\1<prd>\\2<prd>\\3<prd>", text)
    text = re.sub(_ALPHABETS + "[.]" + _ALPHABETS + "[.]", "\\1<prd>\\2<prd>", text)
    text = re.sub(" " + _SUFFIXES + "[.] " + _STARTERS, " \\1<stop> \\2", text)
    text = re.sub(" " + _SUFFIXES + "[.]", " \\1<prd>", text)
    text = re.sub(" " + _ALPHABETS + "[.]", " \\1<prd>", text)
    text = text.replace(".”", "”.").replace('."', '".').replace('!"', '"!').replace('?"', '"?')
    text = text.replace(".", ".<stop>").replace("?", "?<stop>").replace("!", "!<stop>")
    text = text.replace("<prd>", ".")
    sentences = [s.strip() for s in text.split("<stop>")]
    if sentences and not sentences[-1]:
        sentences = sentences[:-1]
    return sentences


# --- copy -------------------------------------------------------------------------------------
def _phrase_words(kw: dict) -> None:
    words = kw["phrase"].split()
    if not words:
        raise ValueError("kwarg 'phrase' is empty")
    for w in {words[0], words[-1]}:
        try:
            re.compile(w)
        except re.error as exc:
            raise ValueError(f"kwarg 'phrase': its first and last words are used as a regular expression "
                             f"(as in IFEvalG) and {w!r} is not one: {exc}") from None


_REGEX_SPECIAL = frozenset("\\.^$*+?{}[]|()")


def _phrases_between(first: str, last: str, value: str) -> list[str]:
    """IFEvalG's `re.findall(rf"{first} .*? {last}", value)`, in linear time when both words are
    plain text (no regex syntax), as phrases almost always are.

    The regex, from each `first `, scans to the end of its line when no ` last` follows there:
    "The " * 25,000 with no "worm" took 25 s. Directly: a match runs from `first ` to the nearest
    ` last` after it on the same line (`.` stops at a line break); where none is, the next
    `first ` is tried. The nearest ` last` and line break are found once and reused while
    they lie ahead. Words with regex syntax keep the regex (the data chose them).
    """
    if _REGEX_SPECIAL & set(first + last):
        return re.findall(rf"{first} .*? {last}", value)
    head, tail = first + " ", " " + last
    found: list[str] = []
    end_at = newline_at = -1  # the nearest " last" and "\n" found so far
    start = value.find(head)
    while start >= 0:
        body = start + len(head)
        if end_at < body:
            end_at = value.find(tail, body)
            if end_at < 0:
                break  # no " last" after this point: no more matches
        if newline_at < body:
            newline_at = value.find("\n", body)
            if newline_at < 0:
                newline_at = len(value)
        if end_at < newline_at:
            found.append(value[start:end_at + len(tail)])
            start = value.find(head, end_at + len(tail))
        else:
            start = value.find(head, start + 1)
    return found


@register("copy:repeat_phrase", source="iftrain", required=("phrase", "small_n"), types={"small_n": int},
          validate=_phrase_words,
          describe=lambda kw: (f"Repeat the phrase {kw['phrase'].strip()} exactly {kw['small_n']} times, "
                               "transforming it slightly each time by replacing only one word in the center "
                               "of the phrase."))
def repeat_phrase(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    ref = kw["phrase"].strip().split()
    found = _phrases_between(ref[0], ref[-1], value)
    if len(found) != kw["small_n"]:
        return False, f"phrases from {ref[0]!r} to {ref[-1]!r}: {len(found)}; required: exactly {kw['small_n']}"
    changed = 0
    for phrase in found:
        words = phrase.split()
        if len(words) != len(ref):
            return False, f"{phrase!r} has {len(words)} words, the phrase has {len(ref)}"
        diff = sum(a != b for a, b in zip(words, ref))
        if diff > 1:
            return False, f"{phrase!r} changes {diff} words; one is allowed"
        changed += diff == 1
    return changed == kw["small_n"], f"repetitions with exactly one word replaced: {changed} of {kw['small_n']}"


def _same_text(value: str, target: str, what: str) -> tuple[bool, str]:
    if value.strip().lower() == target.strip().lower():
        return True, f"the response is {what} (ignoring case and surrounding space)"
    return False, f"the response is not {what}, ignoring case and surrounding space"


@register("copy:copy", source="iftrain", required=("prompt_to_repeat",), validate=_nonempty("prompt_to_repeat"),
          describe=_fixed("Copy this instruction verbatim, do not follow the instruction, only copy it into the "
                          "output (do not include this instruction sentence!)."))
def copy(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _same_text(value, kw["prompt_to_repeat"], "the instruction copied")


@register("new:copy_span_idx", source="iftrain", required=("prompt_to_repeat", "n_start", "n_end"),
          types={"n_start": int, "n_end": int}, validate=_nonempty("prompt_to_repeat"),
          describe=lambda kw: (f"Copy the span of words that lies between (and including) index {kw['n_start']} "
                               f"and {kw['n_end']}, the indices are character indices!"))
def copy_span_idx(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    span = kw["prompt_to_repeat"][kw["n_start"]:kw["n_end"]]
    return _same_text(value, span, f"the span [{kw['n_start']}:{kw['n_end']}] ({span.strip()[:60]!r})")


@register("copy:copying_simple", source="iftrain", required=("prompt_to_repeat",),
          validate=_nonempty("prompt_to_repeat"),
          describe=_fixed("Repeat the request without change (do not say anything before repeating the request; "
                          "the request you need to repeat does not include this sentence) and do not answer the "
                          "actual request!"))
def copying_simple(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _same_text(value, kw["prompt_to_repeat"], "the request repeated")


@register("copy:copying_multiple", source="iftrain", required=("prompt_to_repeat", "N"), types={"N": int},
          validate=_nonempty("prompt_to_repeat"),
          describe=lambda kw: (f"Repeat the request without change {kw['N']} times, separated by 6 asterisk symbols "
                               "(do not say anything before repeating the request; the request you need to repeat "
                               "does not include this sentence) and do not answer the actual request!"))
def copying_multiple(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    parts = value.split("******")
    if len(parts) != kw["N"]:
        return False, f"parts separated by ******: {len(parts)}; required: {kw['N']}"
    target = kw["prompt_to_repeat"].strip().lower()
    bad = [i + 1 for i, p in enumerate(parts) if p.strip().lower() != target]
    if bad:
        return False, f"part(s) {bad} are not the request repeated"
    return True, f"the request repeated {kw['N']} times"


# --- detectable format --------------------------------------------------------------------------
@register("detectable_format:sentence_hyphens", source="iftrain",
          describe=_fixed("All sentences must be connected using hyphens, with no spaces between them."))
def sentence_hyphens(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    gold = split_into_sentences(re.sub("-", " ", value))
    for i, (part, sent) in enumerate(zip(value.split("-"), gold)):
        if part.strip() != part:
            return False, f"space around hyphen-separated part {i + 1} ({part[:40]!r})"
        if part != sent:
            return False, f"hyphen-separated part {i + 1} ({part[:40]!r}) is not sentence {i + 1} ({sent[:40]!r})"
    return True, "sentences joined by hyphens without spaces"


@register("detectable_format:square_brackets", source="iftrain",
          describe=_fixed("Enclose every word in your response within square brackets."))
def square_brackets(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    bad = [w for w in value.split() if not (w.startswith("[") and w.endswith("]"))]
    return (not bad), ("every word in [brackets]" if not bad else f"not in [brackets]: {bad[0][:40]!r}")


@register("detectable_format:bigram_wrapping", source="iftrain",
          describe=_fixed("Wrap every word bigram in double angular brackets, such as <<I am>> <<at home>> "
                          "<<with my>> <<cute dog>>."))
def bigram_wrapping(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    words = value.split()
    for i in range(0, len(words) - 1, 2):
        if not (words[i].startswith("<<") and words[i + 1].endswith(">>")):
            return False, f"words {i + 1}-{i + 2} ({words[i][:20]!r} {words[i + 1][:20]!r}) are not <<wrapped>>"
    return True, "every word bigram wrapped in << >>"


# --- keywords -----------------------------------------------------------------------------------
@register("keywords:no_adjacent_consecutive", source="iftrain",
          describe=_fixed("No two adjacent words can start with consecutive letters of the alphabet."))
def no_adjacent_consecutive(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    words = value.split()
    for a, b in zip(words, words[1:]):
        first, second = a[0].lower(), b[0].lower()
        if len(first) != 1 or len(second) != 1:  # a character whose lower case is two characters
            return False, f"cannot compare the initials of {a[:20]!r} and {b[:20]!r}"
        if ord(second) - ord(first) == 1:
            return False, f"adjacent words {a[:20]!r} {b[:20]!r} start with consecutive letters"
    return True, "no adjacent words start with consecutive letters"


def _occurrences(keyword: str, value: str) -> int:
    return len(re.findall(keyword, value, flags=re.IGNORECASE))


@register("keywords:word_once", source="iftrain", required=("keyword",), regex=("keyword",),
          validate=_nonempty("keyword"),
          describe=lambda kw: f"Include keyword {kw['keyword'].strip()} in your response.")
def word_once(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = _occurrences(kw["keyword"].strip(), value)
    return n == 1, f"occurrences of {kw['keyword'].strip()!r}: {n}; required: exactly 1"


@register("keywords:word_count_different_numbers", source="iftrain", required=("keyword", "frequency", "relation"),
          types={"frequency": int}, choices=_REL, regex=("keyword",), validate=_nonempty("keyword"),
          describe=lambda kw: (f"In your response, the word {kw['keyword'].strip()} should appear "
                               f"{kw['frequency']} times."))
def word_count_different_numbers(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    keyword = kw["keyword"].strip()
    return _counted(f"occurrences of {keyword!r}", _occurrences(keyword, value), kw["relation"], kw["frequency"])


@register("keywords:exclude_word_harder", source="iftrain", required=("keyword",), validate=_nonempty("keyword"),
          describe=lambda kw: f"Do not include keyword {kw['keyword'].strip()} in the response.")
def exclude_word_harder(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    needle = " " + kw["keyword"].strip() + " "
    return (needle not in value), (f"{needle!r} not in the response" if needle not in value
                                   else f"the response contains {needle!r}")


@register("keywords:palindrome", source="iftrain", describe=_fixed("Include a palindrome in your response."))
def palindrome(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    found = [w for w in value.split() if w == w[::-1]]
    return bool(found), (f"palindrome: {found[0][:40]!r}" if found else "no whitespace-separated word is a palindrome")


@register("keywords:keyword_specific_position", source="iftrain", required=("keyword", "n", "m"),
          types={"keyword": list, "n": int, "m": int}, validate=_all(_nonempty("keyword"), _positive("n", "m")),
          describe=lambda kw: (f"Include keyword {_first(kw['keyword'])} in the {kw['n']}-th sentence, as the "
                               f"{kw['m']}-th word of that sentence."))
def keyword_specific_position(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    keyword, n, m = _first(kw["keyword"]), kw["n"], kw["m"]
    sentences = split_into_sentences(value)
    if len(sentences) < n:
        return False, f"sentences: {len(sentences)}; sentence {n} does not exist"
    words = word_tokenize(sentences[n - 1])
    if len(words) < m:
        return False, f"sentence {n} has {len(words)} words; word {m} does not exist"
    return words[m - 1] == keyword, f"word {m} of sentence {n}: {words[m - 1]!r}; required: {keyword!r}"


@register("keywords:start_end", source="iftrain",
          describe=_fixed("Start and end your response with the same word (do not write anything after the last "
                          "word, not even punctuation)."))
def start_end(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    words = word_tokenize(value)
    if len(words) < 2:
        return False, f"tokens: {len(words)}; at least 2 are needed"
    ok = words[0].lower() == words[-1].lower()
    return ok, f"first token {words[0][:20]!r}, last token {words[-1][:20]!r}"


# --- paragraphs ---------------------------------------------------------------------------------
def _paragraph_count(parts: list[str], divider: str) -> tuple[int | None, str]:
    """IFEval's paragraph count over the parts between dividers: an empty first or last part is
    not counted; an empty part between two dividers gives None (not followed) and the reason."""
    n = len(parts)
    for i, p in enumerate(parts):
        if not p.strip():
            if i not in (0, len(parts) - 1):
                return None, f"paragraph {i + 1} between {divider} is empty"
            n -= 1
    return n, f"paragraphs separated by {divider}: {n}"


@register("paragraphs:paragraphs", source="iftrain",
          describe=_fixed("There should be 2 paragraphs. Paragraphs are separated with the markdown divider: ***"))
def paragraphs(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return number_paragraphs(value, {"num_paragraphs": 2}, prompt)


@register("paragraphs:paragraphs2", source="iftrain",
          describe=_fixed("There should be 2 paragraphs. Paragraphs and only paragraphs are separated with each "
                          "other by two line breaks."))
def paragraphs2(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n, why = _paragraph_count(re.split(r"\n\n", value), "blank lines")
    return (False, why) if n is None else (n == 2, f"{why}; required: exactly 2")


# --- first / last word --------------------------------------------------------------------------
def _each_sentence(value: str, pick, want: str, where: str) -> tuple[bool, str]:
    for i, sentence in enumerate(split_into_sentences(value)):
        if not sentence.strip():
            return False, f"sentence {i + 1} is empty"
        word = pick(sentence)
        if word.lower() != want.lower():
            return False, f"sentence {i + 1} {where} {word[:30]!r}; required: {want!r}"
    return True, f"every sentence {where} {want!r}"


def _last_word(text: str) -> str:
    return re.sub(r"[^\w\s]", "", text.split()[-1].strip())


@register("first_word:first_word_sent", source="iftrain", required=("first_word",), types={"first_word": list},
          validate=_nonempty("first_word"),
          describe=lambda kw: f"The first word of each sentence should be the word {_first(kw['first_word'])}.")
def first_word_sent(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _each_sentence(value, lambda s: s.split()[0].strip(), _first(kw["first_word"]), "starts with")


@register("first_word:first_word_answer", source="iftrain", required=("first_word",),
          validate=_nonempty("first_word"),
          describe=lambda kw: f"The first word of your response should be the word {kw['first_word'].strip()}.")
def first_word_answer(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    want = kw["first_word"].strip()
    if not value.split():
        return False, "the response has no words"
    word = value.split()[0].strip()
    return word.lower() == want.lower(), f"first word: {word[:30]!r}; required: {want!r}"


@register("last_word:last_word_sent", source="iftrain", required=("last_word",), types={"last_word": list},
          validate=_nonempty("last_word"),
          describe=lambda kw: (f"The last word of each sentence, before punctuation, should be the word "
                               f"{_first(kw['last_word'])}."))
def last_word_sent(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _each_sentence(value, _last_word, _first(kw["last_word"]), "ends with")


@register("last_word:last_word_answer", source="iftrain", required=("last_word",), validate=_nonempty("last_word"),
          describe=lambda kw: f"The last word of your response should be the word {kw['last_word'].strip()}.")
def last_word_answer(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    want = kw["last_word"].strip()
    if not value.split():
        return False, "the response has no words"
    word = _last_word(value)
    return word.lower() == want.lower(), f"last word without punctuation: {word[:30]!r}; required: {want!r}"


# --- punctuation --------------------------------------------------------------------------------
@register("punctuation:punctuation_dot", source="iftrain",
          describe=_fixed("In your entire response, refrain from the use of . (i.e. dots) as punctuation and in "
                          "general."))
def punctuation_dot(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = value.count(".")
    return n == 0, "no dots" if n == 0 else f"dots: {n}"


@register("punctuation:punctuation_exclamation", source="iftrain",
          describe=_fixed("In your entire response, refrain from the use of ! (i.e. exclamation marks) as "
                          "punctuation and in general."))
def punctuation_exclamation(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = value.count("!")
    return n == 0, "no exclamation marks" if n == 0 else f"exclamation marks: {n}"


# --- counting -----------------------------------------------------------------------------------
@register("count:lowercase_counting", source="iftrain", required=("N",), types={"N": int},
          describe=lambda kw: f"In your response, all lowercase words should appear at most {kw['N']} times.")
def lowercase_counting(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = len(re.findall(r"\b[a-z]+\b", value))
    return n <= kw["N"], f"lowercase words: {n}; allowed: at most {kw['N']}"


@register("letters:letter_counting", source="iftrain", required=("N", "relation"), types={"N": int}, choices=_REL,
          describe=lambda kw: f"Answer with {kw['relation']} {kw['N']} letters.")
def letter_counting(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _counted("letters (a-z, A-Z)", len(re.findall(r"[a-zA-Z]", value)), kw["relation"], kw["N"])


_LETTER_FREQUENCY = REGISTRY["keywords:letter_frequency"]
register("letters:letter_counting2", source="iftrain", describe=_LETTER_FREQUENCY.describe,
         required=_LETTER_FREQUENCY.required, types=_LETTER_FREQUENCY.types,
         choices=_LETTER_FREQUENCY.choices)(letter_frequency)


@register("count:counting_composition", source="iftrain", required=("n_sent", "n_words"),
          types={"n_sent": int, "n_words": int},
          describe=lambda kw: (f"Write 3 paragraphs, delimited by the markdown divider: * * *, with exactly "
                               f"{kw['n_sent']} sentences each, with exactly {kw['n_words']} words in each sentence."))
def counting_composition(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    parts = re.split(r"\s?\*\*\*\s?", value)
    n, why = _paragraph_count(parts, "*** dividers")
    if n is None:
        return False, why
    for i, part in enumerate(parts):
        sentences = split_into_sentences(part)  # an empty first or last part is read here too
        if len(sentences) != kw["n_sent"]:
            return False, f"paragraph {i + 1} has {len(sentences)} sentences; required: {kw['n_sent']}"
        for j, sentence in enumerate(sentences):
            words = word_tokenize(sentence)
            if len(words) != kw["n_words"]:
                return False, (f"paragraph {i + 1}, sentence {j + 1} has {len(words)} tokens; "
                               f"required: {kw['n_words']}")
    return n == 3, f"{why}; required: exactly 3"


@register("count:count_unique", source="iftrain",
          describe=_fixed("Only use unique words in your response, no word should be repeated!"))
def count_unique(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    words = word_tokenize(value)
    seen, repeated = set(), []
    for w in words:
        if w in seen:
            repeated.append(w)
        seen.add(w)
    return (not repeated), ("no token repeated" if not repeated else f"repeated token(s): {sorted(set(repeated))[:5]}")


@register("count:count_increment_word", source="iftrain", required=("keyword1", "keyword2"),
          types={"keyword1": list, "keyword2": list}, regex=("keyword1", "keyword2"),
          validate=_nonempty("keyword1", "keyword2"),
          describe=lambda kw: (f"Include keyword {_first(kw['keyword1'])} once in your response, keyword "
                               f"{_first(kw['keyword2'])} twice in your response."))
def count_increment_word(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    # a one-item list is read as its item: IFEvalG's own random draw stores lists here, which its
    # check then cannot read (it calls .strip() on them)
    k1, k2 = _first(kw["keyword1"]), _first(kw["keyword2"])
    n1, n2 = _occurrences(k1, value), _occurrences(k2, value)
    return n1 == 1 and n2 == 2, f"occurrences of {k1!r}: {n1} (required 1), of {k2!r}: {n2} (required 2)"


# --- where the reference ignores the response ---------------------------------------------------
_RANDOM_WHEN_FALSY = {
    "copy:repeat_phrase": ("small_n",), "new:copy_span_idx": ("n_start", "n_end"),
    "copy:copying_multiple": ("N",), "count:lowercase_counting": ("N",), "letters:letter_counting": ("N",),
    "count:counting_composition": ("n_sent", "n_words"),
}


def reference_is_random(instruction_id: str, kwargs: dict) -> bool:
    """True where open-instruct's `build_description` replaces a kwarg given in the data by a random
    value (a falsy count or index, a negative frequency, a letter that is not an ASCII letter), so
    its outcome does not follow from the response; the checkers here use the value given."""
    kw = kwargs or {}
    if instruction_id in ("keywords:letter_frequency", "letters:letter_counting2"):
        letter = str(kw.get("letter") or "")
        return not (len(letter) == 1 and "a" <= letter.lower() <= "z")
    if instruction_id == "keywords:word_count_different_numbers":
        return kw.get("frequency", 0) < 0
    return any(not kw.get(k) for k in _RANDOM_WHEN_FALSY.get(instruction_id, ()))


IDS = registered_since(_FIRST)  # the instructions this module checks
