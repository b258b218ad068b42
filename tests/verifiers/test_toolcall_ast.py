"""BFCL v4 AST check: each rule of the official checker on calls built by hand.

The expected verdicts follow BFCL's `ast_checker` source (bfcl-eval 2026.3.23); the
differential test in tests/oracle/ compares against the official checker itself.
"""
from __future__ import annotations

import pytest

from mrtpo.verifiers.toolcall import ast_check, ast_check_reason, check_mode, standardize_string

AREA = {"name": "geometry.area", "description": "Area of a shape.", "parameters": {
    "type": "dict", "required": ["shape", "size"], "properties": {
        "shape": {"type": "string", "description": "Shape name."},
        "size": {"type": "float", "description": "Side or radius."},
        "count": {"type": "integer", "description": "How many."},
        "unit": {"type": "string", "description": "Unit.", "enum": ["cm", "m"]},
        "exact": {"type": "boolean", "description": "No rounding."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        "origin": {"type": "tuple", "items": {"type": "integer"}, "description": "x, y."},
        "style": {"type": "dict", "description": "Style.", "properties": {
            "color": {"type": "string"}, "width": {"type": "integer"}}},
        "layers": {"type": "array", "items": {"type": "dict"}, "description": "Layers."},
        "anything": {"type": "any", "description": "Any value."},
    }}}
WEATHER = {"name": "get_weather", "description": "Weather.", "parameters": {
    "type": "dict", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City."},
        "unit": {"type": "string", "description": "Unit."}}}}
FUNCS = [AREA, WEATHER]


def call(name="geometry.area", **args):
    return {"name": name, "arguments": args}


def check(args_or_calls, answer, category="simple", funcs=None):
    calls = args_or_calls if isinstance(args_or_calls, list) else [call(**args_or_calls)]
    return ast_check_reason(funcs or [AREA], calls, answer, category)


BASE = [{"geometry.area": {"shape": ["circle"], "size": [2.0], "unit": ["cm", ""]}}]


def test_exact_answer_passes_and_optional_may_be_left_out():
    assert check({"shape": "circle", "size": 2.0, "unit": "cm"}, BASE)
    assert check({"shape": "circle", "size": 2.0}, BASE)


def test_int_is_accepted_for_float_but_float_not_for_int():
    assert check({"shape": "circle", "size": 2}, BASE)
    ans = [{"geometry.area": {"shape": ["circle"], "size": [2.0], "count": [3]}}]
    assert check({"shape": "circle", "size": 2.0, "count": 3}, ans)
    res = check({"shape": "circle", "size": 2.0, "count": 3.0}, ans)
    assert not res and res.error_type == "type_error:simple" and "'count'" in res.reason


def test_bool_is_not_an_int_and_string_number_is_not_a_number():
    ans = [{"geometry.area": {"shape": ["circle"], "size": [2.0], "count": [1]}}]
    assert not check({"shape": "circle", "size": 2.0, "count": True}, ans)
    assert not check({"shape": "circle", "size": "2.0"}, BASE)


def test_string_normalisation_case_spaces_and_punctuation():
    ans = [{"geometry.area": {"shape": ["Right triangle"], "size": [1.0]}}]
    for variant in ["right triangle", "RIGHT-TRIANGLE", "right_triangle", "Right, triangle.", "righttriangle",
                    "right*tri^angle/"]:
        assert check({"shape": variant, "size": 1.0}, ans), variant
    res = check({"shape": "right triangles", "size": 1.0}, ans)
    assert not res and res.error_type == "value_error:string"
    assert standardize_string("It's A-b") == 'it"sab'


def test_missing_required_unexpected_and_missing_non_optional():
    assert check({"size": 2.0}, BASE).error_type == "simple_function_checker:missing_required"
    res = check({"shape": "circle", "size": 2.0, "nonsense": 1}, BASE)
    assert res.error_type == "simple_function_checker:unexpected_param" and "'nonsense'" in res.reason
    # in the schema but not in the possible answer: also unexpected
    assert check({"shape": "circle", "size": 2.0, "count": 1}, BASE).error_type == \
        "simple_function_checker:unexpected_param"
    ans = [{"geometry.area": {"shape": ["circle"], "size": [2.0], "exact": [True]}}]
    assert check({"shape": "circle", "size": 2.0}, ans).error_type == "simple_function_checker:missing_optional"


def test_wrong_function_name_and_wrong_count():
    assert check([call("geometry_area", shape="circle", size=2.0)], BASE).error_type == \
        "simple_function_checker:wrong_func_name"
    two = [call(shape="circle", size=2.0)] * 2
    assert check(two, BASE).error_type == "simple_function_checker:wrong_count"
    assert check([], BASE).error_type == "simple_function_checker:wrong_count"


def test_lists_compare_in_order_with_standardised_strings_and_tuples_as_lists():
    ans = [{"geometry.area": {"shape": ["sq"], "size": [1.0], "tags": [["Big Red", "b"]], "origin": [[1, 2]]}}]
    assert check({"shape": "sq", "size": 1.0, "tags": ["big-red", "B"], "origin": (1, 2)}, ans)
    assert check({"shape": "sq", "size": 1.0, "tags": ["big red", "b"], "origin": [1, 2]}, ans)
    assert not check({"shape": "sq", "size": 1.0, "tags": ["b", "Big Red"], "origin": [1, 2]}, ans)
    assert not check({"shape": "sq", "size": 1.0, "tags": ["Big Red", "b"], "origin": [2, 1]}, ans)
    # a tuple is only turned into a list where the schema says tuple
    assert not check({"shape": "sq", "size": 1.0, "tags": ("Big Red", "b"), "origin": [1, 2]}, ans)


def test_nested_item_types_are_checked_one_level_deep():
    ans = [{"geometry.area": {"shape": ["sq"], "size": [1.0], "origin": [[1, 2]]}}]
    res = check({"shape": "sq", "size": 1.0, "origin": [1.0, 2.0]}, ans)
    assert not res and res.error_type == "type_error:nested"
    assert check({"shape": "sq", "size": 1.0, "origin": "1, 2"}, ans).error_type == "type_error:simple"


def test_dicts_compare_key_by_key_with_optional_keys():
    ans = [{"geometry.area": {"shape": ["sq"], "size": [1.0],
                              "style": [{"color": ["Dark Blue", "navy"], "width": [2, ""]}]}}]
    assert check({"shape": "sq", "size": 1.0, "style": {"color": "dark-blue", "width": 2}}, ans)
    assert check({"shape": "sq", "size": 1.0, "style": {"color": "NAVY"}}, ans)
    assert check({"shape": "sq", "size": 1.0, "style": {"color": "red"}}, ans).error_type == "value_error:dict_value"
    assert check({"shape": "sq", "size": 1.0, "style": {"width": 2}}, ans).error_type == "value_error:dict_key"
    assert check({"shape": "sq", "size": 1.0, "style": {"color": "navy", "alpha": 1}}, ans).error_type == \
        "value_error:dict_key"


def test_lists_of_dicts_match_position_by_position():
    ans = [{"geometry.area": {"shape": ["sq"], "size": [1.0],
                              "layers": [[{"name": ["base"]}, {"name": ["top"], "z": [1, ""]}]]}}]
    assert check({"shape": "sq", "size": 1.0, "layers": [{"name": "Base"}, {"name": "top", "z": 1}]}, ans)
    assert not check({"shape": "sq", "size": 1.0, "layers": [{"name": "top"}, {"name": "base"}]}, ans)
    assert check({"shape": "sq", "size": 1.0, "layers": [{"name": "base"}]}, ans).error_type == \
        "value_error:list_dict_count"


def test_a_value_of_the_answers_own_type_is_a_variable_compared_as_is():
    # the answer holds a string for a float parameter: BFCL treats it as a variable name
    ans = [{"geometry.area": {"shape": ["sq"], "size": ["side_length"]}}]
    assert check({"shape": "sq", "size": "side_length"}, ans)
    assert not check({"shape": "sq", "size": "Side_Length"}, ans)  # variables are not normalised


def test_any_type_expects_a_string_as_in_bfcl():
    ans = [{"geometry.area": {"shape": ["sq"], "size": [1.0], "anything": ["x"]}}]
    assert check({"shape": "sq", "size": 1.0, "anything": "X"}, ans)
    assert not check({"shape": "sq", "size": 1.0, "anything": 5}, ans)


def test_parallel_calls_match_in_any_order_and_count_must_match():
    ans = [{"get_weather": {"city": ["Paris"], "unit": ["", "celsius"]}},
           {"get_weather": {"city": ["Rome"], "unit": ["", "celsius"]}}]
    paris, rome = call("get_weather", city="paris"), call("get_weather", city="Rome", unit="celsius")
    for category in ("parallel", "live_parallel", "parallel_multiple", "live_parallel_multiple"):
        assert ast_check(FUNCS, [rome, paris], ans, category)
        assert ast_check(FUNCS, [paris, rome], ans, category)
    res = ast_check_reason(FUNCS, [paris, paris], ans, "parallel")
    assert res.error_type == "parallel_function_checker_no_order:cannot_find_match" and "Rome" in res.reason
    assert ast_check_reason(FUNCS, [paris], ans, "parallel").error_type == \
        "parallel_function_checker_no_order:wrong_count"


def test_multiple_picks_the_expected_function_among_several():
    ans = [{"get_weather": {"city": ["Oslo"], "unit": [""]}}]
    assert ast_check(FUNCS, [call("get_weather", city="Oslo")], ans, "multiple")
    assert not ast_check(FUNCS, [call(shape="sq", size=1.0)], ans, "live_multiple")
    # a unit was given although the answer allows none
    assert not ast_check(FUNCS, [call("get_weather", city="Oslo", unit="c")], ans, "multiple")


def test_bfcl_decoded_form_is_accepted_too():
    assert ast_check([AREA], [{"geometry.area": {"shape": "circle", "size": 2}}], BASE, "simple_python")


def test_malformed_calls_fail_without_raising():
    for calls in ["text", 5, [1], [{"name": 3}], [{"a": 1, "b": 2}], [call(**{})] * 0]:
        res = ast_check_reason([AREA], calls, BASE, "simple")
        assert not res.valid and res.reason
    assert not ast_check([AREA], [{"name": "geometry.area", "arguments": ["x"]}], BASE, "simple")


def test_categories_and_bad_data_raise():
    assert [check_mode(c) for c in ("simple_python", "live_multiple", "parallel_multiple")] == \
        ["simple", "multiple", "parallel"]
    for bad in ("irrelevance", "simple_java", "simple_javascript", ""):
        with pytest.raises(ValueError):
            check_mode(bad)
    with pytest.raises(ValueError, match="not among the functions"):
        ast_check([AREA], [call()], [{"nope": {}}], "multiple")
    with pytest.raises(ValueError, match="list of possible values"):
        ast_check([AREA], [call()], [{"geometry.area": {"shape": "circle"}}], "simple")
