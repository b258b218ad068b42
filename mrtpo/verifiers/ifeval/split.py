"""Locate a constraint's own sentence in a prompt, and remove it again with tidy whitespace.

An instruction-following prompt P0 is a base request plus one sentence per constraint. MRTPO
needs each constraint's sentence as a block (Z_k) that is an exact substring of P0, so that
P_without_k is P0 with exactly that text removed. Benchmarks do not store the sentences, so
`find_sentence` looks for them:

1. "template": the checker's own description (`describe`, the benchmark's `build_description`
   text) appears verbatim in the prompt. IFBench's test prompts mostly are built this way.
2. "close": a run of one to three of the prompt's sentences (or lines) whose words match the
   description closely (a paraphrase of the template, e.g. "in your response" inserted); the
   block is still the prompt's own text, verbatim.
3. "" (not found): the constraint is woven into hand-written prose (IFEval). The row is still
   usable; that reward simply has no block.
"""
from __future__ import annotations

import re

from mrtpo.verifiers.ifeval.scoring import describe
from mrtpo.verifiers.ifeval.sentences import split_sentences

_WORD = re.compile(r"\w+")
#: minimum Jaccard similarity of word sets for a "close" match, and minimum share of the
#: description's words the span must contain
CLOSE_JACCARD = 0.6
CLOSE_RECALL = 0.75


#: the part of a description that states the constraint, where the template also quotes the
#: request itself (IFBench's repeat_change template ends with "Request: <the request>")
_ANCHOR = {"repeat:repeat_change": lambda d: d.split(" Request: ")[0]}


def _spans(prompt: str) -> list[tuple[int, int]]:
    """Character spans of the prompt's sentences, also cut at line breaks."""
    spans = []
    pos = 0
    for sent in split_sentences(prompt):
        start = prompt.find(sent, pos)
        if start < 0:
            continue
        pos = start + len(sent)
        offset = start
        for line in sent.split("\n"):
            if line.strip():
                lead = len(line) - len(line.lstrip())
                spans.append((offset + lead, offset + len(line.rstrip())))
            offset += len(line) + 1
    return spans


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def find_close(prompt: str, description: str, taken: list[tuple[int, int]] = ()) -> tuple[int, int] | None:
    """The span of 1-3 consecutive prompt sentences closest to `description`, if close enough."""
    want = _words(description)
    if not want:
        return None
    spans = _spans(prompt)
    best, best_score = None, 0.0
    for i in range(len(spans)):
        for j in range(i, min(i + 3, len(spans))):
            start, end = spans[i][0], spans[j][1]
            if any(start < b and a < end for a, b in taken):
                continue
            have = _words(prompt[start:end])
            inter = len(want & have)
            jac = inter / len(want | have)
            if jac >= CLOSE_JACCARD and inter / len(want) >= CLOSE_RECALL and jac > best_score:
                best, best_score = (start, end), jac
    return _trim(prompt, best, want) if best else None


def _trim(prompt: str, span: tuple[int, int], want: set[str]) -> tuple[int, int]:
    """Drop words at either end of `span` that the description lacks, cutting only where a
    sentence starts (a capital) or ends (. ! ?): a base request running into the constraint
    without a full stop ("Add dialogue throughout Each word ...") loses its words, while a
    lead-in such as "In your response, the last word ..." stays whole."""
    toks = [(m.start() + span[0], m.end() + span[0]) for m in re.finditer(r"\S+", prompt[span[0]:span[1]])]
    text = [prompt[a:b] for a, b in toks]
    n = len(toks)
    start = 0
    for j in range(1, n):
        if _words(text[j - 1]) & want:
            break
        if text[j][:1].isupper():
            start = j
    end = n
    for j in range(n - 1, start, -1):
        if _words(text[j]) & want:
            break
        if text[j - 1][-1:] in ".!?":
            end = j
    return toks[start][0], toks[end - 1][1]


def find_sentence(prompt: str, instruction_id: str, kwargs: dict | None,
                  taken: list[tuple[int, int]] = ()) -> tuple[str, str]:
    """(sentence, how) for one constraint: how is "template", "close" or "" (not found).

    `taken` lists spans already claimed by other constraints of the same prompt.
    """
    desc = describe(instruction_id, kwargs)
    for text in dict.fromkeys((desc, _ANCHOR.get(instruction_id, lambda d: d)(desc))):
        start = prompt.find(text)
        while start >= 0:
            if not any(start < b and a < start + len(text) for a, b in taken):
                return text, "template"
            start = prompt.find(text, start + 1)
    desc = _ANCHOR.get(instruction_id, lambda d: d)(desc)
    span = find_close(prompt, desc, taken)
    if span:
        return prompt[span[0]:span[1]], "close"
    return "", ""


def remove_sentence(prompt: str, sentence: str) -> str:
    """`prompt` with the first occurrence of `sentence` removed and the seam's whitespace tidied.

    Only the whitespace at the seam changes: the gap left behind becomes one space, or a line
    break (a blank line) where either side had one; leading/trailing gaps disappear. Raises
    ValueError when `sentence` is not in `prompt` (a programming error: blocks come from it).
    """
    if not sentence:
        return prompt
    i = prompt.find(sentence)
    if i < 0:
        raise ValueError(f"the constraint sentence {sentence[:60]!r} is not part of the prompt")
    left, right = prompt[:i], prompt[i + len(sentence):]
    left_core, right_core = left.rstrip(), right.lstrip()
    gap = left[len(left_core):] + right[:len(right) - len(right_core)]
    if not left_core:
        return right_core
    if not right_core:
        return left_core
    if "\n\n" in left[len(left_core):] or "\n\n" in right[:len(right) - len(right_core)]:
        sep = "\n\n"
    elif "\n" in gap:
        sep = "\n"
    else:
        sep = " "
    return left_core + sep + right_core
