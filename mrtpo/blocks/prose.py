"""What in a block is prose and what is payload, and the word lists the prose checks use.

`split_text` masks quoted text and replaces payloads (code fences, tool calls, JSON values) by
one mark per kind, so the rules' prose checks (mrtpo.blocks.text_rules) never read a payload;
`own_words` maps an excerpt of the masked prose back to the block's own text, so that a finding
quotes what the user wrote.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable

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

_LABEL_WORDS = ("reference|feedback|hint|hints|note|notes|error|errors|context|constraint|"
                "constraints|block|info|information|solution|expected|schema|rubric|"
                "instruction|instructions|gold|label|answer key|tip|tips|warning|reminder|"
                "requirement|requirements|correction|critique")
_TAG_LABEL_RE = re.compile(r"</?(?:" + _LABEL_WORDS + r")\b[^>\n]{0,40}>", re.IGNORECASE)


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


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()
