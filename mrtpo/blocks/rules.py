"""The block writing rules, as lint checks.

A block Z_k is only useful to MRTPO if removing it changes exactly the information reward k
checks, so blocks are written to six rules (docs/writing-blocks.md has each with a good and a
bad block). Each rule has an id, and each check a short name and a message that says what to
change:

  R1 one reward, one block      a block never merges constraints, verifiers or a feedback
                                text with a reference; each reward has one block builder
  R2 specific information       built from this example's label or the verifier's output,
                                never a generic requirement
  R3 a plain statement          no instructions to the model, no headings or labels, no
                                words about training, replay, rewards, scores or verifiers
  R4 only this response's       a feedback block is empty when the verifier said nothing,
     own feedback               and quotes the verifier's own words otherwise
  R5 references in the          a reference block parses with the task's format and gets
     policy's own form          full marks from its paired reward
  R6 consistency                prompt, rewards and blocks agree (P_without_k is P_all minus
                                block k, P0 is what sampling used, declared dependence holds)

Three layers, from cheap to complete:
- `check_text(text)`: text alone (R1 merges that show in the text, all of R3, and R2's
  generic requirements such as "The answer must be correct."). Custom tasks call it on their
  own blocks.
- `check_block(...)`: one block in its context (example, verdict, reward, format): R2's
  "nothing taken from the example", R4, R5 and R6's in-prompt presence, plus `check_text`.
- dataset-level checks over evaluated examples, in `mrtpo.blocks.lint`, which call the
  functions at the end of this module (R1 structure, R2 identical blocks, R6 contexts).

Kinds. A block's kind says which checks apply: "format", "feedback", "reference",
"constraint", "schema" or "" (other). A reward states it with `Reward.kind`; when that is
empty, `infer_kind` works it out from the block's structure (see there). A reward can waive
one rule, or one check of a rule, with a reason (`Reward.waive`); `split_waived` sets such
findings apart, and the lint summary lists them with the reason.

Heuristics are measured, not assumed: tests/test_blocks_corpus.py runs the lint over a
corpus of good and bad blocks and reports precision and recall.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from mrtpo.formats import CodeBlockFormat, Format, TextFormat, ToolCallFormat
from mrtpo.tasks.base import Example, Reward, Verdict
from mrtpo.tasks.contract import USER_CODE_ERRORS

#: rule id -> short title
RULES: dict[str, str] = {
    "R1": "one reward, one block",
    "R2": "specific information",
    "R3": "a plain statement",
    "R4": "only this response's own feedback",
    "R5": "references in the policy's own form",
    "R6": "consistency of prompt, rewards and blocks",
}

KINDS = ("format", "feedback", "reference", "constraint", "schema", "")

#: what counts as full marks for R5 (the rewards of mrtpo's tasks score in [floor, 1])
FULL_MARKS = 1.0


@dataclass(frozen=True)
class Finding:
    """One broken rule: which rule and check, what to change, and where."""

    rule: str  # "R1".."R6"
    check: str  # short name of the check, e.g. "imperative"
    message: str  # what is wrong and what to change
    excerpt: str = ""  # the offending piece of text
    example: str = ""  # the example's location (source, else id); set by dataset-level checks
    reward: str = ""
    response: str = ""  # which response the block was built for ("reference", "corrupted"...)
    waived: str = ""  # the reason, when the reward waives this rule (`Reward.waive`)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def at(self, *, example: str = "", reward: str = "", response: str = "") -> "Finding":
        """The same finding with its location filled in (fields already set are kept)."""
        return Finding(self.rule, self.check, self.message, self.excerpt,
                       self.example or example, self.reward or reward, self.response or response,
                       self.waived)

    def __str__(self) -> str:
        where = " ".join(x for x in (self.example, self.reward and f"[{self.reward}]",
                                     self.response and f"({self.response})") if x)
        exc = f" -- {self.excerpt!r}" if self.excerpt else ""
        return f"{self.rule} {self.check}: {self.message}{exc}" + (f" @ {where}" if where else "")


# --------------------------------------------------------------------------------------------
# Text: what is prose and what is payload
# --------------------------------------------------------------------------------------------
_MASK = " \u220e "  # stands in for quoted text, so prose checks skip it
# payloads are replaced by one mark per kind, so adjacency and kind survive in the prose
_PMARK = {"code": "\u25a0", "tool_call": "\u25b2", "json": "\u25c6"}
_FENCE_RE = re.compile(r"```[^\n`]*\n.*?```|```[^`\n]+```", re.DOTALL)
_TOOL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_INLINE_CODE_RE = re.compile(r"`[^`\n]+`")
_DQUOTE_RE = re.compile(r"\"[^\"\n]*\"|\u201c[^\u201d\n]*\u201d")
_TAG_RE = re.compile(r"</?[A-Za-z_][\w\-]*>")
_SQUOTE_RE = re.compile(r"(?<![\w])['\u2018][^'\u2018\u2019\n]{1,80}['\u2019](?![\w])")


@dataclass(frozen=True)
class _Split:
    prose: str  # the text with quotations replaced by _MASK and payloads by their _PMARK
    payloads: list[tuple[str, str]]  # (kind, text) for code fences, tool calls, JSON values


def _json_spans(text: str) -> list[tuple[int, int]]:
    """Where JSON objects/arrays (a schema, a call) lie in `text`, left to right, each found by
    `json.JSONDecoder.raw_decode` so it is one span whatever it holds. Empty ones (`{}`, `[]`)
    are not payloads: they are answer markers (`\\boxed{}`) and placeholders."""
    dec = json.JSONDecoder()
    spans, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch in "{[":
            try:
                obj, end = dec.raw_decode(text, i)
            except ValueError:
                obj, end = None, i
            if end > i and isinstance(obj, (dict, list)) and obj:
                spans.append((i, end))
                i = end
                continue
        i += 1
    return spans


def _mask_json(text: str, payloads: list[tuple[str, str]]) -> str:
    """Replace JSON objects/arrays (a schema, a call) by their mark, recording them as payloads."""
    out, last = [], 0
    for start, end in _json_spans(text):
        payloads.append(("json", text[start:end]))
        out += [text[last:start], f" {_PMARK['json']} "]
        last = end
    out.append(text[last:])
    return "".join(out)


_FILL = "\u2591"  # stands in for a payload while later payload kinds are looked for


def _payload_spans(text: str) -> list[tuple[int, int]]:
    """Where the payloads (code fences, tool calls, `<think>` blocks, JSON objects/arrays) lie
    in `text`, found by structure alone, in the order `split_text` takes them: each kind is
    blanked out (same length, so offsets hold) before the next is looked for, and JSON values
    are found by `json.JSONDecoder.raw_decode` scanning, so a JSON document is one span
    whatever strings it holds."""
    spans: list[tuple[int, int]] = []
    work = text
    for rx in (_FENCE_RE, _TOOL_RE, _THINK_RE):
        spans += [m.span() for m in rx.finditer(work)]
        work = rx.sub(lambda m: _FILL * len(m.group(0)), work)
    return spans + _json_spans(work)


def _mask_quoted(text: str, quoted: Iterable[str]) -> str:
    """`text` with each occurrence of a `quoted` string replaced by _MASK, longest first,
    except occurrences that lie inside a payload or a tag or cut across its edge: a label
    value that is also a string or number inside a JSON schema or a tool call (BFCL's
    "0.0001", "all" inside "<tool_call>", "tools" inside "<tools>") is part of that payload or
    tag, and masking it would cut the payload into pieces or turn the tag into prose. An
    occurrence that covers whole payloads (feedback quoting a call) is masked, so what the
    verifier said stays quotation, not payload."""
    qs = sorted({q for q in quoted if q and len(q.strip()) >= 3}, key=len, reverse=True)
    if not qs:
        return text
    spans = _payload_spans(text) + [m.span() for m in _TAG_RE.finditer(text)]
    chosen: list[tuple[int, int]] = []
    for q in qs:
        i = text.find(q)
        while i >= 0:
            j = i + len(q)
            free = not any(a < j and i < b for a, b in chosen)
            outside = all(b <= i or j <= a or (i <= a and b <= j) for a, b in spans)
            if free and outside:
                chosen.append((i, j))
                i = text.find(q, j)
            else:
                i = text.find(q, i + 1)
    out, pos = [], 0
    for a, b in sorted(chosen):
        out += [text[pos:a], _MASK]
        pos = b
    return "".join(out) + text[pos:]


def split_text(text: str, quoted: Iterable[str] = ()) -> _Split:
    """Separate prose from payloads (code fences, tool calls, JSON) and quotations.

    `quoted` are strings the caller knows come from the data or the verifier (its feedback,
    the example's label); they are masked too, so words inside them are not judged as prose.
    Payloads are located by structure first (`_payload_spans`), so a quoted string inside a
    payload leaves the payload whole.
    """
    payloads: list[tuple[str, str]] = []
    s = _mask_quoted(text, quoted)

    def fence(m: re.Match) -> str:
        payloads.append(("code", m.group(0)))
        return f" {_PMARK['code']} "

    def tool(m: re.Match) -> str:
        if m.group(1).strip():
            payloads.append(("tool_call", m.group(0)))
            return f" {_PMARK['tool_call']} "
        return _MASK

    s = _FENCE_RE.sub(fence, s)
    s = _TOOL_RE.sub(tool, s)
    s = _THINK_RE.sub(_MASK, s)
    s = _mask_json(s, payloads)
    # other tags (<tools>, <think> mentions) are neither prose nor payload: drop them
    s = _TAG_RE.sub(lambda m: m.group(0) if _TAG_LABEL_RE.fullmatch(m.group(0)) else " ", s)
    s = _INLINE_CODE_RE.sub(_MASK, s)
    s = _DQUOTE_RE.sub(_MASK, s)
    s = _SQUOTE_RE.sub(_MASK, s)
    return _Split(s, payloads)


def _payload_groups(split: _Split) -> int:
    """Number of separate payloads. Adjacent tool calls (parallel calls) or adjacent JSON
    values (a list of schemas), separated by nothing but whitespace or commas, count as one;
    every code fence counts (two fenced answers are two answers)."""
    runs = re.findall(r"\u25b2(?:[\s,\u220e]*\u25b2)*|\u25c6(?:[\s,\u220e]*\u25c6)*|\u25a0", split.prose)
    return len(runs)


def _sentences(prose: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\u220e\u25a0\u25b2\u25c6\"'(*\-])|\n+", prose)
    out = []
    for p in parts:
        p = p.strip()
        if re.sub(r"[\s\u220e\u25a0\u25b2\u25c6.,;:!?()\-*]", "", p):
            out.append(p)
    return out


_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_'\-]*")

STOPWORDS = frozenset("""
a an the and or but if then else of to in on at by for with from into onto as is are was were
be been being am it its this that these those there here which who whom whose what when where
why how not no nor so than too very can could may might must shall should will would do does
did done has have had having each every all any some such only own same both few more most
other one two three four five six seven eight nine ten first second last also just about
above below over under again further once per via i me my we our you your he him his she her
they them their itself themselves out up down off while until because between through during
before after without within against among upon yet still already even ever whose whether
though although however instead rather than onto across toward towards around near
""".split())

#: words that describe any example of a task; a block made only of these says nothing specific
GENERIC = frozenset("""
query queries sql sqlite statement statements response responses answer answers result results
row rows column columns table tables database databases return returns returned returning
execute executes executed execution executing run runs ran running correct correctly incorrect
valid invalid output outputs format formats formatted function functions call calls called
tool tools argument arguments parameter parameters value values schema schemas json code block
blocks text question questions user request reference expected error errors need needs needed
required require requires match matches matching matched same right wrong exactly exact
contain contains containing follow follows following given give gives giving use uses used
using true false none null data name names type types constraint constraints instruction
instructions rule rules requirement requirements information word words sentence sentences
line lines proper properly well good bad problem problems issue issues fix fixed work works
working worked solution solutions task tasks model assistant make makes sure check checks
checked expectation expected please note important always never written write writes
gold number numbers count counts satisfy satisfies satisfied every required prompt
""".split())

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

_LABEL_WORDS = ("reference|feedback|hint|hints|note|notes|error|errors|context|constraint|"
                "constraints|block|info|information|solution|expected|schema|rubric|"
                "instruction|instructions|gold|label|answer key|tip|tips|warning|reminder|"
                "requirement|requirements|correction|critique")
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
_TAG_LABEL_RE = re.compile(r"</?(?:" + _LABEL_WORDS + r")\b[^>\n]{0,40}>", re.IGNORECASE)
_LEAD_IN_RE = re.compile(r"^([^\n\u220e\u25a0\u25b2\u25c6]{1,80}?):[ \t]*(?=\s*[\u25a0\u25b2\u25c6])",
                         re.MULTILINE)
_LIST_ITEM_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+\S", re.MULTILINE)
_ERROR_WORDS = re.compile(
    r"\b(errors?|fails?|failed|failing|failure|exception|traceback|no such|syntax|"
    r"incorrect|invalid|missing|mismatch(?:es|ed)?|rejected|refused|unknown)\b", re.IGNORECASE)


_MARKS_RE = re.compile(r"[\u220e\u25a0\u25b2\u25c6\u2591]|\.\.\.")


def own_words(excerpt: str, text: str, tail: int = 30) -> str:
    """The piece of the block's own `text` that an excerpt of its masked prose stands for.

    The excerpt's runs between marks (payloads, quotations) are found in `text` in order
    (whitespace aside), and the excerpt becomes `text` from the first run to the last (a
    payload the excerpt ends on adds up to `tail` characters), so a finding quotes what the
    user wrote, payloads included, never the lint's internal marks."""
    if not excerpt or not text or not _MARKS_RE.search(excerpt) and excerpt in text:
        return excerpt
    pieces = [p.strip() for p in _MARKS_RE.split(excerpt) if len(p.strip()) >= 2]
    start = end = None
    pos = 0
    for p in pieces:
        m = re.compile(r"\s+".join(re.escape(w) for w in p.split())).search(text, pos)
        if m is None:
            continue
        start = m.start() if start is None else start
        end = pos = m.end()
    if start is None:
        return _norm(_MARKS_RE.sub("...", excerpt)) if pieces else _norm(text)[:60]
    if _MARKS_RE.search(excerpt.rstrip()[-1:]):
        end = min(len(text), end + tail)
    return _norm(text[start:end])


def _excerpt(text: str, start: int, end: int, width: int = 40) -> str:
    a, b = max(0, start - 10), min(len(text), end + width)
    piece = re.sub(r"[\u220e\u25a0\u25b2\u25c6]", "...", text[a:b])
    return re.sub(r"\s*(?:\.\.\.\s*)+", " ... ", re.sub(r"\s+", " ", piece)).strip()


def _content_words(sentence: str) -> set[str]:
    out = set()
    for w in _WORD_RE.findall(sentence):
        w = w.lower().strip("'-")
        if len(w) < 3 or w in STOPWORDS or w in GENERIC:
            continue
        out.add(w[:-1] if w.endswith("s") and len(w) > 3 else w)
    return out


# --------------------------------------------------------------------------------------------
# R1 (text) and R3: check_text
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# One block in context: R2, R4, R5, R6 (in-prompt)
# --------------------------------------------------------------------------------------------
def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def format_markers(fmt: Format | None) -> list[str]:
    """Text a statement of this format's rule necessarily mentions: the format's `markers`
    (a fence opener, a tag, "\\boxed{"), and "<think>" when it asks for reasoning first."""
    if fmt is None:
        return []
    rule_markers = getattr(fmt, "rule_markers", None)
    if callable(rule_markers):
        return list(rule_markers())
    return list(getattr(fmt, "markers", ())) + (["<think>"] if getattr(fmt, "think", False) else [])


def has_format_payload(block: str, fmt: Format | None) -> bool:
    """Whether the block holds an answer written in the format (a fence, tool-call tags, a
    marked answer such as `\\boxed{12}`)."""
    if isinstance(fmt, CodeBlockFormat):
        return bool(_FENCE_RE.search(block))
    if isinstance(fmt, ToolCallFormat):
        return any(m.group(1).strip() for m in _TOOL_RE.finditer(block))
    if fmt is None or isinstance(fmt, TextFormat) or not getattr(fmt, "markers", ()):
        return False
    if not any(m in block for m in fmt.markers):
        return False
    try:
        return fmt.parse(as_response(block, fmt)).answer is not None
    except USER_CODE_ERRORS:
        return False


def infer_kind(block: str, *, reward: Reward | None = None, fmt: Format | None = None,
               placement: str = "append") -> str:
    """The block's kind: `reward.kind` when set, else worked out from the structure.

    Inference (used only when the reward does not say): a response-dependent reward's block
    is "feedback"; a block equal to the format's rule is "format"; with "in_prompt"
    placement, "constraint"; a block holding an answer in the task's format (a ```sql fence,
    <tool_call> tags) is "reference"; a block that is one JSON value is "schema"; else "".
    """
    if reward is not None and getattr(reward, "kind", ""):
        return reward.kind
    if reward is not None and reward.response_dependent:
        return "feedback"
    if fmt is not None and _norm(block) and _norm(block) == _norm(fmt.rule):
        return "format"
    if placement == "in_prompt":
        return "constraint"
    if has_format_payload(block, fmt):
        return "reference"
    try:
        if isinstance(json.loads(block), (dict, list)):
            return "schema"
    except (ValueError, TypeError):
        pass
    return ""


def flatten_strings(value: Any) -> list[str]:
    """Every string and number inside a nested structure (dict values, list items)."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, (int, float)):
        if not (isinstance(value, float) and math.isnan(value)):
            out.append(str(value))
    elif isinstance(value, dict):
        for v in value.values():
            out += flatten_strings(v)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            out += flatten_strings(v)
    return out


def distinctive_tokens(text: str) -> set[str]:
    """Tokens that can carry example-specific information: identifiers, numbers, and words
    that are neither stop words nor generic task vocabulary."""
    out = set()
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?", text):
        low = tok.lower()
        if any(c.isdigit() for c in tok) or ("_" in tok and len(tok) > 1):
            out.add(low)
        elif len(low) >= 3 and low not in STOPWORDS and low not in GENERIC:
            out.add(low)
    return out


def check_feedback(block: str, verdict: Verdict | None) -> list[Finding]:
    """R4 for one built block: empty when the verifier gave no feedback, else its own words."""
    if not block.strip() or verdict is None:
        return []
    fb = verdict.feedback or ""
    if not fb.strip():
        return [Finding("R4", "invented-feedback",
                        "the verifier gave no feedback for this response, yet the block says "
                        "something; return '' when the verdict's feedback is empty", block[:60])]
    nb, nf = _norm(block).lower(), _norm(fb).lower().rstrip(".")
    if nf in nb or (len(nf) > 40 and nf[:40] in nb):
        return []
    return [Finding("R4", "not-own-feedback",
                    "the block does not quote this response's feedback from the verifier; build "
                    "it from verdict.feedback (quoted verbatim, optionally in a sentence)",
                    block[:60])]


def probe_feedback_builder(reward: Reward, example: Example) -> list[Finding]:
    """R4 by probing the builder: with an empty feedback it must return '' (any score)."""
    found = []
    for score in sorted({reward.floor, FULL_MARKS}):
        try:
            text = reward.block(example, Verdict(score=score, feedback=""))
        except USER_CODE_ERRORS as exc:  # a builder that cannot handle "no feedback" is a finding
            return [Finding("R4", "builder-error",
                            f"the block builder raised {type(exc).__name__}: {exc} when the "
                            "verdict has no feedback; it must return '' then")]
        if isinstance(text, str) and text.strip():
            found.append(Finding(
                "R4", "invented-feedback",
                f"with no feedback from the verifier (score {score:g}) the block builder still "
                "writes text; return '' when the verdict's feedback is empty", text[:60]))
            break
    return found


def as_response(block: str, fmt: Format) -> str:
    """The block as the policy would write it: a think format gets an empty thought first."""
    if fmt.think and not block.lstrip().startswith("<think>"):
        return "<think>\n</think>\n" + block.strip()
    return block


def reference_payload(block: str) -> str | None:
    """The answer inside a block that has exactly one payload (one fence, or adjacent tool
    calls), without the prose around it; None otherwise."""
    split = split_text(block)
    if _payload_groups(split) != 1:
        return None
    return "\n".join(text for kind, text in split.payloads if kind != "json") or None


def check_reference(block: str, *, fmt: Format | None, reward: Reward | None = None,
                    example: Example | None = None) -> list[Finding]:
    """R5: the reference parses strictly with the task's format and gets full marks."""
    if not block.strip() or fmt is None:
        return []
    response = as_response(block, fmt)
    parsed = fmt.parse(response)
    if not parsed.strict:
        return [Finding("R5", "not-policy-form",
                        f"the reference does not parse with the task's {fmt.name} format "
                        f"({parsed.error}); render it with task.format.render(answer)", block[:60])]
    if reward is None or example is None:
        return []
    try:
        verdict = reward.verify(example, response)
    except USER_CODE_ERRORS as exc:
        return [Finding("R5", "verify-error",
                        f"scoring the reference raised {type(exc).__name__}: {exc}")]
    if not (verdict.score >= FULL_MARKS):
        why = f": {verdict.feedback}" if verdict.feedback else ""
        return [Finding("R5", "not-full-marks",
                        f"scored by its own reward the reference gets {verdict.score:g}, not "
                        f"{FULL_MARKS:g}{why}; the reference must be an answer that reward accepts "
                        "(same tags, fences and argument types)", block[:60])]
    return []


def _bare_answer(block: str, fmt: Format):
    """The answer a block would be if it were a reference written without the format's
    wrapping (a bare query, a call as plain JSON); None when it does not look like one."""
    text = block.strip()
    if isinstance(fmt, CodeBlockFormat):
        return None if "```" in text or "\n\n" in text else text
    if isinstance(fmt, ToolCallFormat):
        try:
            obj = json.loads(text)
        except ValueError:
            return None
        calls = [obj] if isinstance(obj, dict) else obj
        if isinstance(calls, list) and calls and all(
                isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments"), dict)
                for c in calls):
            return calls
    return None


def check_bare_answer(block: str, *, fmt: Format | None, reward: Reward | None,
                      example: Example | None) -> list[Finding]:
    """R5 for a block whose reward does not say it is a reference: if the block, wrapped in the
    task's format, is an answer that gets full marks from its reward, it is a reference
    written outside the policy's form (a bare query, a call without its tags)."""
    if fmt is None or reward is None or example is None or not block.strip():
        return []
    if fmt.parse(as_response(block, fmt)).strict:
        return []
    answer = _bare_answer(block, fmt)
    if answer is None:
        return []
    try:
        score = reward.verify(example, fmt.render(answer)).score
    except USER_CODE_ERRORS:
        return []
    if score >= FULL_MARKS:
        return [Finding("R5", "not-policy-form",
                        f"the block is this example's answer but not in the task's {fmt.name} "
                        "format (the policy writes it wrapped); render it with "
                        "task.format.render(answer)", block[:60])]
    return []


def check_specific(block: str, *, kind: str, example: Example | None, verdict: Verdict | None,
                   fmt: Format | None, reference: str | None = None) -> list[Finding]:
    """R2: the block carries something from this example's label or the verifier's output.

    A format block must mention its format's markers (```sql, <tool_call>...). Other blocks
    must share at least one distinctive token (identifier, number, non-generic word) with the
    example's prompt or data, the reference, or the verdict's feedback.
    """
    if not block.strip():
        return []
    if kind == "format":
        marks = format_markers(fmt)
        if marks and not any(m in block for m in marks):
            return [Finding("R2", "generic",
                            "the format block does not state the format (it mentions none of "
                            f"{', '.join(marks)}); use task.format.rule", block[:60])]
        if not marks and fmt is not None and not (distinctive_tokens(block) & distinctive_tokens(
                _safe_rule(fmt))):
            return [Finding("R2", "generic",
                            "the format block shares nothing with the format's own rule "
                            f"({_safe_rule(fmt)[:60]!r}); use task.format.rule, and give the "
                            "format `markers` so the lint knows what a statement of it mentions",
                            block[:60])]
        return []
    if kind == "constraint" or example is None:
        return []
    sources = [example.prompt, example.system or ""] + flatten_strings(example.data)
    sources += [reference or "", verdict.feedback if verdict else ""]
    have = set()
    for s in sources:
        have |= distinctive_tokens(s)
    mine = distinctive_tokens(block)
    if mine & have:
        return []
    return [Finding("R2", "generic",
                    "the block holds nothing taken from this example (its label, prompt, "
                    "reference) or the verifier's output: a generic requirement carries no "
                    "information; build it from the example's data or the verdict", block[:60])]


def _safe_rule(fmt: Format) -> str:
    try:
        return str(fmt.rule)
    except USER_CODE_ERRORS:
        return ""


def prompt_text(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def check_in_prompt(block: str, p0_messages: Sequence[dict[str, str]]) -> list[Finding]:
    """R6 for in-prompt placement: the block is found verbatim in P0, so it can be removed."""
    if not block.strip():
        return []
    if block.strip() in prompt_text(p0_messages):
        return []
    return [Finding("R6", "not-in-prompt",
                    "with in_prompt placement the block must be the exact text of P0 it stands "
                    "for, so P_without_k can remove it; this text is not in P0", block[:60])]


def check_block(block: str, *, kind: str = "", example: Example | None = None,
                verdict: Verdict | None = None, reward: Reward | None = None,
                fmt: Format | None = None, placement: str = "append",
                p0_messages: Sequence[dict[str, str]] | None = None,
                reference: str | None = None, probe: bool = True) -> list[Finding]:
    """Every single-block check: `check_text` plus R2, R4, R5 and R6's in-prompt presence.

    `kind` overrides the reward's; when both are empty it is inferred (`infer_kind`).
    `probe=True` also calls the reward's builder with synthetic verdicts (R4). A reference
    block is always scored by `reward.verify` when a reward and example are given (R5).
    """
    if not isinstance(block, str):
        return check_text(block)  # reports the type error
    kind = kind or infer_kind(block, reward=reward, fmt=fmt, placement=placement)
    found: list[Finding] = []
    if kind == "feedback" and reward is not None and example is not None and probe:
        found += probe_feedback_builder(reward, example)
    if not block.strip():
        return found
    quoted = [verdict.feedback] if verdict and verdict.feedback else []
    # the format's own markers ("Answer:", "\\boxed{") are the answer's form, not prose: a
    # marker that reads like a label or an imperative is not one
    quoted += [m for m in getattr(fmt, "markers", ()) if isinstance(m, str)]
    if example is not None:
        quoted += [s for s in flatten_strings(example.data) if len(s) >= 3]
    found += check_text(block, placement=placement, quoted=quoted)
    if not any(f.check == "generic-requirement" for f in found):
        found += check_specific(block, kind=kind, example=example, verdict=verdict, fmt=fmt,
                                reference=reference)
    if kind == "feedback":
        found += check_feedback(block, verdict)
    if kind == "reference" and not any(f.rule == "R1" for f in found):
        # R5 judges the answer itself: a label around it is R3's finding, a second payload
        # R1's, so with a label the payload alone is checked (a merged block is not)
        payload = reference_payload(block) if any(f.check == "label" for f in found) else None
        found += check_reference(payload or block, fmt=fmt, reward=reward, example=example)
    if kind == "" and not any(f.rule == "R1" for f in found):
        found += check_bare_answer(block, fmt=fmt, reward=reward, example=example)
    if placement == "in_prompt" and p0_messages is not None:
        found += check_in_prompt(block, p0_messages)
    return found


# --------------------------------------------------------------------------------------------
# Dataset-level checks (called by mrtpo.blocks.lint with evaluated examples)
# --------------------------------------------------------------------------------------------
def check_rewards(rewards: Sequence[Reward]) -> list[Finding]:
    """R1/R6 structure of one example's rewards: unique names, one callable builder each."""
    found = []
    seen: set[str] = set()
    for r in rewards:
        if not isinstance(r, Reward):
            found.append(Finding("R6", "not-a-reward",
                                 f"rewards() returned a {type(r).__name__}, not a Reward"))
            continue
        if r.name in seen:
            found.append(Finding("R1", "duplicate-reward",
                                 f"two rewards are named {r.name!r}; each reward needs its own "
                                 "name (suffix a repeated constraint: 'id', 'id#2')", reward=r.name))
        seen.add(r.name)
        if not callable(r.block):
            found.append(Finding("R1", "no-builder", "the reward has no callable block builder; "
                                 "give it block(example, verdict) -> str", reward=r.name))
        if r.kind not in KINDS:
            found.append(Finding("R6", "unknown-kind", f"kind {r.kind!r} is not one of "
                                 f"{', '.join(repr(k) for k in KINDS)}", reward=r.name))
        found += check_waivers(r)
    return found


_WAIVER_KEY_RE = re.compile(r"(R[1-6])(?::([a-z0-9\-]+))?")


def check_waivers(reward: Reward) -> list[Finding]:
    """R6: `Reward.waive` maps a rule id ("R3") or a rule and check ("R3:label") to a reason."""
    waive = getattr(reward, "waive", None) or {}
    if not isinstance(waive, Mapping):
        return [Finding("R6", "bad-waiver", f"waive is a {type(waive).__name__}; give a dict "
                        '{"R3": "why this rule does not apply"}', reward=reward.name)]
    found = []
    for key, reason in waive.items():
        if not isinstance(key, str) or not _WAIVER_KEY_RE.fullmatch(key):
            found.append(Finding("R6", "bad-waiver", f"waive key {key!r} is not a rule id "
                                 '("R1".."R6") or a rule and check ("R3:label")', reward=reward.name))
        elif not isinstance(reason, str) or not reason.strip():
            found.append(Finding("R6", "bad-waiver", f"waive[{key!r}] gives no reason; say why "
                                 "the rule does not apply to this reward", reward=reward.name))
    return found


def waiver(finding: Finding, waive: Mapping[str, str] | None) -> str:
    """The reason `waive` gives for `finding` ("" when it is not waived): a "rule:check" key
    first, then the rule id. Findings about the waivers themselves are never waived."""
    if not waive or not isinstance(waive, Mapping) or finding.check == "bad-waiver":
        return ""
    for key in (f"{finding.rule}:{finding.check}", finding.rule):
        reason = waive.get(key)
        if isinstance(reason, str) and reason.strip():
            return reason.strip()
    return ""


def split_waived(findings: Iterable[Finding], waivers: Mapping[str, Mapping[str, str]]
                 ) -> tuple[list[Finding], list[Finding]]:
    """(kept, waived): `waivers` maps a reward name to its `waive`; a waived finding carries
    the reason in `Finding.waived`."""
    kept, waived = [], []
    for f in findings:
        reason = waiver(f, waivers.get(f.reward)) if f.reward else ""
        if reason:
            waived.append(replace(f, waived=reason))
        else:
            kept.append(f)
    return kept, waived


def check_shared_blocks(names: Sequence[str], blocks: Sequence[str]) -> list[Finding]:
    """R1 across one example's blocks: no block repeats or contains another reward's block."""
    found = []
    for i, a in enumerate(blocks):
        for j, b in enumerate(blocks):
            if i == j or not isinstance(a, str) or not isinstance(b, str):
                continue
            na, nb = _norm(a), _norm(b)
            if not na or not nb or len(nb) < 10:
                continue
            if na == nb and i < j:
                found.append(Finding("R1", "shared-block",
                                     f"rewards {names[i]!r} and {names[j]!r} have the same block; "
                                     "each block carries only its own reward's information",
                                     a[:60], reward=names[j]))
            elif na != nb and nb in na:
                found.append(Finding("R1", "merged",
                                     f"the block of {names[i]!r} contains the block of "
                                     f"{names[j]!r}; each block carries only its own reward's "
                                     "information", b[:60], reward=names[i]))
    return found


def check_declared_dependence(reward: Reward, built: Sequence[str]) -> list[Finding]:
    """R6: a reward declared response-independent builds the same block for every verdict."""
    texts = {b for b in built if isinstance(b, str)}
    if not reward.response_dependent and len(texts) > 1:
        return [Finding("R6", "undeclared-dependence",
                        "the block changes with the verdict but the reward says "
                        "response_dependent=False; set it to True (contexts order blocks by it)",
                        reward=reward.name)]
    return []


def check_verdict(reward: Reward, verdict: Any) -> list[Finding]:
    """R6: a verdict is a Verdict with a finite score not below the reward's floor."""
    if not isinstance(verdict, Verdict):
        return [Finding("R6", "bad-verdict", f"verify returned {type(verdict).__name__}, not a "
                        "Verdict", reward=reward.name)]
    s = verdict.score
    if not isinstance(s, (int, float)) or isinstance(s, bool) or math.isnan(s) or math.isinf(s):
        return [Finding("R6", "bad-score", f"verify returned the score {s!r}; scores are finite "
                        "numbers", reward=reward.name)]
    if s < reward.floor:
        return [Finding("R6", "below-floor", f"score {s:g} is below the reward's floor "
                        f"{reward.floor:g}; lower the floor or fix the verifier", reward=reward.name)]
    return []


def check_contexts(p0: Sequence[dict[str, str]], p_all: Sequence[dict[str, str]],
                   p_without: Sequence[Sequence[dict[str, str]]], names: Sequence[str],
                   blocks: Sequence[str], placement: str,
                   dropped: Sequence[Sequence[dict[str, str]]] | None = None) -> list[Finding]:
    """R6: P_all starts from P0 (is P0 for in_prompt), and P_without_k is P_all with exactly
    block k removed (whitespace aside); an empty block leaves P_without_k equal to P_all.
    `dropped[k]`: whole messages of P0 that the task says carry block k's information too
    (`Task.without_messages`, e.g. a worked example); P_without_k may lack exactly those."""
    found = []
    if len(p_without) != len(names):
        return [Finding("R6", "context-count", f"{len(p_without)} P_without contexts for "
                        f"{len(names)} rewards; there is one per reward")]
    if placement == "in_prompt":
        if list(p_all) != list(p0):
            found.append(Finding("R6", "p_all-not-p0", "with in_prompt placement P_all must be "
                                 "P0 exactly (the blocks are already in the prompt)"))
    elif not _extends(p0, p_all):
        found.append(Finding("R6", "p_all-not-from-p0", "P_all must be P0 with the blocks "
                             "appended to one message (the user turn); it changes P0 itself"))
    full_text = prompt_text(p_all)
    for k, (name, block, pw) in enumerate(zip(names, blocks, p_without)):
        gone = list(dropped[k]) if dropped else []
        ref = [m for m in p_all if m not in gone] if gone else p_all
        all_text = prompt_text(ref) if gone else full_text
        wo = prompt_text(pw)
        if not isinstance(block, str) or not block.strip():
            if list(pw) != list(p_all):
                found.append(Finding("R6", "empty-block-changes-context", "the block is empty "
                                     "but P_without_k differs from P_all", reward=name))
            continue
        if block.strip() not in all_text:
            found.append(Finding("R6", "block-not-in-p_all", "the block is not in P_all",
                                 block[:60], reward=name))
            continue
        if not _removes_once(all_text, block.strip(), wo) or \
                [m.get("role") for m in pw] != [m.get("role") for m in ref]:
            found.append(Finding("R6", "without-k-differs", "P_without_k is not P_all with "
                                 "exactly this block removed", block[:60], reward=name))
    return found


def _removes_once(text: str, block: str, without: str) -> bool:
    """`without` is `text` with one occurrence of `block` cut out, whitespace aside."""
    target = _norm(without)
    i = text.find(block)
    while i >= 0:
        if _norm(text[:i] + " " + text[i + len(block):]) == target:
            return True
        i = text.find(block, i + 1)
    return False


def _extends(p0: Sequence[dict[str, str]], p_all: Sequence[dict[str, str]]) -> bool:
    """P_all is P0 with text appended to at most one message."""
    if len(p0) != len(p_all) or [m.get("role") for m in p0] != [m.get("role") for m in p_all]:
        return False
    changed = [i for i, (a, b) in enumerate(zip(p0, p_all)) if a != b]
    if not changed:
        return True
    i = changed[0]
    return len(changed) == 1 and str(p_all[i].get("content", "")).startswith(
        str(p0[i].get("content", "")).rstrip())


def check_identical_across(reward_name: str, block: str, examples: Sequence[tuple[str, bool]]) -> list[Finding]:
    """R2 across examples: `examples` lists (location, labels_differ) for examples that got
    this same block; a finding when any pair's labels differ."""
    differing = [loc for loc, differ in examples if differ]
    if not differing:
        return []
    return [Finding("R2", "identical-across-examples",
                    f"the same block appears for examples whose labels differ ({', '.join(differing[:3])}"
                    f"{'...' if len(differing) > 3 else ''}); a block built from each example's "
                    "label differs with it", block[:60], reward=reward_name)]
