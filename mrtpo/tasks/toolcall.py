"""The `toolcall` task: call the right function(s) with the right arguments (BFCL-style).

P0 is the user turn (and BFCL's system message when there is one) followed by the available
functions as JSON, one line per tool inside `<tools></tools>` (as Qwen/Hermes chat templates
present tools), and the format instruction. Three rewards, each with its block:

| reward    | score (0 or 1)                                      | block                               |
|-----------|-----------------------------------------------------|-------------------------------------|
| `format`  | the response follows the format exactly             | P0's format sentence (in the prompt |
|           |                                                     | already: see below)                 |
| `schema`  | every call names a provided function and its        | the JSON of the function(s) the     |
|           | arguments validate against its JSON schema          | answer calls, as the prompt shows it|
|           |                                                     | (in the prompt already: see below)  |
| `correct` | BFCL v4's AST check passes                          | the reference call(s), rendered as  |
|           |                                                     | the policy is asked to write them   |

The schema block is information P0 already holds (the tool list), so it follows the in-prompt
rule (`Reward.in_prompt`): it is not appended a second time, and P_without_schema is P_all
with the called functions' lines removed from the tool list. Appending the tool list again
would tell a model nothing new, so removing that copy would move no distribution for any
model (and it made every replay row longer); removing the schema from the prompt takes away
what the `schema` reward checks: the function's name, its parameters and their types.

The format block follows the same rule: P0 ends with the format sentence ("Give each function
call as a JSON object ... inside its own <tool_call></tool_call> tags"), so the block is that
sentence and P_without_format removes it from the prompt. Appending the rule as a second
statement told a model that reads its prompt almost nothing (on SmolLM2-135M-Instruct,
removing it moved the tags 1.14x as much as as many tokens of unrelated text).

`demo=True` puts one worked exchange before the user turn: a question with a made-up tool
that no example uses (`DEMO_TOOL`), and its answer in the format. It shows the format, never an
answer a reward checks. A small pretrained instruct model needs it to write tool calls at all
(SmolLM2-135M-Instruct scored 0 on every reward without it); the demo is format information,
so P_without_format drops the exchange with the sentence.

Calls are read from the format, or from BFCL's Python-call text when the format finds none,
so `schema` and `correct` judge the calls whatever their wrapping (`format` judges that).
"""
from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Iterator, Optional

from mrtpo.formats import ToolCallFormat
from mrtpo.tasks.base import Example, ProbeEdit, Reward, Task, Verdict
from mrtpo.tasks.toolcall_data import ToolCallRow, iter_toolcall
from mrtpo.verifiers.lru import BoundedCache
from mrtpo.verifiers.toolcall import (
    ParsedCalls,
    ast_check_reason,
    parse_calls,
    reference_calls,
    render_tools,
    schema_check,
)

TOOLS_INTRO = ("You may call one or more of the following functions. Each is described as JSON "
               "within <tools></tools> tags:")
SAMPLE = "sample.jsonl"

#: the demonstration's made-up tool and exchange (`demo=True`): no bundled function is like it,
#: so it shows the call format and nothing an example's rewards check
DEMO_TOOL = {"name": "lookup_word", "description": "Look up a word in a dictionary.",
             "parameters": {"type": "dict", "properties": {
                 "word": {"type": "string", "description": "The word to look up."},
                 "language": {"type": "string", "description": "ISO 639-1 code of the dictionary's language."}},
                 "required": ["word"]}}
DEMO_QUESTION = "What does the French word 'bibliothèque' mean?"
DEMO_CALL = [{"name": "lookup_word", "arguments": {"word": "bibliothèque", "language": "fr"}}]


#: Parsed responses, shared by the three rewards. Keyed by a digest (the key holds no copy of
#: the response) and bounded by bytes: an entry counts PARSE_BYTES_PER_CHAR bytes per response
#: character (the parsed calls are Python objects, a few times their JSON text), at most
#: PARSE_CACHE_BYTES in all, so 40 distinct 10 MB responses are not all kept.
PARSE_CACHE_BYTES = 64_000_000
PARSE_BYTES_PER_CHAR = 8
_PARSED = BoundedCache(max_entries=1024, max_bytes=PARSE_CACHE_BYTES)


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"arguments"\s*:\s*\{')
# one argument: "key": value, where value is a string, number, literal, list or flat object
_ARG = re.compile(r'\s*,?\s*"((?:[^"\\]|\\.)*)"\s*:\s*'
                  r'("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|true|false|null|\[[^\]]*\]|\{[^{}]*\})')


def call_spans(text: str) -> dict[str, list[tuple[int, int]]]:
    """The characters of a response that each toolcall reward is about, read off its JSON
    calls by pattern (not parsed, so a half-written call still has spans): `schema` the
    function names and argument names, `correct` the argument values, `format` the rest."""
    schema: list[tuple[int, int]] = [m.span(1) for m in _NAME.finditer(text)]
    correct: list[tuple[int, int]] = []
    for m in _ARGS.finditer(text):
        pos = m.end()
        while (a := _ARG.match(text, pos)) is not None:
            schema.append(a.span(1))
            correct.append(a.span(2))
            pos = a.end()
    fmt: list[tuple[int, int]] = []
    at = 0
    for s, e in sorted(schema + correct):
        if s > at:
            fmt.append((at, s))
        at = max(at, e)
    if at < len(text):
        fmt.append((at, len(text)))
    return {"format": fmt, "schema": sorted(schema), "correct": correct}


def _parse_cached(response: str, think: bool) -> ParsedCalls:
    key = (hashlib.sha256(response.encode("utf-8", "surrogatepass")).digest(), think)
    hit = _PARSED.get(key)
    if hit is None:
        hit = parse_calls(response, ToolCallFormat(think=think))
        _PARSED.put(key, hit, PARSE_BYTES_PER_CHAR * len(response) + 1000)
    return hit


class ToolCallTask(Task):
    """Function calling with format, JSON-schema and BFCL AST-correctness rewards.

    Args:
        think: ask for (and require) a leading `<think>...</think>`.
        demo: a worked exchange (one question, one call) before the user turn.
        categories: the BFCL categories read from a data directory (or "bfcl_eval") when no
            split is given, comma-separated in the order read (`-o categories=simple_python,multiple`);
            None reads every supported category (data_cards/bfcl.md).
    """

    name = "toolcall"
    placement = "append"
    description = "Function calling (BFCL v4 AST check): format, JSON-schema validity, correctness."
    reward_names = ("format", "schema", "correct")

    demo_reward = "format"  # P_without_format drops the demonstration with the sentence

    def __init__(self, think: bool = False, demo: bool = False, categories: Optional[str] = None):
        self.format = ToolCallFormat(think=think)
        self.demo = demo
        if categories is not None and not [c for c in str(categories).split(",") if c.strip()]:
            raise ValueError(f"categories={categories!r}: name BFCL categories, comma-separated "
                             "(e.g. simple_python,multiple)")
        self.categories = categories

    def demo_messages(self) -> list[dict[str, str]]:
        """The demonstration exchange (user, assistant), or [] without `demo`."""
        if not self.demo:
            return []
        question = self._prompt(DEMO_QUESTION, [DEMO_TOOL])
        return [{"role": "user", "content": question},
                {"role": "assistant", "content": self.format.render(DEMO_CALL)}]

    # --- data ---------------------------------------------------------------------------------
    def iter_examples(self, path: str | None = None, split: str | None = None) -> Iterator[Example]:
        """Examples from `path`, one at a time (`load` is their list): None for the bundled
        sample, a BFCL v4 data directory or question file (answers from `possible_answer/`),
        "bfcl_eval" for the installed package's data, or a project JSONL file. `split`: BFCL
        categories (comma-separated; default: the `categories` option) or a JSONL row's split."""
        split = split if split is not None else self.categories
        if path is None:
            with resources.as_file(resources.files("mrtpo") / "data" / "toolcall" / SAMPLE) as p:
                yield from (self.example(r) for r in iter_toolcall(Path(p), split))
            return
        yield from (self.example(r) for r in iter_toolcall(path, split))

    def example(self, row: ToolCallRow) -> Example:
        """An Example from a row: P0 text plus what the verifiers need in `data`."""
        prompt = self._prompt(row.user, row.functions)
        data = {"functions": row.functions, "ground_truth": row.ground_truth, "category": row.category}
        return Example(id=row.id, prompt=prompt, system=row.system, data=data, source=row.source)

    def _prompt(self, question: str, functions: list) -> str:
        return (f"{question}\n\n{TOOLS_INTRO}\n<tools>\n{render_tools(functions)}\n</tools>\n\n"
                f"{self.format.instruction}")

    # --- rewards --------------------------------------------------------------------------------
    def rewards(self, example: Example) -> list[Reward]:
        return [
            Reward("format", self._verify_format, self._format_block, kind="format", in_prompt=True),
            Reward("schema", self._verify_schema, self._schema_block, kind="schema", in_prompt=True),
            Reward("correct", self._verify_correct, self._correct_block, kind="reference"),
        ]

    def reference(self, example: Example) -> str:
        """The calls with the first possible value of each argument (skipping the optional
        marker "" and values that break the parameter's schema), rendered in the format."""
        return self.format.render(reference_calls(example.data["functions"], example.data["ground_truth"]))

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """Targeted edits of the reference for the credit probe (see mrtpo.tasks.probe_edits)."""
        from mrtpo.tasks.probe_edits import toolcall_edits

        return toolcall_edits(self, example)

    def reward_spans(self, example: Example, response: str) -> dict[str, list[tuple[int, int]]]:
        """schema: each call's function name and argument names; correct: the argument
        values; format: everything else (tags, JSON punctuation and keys, text around)."""
        return call_spans(response)

    def parse(self, response: object) -> ParsedCalls:
        """The calls in a response (cached: the three rewards read the same response)."""
        if isinstance(response, str):
            return _parse_cached(response, self.format.think)
        return parse_calls(response, self.format)

    def _verify_format(self, example: Example, response: str) -> Verdict:
        p = self.parse(response)
        return Verdict(1.0 if p.strict else 0.0, p.error)

    def _verify_schema(self, example: Example, response: str) -> Verdict:
        p = self.parse(response)
        if not p.calls:
            return Verdict(0.0, f"no function call could be read: {p.error}")
        ok, why = schema_check(example.data["functions"], p.calls)
        return Verdict(1.0 if ok else 0.0, why)

    def _verify_correct(self, example: Example, response: str) -> Verdict:
        p = self.parse(response)
        if not p.calls:
            return Verdict(0.0, f"no function call could be read: {p.error}")
        d = example.data
        res = ast_check_reason(d["functions"], p.calls, d["ground_truth"], d["category"])
        return Verdict(1.0 if res.valid else 0.0, res.reason)

    # --- blocks ---------------------------------------------------------------------------------
    def _format_block(self, example: Example, verdict: Verdict) -> str:
        """P0's format sentence (in-prompt: P_without_format removes it from the prompt)."""
        return self.format.instruction

    def _schema_block(self, example: Example, verdict: Verdict) -> str:
        """The tool JSON line(s) of the function(s) the answer calls, exactly as the prompt's
        tool list shows them (in-prompt: P_without_schema removes these lines from P0)."""
        wanted = list(dict.fromkeys(next(iter(c)) for c in example.data["ground_truth"]))
        funcs = [f for name in wanted for f in example.data["functions"] if f["name"] == name]
        return render_tools(funcs)

    def _correct_block(self, example: Example, verdict: Verdict) -> str:
        return self.reference(example)
