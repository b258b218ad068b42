"""The checks on a block's text alone: R1 (merges that show in the text), R3 (a plain
statement) and R2's generic requirements ("The answer must be correct."). `check_text` runs
them; custom tasks call it on their own blocks (it is exported by mrtpo.blocks.rules).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable

from mrtpo.blocks.findings import Finding
from mrtpo.blocks.prose import (GENERIC, STOPWORDS, _LABEL_WORDS, _TAG_LABEL_RE, _WORD_RE, _Split,
                                _content_words, _excerpt, _norm, _payload_groups, _sentences, own_words,
                                split_text)

_IMPERATIVE_VERBS = frozenset("""
use write return output answer respond give include provide make ensure check fix avoid remember
consider try keep follow add remove replace change format wrap put place start begin finish think
reason call invoke do don't dont never always please note be let let's focus double-check verify
compute list explain describe generate produce create rewrite correct submit stop read look pay
recall mention state select choose pick set apply print emit reply respond limit refrain skip omit
""".split())

_IMPERATIVE_PHRASES = re.compile(
    r"\b(please|make sure|be sure|ensure that|remember to|don't forget|do not forget|"
    r"keep in mind|note that|pay attention|take care|be careful)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(you|your|yours|yourself|you're|you'll|you've|you'd)\b", re.IGNORECASE)

_TRAINING_WORDS = re.compile(
    r"\b(train(?:ing|ed|s)?|replay(?:s|ed|ing)?|rewards?|rewarded|rewarding|"
    r"scor(?:e|es|ed|ing)|verifiers?|verif(?:y|ies|ied|ication)|graders?|grad(?:ed|ing)|"
    r"advantages?|polic(?:y|ies)|gradients?|fine-?tun\w*|rlhf|penalt(?:y|ies)|penali[sz]\w*|"
    r"evaluat(?:or|ors|ion|ed)|checker|full marks|mrtpo|grpo|gdpo|ppo)\b", re.IGNORECASE)
_RL_WORD = re.compile(r"\bRL\b")
_MODEL_WORDS = re.compile(r"\b(?:the|a) (?:language )?model (?:should|must|will|can|needs?|has to|is asked)\b"
                          r"|\b(?:LLM|language model)s?\b", re.IGNORECASE)
_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+\S[^\n]*", re.MULTILINE)
_BOLD_RE = re.compile(r"^\s*(\*\*|__)[^*_\n]{1,60}(\*\*|__)\s*:?", re.MULTILINE)
_BRACKET_RE = re.compile(r"^\s*\[[A-Z][A-Za-z _\-]{1,30}\]", re.MULTILINE)
# "Label:" at a line's start: up to three words, or any short phrase opening with a label word
_LINE_LABEL_RE = re.compile(
    r"^\s*(?:[-*\u2022]\s+)?([A-Z][A-Za-z]*(?:[ \-][A-Za-z0-9]+){0,2}|(?i:" + _LABEL_WORDS
    + r")(?:[ \-][A-Za-z0-9]+){0,4})\s*:(?=\s|$)", re.MULTILINE)
_DASH_LABEL_RE = re.compile(r"^\s*(?i:" + _LABEL_WORDS + r"|important)\s+[-\u2013\u2014]\s", re.MULTILINE)
#: words shouted as labels ("IMPORTANT:", "NOTE:")
_SHOUTS = frozenset("important note warning caution tip hint attention reminder nb".split())
#: verbs that make "X verb: ..." a sentence with a colon rather than a label
_VERBS = frozenset("""is are was were be has have had says said fails failed reports returns
gives shows stops reads rejects refuses answers means contains holds lists gets""".split())
_LEAD_IN_RE = re.compile(r"^([^\n\u220e\u25a0\u25b2\u25c6]{1,80}?):[ \t]*(?=\s*[\u25a0\u25b2\u25c6])",
                         re.MULTILINE)
_LIST_ITEM_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+\S", re.MULTILINE)
_ERROR_WORDS = re.compile(
    r"\b(errors?|fails?|failed|failing|failure|exception|traceback|no such|syntax|"
    r"incorrect|invalid|missing|mismatch(?:es|ed)?|rejected|refused|unknown)\b", re.IGNORECASE)


def check_text(text: str, *, placement: str = "append", quoted: Iterable[str] = ()) -> list[Finding]:
    """Lint one block's text: R3 (a plain statement) and the R1 merges that show in the text.

    Returns a list of findings, empty when the text is clean. Code fences, tool calls, JSON,
    `<think>` blocks and quotations ("...", '...', `...`) are payload, not prose, and are not
    judged as prose. `quoted` names more strings to treat that way (the verifier's feedback,
    values from the example's label), which the dataset-level lint passes in.

    `placement="in_prompt"` marks a constraint sentence that is already part of P0 (the
    user's own request): the imperative check does not apply to it, everything else does.
    """
    if not isinstance(text, str):
        return [Finding("R6", "not-text", f"the block is {type(text).__name__}, not a string; "
                        "a block builder returns text ('' when there is nothing to say)")]
    if not text.strip():
        return []
    split = split_text(text, quoted)
    prose = split.prose
    found: list[Finding] = []
    found += _check_imperative(prose) if placement != "in_prompt" else []
    found += _check_labels(prose)
    found += _check_training_words(prose)
    found += _check_merged(split, placement)
    found += check_generic_requirement(split)
    return [replace(f, excerpt=own_words(f.excerpt, text)) for f in found]


#: words that say how any answer should be, whatever the example ("short", "correct")
VAGUE = frozenset("""
short shorter concise brief briefly long longer clear clearly accurate accurately complete
completely correct correctly right wrong appropriate appropriately good better best nice
proper properly relevant helpful precise precisely well-formatted well-formed formatted
formatting neat clean tidy simple readable succinct detailed thorough quality high expected
specified required requested desired acceptable reasonable sensible fine ok okay perfect
necessary sufficient enough
""".split())
#: of those and GENERIC, the words that carry a requirement ("correct", "short", "format")
_REQUIREMENT_WORDS = VAGUE | frozenset("""valid invalid format formats follow follows following
match matches matching expected exactly exact satisfy satisfies satisfied""".split())
#: GENERIC words that still name something specific in a requirement ("valid JSON", "one code block")
_NAMING_WORDS = frozenset("json sql sqlite code block blocks table tables lowercase".split())


def check_generic_requirement(split: _Split) -> list[Finding]:
    """R2 on text alone: a block whose every word is generic ("The answer must be correct.",
    "The response should be short and concise.", "A correct response has the right format.")
    says what every answer of every example should be, which carries no information. Text
    with a payload, a quotation, a number or any specific word is left to the other checks."""
    prose = split.prose
    if split.payloads or re.search(r"[\u220e\u25a0\u25b2\u25c6\d]", prose):
        return []
    words = [w.lower().strip("'-") for w in _WORD_RE.findall(prose)]
    content = [w for w in words if w not in STOPWORDS and len(w) >= 2]
    generic = (GENERIC - _NAMING_WORDS) | VAGUE
    if not content or not all(w in generic or _singular(w) in generic for w in content):
        return []
    if not any(w in _REQUIREMENT_WORDS for w in content):
        return []
    return [Finding("R2", "generic-requirement",
                    "the block is a generic requirement (every word of it fits any example); it "
                    "carries no information: say what this example's answer is or what this "
                    "response got wrong (its value, its length, the verifier's words)",
                    _norm(prose)[:60])]


def _singular(w: str) -> str:
    return w[:-1] if w.endswith("s") and len(w) > 3 else w


def _check_imperative(prose: str) -> list[Finding]:
    found = []
    for s in _sentences(prose):
        first = re.sub(r"^[\s\u220e\u25a0\u25b2\u25c6\"'(*\-\u2022>]+", "", s)
        m = _WORD_RE.match(first)
        if m and m.group(0)[0].isupper() and not (m.group(0).isupper() and len(m.group(0)) > 1):
            word = m.group(0).lower()
            if word in _IMPERATIVE_VERBS:
                found.append(Finding(
                    "R3", "imperative",
                    f"the sentence starts with the imperative {m.group(0)!r}, an instruction to "
                    "the model; state the fact instead (e.g. 'The query ...', 'A correct "
                    "response ...')", _excerpt(first, 0, 0, 50)))
                break
    m = _IMPERATIVE_PHRASES.search(prose)
    if m and not found:
        found.append(Finding("R3", "imperative",
                             f"{m.group(0)!r} instructs the model; write the information as a "
                             "plain statement", _excerpt(prose, m.start(), m.end())))
    m = _SECOND_PERSON.search(prose)
    if m and not found:
        found.append(Finding("R3", "addresses-model",
                             f"{m.group(0)!r} addresses the model; describe the answer in the "
                             "third person ('the query', 'a correct response')",
                             _excerpt(prose, m.start(), m.end())))
    return found


def _check_labels(prose: str) -> list[Finding]:
    for rx, what in ((_HEADING_RE, "a markdown heading"), (_BOLD_RE, "a bold label"),
                     (_BRACKET_RE, "a bracketed label"), (_TAG_LABEL_RE, "a label tag")):
        m = rx.search(prose)
        if m:
            return [Finding("R3", "label", f"{what} ({m.group(0).strip()!r}); drop it and write "
                            "the information as a plain statement", _excerpt(prose, m.start(), m.end()))]
    m = _LEAD_IN_RE.search(prose)
    if m:
        return [Finding("R3", "label", f"the lead-in {m.group(0).strip()!r} labels the payload "
                        "that follows; drop it (the payload alone is the block)",
                        _excerpt(prose, m.start(), m.end()))]
    m = _DASH_LABEL_RE.search(prose)
    if m:
        return [Finding("R3", "label", f"the line starts with the label {m.group(0).strip()!r}; "
                        "drop it and write the information as a plain statement",
                        _excerpt(prose, m.start(), m.end()))]
    for m in _LINE_LABEL_RE.finditer(prose):
        label = m.group(1)
        words = label.lower().split()
        if label.isupper() and len(label) > 1 and " " not in label and label.lower() not in _SHOUTS:
            continue  # SQL keyword or an acronym followed by a colon, not a label
        if not re.match(r"(?i:" + _LABEL_WORDS + r")\b", label) and (
                words[0] in ("the", "a", "an", "this", "it") or set(words) & _VERBS):
            continue  # a sentence's own colon ("SQLite says: ...", "The query fails: ...")
        return [Finding("R3", "label", f"the line starts with the label {label + ':'!r}; drop "
                        "it and write the information as a plain statement",
                        _excerpt(prose, m.start(), m.end()))]
    return []


def _check_training_words(prose: str) -> list[Finding]:
    m = _TRAINING_WORDS.search(prose) or _RL_WORD.search(prose) or _MODEL_WORDS.search(prose)
    if not m:
        return []
    return [Finding("R3", "training-words",
                    f"{m.group(0)!r} talks about training, rewards, scoring or verifiers; a "
                    "block states facts about the answer only", _excerpt(prose, m.start(), m.end()))]


def _check_merged(split: _Split, placement: str) -> list[Finding]:
    # headings and label lines are R3's business; leave them out of the sentence count
    prose = _HEADING_RE.sub("", split.prose)
    prose = _LINE_LABEL_RE.sub("", _BRACKET_RE.sub("", _BOLD_RE.sub("", prose)))
    prose = _LEAD_IN_RE.sub("", _TAG_LABEL_RE.sub("", prose))
    groups = _payload_groups(split)
    sentences = _sentences(prose)
    if groups >= 2:
        kinds = sorted({k for k, _ in split.payloads})
        return [Finding("R1", "merged", f"the block holds {groups} separate payloads "
                        f"({', '.join(kinds)}); give each reward its own block")]
    if groups == 1 and sentences:
        # a payload block is the payload alone: a statement beside it is a second piece of
        # information (a lead-in label was removed above; R3 reports it)
        m = _ERROR_WORDS.search(prose)
        if m:
            return [Finding("R1", "merged", "the block joins a feedback text with a "
                            f"{split.payloads[0][0]} payload; the feedback belongs to its own "
                            "reward's block", _excerpt(prose, m.start(), m.end()))]
        return [Finding("R1", "merged", "the block joins a statement with a "
                        f"{split.payloads[0][0]} payload; a payload block holds the payload "
                        "alone, and the statement belongs to its own reward's block",
                        sentences[0][:60])]
    if placement != "in_prompt" and len(_LIST_ITEM_RE.findall(prose)) >= 2:
        return [Finding("R1", "merged", "the block is a list of several items (rubric items or "
                        "constraints); give each its own reward and block")]
    if len(sentences) >= 2:
        seen = _content_words(sentences[0])
        for s in sentences[1:]:
            cw = _content_words(s)
            if cw and not (cw & seen):
                return [Finding("R1", "merged", "the block states unrelated things in separate "
                                "sentences (e.g. two constraints); give each its own reward and "
                                "block", s[:60])]
            seen |= cw
    return []
