"""IFEval's 25 instruction checkers (Zhou et al. 2023), with the official semantics.

Each function mirrors `check_following` of the class registered under the same id in
google-research `instruction_following_eval/instructions.py` (identical in lm-eval's copy),
including its quirks: keywords are raw regexes matched as substrings, `relation` is
`less than` (<) or `at least` (>=), an undetectable language counts as followed. The
description templates are the classes' `build_description` texts.

One deliberate difference: `keywords:letter_frequency` with a non-letter (IFEval prompts 1122
`#` and 1129 `!`) counts that character, as the prompt asks; the official code draws a
random letter there instead.
"""
from __future__ import annotations

import json
import re
from collections import Counter

from mrtpo.verifiers.ifeval.lang import LANGUAGE_CODES, detect_language
from mrtpo.verifiers.ifeval.instruction import REGISTRY, RELATIONS, register, registered_since
from mrtpo.verifiers.ifeval.text import count_capital_words, count_sentences, count_words

_FIRST = len(REGISTRY)  # the table before this module registers (see IDS at the end)

_REL = {"relation": RELATIONS}


def _compare(actual: int, relation: str, threshold: int | float) -> bool:
    return actual < threshold if relation == "less than" else actual >= threshold


def _counted(what: str, actual: int, relation: str, threshold) -> tuple[bool, str]:
    ok = _compare(actual, relation, threshold)
    return ok, f"{what}: {actual}; required: {relation} {threshold}"


# --- keywords -------------------------------------------------------------------------------
@register("keywords:existence", source="ifeval", required=("keywords",), types={"keywords": list},
          regex=("keywords",),
          describe=lambda kw: f"Include keywords {sorted(kw['keywords'])} in the response.")
def keywords_existence(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    missing = [k for k in sorted(kw["keywords"]) if not re.search(k, response, flags=re.IGNORECASE)]
    if missing:
        return False, f"missing keyword(s): {', '.join(missing)}"
    return True, "all keywords present"


@register("keywords:frequency", source="ifeval", required=("keyword", "frequency", "relation"),
          types={"frequency": int}, choices=_REL, regex=("keyword",),
          describe=lambda kw: (f"In your response, the word {kw['keyword'].strip()} should appear "
                               f"{kw['relation']} {kw['frequency']} times."))
def keywords_frequency(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    keyword = kw["keyword"].strip()
    n = len(re.findall(keyword, response, flags=re.IGNORECASE))
    return _counted(f"occurrences of {keyword!r}", n, kw["relation"], kw["frequency"])


@register("keywords:forbidden_words", source="ifeval", required=("forbidden_words",),
          types={"forbidden_words": list}, regex=("forbidden_words",),
          describe=lambda kw: f"Do not include keywords {sorted(set(kw['forbidden_words']))} in the response.")
def keywords_forbidden(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    used = [w for w in sorted(set(kw["forbidden_words"]))
            if re.search(r"\b" + w + r"\b", response, flags=re.IGNORECASE)]
    if used:
        return False, f"forbidden word(s) used: {', '.join(used)}"
    return True, "no forbidden word used"


@register("keywords:letter_frequency", source="ifeval",
          required=("letter", "let_frequency", "let_relation"), types={"let_frequency": int},
          choices={"let_relation": RELATIONS},
          describe=lambda kw: (f"In your response, the letter {kw['letter'].strip().lower()} should "
                               f"appear {kw['let_relation']} {kw['let_frequency']} times."))
def letter_frequency(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    letter = kw["letter"].strip().lower() or kw["letter"]
    n = Counter(response.lower())[letter]
    return _counted(f"occurrences of {letter!r}", n, kw["let_relation"], kw["let_frequency"])


# --- language -------------------------------------------------------------------------------
@register("language:response_language", source="ifeval", required=("language",),
          describe=lambda kw: (f"Your ENTIRE response should be in "
                               f"{LANGUAGE_CODES.get(kw['language'], kw['language'])} language, "
                               "no other language is allowed."))
def response_language(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    lang = detect_language(response)
    if lang is None:
        return True, "language could not be detected (IFEval counts this as followed)"
    return lang == kw["language"], f"detected language: {lang}; required: {kw['language']}"


# --- length ---------------------------------------------------------------------------------
@register("length_constraints:number_sentences", source="ifeval",
          required=("num_sentences", "relation"), types={"num_sentences": int}, choices=_REL,
          describe=lambda kw: f"Your response should contain {kw['relation']} {kw['num_sentences']} sentences.")
def number_sentences(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _counted("sentences", count_sentences(response), kw["relation"], kw["num_sentences"])


@register("length_constraints:number_paragraphs", source="ifeval", required=("num_paragraphs",),
          types={"num_paragraphs": int},
          describe=lambda kw: (f"There should be {kw['num_paragraphs']} paragraphs. "
                               "Paragraphs are separated with the markdown divider: ***"))
def number_paragraphs(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    paragraphs = re.split(r"\s?\*\*\*\s?", response)
    n = len(paragraphs)
    for i, p in enumerate(paragraphs):
        if not p.strip():
            if i in (0, len(paragraphs) - 1):
                n -= 1
            else:
                return False, f"paragraph {i + 1} between *** dividers is empty"
    return n == kw["num_paragraphs"], f"paragraphs separated by ***: {n}; required: exactly {kw['num_paragraphs']}"


@register("length_constraints:number_words", source="ifeval", required=("num_words", "relation"),
          types={"num_words": int}, choices=_REL,
          describe=lambda kw: f"Answer with {kw['relation']} {kw['num_words']} words.")
def number_words(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _counted("words", count_words(response), kw["relation"], kw["num_words"])


@register("length_constraints:nth_paragraph_first_word", source="ifeval",
          required=("num_paragraphs", "nth_paragraph", "first_word"),
          types={"num_paragraphs": int, "nth_paragraph": int},
          describe=lambda kw: (f"There should be {kw['num_paragraphs']} paragraphs. Paragraphs and only "
                               "paragraphs are separated with each other by two new lines as if it was "
                               f"'\\n\\n' in python. Paragraph {kw['nth_paragraph']} must start with word "
                               f"{kw['first_word'].lower()}."))
def nth_paragraph_first_word(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    want_n, nth, want_word = kw["num_paragraphs"], kw["nth_paragraph"], kw["first_word"].lower()
    paragraphs = re.split(r"\n\n", response)
    n = sum(1 for p in paragraphs if p.strip())
    if nth > n:
        return False, f"paragraphs separated by blank lines: {n}; paragraph {nth} does not exist"
    paragraph = paragraphs[nth - 1].strip()
    if not paragraph:
        return False, f"paragraph {nth} is empty"
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for ch in word:
        if ch in {".", ",", "?", "!", "'", '"'}:
            break
        first += ch.lower()
    ok = n == want_n and first == want_word
    return ok, (f"paragraphs: {n} (required {want_n}); paragraph {nth} starts with {first!r} "
                f"(required {want_word!r})")


# --- detectable content -----------------------------------------------------------------------
@register("detectable_content:number_placeholders", source="ifeval", required=("num_placeholders",),
          types={"num_placeholders": int},
          describe=lambda kw: (f"The response must contain at least {kw['num_placeholders']} placeholders "
                               "represented by square brackets, such as [address]."))
def number_placeholders(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _counted("placeholders in [brackets]", _count_placeholders(response),
                    "at least", kw["num_placeholders"])


def _count_placeholders(text: str) -> int:
    """`len(re.findall(r"\\[.*?\\]", text))` in linear time.

    The regex, from each `[`, scans to the first `]` or line break; a `[` that meets a line
    break first has no match, and neither has any `[` before that line break, so the scan
    skips to it (the regex itself rescans the line once per `[`: quadratic).
    """
    n, i = 0, text.find("[")
    while i >= 0:
        close, newline = text.find("]", i + 1), text.find("\n", i + 1)
        if close >= 0 and (newline < 0 or close < newline):
            n += 1
            i = text.find("[", close + 1)
        elif newline >= 0:
            i = text.find("[", newline + 1)
        else:
            break
    return n


@register("detectable_content:postscript", source="ifeval", required=("postscript_marker",),
          regex=("postscript_marker",),
          describe=lambda kw: ("At the end of your response, please explicitly add a postscript "
                               f"starting with {kw['postscript_marker'].strip()}"))
def postscript(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    marker = kw["postscript_marker"].strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + marker.lower() + r".*$"
    # IFEval tests `re.findall(pattern)`; a match exists exactly when the pattern without its
    # optional leading `\s*` and trailing `.*$` (which match anywhere) matches, and
    # searching for that is linear where findall's `\s*` rescans every run of whitespace.
    core = pattern.removeprefix(r"\s*").removesuffix(r".*$")
    if re.search(core, response.lower(), flags=re.MULTILINE):
        return True, f"postscript starting with {marker} found"
    return False, f"no postscript starting with {marker}"


# --- detectable format ------------------------------------------------------------------------
@register("detectable_format:number_bullet_lists", source="ifeval", required=("num_bullets",),
          types={"num_bullets": int},
          describe=lambda kw: (f"Your answer must contain exactly {kw['num_bullets']} bullet points. "
                               "Use the markdown bullet points such as:\n* This is point 1. \n* This is point 2"))
def number_bullet_lists(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = _count_line_starts(response, "*") + _count_line_starts(response, "-")
    return n == kw["num_bullets"], f"bullet points: {n}; required: exactly {kw['num_bullets']}"


_SPACES = re.compile(r"\s+")


def _count_line_starts(text: str, mark: str) -> int:
    """IFEval's bullet counts in linear time: `len(re.findall(r"^\\s*\\*[^\\*].*$", text,
    re.M))` for mark "*", `len(re.findall(r"^\\s*-.*$", text, re.M))` for "-".

    From a line start, `\\s*` (line breaks included) reaches the end of the whitespace run
    there, and the match needs the mark right after it (backtracking into the run cannot
    help: it would leave whitespace, not the mark); `[^\\*]` may be a line break, and `.*$`
    ends the match at the next line break. The regexes rescan a run of blank lines once per
    line in it (quadratic); here each run end is computed once.
    """
    runs = [(m.start(), m.end()) for m in _SPACES.finditer(text)]  # maximal, in order
    n, pos, size, r = 0, 0, len(text), 0
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for start in starts:
        if start < pos:
            continue
        while r < len(runs) and runs[r][1] <= start:
            r += 1
        w = runs[r][1] if r < len(runs) and runs[r][0] <= start else start
        if w >= size or text[w] != mark:
            continue
        body = w + 1
        if mark == "*":
            if body >= size or text[body] == "*":
                continue
            body += 1
        end = text.find("\n", body)
        n += 1
        pos = size if end < 0 else end
    return n


_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@register("detectable_format:constrained_response", source="ifeval",
          describe=lambda kw: f"Answer with one of the following options: {_OPTIONS}")
def constrained_response(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    value = response.strip()
    if any(opt in value for opt in _OPTIONS):
        return True, "contains one of the allowed answers"
    return False, f"contains none of {', '.join(map(repr, _OPTIONS))}"


@register("detectable_format:number_highlighted_sections", source="ifeval", required=("num_highlights",),
          types={"num_highlights": int},
          describe=lambda kw: (f"Highlight at least {kw['num_highlights']} sections in your answer with "
                               "markdown, i.e. *highlighted section*."))
def number_highlighted_sections(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = sum(1 for h in re.findall(r"\*[^\n\*]*\*", response) if h.strip("*").strip())
    n += sum(1 for h in re.findall(r"\*\*[^\n\*]*\*\*", response)
             if h.removeprefix("**").removesuffix("**").strip())
    return _counted("highlighted sections", n, "at least", kw["num_highlights"])


@register("detectable_format:multiple_sections", source="ifeval",
          required=("section_spliter", "num_sections"), types={"num_sections": int},
          regex=("section_spliter",),
          describe=lambda kw: (f"Your response must have {kw['num_sections']} sections. Mark the beginning "
                               f"of each section with {kw['section_spliter'].strip()} X, such as:\n"
                               f"{kw['section_spliter'].strip()} 1\n[content of section 1]\n"
                               f"{kw['section_spliter'].strip()} 2\n[content of section 2]"))
def multiple_sections(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    splitter = kw["section_spliter"].strip()
    n = len(re.split(r"\s?" + splitter + r"\s?\d+\s?", response)) - 1
    return _counted(f"sections marked '{splitter} X'", n, "at least", kw["num_sections"])


@register("detectable_format:json_format", source="ifeval",
          describe=lambda kw: "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.")
def json_format(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    value = (response.strip().removeprefix("```json").removeprefix("```Json")
             .removeprefix("```JSON").removeprefix("```").removesuffix("```").strip())
    try:
        json.loads(value)
    except ValueError as exc:
        return False, f"not valid JSON: {exc}"
    except RecursionError:  # the official checker raises here; any reader of it would too
        return False, "not valid JSON: nested too deeply to read"
    return True, "valid JSON"


@register("detectable_format:title", source="ifeval",
          describe=lambda kw: ("Your answer must contain a title, wrapped in double angular brackets, "
                               "such as <<poem of joy>>."))
def title(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    # IFEval: any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", ...)).
    # Greedy `[^\n]+` makes each line hold at most one match, from its first "<<" to its last
    # ">>" (with a character between); finding those directly is linear, the regex is not.
    titles = []
    for line in response.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3:
            titles.append(line[start:end + 2])
    if any(t.lstrip("<").rstrip(">").strip() for t in titles):
        return True, "title in <<double angular brackets>> found"
    return False, "no non-empty title in <<double angular brackets>>"


# --- combination ----------------------------------------------------------------------------
@register("combination:two_responses", source="ifeval",
          describe=lambda kw: ("Give two different responses. Responses and only responses should be "
                               "separated by 6 asterisk symbols: ******."))
def two_responses(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    parts = response.split("******")
    valid = []
    for i, part in enumerate(parts):
        if not part.strip():
            if i not in (0, len(parts) - 1):
                return False, "an empty response between ****** separators"
        else:
            valid.append(part)
    if len(valid) != 2:
        return False, f"responses separated by ******: {len(valid)}; required: 2"
    if valid[0].strip() == valid[1].strip():
        return False, "the two responses are identical"
    return True, "two different responses"


@register("combination:repeat_prompt", source="ifeval", required=("prompt_to_repeat",),
          describe=lambda kw: ("First repeat the request word for word without change, then give your "
                               "answer (1. do not say any words or characters before repeating the "
                               "request; 2. the request you need to repeat does not include this sentence)"))
def repeat_prompt(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    if response.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower()):
        return True, "starts by repeating the request"
    return False, "does not start with the request repeated word for word"


# --- start / end ----------------------------------------------------------------------------
@register("startend:end_checker", source="ifeval", required=("end_phrase",),
          describe=lambda kw: (f"Finish your response with this exact phrase {kw['end_phrase'].strip()}. "
                               "No other words should follow this phrase."))
def end_checker(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    phrase = kw["end_phrase"].strip().lower()
    if response.strip().strip('"').lower().endswith(phrase):
        return True, "ends with the required phrase"
    return False, f"does not end with {kw['end_phrase'].strip()!r}"


@register("startend:quotation", source="ifeval",
          describe=lambda kw: "Wrap your entire response with double quotation marks.")
def quotation(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    v = response.strip()
    if len(v) > 1 and v[0] == '"' and v[-1] == '"':
        return True, "wrapped in double quotation marks"
    return False, "not wrapped in double quotation marks"


# --- change case ----------------------------------------------------------------------------
@register("change_case:capital_word_frequency", source="ifeval",
          required=("capital_frequency", "capital_relation"), types={"capital_frequency": int},
          choices={"capital_relation": RELATIONS},
          describe=lambda kw: ("In your response, words with all capital letters should appear "
                               f"{kw['capital_relation']} {kw['capital_frequency']} times."))
def capital_word_frequency(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _counted("all-capital words", count_capital_words(response), kw["capital_relation"],
                    kw["capital_frequency"])


@register("change_case:english_capital", source="ifeval",
          describe=lambda kw: "Your entire response should be in English, and in all capital letters.")
def english_capital(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    if not response.isupper():
        return False, "not all letters are capital letters"
    lang = detect_language(response)
    if lang is None:
        return True, "all capitals; language could not be detected (counted as followed)"
    return lang == "en", f"all capitals; detected language: {lang}"


@register("change_case:english_lowercase", source="ifeval",
          describe=lambda kw: ("Your entire response should be in English, and in all lowercase letters. "
                               "No capital letters are allowed."))
def english_lowercase(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    if not response.islower():
        return False, "contains capital letters (or no letters)"
    lang = detect_language(response)
    if lang is None:
        return True, "all lowercase; language could not be detected (counted as followed)"
    return lang == "en", f"all lowercase; detected language: {lang}"


# --- punctuation ----------------------------------------------------------------------------
@register("punctuation:no_comma", source="ifeval",
          describe=lambda kw: "In your entire response, refrain from the use of any commas.")
def no_comma(response: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = response.count(",")
    return n == 0, "no commas" if n == 0 else f"commas: {n}"


IDS = registered_since(_FIRST)  # the instructions this module checks
