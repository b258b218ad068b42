"""Output formats the policy is asked to produce.

One `Format` object serves the prompt (its `instruction` sentence), the format reward (its
strict check), the format block (its `rule` statement) and the reference block (`render`),
so the four cannot drift apart. `parse` never raises: arbitrary text gives a `Parsed` with
`answer=None` and an `error` saying what is missing.

Formats:
- `CodeBlockFormat("sql")`: the final answer in one ```sql fenced block;
- `ToolCallFormat()`: calls as JSON objects `{"name": ..., "arguments": {...}}`, each inside
  `<tool_call>...</tool_call>` (Qwen/Hermes style), several tags for parallel calls;
- `DelimitedFormat(open, close)`: the final answer between two markers, as the last thing in
  the response: `DelimitedFormat("\\boxed{", "}")` (math), `DelimitedFormat("<answer>",
  "</answer>")`;
- `TextFormat()`: plain text.
Each may be preceded by reasoning in `<think>...</think>` (`think=True` asks for it and the
strict check requires it; with `think=False` a think block is tolerated by `parse` but fails
the strict check).

A new format subclasses `Format` and defines four public methods, `body_instruction`,
`body_rule`, `parse_body` and `render_body` (the think handling around them is the base
class's), and sets `markers`, the text its rule always mentions (the lint looks for it).
docs/custom-tasks.md walks through one.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_THINK_RE = re.compile(r"\A\s*<think>(.*?)</think>", re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    """What `parse` found: the answer (None when nothing usable), whether the response follows
    the format exactly, and why not."""

    answer: Any
    strict: bool
    error: str = ""
    think: str | None = None


def split_think(response: str) -> tuple[str | None, str]:
    """Split a leading `<think>...</think>` off a response: (thought or None, the rest)."""
    m = _THINK_RE.match(response)
    if not m:
        return None, response
    return m.group(1), response[m.end():]


class Format:
    """An output format: subclass it and define the four `body_*` / `*_body` methods.

    - `body_instruction()`: the end of the prompt's sentence "Give ...", e.g. "the final
      answer inside \\boxed{}, with nothing after it." (`instruction` adds the start, and the
      think request when `think=True`);
    - `body_rule()`: the end of the rule statement "A correct response gives ..." (the format
      block, `rule`);
    - `parse_body(body)`: the response after any `<think>` block -> `Parsed(answer, strict,
      error)` (or the tuple `(answer, strict, error)`): `answer` leniently extracted (None when
      there is none), `strict` whether the body follows the format exactly, `error` why not.
      It may raise on odd text: `parse` turns an exception into "could not parse";
    - `render_body(answer)`: the body that `parse_body` reads back as `answer`, strictly.

    `name` names the format in messages; `markers` is the text any statement of the rule
    mentions (a fence opener, a tag), which the lint's R2 check looks for in a format block
    ("<think>" is added when `think=True`).
    """

    name = "format"
    markers: tuple[str, ...] = ()

    def __init__(self, think: bool = False):
        self.think = think

    # --- text shown to the policy -------------------------------------------------------
    @property
    def instruction(self) -> str:
        """The sentence that goes into P0, asking for this format."""
        pre = "First reason step by step inside <think></think> tags, then give " if self.think else "Give "
        return pre + self.body_instruction()

    @property
    def rule(self) -> str:
        """The format rule as a plain statement (the format block)."""
        pre = "A correct response starts with its reasoning inside <think></think> tags and then gives " if self.think \
            else "A correct response gives "
        return pre + self.body_rule()

    # --- parsing and rendering ------------------------------------------------------------
    def parse(self, response: Any) -> Parsed:
        """Extract the answer; never raises."""
        if not isinstance(response, str):
            return Parsed(None, False, f"the response is {type(response).__name__}, not text")
        thought, body = split_think(response)
        if thought is None and response.lstrip().startswith("<think>"):
            return Parsed(None, False, "a <think> tag is not closed by </think> at the start of the response")
        try:
            answer, strict, error = _as_triple(self.parse_body(body))
        except Exception as exc:  # defensive: parse must never raise on model output
            return Parsed(None, False, f"could not parse the response: {exc}")
        if strict and self.think and thought is None:
            strict, error = False, "the response does not start with <think>...</think>"
        if strict and not self.think and thought is not None:
            strict, error = False, "the response contains a <think> block, which this format does not ask for"
        return Parsed(answer, strict, error, thought)

    def check(self, response: Any) -> bool:
        """Strict format check: True when the response follows the format exactly."""
        return self.parse(response).strict

    def render(self, answer: Any, think: str | None = None) -> str:
        """A response in exactly this format; `parse(render(x)).answer == x`."""
        body = self.render_body(answer)
        if self.think:
            return f"<think>{think or ''}</think>\n{body}"
        return body

    def rule_markers(self) -> list[str]:
        """`markers`, plus "<think>" when the format asks for reasoning first."""
        return list(self.markers) + (["<think>"] if self.think else [])

    def body_instruction(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define body_instruction()")

    def body_rule(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define body_rule()")

    def parse_body(self, body: str) -> "Parsed | tuple[Any, bool, str]":
        raise NotImplementedError(f"{type(self).__name__} must define parse_body(body)")

    def render_body(self, answer: Any) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define render_body(answer)")


def _as_triple(result: Any) -> tuple[Any, bool, str]:
    """`parse_body`'s result as (answer, strict, error), whether it gave a Parsed or a tuple."""
    if isinstance(result, Parsed):
        return result.answer, result.strict, result.error
    answer, strict, error = result
    return answer, bool(strict), str(error or "")


class CodeBlockFormat(Format):
    """The final answer in exactly one fenced code block tagged with `language`."""

    name = "code_block"

    def __init__(self, language: str = "sql", think: bool = False):
        super().__init__(think)
        self.language = language
        self.markers = ("```" + language,)
        lang = re.escape(language)
        self._strict_re = re.compile(r"\A\s*```" + lang + r"[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)
        self._any_re = re.compile(r"```(" + lang + r")?[ \t]*\n(.*?)```", re.DOTALL)

    def body_instruction(self) -> str:
        return (f"the final answer as a single {self.language.upper()} statement inside one "
                f"```{self.language} code block, with nothing after the block.")

    def body_rule(self) -> str:
        return (f"exactly one ```{self.language} code block holding the {self.language.upper()} "
                "statement and nothing outside the block.")

    def parse_body(self, body: str) -> tuple[Any, bool, str]:
        m = self._strict_re.match(body)
        if m and "```" not in m.group(1) and m.group(1).strip():
            return m.group(1).strip(), True, ""
        blocks = self._any_re.findall(body)
        tagged = [code for tag, code in blocks if tag]
        chosen = (tagged or [code for _, code in blocks])
        if not chosen:
            return None, False, f"no ```{self.language} code block was found"
        answer = chosen[-1].strip()
        if not answer:
            return None, False, f"the ```{self.language} code block is empty"
        if len(blocks) > 1:
            return answer, False, f"found {len(blocks)} code blocks; exactly one is expected"
        if not tagged:
            return answer, False, f"the code block is not tagged ```{self.language}"
        return answer, False, "there is text outside the code block"

    def render_body(self, answer: Any) -> str:
        return f"```{self.language}\n{str(answer).strip()}\n```"


class ToolCallFormat(Format):
    """Tool calls as JSON objects inside `<tool_call>...</tool_call>` tags, one call per tag.

    The answer is a list of `{"name": str, "arguments": dict}` in the order written.
    """

    name = "tool_call"
    markers = ("<tool_call>",)
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def body_instruction(self) -> str:
        return ('each function call as a JSON object {"name": <function name>, "arguments": '
                '<arguments object>} inside its own <tool_call></tool_call> tags, and nothing else.')

    def body_rule(self) -> str:
        return ('each function call as one JSON object with the keys "name" and "arguments" inside '
                'its own <tool_call></tool_call> tags, with no other text.')

    def parse_body(self, body: str) -> tuple[Any, bool, str]:
        spans = _tag_spans(body, self.OPEN, self.CLOSE)
        tags = [body[a + len(self.OPEN):b - len(self.CLOSE)] for a, b in spans]
        if not tags:
            return None, False, "no <tool_call>...</tool_call> block was found"
        calls, errors = [], []
        for i, raw in enumerate(tags, 1):
            call, err = _parse_call(raw)
            if err:
                errors.append(f"tool call {i}: {err}")
            else:
                calls.append(call)
        outside = "".join(body[a:b] for a, b in zip([0] + [e for _, e in spans],
                                                    [s for s, _ in spans] + [len(body)])).strip()
        if errors:
            return (calls or None), False, "; ".join(errors)
        if outside:
            return calls, False, f"there is text outside the <tool_call> tags: {outside[:60]!r}"
        return calls, True, ""

    def render_body(self, answer: Any) -> str:
        return "\n".join(
            "<tool_call>\n" + json.dumps({"name": c["name"], "arguments": c.get("arguments", {})},
                                         ensure_ascii=False) + "\n</tool_call>"
            for c in answer
        )


def _tag_spans(text: str, open_tag: str, close_tag: str) -> list[tuple[int, int]]:
    """(start, end) of each `open_tag ... close_tag` in `text`, shortest first, left to right:
    the matches of `re.finditer(open + "(.*?)" + close, text, re.DOTALL)`, found with `str.find`
    in linear time (the regex rescans the rest of the text from every unclosed open tag)."""
    spans, i = [], text.find(open_tag)
    while i >= 0:
        j = text.find(close_tag, i + len(open_tag))
        if j < 0:
            break  # no later open tag has a close either
        spans.append((i, j + len(close_tag)))
        i = text.find(open_tag, j + len(close_tag))
    return spans


def _parse_call(raw: str) -> tuple[dict | None, str]:
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(obj, dict):
        return None, f"a JSON {type(obj).__name__}, not an object"
    if not isinstance(obj.get("name"), str):
        return None, 'the object has no string "name"'
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            return None, '"arguments" is a string that is not a JSON object'
    if not isinstance(args, dict):
        return None, '"arguments" is not a JSON object'
    extra = set(obj) - {"name", "arguments"}
    if extra:
        return None, f"unexpected keys {sorted(extra)}"
    return {"name": obj["name"], "arguments": args}, ""


class TextFormat(Format):
    """Plain text: the answer is the whole response (after any think block), stripped."""

    name = "text"
    markers = ("plain text",)

    def body_instruction(self) -> str:
        return "your answer as plain text."

    def body_rule(self) -> str:
        return "its answer as plain text."

    def parse_body(self, body: str) -> tuple[Any, bool, str]:
        text = body.strip()
        if not text:
            return None, False, "the response is empty"
        return text, True, ""

    def render_body(self, answer: Any) -> str:
        return str(answer).strip()


class DelimitedFormat(Format):
    """The final answer between an opening and a closing marker, as the last thing written.

    `DelimitedFormat("\\boxed{", "}")` reads `... so she has 12 left. \\boxed{12}`, with braces
    nesting inside the answer (`\\boxed{\\frac{1}{2}}`); `DelimitedFormat("<answer>",
    "</answer>")` reads `<answer>Paris</answer>`. Text before the marked answer (the working)
    is allowed, unless `text_before=False`; text after it fails the strict check, and so do
    several marked answers (the last one is the lenient answer). `what` names the answer in
    the instruction and the rule. The answer is the text between the markers, stripped.
    """

    def __init__(self, open: str = "\\boxed{", close: str = "}", *, what: str = "the final answer",
                 text_before: bool = True, think: bool = False, name: str = "delimited"):
        super().__init__(think)
        if not open or not close:
            raise ValueError("DelimitedFormat needs a non-empty opening and closing marker")
        self.open, self.close, self.what, self.text_before = open, close, what, text_before
        self.name = name
        self.markers = (open,)
        # "\boxed{" ... "}": braces inside the answer nest, so the closing brace is the match
        self._nested = open.endswith("{") and close == "}"

    def body_instruction(self) -> str:
        if self.text_before:
            return f"{self.what} inside {self.open}{self.close}, with nothing after it."
        return f"only {self.what} inside {self.open}{self.close}, with no other text."

    def body_rule(self) -> str:
        return self.body_instruction()  # "A correct response gives" + the same words

    def _spans(self, body: str) -> tuple[list[tuple[int, int, int]], bool]:
        """(start of open, start of content, end of close) per marked answer; and whether an
        opening marker was left unclosed."""
        out, i, unclosed = [], body.find(self.open), False
        while i >= 0:
            j = i + len(self.open)
            end = self._close_at(body, j)
            if end < 0:
                unclosed = True
                break
            out.append((i, j, end))
            i = body.find(self.open, end)
        return out, unclosed

    def _close_at(self, body: str, j: int) -> int:
        """Index just past the closing marker of an answer starting at j, or -1."""
        if not self._nested:
            k = body.find(self.close, j)
            return -1 if k < 0 else k + len(self.close)
        depth = 1
        for k in range(j, len(body)):
            if body[k] == "{":
                depth += 1
            elif body[k] == "}":
                depth -= 1
                if depth == 0:
                    return k + 1
        return -1

    def parse_body(self, body: str) -> Parsed:
        spans, unclosed = self._spans(body)
        marked = f"{self.open}{self.close}"
        if not spans:
            why = (f"{self.open} is not closed by {self.close}" if unclosed
                   else f"no answer inside {marked} was found")
            return Parsed(None, False, why)
        start, j, end = spans[-1]
        answer = body[j:end - len(self.close)].strip()
        if not answer:
            return Parsed(None, False, f"the {marked} is empty")
        if len(spans) > 1:
            return Parsed(answer, False, f"found {len(spans)} answers inside {marked}; exactly one is expected")
        if body[end:].strip():
            return Parsed(answer, False, f"there is text after the {marked} answer: {body[end:].strip()[:60]!r}")
        if not self.text_before and body[:start].strip():
            return Parsed(answer, False, f"there is text before the {marked} answer")
        return Parsed(answer, True)

    def render_body(self, answer: Any) -> str:
        return f"{self.open}{str(answer).strip()}{self.close}"


FORMATS = {"sql": lambda think=False: CodeBlockFormat("sql", think),
           "tool_call": ToolCallFormat, "text": TextFormat,
           "boxed": lambda think=False: DelimitedFormat("\\boxed{", "}", think=think, name="boxed"),
           "answer_tags": lambda think=False: DelimitedFormat("<answer>", "</answer>", think=think,
                                                              name="answer_tags")}


def get_format(name: str, think: bool = False) -> Format:
    """A built-in format by name: "sql", "tool_call", "text", "boxed", "answer_tags"."""
    if name not in FORMATS:
        raise KeyError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}")
    return FORMATS[name](think=think)
