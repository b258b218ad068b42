"""The `toolcall` task: call the right function(s) with the right arguments (BFCL-style).

P0 is the user turn (and BFCL's system message when there is one) followed by the available
functions as JSON, one line per tool inside `<tools></tools>` (as Qwen/Hermes chat templates
present tools), and the format instruction. Three rewards, each with its block:

| reward    | score (0 or 1)                                      | block                               |
|-----------|-----------------------------------------------------|-------------------------------------|
| `format`  | the response follows the format exactly             | the format rule                     |
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

Calls are read from the format, or from BFCL's Python-call text when the format finds none,
so `schema` and `correct` judge the calls whatever their wrapping (`format` judges that).
"""
from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from mrtpo.formats import ToolCallFormat
from mrtpo.tasks.base import Example, Reward, Task, Verdict
from mrtpo.tasks.toolcall_data import ToolCallRow, read_toolcall
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


@functools.lru_cache(maxsize=1024)
def _parse_cached(response: str, think: bool) -> ParsedCalls:
    return parse_calls(response, ToolCallFormat(think=think))


class ToolCallTask(Task):
    """Function calling with format, JSON-schema and BFCL AST-correctness rewards."""

    name = "toolcall"
    placement = "append"
    description = "Function calling (BFCL v4 AST check): format, JSON-schema validity, correctness."
    reward_names = ("format", "schema", "correct")

    def __init__(self, think: bool = False):
        self.format = ToolCallFormat(think=think)

    # --- data ---------------------------------------------------------------------------------
    def load(self, path: str | None = None, split: str | None = None) -> list[Example]:
        """Examples from `path`: None for the bundled sample, a BFCL v4 data directory or question
        file (answers from `possible_answer/`), "bfcl_eval" for the installed package's data, or
        a project JSONL file. `split`: BFCL categories (comma-separated) or a JSONL row's split."""
        if path is None:
            with resources.as_file(resources.files("mrtpo") / "data" / "toolcall" / SAMPLE) as p:
                rows = read_toolcall(Path(p), split)
        else:
            rows = read_toolcall(path, split)
        return [self.example(r) for r in rows]

    def example(self, row: ToolCallRow) -> Example:
        """An Example from a row: P0 text plus what the verifiers need in `data`."""
        prompt = (f"{row.user}\n\n{TOOLS_INTRO}\n<tools>\n{render_tools(row.functions)}\n</tools>\n\n"
                  f"{self.format.instruction}")
        data = {"functions": row.functions, "ground_truth": row.ground_truth, "category": row.category}
        return Example(id=row.id, prompt=prompt, system=row.system, data=data, source=row.source)

    # --- rewards --------------------------------------------------------------------------------
    def rewards(self, example: Example) -> list[Reward]:
        return [
            Reward("format", self._verify_format, self._format_block, kind="format"),
            Reward("schema", self._verify_schema, self._schema_block, kind="schema", in_prompt=True),
            Reward("correct", self._verify_correct, self._correct_block, kind="reference"),
        ]

    def reference(self, example: Example) -> str:
        """The calls with the first possible value of each argument (skipping the optional
        marker "" and values that break the parameter's schema), rendered in the format."""
        return self.format.render(reference_calls(example.data["functions"], example.data["ground_truth"]))

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
        return self.format.rule

    def _schema_block(self, example: Example, verdict: Verdict) -> str:
        """The tool JSON line(s) of the function(s) the answer calls, exactly as the prompt's
        tool list shows them (in-prompt: P_without_schema removes these lines from P0)."""
        wanted = list(dict.fromkeys(next(iter(c)) for c in example.data["ground_truth"]))
        funcs = [f for name in wanted for f in example.data["functions"] if f["name"] == name]
        return render_tools(funcs)

    def _correct_block(self, example: Example, verdict: Verdict) -> str:
        return self.reference(example)
