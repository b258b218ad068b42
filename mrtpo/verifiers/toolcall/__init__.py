"""Tool-call verifiers: parse a response into calls, BFCL v4's AST check, JSON-Schema check.

- `parse_calls(response, fmt)`: calls from the task's format (JSON in `<tool_call>` tags),
  falling back to BFCL's Python-call text; never raises.
- `ast_check(functions, calls, possible_answer, category)` -> bool, and `ast_check_reason`
  (-> AstResult with the failure's reason): BFCL v4 single-turn AST semantics.
- `schema_check(functions, calls)`: every call names a provided function and its arguments
  validate with `jsonschema` (BFCL types mapped to JSON Schema).
- `reference_calls(functions, possible_answer)`: one correct set of calls.
"""
from mrtpo.verifiers.toolcall.ast_check import (
    AstResult,
    ast_check,
    ast_check_reason,
    check_mode,
    normalize_calls,
    standardize_string,
)
from mrtpo.verifiers.toolcall.parse import ParsedCalls, parse_calls, parse_python_calls
from mrtpo.verifiers.toolcall.reference import reference_calls
from mrtpo.verifiers.toolcall.schema import (
    FunctionSpecError,
    normalize_function,
    render_tools,
    schema_check,
    to_json_schema,
    tool_json,
)

__all__ = [
    "AstResult", "FunctionSpecError", "ParsedCalls", "ast_check", "ast_check_reason", "check_mode",
    "normalize_calls", "normalize_function", "parse_calls", "parse_python_calls", "reference_calls",
    "render_tools", "schema_check", "standardize_string", "to_json_schema", "tool_json",
]
