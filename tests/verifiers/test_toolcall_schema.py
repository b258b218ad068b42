"""Function documents: BFCL types <-> JSON Schema, tool JSON, jsonschema validation of arguments."""
from __future__ import annotations

import json

import pytest

from mrtpo.verifiers.toolcall import (
    FunctionSpecError,
    normalize_function,
    reference_calls,
    render_tools,
    schema_check,
    to_json_schema,
    tool_json,
)

BFCL_FUNC = {"name": "trip.plan", "description": "Plan a trip.", "parameters": {
    "type": "dict", "required": ["city", "days"], "properties": {
        "city": {"type": "string", "description": "City."},
        "days": {"type": "integer", "description": "Days."},
        "budget": {"type": "float", "description": "Budget."},
        "stops": {"type": "tuple", "items": {"type": "string"}, "description": "Stops."},
        "prefs": {"type": "dict", "description": "Prefs.", "required": ["pace"],
                  "properties": {"pace": {"type": "string", "enum": ["slow", "fast"]}}},
        "note": {"type": "any", "description": "Anything."},
        "sort": {"type": "string", "description": "Order.", "enum": ["asc", "desc"], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "enum": ["a", "b"], "description": "Tags."},
    }}}


def test_bfcl_types_become_json_schema_types():
    tool = tool_json(normalize_function(BFCL_FUNC))
    assert tool["type"] == "function" and tool["function"]["name"] == "trip.plan"
    props = tool["function"]["parameters"]["properties"]
    assert tool["function"]["parameters"]["type"] == "object"
    assert [props[p].get("type") for p in ("budget", "stops", "prefs", "note")] == ["number", "array", "object", None]
    assert props["prefs"]["properties"]["pace"]["enum"] == ["slow", "fast"]
    assert props["tags"]["items"]["enum"] == ["a", "b"] and "enum" not in props["tags"]  # item values on items
    line = render_tools([normalize_function(BFCL_FUNC)])
    assert json.loads(line) == tool


def test_json_schema_typed_and_wrapped_functions_normalise_to_bfcl_types():
    openai_style = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "number"}, "o": {"type": "object"}, "free": {}}}}}
    f = normalize_function(openai_style)
    props = f["parameters"]["properties"]
    assert (f["parameters"]["type"], props["x"]["type"], props["o"]["type"], props["free"]["type"]) == \
        ("dict", "float", "dict", "any")
    assert f["parameters"]["required"] == [] and f["description"] == ""
    assert to_json_schema(f["parameters"])["properties"]["x"]["type"] == "number"


@pytest.mark.parametrize("bad, words", [
    ({"parameters": {}}, "no \"name\""),
    ({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "date"}}}}, "type 'date'"),
    ({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": ["string", "null"]}}}}, "not supported"),
    ({"name": "f", "parameters": {"type": "dict", "properties": {}, "required": "x"}}, "required must be a list"),
    ({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "string", "enum": "ab"}}}},
     "not a valid JSON Schema"),
    ({"name": "f", "parameters": {"type": "string"}}, "\"dict\" or \"object\""),
])
def test_unusable_functions_raise_naming_where_and_what(bad, words):
    with pytest.raises(FunctionSpecError) as exc:
        normalize_function(bad, "data.jsonl:3: functions[0]")
    assert "data.jsonl:3" in str(exc.value) and words in str(exc.value)


def test_schema_check_accepts_valid_calls_and_explains_invalid_ones():
    funcs = [normalize_function(BFCL_FUNC)]
    ok = {"name": "trip.plan", "arguments": {"city": "Rome", "days": 3, "budget": 900, "stops": ["a"],
                                              "prefs": {"pace": "slow"}, "note": [1, {"x": None}], "tags": ["a"]}}
    assert schema_check(funcs, [ok]) == (True, "")
    cases = [
        ({"city": "Rome"}, "'days' is a required property"),
        ({"city": "Rome", "days": "3"}, "'3' is not of type 'integer' (at days)"),
        ({"city": "Rome", "days": 3, "extra": 1}, "'extra' was unexpected"),
        ({"city": "Rome", "days": 3, "prefs": {"pace": "brisk"}}, "(at prefs/pace)"),
        ({"city": "Rome", "days": 3, "tags": ["c"]}, "(at tags/0)"),
        ({"city": "Rome", "days": True}, "True is not of type 'integer'"),
    ]
    for args, words in cases:
        good, why = schema_check(funcs, [{"name": "trip.plan", "arguments": args}])
        assert not good and words in why and why.startswith("call 1 (trip.plan)"), (args, why)
    good, why = schema_check(funcs, [ok, {"name": "trip_plan", "arguments": {}}])
    assert not good and "call 2 names 'trip_plan'" in why and "trip.plan" in why
    assert schema_check(funcs, []) == (False, "no function call was found")


def test_null_is_accepted_where_the_default_is_null_only():
    funcs = [normalize_function(BFCL_FUNC)]
    assert schema_check(funcs, [{"name": "trip.plan", "arguments": {"city": "R", "days": 1, "sort": None}}])[0]
    assert not schema_check(funcs, [{"name": "trip.plan", "arguments": {"city": None, "days": 1}}])[0]


def test_pathological_arguments_do_not_raise():
    funcs = [normalize_function(BFCL_FUNC)]
    deep = current = {}
    for _ in range(3000):
        current["x"] = {}
        current = current["x"]
    good, why = schema_check(funcs, [{"name": "trip.plan", "arguments": {"city": "R", "days": 1, "note": deep}}])
    assert isinstance(good, bool)


def test_reference_takes_first_possible_value_and_skips_optional_markers():
    funcs = [normalize_function(BFCL_FUNC)]
    answer = [{"trip.plan": {"city": ["Rome", "Roma"], "days": [3], "budget": ["", 900.0], "sort": [""],
                             "prefs": [{"pace": ["slow", "fast"]}], "stops": [["a", "b"]],
                             "note": [None, ""]}}]
    ref = reference_calls(funcs, answer)
    # note's first value (None) breaks its schema only if typed; "any" admits it
    assert ref == [{"name": "trip.plan", "arguments": {"city": "Rome", "days": 3, "budget": 900.0,
                                                       "prefs": {"pace": "slow"}, "stops": ["a", "b"], "note": None}}]
    # a first value outside the schema gives way to the next one, or to leaving the argument out
    answer2 = [{"trip.plan": {"city": ["Rome"], "days": ["three", 3], "sort": [None, ""], "tags": [["z"], ["a"]]}}]
    assert reference_calls(funcs, answer2)[0]["arguments"] == {"city": "Rome", "days": 3, "sort": None, "tags": ["a"]}
