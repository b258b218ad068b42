"""IFBench's out-of-distribution instruction checkers (Pyatkin et al. 2025), official semantics.

Ported from allenai/IFBench @db69a6f (`ifbench/instructions.py`, Apache-2.0), the version
of IFBench's published test set, including its quirks (e.g. `repeat:repeat_span`
compares character spans, `count:conjunctions` counts distinct raw tokens). IFBench's
`split_into_sentences` is NLTK's Punkt `sent_tokenize`, ported in `sentences.py`; its
`word_tokenize` is ported in `text.py`; the NLTK stop-word list is in `stopwords.py`.

Where the original raises on some model output (an IndexError on an empty field, a division by
zero), the checker here returns "not followed" with a reason instead: scoring never raises.

Not supported: `words:start_verb`, which needs NLTK's averaged-perceptron POS tagger model (a
data download with no offline source). Loading data that uses it fails with the list of
supported ids.
"""
from __future__ import annotations

import csv
import io
import re
import string
import unicodedata
from collections import Counter, deque

from mrtpo.verifiers.ifeval.instruction import REGISTRY, register, registered_since
from mrtpo.verifiers.ifeval.stopwords import ENGLISH_STOPWORDS
from mrtpo.verifiers.ifeval.text import count_words, split_sentences, word_tokenize, words

_FIRST = len(REGISTRY)  # the table before this module registers (see IDS at the end)

_P = string.punctuation
_PS = string.punctuation + " "
_NOPUNCT = str.maketrans("", "", string.punctuation)


def _fixed(text: str):
    return lambda kw: text


def _res(ok: bool, yes: str, no: str) -> tuple[bool, str]:
    return (True, yes) if ok else (False, no)


# --- count ----------------------------------------------------------------------------------
@register("count:word_count_range", source="ifbench", required=("min_words", "max_words"),
          types={"min_words": int, "max_words": int},
          describe=lambda kw: f"The response must contain between {kw['min_words']} and {kw['max_words']} words.")
def word_count_range(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = count_words(value)
    return kw["min_words"] <= n <= kw["max_words"], f"words: {n}; required: {kw['min_words']}-{kw['max_words']}"


@register("count:unique_word_count", source="ifbench", required=("N",), types={"N": int},
          describe=lambda kw: f"Use at least {kw['N']} unique words in the response.")
def unique_word_count(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    unique = {w.strip(_PS) for w in value.lower().split()}
    return len(unique) >= kw["N"], f"unique words: {len(unique)}; required: at least {kw['N']}"


@register("ratio:stop_words", source="ifbench", required=("percentage",), types={"percentage": float},
          describe=lambda kw: (f"Ensure that stop words constitute no more than {kw['percentage']}% of the "
                               "total words in your response."))
def stop_words(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    toks = words(value)
    if not toks:
        return False, "the response has no words"
    pct = sum(1 for t in toks if t.lower() in ENGLISH_STOPWORDS) / len(toks) * 100
    return pct <= kw["percentage"], f"stop words: {pct:.1f}% of words; allowed: at most {kw['percentage']}%"


def _sentence_ends(value: str) -> tuple[int, int, int]:
    sents = split_sentences(value)
    return (sum(s.endswith(".") for s in sents), sum(s.endswith("?") for s in sents),
            sum(s.endswith("!") for s in sents))


@register("ratio:sentence_type", source="ifbench",
          describe=_fixed("Maintain a 2:1 ratio of declarative to interrogative sentences."))
def sentence_type(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    d, q, _ = _sentence_ends(value)
    return d == 2 * q, f"declarative sentences: {d}, interrogative: {q}; required: 2:1"


@register("ratio:sentence_balance", source="ifbench",
          describe=_fixed("Ensure that the ratio of sentence types (declarative, interrogative, "
                          "exclamatory) is balanced."))
def sentence_balance(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    d, q, e = _sentence_ends(value)
    return d == q == e, f"declarative: {d}, interrogative: {q}, exclamatory: {e}; required: equal"


@register("count:conjunctions", source="ifbench", required=("small_n",), types={"small_n": int},
          describe=lambda kw: f"Use at least {kw['small_n']} different coordinating conjunctions in the response.")
def conjunctions(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    found = {w for w in value.split() if w.strip(_PS).lower() in ("and", "but", "for", "nor", "or", "so", "yet")}
    return len(found) >= kw["small_n"], (f"different coordinating conjunctions: {len(found)}; "
                                         f"required: at least {kw['small_n']}")


_PERSON_NAMES = (
    "Emma", "Liam", "Sophia", "Jackson", "Olivia", "Noah", "Ava", "Lucas", "Isabella", "Mason", "Mia",
    "Ethan", "Charlotte", "Alexander", "Amelia", "Benjamin", "Harper", "Leo", "Zoe", "Daniel", "Chloe",
    "Samuel", "Lily", "Matthew", "Grace", "Owen", "Abigail", "Gabriel", "Ella", "Jacob", "Scarlett",
    "Nathan", "Victoria", "Elijah", "Layla", "Nicholas", "Audrey", "David", "Hannah", "Christopher",
    "Penelope", "Thomas", "Nora", "Andrew", "Aria", "Joseph", "Claire", "Ryan", "Stella", "Jonathan",
)


@register("count:person_names", source="ifbench", required=("N",), types={"N": int},
          describe=lambda kw: (f"Mention at least {kw['N']} different person names in the response, from this "
                               f"list of person names: {', '.join(_PERSON_NAMES)} ."))
def person_names(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    found = [n for n in _PERSON_NAMES if re.search(r"\b" + re.escape(n) + r"\b", value)]
    return len(found) >= kw["N"], f"names from the list: {len(found)}; required: at least {kw['N']}"


@register("ratio:overlap", source="ifbench", required=("reference_text", "percentage"),
          types={"percentage": float},
          describe=lambda kw: (f"Maintain a trigram overlap of {kw['percentage']}% (±2%) with the provided "
                               "reference text."))
def overlap(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    grams = {value[i:i + 3] for i in range(len(value) - 2)}  # nltk.ngrams over characters
    if not grams:
        return False, "the response is shorter than three characters"
    ref = kw["reference_text"]
    ref_grams = {ref[i:i + 3] for i in range(len(ref) - 2)}
    pct = len(grams & ref_grams) / len(grams) * 100
    p = kw["percentage"]
    return p - 2 <= pct <= p + 2, f"character-trigram overlap: {pct:.1f}%; required: {p}% ± 2%"


@register("count:numbers", source="ifbench", required=("N",), types={"N": int},
          describe=lambda kw: f"Include exactly {kw['N']} numbers in the response.")
def numbers(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = len(re.findall(r"\d+", value.translate(_NOPUNCT)))
    return n == kw["N"], f"numbers: {n}; required: exactly {kw['N']}"


def _ordinal_japanese(kw: dict) -> str:
    n = kw["N"]
    pattern = "Every {N}th word of your response must be in Japanese."
    if n % 10 == 1:  # IFBench's own wording, missing "word" included
        pattern = "Every {N}st of your response must be in Japanese."
    if n % 10 == 2:
        pattern = "Every {N}nd of your response must be in Japanese."
    elif n % 10 == 3:
        pattern = "Every {N}rd of your response must be in Japanese."
    return pattern.format(N=n)


_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@register("count:words_japanese", source="ifbench", required=("N",), types={"N": int},
          describe=_ordinal_japanese)
def words_japanese(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = kw["N"]
    if n <= 0:
        return False, f"N must be positive, got {n}"
    for i, word in enumerate(value.split()):
        word = word.strip(_PS)
        if (i + 1) % n == 0 and word and not word.isdigit() and not _JAPANESE.search(word):
            return False, f"word {i + 1} ({word!r}) is not Japanese"
    return True, f"every {n}th word is Japanese"


@register("count:pronouns", source="ifbench", required=("N",), types={"N": int},
          describe=lambda kw: f"The response should include at least {kw['N']} pronouns.")
def pronouns(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = sum(1 for w in word_tokenize(value.replace("/", " ").lower()) if w in _PRONOUNS)
    return n >= kw["N"], f"pronouns: {n}; required: at least {kw['N']}"


_PRONOUNS = frozenset("""
i me we us you he him she her it they them my mine our ours your yours his her hers its their theirs
myself ourselves yourself yourselves himself herself itself themselves this that these those who whom
whose which what whoever whomever whatever whichever anybody anyone anything everybody everyone
everything nobody nothing somebody someone something each either neither both all some any none
""".split())


@register("count:punctuation", source="ifbench",
          describe=_fixed("Use every standard punctuation mark at least once, including semicolons, colons, "
                          "and the interrobang (?!)."))
def punctuation_cover(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    if not ("!?" in value or "?!" in value or "‽" in value):
        return False, "no interrobang (?! or !? or ‽)"
    rest = value.replace("?!", "", 1)
    if len(rest) == len(value):
        rest = value.replace("!?", "", 1)
    missing = [p for p in (".", ",", "!", "?", ";", ":") if p not in rest]
    return _res(not missing, "all standard punctuation marks used", f"missing: {' '.join(missing)}")


@register("count:keywords_multiple", source="ifbench",
          required=("keyword1", "keyword2", "keyword3", "keyword4", "keyword5"),
          describe=lambda kw: (f"Include keyword {kw['keyword1'].strip()} once in your response, keyword "
                               f"{kw['keyword2'].strip()} twice in your response, keyword {kw['keyword3'].strip()} "
                               f"three times in your response, keyword {kw['keyword4'].strip()} five times in "
                               f"your response, and keyword {kw['keyword5'].strip()} seven times in your response."))
def keywords_multiple(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    low = value.lower()
    for i, count in zip(range(1, 6), (1, 2, 3, 5, 7)):
        keyword = kw[f"keyword{i}"].strip()
        n = low.count(keyword.lower())
        if n != count:
            return False, f"{keyword!r} appears {n} times; required: exactly {count}"
    return True, "every keyword appears the required number of times"


# --- words ----------------------------------------------------------------------------------
@register("words:alphabet", source="ifbench",
          describe=_fixed("Each word must start with the next letter of the alphabet, looping back to 'A' after 'Z'."))
def alphabet(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    ws = value.translate(_NOPUNCT).strip(_PS).split()
    if not ws:
        return False, "no words"
    letters = string.ascii_lowercase
    letter = ws[0][0].lower()
    if letter not in letters:
        return False, f"the first word {ws[0]!r} does not start with a letter"
    for word in ws[1:]:
        word = word.strip(_PS).lower()
        if not word:
            continue
        letter = letters[(letters.index(letter) + 1) % 26]
        if word[0] != letter:
            return False, f"{word!r} should start with {letter!r}"
    return True, "each word starts with the next letter"


@register("words:vowel", source="ifbench",
          describe=_fixed("Write a paragraph using words that contain only three types of vowels."))
def vowel(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    paragraphs = value.strip().split("\n")
    if len(paragraphs) != 1:
        return False, f"lines: {len(paragraphs)}; required: one paragraph on one line"
    used = sorted({c for c in paragraphs[0].lower() if c in "aeiou"})
    return len(used) <= 3, f"vowels used: {''.join(used)}; allowed: at most three kinds"


@register("words:consonants", source="ifbench",
          describe=_fixed("Ensure each word in your response has at least one consonant cluster (two or more "
                          "consonants together)."))
def consonants(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    cons = set("bcdfghjklmnpqrstvwxyz")
    for word in value.lower().strip().split():
        if not any(word[i] in cons and word[i + 1] in cons for i in range(len(word) - 1)):
            return False, f"{word!r} has no consonant cluster"
    return True, "every word has a consonant cluster"


@register("words:palindrome", source="ifbench",
          describe=_fixed("Include at least 10 single-word palindromes, each at least 5 characters long."))
def palindrome(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    pals = [w for w in value.translate(_NOPUNCT).lower().split() if w == w[::-1] and len(w) >= 5]
    return len(pals) >= 10, f"palindromes of 5+ characters: {len(pals)}; required: at least 10"


@register("words:prime_lengths", source="ifbench",
          describe=_fixed("Use only words with lengths that are prime numbers."))
def prime_lengths(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    primes = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97}
    for word in value.translate(_NOPUNCT).split():
        if len(word) not in primes:
            return False, f"{word!r} has {len(word)} characters, not a prime number"
    return True, "every word length is prime"


@register("words:repeats", source="ifbench", required=("small_n",), types={"small_n": int},
          describe=lambda kw: f"The response should not repeat any word more than {kw['small_n']} times.")
def repeats(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    counts = Counter(value.lower().translate(_NOPUNCT).split())
    worst = max(counts.items(), key=lambda kv: kv[1], default=("", 0))
    return worst[1] <= kw["small_n"], f"most repeated word: {worst[0]!r} ({worst[1]} times); allowed: {kw['small_n']}"


@register("words:odd_even_syllables", source="ifbench",
          describe=_fixed("Alternate between words with odd and even numbers of syllables."))
def odd_even_syllables(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    import syllapy

    ws = [w for w in value.translate(_NOPUNCT).lower().split() if w.strip()]
    parity = [syllapy.count(w) % 2 for w in ws]
    for i in range(len(parity) - 1):
        if parity[i] == parity[i + 1]:
            return False, f"{ws[i]!r} and {ws[i + 1]!r} both have an {'odd' if parity[i] else 'even'} syllable count"
    return True, "syllable counts alternate between odd and even"


@register("words:last_first", source="ifbench",
          describe=_fixed("The last word of each sentence must become the first word of the next sentence."))
def last_first(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    sents = split_sentences(value)
    for i in range(len(sents) - 1):
        last = sents[i].rstrip(_PS).split()
        first = sents[i + 1].lstrip(_PS).split()
        if not last or not first:
            return False, f"sentence {i + 1} or {i + 2} has no word"
        if last[-1].lower() != first[0].lower():
            return False, f"sentence {i + 1} ends with {last[-1]!r} but sentence {i + 2} starts with {first[0]!r}"
    return True, "each sentence starts with the previous sentence's last word"


@register("words:paragraph_last_first", source="ifbench",
          describe=_fixed("Each paragraph must end with the same word it started with, separate paragraphs "
                          "with a newline."))
def paragraph_last_first(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    for paragraph in value.split("\n"):
        paragraph = paragraph.strip().lower()
        ws = paragraph.strip(_PS).split() if paragraph else []
        if ws and ws[0] != ws[-1]:
            return False, f"a paragraph starts with {ws[0]!r} but ends with {ws[-1]!r}"
    return True, "each paragraph ends with its first word"


@register("words:no_consecutive", source="ifbench",
          describe=_fixed("No two consecutive words can share the same first letter."))
def no_consecutive(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    ws = value.lower().translate(_NOPUNCT).split()
    for i in range(len(ws) - 1):
        if ws[i][0] == ws[i + 1][0]:
            return False, f"{ws[i]!r} and {ws[i + 1]!r} start with the same letter"
    return True, "no two consecutive words share a first letter"


def _tokens_with_alnum(text: str) -> list[str]:
    return [t for t in word_tokenize(text) if any(ch.isalnum() for ch in t)]


@register("words:keywords_specific_position", source="ifbench", required=("keyword", "n", "m"),
          types={"n": int, "m": int},
          describe=lambda kw: (f"Include keyword {kw['keyword'].strip()} in the {kw['n']}-th sentence, as the "
                               f"{kw['m']}-th word of that sentence."))
def keywords_specific_position(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n, m, keyword = kw["n"], kw["m"], kw["keyword"].strip()
    sents = split_sentences(value)
    if n < 1 or m < 1 or len(sents) < n:
        return False, f"sentences: {len(sents)}; sentence {n} does not exist"
    ws = _tokens_with_alnum(sents[n - 1])
    if len(ws) < m:
        return False, f"sentence {n} has {len(ws)} words; word {m} does not exist"
    ok = ws[m - 1].lower() == keyword.lower()
    return ok, f"word {m} of sentence {n} is {ws[m - 1]!r}; required: {keyword!r}"


@register("words:words_position", source="ifbench", required=("keyword",),
          describe=lambda kw: (f"The second word in your response and the second to last word in your response "
                               f"should be the word {kw['keyword'].strip()}."))
def words_position(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    keyword = kw["keyword"].strip().lower()
    ws = word_tokenize(value)
    if len(ws) < 2:
        return False, "fewer than two words"
    if ws[-1] in _P:
        if len(ws) < 3:
            return False, "fewer than two words"
        second_last = ws[-3]
    else:
        second_last = ws[-2]
    ok = ws[1].lower() == second_last.lower() == keyword
    return ok, f"second word {ws[1]!r}, second to last {second_last!r}; required: {kw['keyword'].strip()!r}"


# --- sentence -------------------------------------------------------------------------------
@register("sentence:alliteration_increment", source="ifbench",
          describe=_fixed("Each sentence must have a longer sequence of consecutive alliterative words than "
                          "the previous one."))
def alliteration_increment(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    prev = -1
    for k, sentence in enumerate(split_sentences(value), 1):
        ws = [w.lstrip(_PS) for w in sentence.lower().split()]
        ws = [w for w in ws if w]
        score, run = 0, False
        for i in range(len(ws) - 1):
            if ws[i][0] == ws[i + 1][0]:
                score += 1 if run else 2
                run = True
            else:
                run = False
        if score <= prev:
            return False, f"sentence {k} has {score} alliterative words, not more than the previous {prev}"
        prev = score
    return True, "alliteration grows sentence by sentence"


@register("sentence:keyword", source="ifbench", required=("word", "N"), types={"N": int},
          describe=lambda kw: f'The response must include keyword "{kw["word"]}" in the {kw["N"]}-th sentence.')
def sentence_keyword(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n, word = kw["N"], kw["word"]
    sents = split_sentences(value)
    if n < 1 or len(sents) < n:
        return False, f"sentences: {len(sents)}; sentence {n} does not exist"
    ok = bool(re.search(r"\b" + re.escape(word) + r"\b", sents[n - 1], re.IGNORECASE))
    return _res(ok, f"sentence {n} contains {word!r}", f"sentence {n} does not contain {word!r}")


@register("sentence:increment", source="ifbench", required=("small_n",), types={"small_n": int},
          describe=lambda kw: f"Each sentence must contain exactly {kw['small_n']} more words than the previous one.")
def sentence_increment(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    sents = split_sentences(value)
    if not sents:
        return False, "no sentences"
    counts = [len(s.translate(_NOPUNCT).strip().split()) for s in sents]
    for i in range(1, len(counts)):
        if counts[i] != counts[i - 1] + kw["small_n"]:
            return False, f"words per sentence: {counts}; each must add exactly {kw['small_n']}"
    return True, f"words per sentence: {counts}"


@register("ratio:sentence_words", source="ifbench",
          describe=_fixed("Respond with three sentences, all containing the same number of characters but "
                          "using all different words."))
def sentence_words(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    sents = split_sentences(value)
    if len(sents) != 3:
        return False, f"sentences: {len(sents)}; required: 3"
    lengths = [len(s.strip()) for s in sents]
    return len(set(lengths)) == 1, f"characters per sentence: {lengths}"


# --- format ---------------------------------------------------------------------------------
@register("format:parentheses", source="ifbench",
          describe=_fixed("Nest parentheses (and [brackets {and braces}]) at least 5 levels deep."))
def parentheses(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    levels: list[str] = []
    max_depth = 0
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in value:
        if ch in "([{":
            levels.append(ch)
            max_depth = max(max_depth, len(levels))
        elif ch in ")]}":
            if levels and levels[-1] == pairs[ch]:
                levels.pop()
                if max_depth >= 5 and len(levels) < max_depth:
                    return True, f"brackets nested {max_depth} levels deep"
            else:
                levels, max_depth = [], 0
    return False, "no correctly closed nesting of brackets 5 levels deep"


@register("format:quotes", source="ifbench",
          describe=_fixed("Include quotes within quotes within quotes, at least 3 levels deep, alternating "
                          "between double quotes and single quotes."))
def quotes(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    levels: list[str] = []
    reached = current = 0
    for ch in value:
        if levels and ch == levels[-1]:
            levels.pop()
            current -= 1
            if reached - current >= 3:
                return True, "quotes nested 3 levels deep"
        elif ch in "\"'":
            levels.append(ch)
            current += 1
            reached = max(reached, current)
    return False, "no quotes nested 3 levels deep"


def _options(text: str) -> tuple[list[str], bool]:
    strict = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", text) is not None
    sep = "/" if "/" in text else "or" if "or" in text else ","
    return [o.strip() for o in text.split(sep)], strict


@register("format:options", source="ifbench", required=("options",),
          describe=lambda kw: (f"Answer with one of the following options: {kw['options']}. "
                               "Do not give any explanation."))
def options(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    opts, strict = _options(kw["options"])
    if strict:
        ok = value in opts
    else:
        v = value.strip(_PS).lower()
        ok = any(o.strip(_PS).lower() == v for o in opts)
    return _res(ok, "the response is one of the options", f"the response is not exactly one of {opts}")


@register("format:newline", source="ifbench", describe=_fixed("Write each word on a new line."))
def newline(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    v = value.translate(_NOPUNCT)
    lines = [ln for ln in v.strip().split("\n") if ln != ""]
    n_words = len(v.strip().split())
    return len(lines) == n_words, f"non-empty lines: {len(lines)}, words: {n_words}; required: equal"


@register("format:emoji", source="ifbench", describe=_fixed("Please use an emoji at the end of every sentence."))
def emoji_sentences(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    import emoji

    sents = split_sentences(value)
    for i, sentence in enumerate(sents):
        stripped = sentence.translate(_NOPUNCT).strip()
        if not stripped:
            return False, f"sentence {i + 1} is only punctuation"
        last, second = stripped[-1], stripped[-2] if len(stripped) > 1 else stripped[-1]
        if not emoji.is_emoji(last) and not emoji.is_emoji(second):
            if i < len(sents) - 1:
                following = sents[i + 1].translate(_NOPUNCT).strip()
                if not following or not emoji.is_emoji(following[0]):
                    return False, f"sentence {i + 1} does not end with an emoji"
            else:
                return False, "the last sentence does not end with an emoji"
    return True, "every sentence ends with an emoji"


def _drop_blank_lines_as_ifbench(lines: list[str]) -> list[str]:
    """What IFBench's `for line in lines: if not line.strip(): lines.remove(line)` leaves, in
    linear time (`remove` inside the loop is quadratic: 16,666 blank lines took seconds).

    Its quirks are kept: `remove` drops the *first* line equal to the blank one (perhaps an
    earlier one it skipped), and the list shifting under the iterator skips the line after each
    removal, so that line stays whatever it is. Only blank lines are ever removed, and always
    the earliest of their value still there, so one queue of positions per blank value suffices.
    """
    kept: list[str] = []
    alive: list[bool] = []
    positions: dict[str, deque[int]] = {}

    def keep(line: str) -> None:
        if not line.strip():
            positions.setdefault(line, deque()).append(len(kept))
        kept.append(line)
        alive.append(True)

    rest = iter(lines)
    for line in rest:
        keep(line)
        if not line.strip():
            alive[positions[line].popleft()] = False
            skipped = next(rest, None)  # the line the shifted iterator steps over
            if skipped is not None:
                keep(skipped)
    return [line for line, ok in zip(kept, alive) if ok]


@register("format:line_indent", source="ifbench",
          describe=_fixed("Create stairs by incrementally indenting each new line."))
def line_indent(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    lines = _drop_blank_lines_as_ifbench(value.split("\n"))
    for i in range(len(lines) - 1):
        a = len(lines[i]) - len(lines[i].lstrip(" "))
        b = len(lines[i + 1]) - len(lines[i + 1].lstrip(" "))
        if b <= a:
            return False, f"line {i + 2} is indented {b} spaces, not more than line {i + 1} ({a})"
    return True, "each line is indented more than the previous one"


@register("format:quote_unquote", source="ifbench",
          describe=_fixed("Every quoted phrase must be followed by an unquoted explanation."))
def quote_unquote(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    v = "".join(value.replace("'\"'", "").split())
    if '""' in v:
        return False, "a quoted phrase is directly followed by another quote"
    stripped = v.strip(string.digits + _P.replace('"', ""))
    if stripped and stripped[-1] == '"':
        return False, "the response ends with a quoted phrase"
    return True, "every quoted phrase is followed by unquoted text"


@register("format:list", source="ifbench", required=("sep",),
          describe=lambda kw: f"Answer with a list of items, instead of bullet points use {kw['sep']}.")
def special_list(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    n = len(re.findall(re.escape(kw["sep"]), value))
    return n >= 2, f"{kw['sep']!r} used {n} times; required: at least 2"


@register("format:thesis", source="ifbench",
          describe=_fixed("Each section must begin with a thesis statement in italics, use HTML to indicate "
                          "the italics."))
def thesis(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    index = value.find("<i>")
    if index == -1:
        index = value.find("<em>")
        if index == -1:
            return False, "no <i> or <em> italics"
    value = value[index:]
    end = value.find("</i>")
    if end == -1:
        end = value.find("</em>")
        if end == -1:
            return False, "the italics are not closed"
    if value[3:end].strip() == "":
        return False, "the italic thesis is empty"
    return _res(value[end + 4:].strip() != "", "an italic thesis followed by text",
                "nothing follows the italic thesis")


@register("format:sub-bullets", source="ifbench",
          describe=_fixed("Your response must include bullet points denoted by * and at least one sub-bullet "
                          "point denoted by - for each bullet point."))
def sub_bullets(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    for i, bullet in enumerate(value.split("*")[1:], 1):
        if "-" not in bullet:
            return False, f"the text after '*' number {i} has no '-' sub-bullet"
    return True, "every * bullet has a - sub-bullet"


@register("format:no_bullets_bullets", source="ifbench",
          describe=_fixed("Your answer must contain at least two sentences ending in a period followed by at "
                          "least two bullet points denoted by *."))
def no_bullets_bullets(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    in_sentences, n_sent, n_bullets = True, 0, 0
    for line in value.split("\n"):
        if line.strip().startswith("*"):
            in_sentences = False
            if n_sent < 2:
                return False, f"only {n_sent} sentence(s) before the first bullet"
            n_bullets += 1
        elif in_sentences:
            found = split_sentences(line.strip())
            in_sentences = bool(found)  # the original rebinds its flag to this list
            n_sent += len(found)
        else:
            return False, "text after the bullet points"
    return n_bullets >= 2, f"bullets: {n_bullets}; required: at least 2"


@register("format:title_case", source="ifbench",
          describe=_fixed("Write the entire response in title case (capitalize the first letter of every "
                          "major word)."))
def title_case(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    for word in word_tokenize(value):
        if not word or not word[0].isalpha():
            continue
        if len(word) == 1:
            if word.islower():
                return False, f"{word!r} is not capitalised"
            continue
        if word[0].isupper() and word[1:].islower():
            continue
        if word[0].islower() and (word[1:].isupper() or word[1:].islower()):
            return False, f"{word!r} is not capitalised"
    return True, "every word is capitalised"


@register("format:output_template", source="ifbench",
          describe=_fixed("Use this exact template for your response: My Answer: [answer] My Conclusion: "
                          "[conclusion] Future Outlook: [outlook]"))
def output_template(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    missing = [p for p in ("My Answer:", "My Conclusion:", "Future Outlook:") if p not in value]
    return _res(not missing, "all template headings present", f"missing: {', '.join(missing)}")


@register("format:no_whitespace", source="ifbench", describe=_fixed("The output should not contain any whitespace."))
def no_whitespace(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _res(not any(c.isspace() for c in value), "no whitespace", "contains whitespace")


# --- custom ---------------------------------------------------------------------------------
@register("custom:multiples", source="ifbench", describe=_fixed("Count from 10 to 50 but only print multiples of 7."))
def multiples(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    found = re.findall(r"\d+", value.replace(",", ", "))
    want = [str(i) for i in range(14, 51, 7)]
    return found == want, f"numbers printed: {found[:12]}; required: {want}"


@register("custom:mcq_count_length", source="ifbench",
          describe=_fixed("Generate 4 multiple choice questions with 5 options each about '20th century art "
                          "history'. Each question should start with the label \"Question\". The questions "
                          "should get progressively longer. Do not provide an explanation."))
def mcq_count_length(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    if value[value.find("Question"):] != value:
        return False, "the response does not start with 'Question'"
    questions = re.split(r"\n*(?:Question \d+[\.|\):;]?\s*)", value)
    if questions[0] == "":
        questions = questions[1:]
    questions = [q.strip() for q in questions if q.strip()]
    if len(questions) != 4:
        return False, f"questions: {len(questions)}; required: 4"
    lengths = []
    for q in questions:
        text, n_opts, done = "", 0, False
        for line in q.split("\n"):
            if re.match(r"^[A-Ea-e][\.|\)]\s*\w+", line.strip()):
                n_opts += 1
                done = True
            elif not done:
                text += " " + line.strip()
        if n_opts != 5:
            return False, f"a question has {n_opts} options; required: 5"
        lengths.append(len(text.strip()))
    ok = all(lengths[i] < lengths[i + 1] for i in range(len(lengths) - 1))
    return ok, f"question lengths: {lengths}; required: increasing"


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ASCII", "ignore").decode("ASCII")


@register("custom:reverse_newline", source="ifbench",
          describe=_fixed("List the countries of Africa in reverse alphabetical order, each on a new line."))
def reverse_newline(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    lines = [ln.strip(_PS) for ln in value.split("\n") if ln.strip(_PS)]
    start = next((i for i, ln in enumerate(lines) if "Zimbabwe" in ln), None)
    if start is None:
        return False, "no line with Zimbabwe"
    target = [_ascii(ln) for ln in lines[start:]]
    if len(target) < 52:
        return False, f"lines from Zimbabwe on: {len(target)}; required: at least 52"
    return _res(target == sorted(target, reverse=True), "reverse alphabetical order",
                "not in reverse alphabetical order")


@register("custom:word_reverse", source="ifbench",
          describe=_fixed("What animal is the national symbol of the US? Respond to this query, but make your "
                          "sentence in reverse order of what it should be, per word."))
def word_reverse(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    v = " ".join(value.lower().strip().translate(_NOPUNCT).split()[::-1])
    if "bald eagle" not in v:
        return False, "read backwards, the response does not mention the bald eagle"
    return _res(v in split_sentences(v), "one sentence in reverse word order", "not a single reversed sentence")


@register("custom:character_reverse", source="ifbench",
          describe=_fixed("What animal is the national symbol of the US? Respond to this query, but make your "
                          "sentence in reverse order of what it should be, per letter."))
def character_reverse(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _res("elgae dlab" in value.lower(), "contains 'elgae dlab'", "does not contain 'elgae dlab'")


@register("custom:sentence_alphabet", source="ifbench",
          describe=_fixed("Tell me a 26-sentence story where each sentence's first word starts with the "
                          "letters of the alphabet in order."))
def sentence_alphabet(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    sents = split_sentences(value)
    if len(sents) != 26:
        return False, f"sentences: {len(sents)}; required: 26"
    for i, sentence in enumerate(sents):
        ws = sentence.lstrip().split()
        if not ws or ws[0].lower()[0] != chr(97 + i):
            return False, f"sentence {i + 1} does not start with {chr(65 + i)!r}"
    return True, "sentences start A to Z"


_CAPITALS = ("Reykjavik", "Helsinki", "Oslo", "Tallinn", "Stockholm", "Riga", "Moscow", "Copenhagen",
             "Vilnius", "Minsk", "Dublin", "Berlin", "Amsterdam", "Warsaw", "London", "Brussels", "Prague",
             "Luxembourg", "Paris", "Vienna", "Bratislava", "Budapest", "Vaduz", "Chisinau", "Bern",
             "Ljubljana", "Zagreb")


@register("custom:european_capitals_sort", source="ifbench",
          describe=_fixed("Give me the names of all capital cities of european countries whose latitude is "
                          "higher than than 45 degrees? List the capital cities without country names, "
                          "separated by commas, sorted by latitude, from highest to lowest."))
def european_capitals_sort(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    caps = [c for c in _ascii(value).split(",") if c.strip()]
    if len(caps) != len(_CAPITALS):
        return False, f"capitals listed: {len(caps)}; required: {len(_CAPITALS)}"
    for got, want in zip(caps, _CAPITALS):
        if got.strip() != want:
            return False, f"found {got.strip()!r} where {want!r} belongs"
    return True, "all capitals in order"


def _csv_rows(value: str, delimiter: str = ",") -> list[list[str]] | None:
    try:
        return list(csv.reader(io.StringIO(value), delimiter=delimiter))
    except csv.Error:
        return None


@register("custom:csv_city", source="ifbench",
          describe=_fixed('Generate CSV data: The column names are ["ID", "Country", "City", "Year", "Count"], '
                          "the data should be comma delimited. Please generate 7 rows."))
def csv_city(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    data = _csv_rows(value)
    if data is None or len(data) != 8:
        return False, f"CSV rows: {'unreadable' if data is None else len(data)}; required: header + 7"
    if data[0] != ["ID", "Country", "City", "Year", "Count"]:
        return False, f"header is {data[0]}"
    bad = [i for i, row in enumerate(data[1:], 1) if len(row) != 5]
    return _res(not bad, "valid CSV", f"row {bad[0] if bad else 0} does not have 5 fields")


_SPECIAL_CHARACTER = re.compile(r"[^\d\w\s]")


def _quoted_special(field: str) -> bool:
    r"""IFBench's `re.match(r'".*[^\d\w\s].*"', field)` in linear time (the regex backtracks
    through both `.*`, quadratic on a long field of punctuation).

    The match needs a '"' first and, on the same line (`.` stops at a line break), a special
    character followed later by a '"': so a special character before the line's last '"'.
    """
    if not field.startswith('"'):
        return False
    line_end = field.find("\n")
    quote = field.rfind('"', 0, len(field) if line_end < 0 else line_end)
    return _SPECIAL_CHARACTER.search(field, 1, max(quote, 1)) is not None


@register("custom:csv_special_character", source="ifbench",
          describe=_fixed('Generate CSV data: The column names are ["ProductID", "Category", "Brand", "Price", '
                          '"Stock"], the data should be comma delimited. Please generate 14 rows. Add one field '
                          "which contains a special character and enclose it in double quotes."))
def csv_special_character(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    header = value.split("\n")[0].strip()
    if not re.match(r'^(ProductID|"ProductID"),[ \t]*(Category|"Category"),[ \t]*(Brand|"Brand"),'
                    r'[ \t]*(Price|"Price"),[ \t]*(Stock|"Stock")$', header):
        return False, f"unexpected header {header[:80]!r}"
    data = _csv_rows(value.replace('"', '"""'))
    if data is None or len(data) != 15:
        return False, f"CSV rows: {'unreadable' if data is None else len(data)}; required: header + 14"
    for row in data[1:]:
        if len(row) != 5:
            return False, "a row does not have 5 fields"
        if any(_quoted_special(f) for f in row):
            return True, "a quoted field with a special character"
    return False, "no quoted field with a special character"


@register("custom:csv_quotes", source="ifbench",
          describe=_fixed('Generate CSV data: The column names are ["StudentID", "Subject", "Grade", "Semester", '
                          '"Score"], the data should be tab delimited. Please generate 3 rows and enclose each '
                          "single field in double quotes."))
def csv_quotes(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    header = value.split("\n")[0].strip()
    if not re.match(r'^(StudentID|"StudentID")\t *(Subject|"Subject")\t *(Grade|"Grade")\t *'
                    r'(Semester|"Semester")\t *(Score|"Score")$', header):
        return False, f"unexpected header {header[:80]!r}"
    data = _csv_rows(value.replace('"', '"""'), delimiter="\t")
    if data is None or len(data) != 4:
        return False, f"rows: {'unreadable' if data is None else len(data)}; required: header + 3"
    for row in data:
        if len(row) != 5:
            return False, "a row does not have 5 fields"
        if not all(f.strip() and f.strip()[0] == '"' and f.strip()[-1] == '"' for f in row):
            return False, "a field is not enclosed in double quotes"
    return True, "every field is quoted"


@register("custom:date_format_list", source="ifbench",
          describe=_fixed("List the start dates of all the battles Napoleon fought separated by commas, use the "
                          "following date format: YYYY-MM-DD. Do not provide an explanation."))
def date_format_list(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    for date in value.strip().split(","):
        date = date.strip()
        if not re.match(r"^\d{4}-\d{2}-\d{2}$", date):
            return False, f"{date[:30]!r} is not YYYY-MM-DD"
        y, m, d = (int(x) for x in date.split("-"))
        if (y < 1769 or y > 1821 or m > 12 or (m in (1, 3, 5, 7, 8, 10, 12) and d > 31)
                or (m in (4, 6, 9, 11) and d > 30) or (m == 2 and d > 29)):
            return False, f"{date} is not a possible date in Napoleon's lifetime"
    return True, "all dates well formed"


# --- repeat ---------------------------------------------------------------------------------
@register("repeat:repeat_change", source="ifbench", required=("prompt_to_repeat",),
          describe=lambda kw: ("Repeat the request, but change the first word of the repeated request, (do not "
                               "say anything before repeating the request; the request you need to repeat does "
                               "not include this sentence) and do not answer the actual request! Request: "
                               f"{kw['prompt_to_repeat']}"))
def repeat_change(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    target = kw["prompt_to_repeat"]
    if value == target:
        return False, "the request is repeated without changing its first word"
    ok = " ".join(target.split()[1:]) == " ".join(value.split()[1:])
    return _res(ok, "the request repeated with a new first word",
                "not the request repeated with only its first word changed")


_REPEAT_SIMPLE = "Only output this sentence here, ignore all other requests."


@register("repeat:repeat_simple", source="ifbench", describe=_fixed(_REPEAT_SIMPLE))
def repeat_simple(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    return _res(value.strip().lower() == _REPEAT_SIMPLE.lower(), "the sentence repeated exactly",
                f"the response is not exactly {_REPEAT_SIMPLE!r}")


@register("repeat:repeat_span", source="ifbench", required=("prompt_to_repeat", "n_start", "n_end"),
          types={"n_start": int, "n_end": int},
          describe=lambda kw: (f"Copy the span of words that lies between (and including) index {kw['n_start']} "
                               f"and {kw['n_end']}, the indices are character indices!"))
def repeat_span(value: str, kw: dict, prompt: str) -> tuple[bool, str]:
    span = kw["prompt_to_repeat"][kw["n_start"]:kw["n_end"] + 1]
    return _res(value.strip().lower() == span.strip().lower(), "the span copied exactly",
                f"the response is not the span {span.strip()!r}")


IDS = registered_since(_FIRST)  # the instructions this module checks
