"""Responses -> calls: the task's <tool_call> format, BFCL's Python-call text, and garbage."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo.formats import TextFormat, ToolCallFormat
from mrtpo.verifiers.toolcall import parse_calls, parse_python_calls

FMT = ToolCallFormat()


def test_tool_call_tags_single_and_parallel():
    one = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    p = parse_calls(one, FMT)
    assert p.strict and p.syntax == "tool_call" and p.calls == [{"name": "f", "arguments": {"a": 1}}]
    two = one + '\n<tool_call>\n{"name": "g", "arguments": {"b": [1.5, "x"]}}\n</tool_call>'
    assert [c["name"] for c in parse_calls(two, FMT).calls] == ["f", "g"]
    assert parse_calls(FMT.render(parse_calls(two, FMT).calls), FMT).calls == parse_calls(two, FMT).calls


def test_tool_call_with_extra_text_is_read_but_not_strict():
    p = parse_calls('Sure!\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', FMT)
    assert p.calls == [{"name": "f", "arguments": {}}] and not p.strict and "outside" in p.error


def test_think_block_follows_the_format_setting():
    body = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert parse_calls("<think>hm</think>\n" + body, ToolCallFormat(think=True)).strict
    p = parse_calls("<think>hm</think>\n" + body, FMT)
    assert p.calls and not p.strict


def test_python_call_text_is_read_as_bfcl_reads_it():
    calls, err = parse_python_calls(
        '[math.hypot(x=3, y=-4.5, opts={"a": [1, 2]}, pt=(1, 2), flag=True, none=None, var=radius, '
        'expr=2*3+1, nested=g(h="x"), bare=now(), sub=data["k"]), other(s=\'it\')]')
    assert err == ""
    assert calls == [
        {"name": "math.hypot", "arguments": {"x": 3, "y": -4.5, "opts": {"a": [1, 2]}, "pt": (1, 2), "flag": True,
                                             "none": None, "var": "radius", "expr": 7, "nested": {"g": {"h": "x"}},
                                             "bare": "now()", "sub": "data['k']"}},
        {"name": "other", "arguments": {"s": "it"}}]
    assert parse_python_calls("f(a=1)") == ([{"name": "f", "arguments": {"a": 1}}], "")
    assert parse_python_calls("```python\n[f(a='x')]\n```")[0] == [{"name": "f", "arguments": {"a": "x"}}]


def test_python_calls_are_a_fallback_of_the_format():
    p = parse_calls('[get_weather(city="Paris")]', FMT)
    assert p.syntax == "python" and not p.strict and "Python" in p.error
    assert p.calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    q = parse_calls('[f(a=1)]', TextFormat())  # with a text format the Python calls are the answer
    assert q.strict and q.calls == [{"name": "f", "arguments": {"a": 1}}]


def test_positional_arguments_are_dropped_and_reported():
    calls, err = parse_python_calls("f(1, b=2)")
    assert calls == [{"name": "f", "arguments": {"b": 2}}] and "positional" in err


def test_nothing_is_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [f"[f(x=__import__('os').system('touch {marker}'))]",
                f"[f(x=open('{marker}', 'w').write('x'))]",
                f"[f(x=(lambda: open('{marker}', 'w'))())]",
                f"[f(x=[open('{marker}', 'w') for _ in range(1)])]",
                "[f(x=9**9**9)]", "[f(x=10**10000000)]", "[f(x='a'*10**9)]", "[f(x=1/0)]"]
    for text in payloads:
        calls, err = parse_python_calls(text)
        assert not marker.exists()
        assert all(not isinstance(v, (int, float)) or abs(v) < 10**1000
                   for c in calls for v in c["arguments"].values())


def test_malformed_text_gives_no_calls_and_a_reason():
    for text in ["", "hello there", "[1, 2]", "f(", "[f(a=1), 3]", "[f(**kw)]", "{'name': 'f'}", "x" * 30000,
                 "[" * 5000, "f(a={[1]: 2})", "a[0](c=1)", "[f(a=-'x')]"]:
        p = parse_calls(text, FMT)
        assert p.calls == [] and not p.strict and p.error, text[:40]


FRAGMENTS = list("f(a=1,b'x\")[]{}:.-*9 \n") + ["<tool_call>", "</tool_call>", '"name"', '"arguments"', "g(", "True"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_parse_never_raises(text):
    p = parse_calls(text, FMT)
    assert isinstance(p.calls, list) and isinstance(p.strict, bool)
    assert p.strict or p.error
    assert all(isinstance(c["name"], str) and isinstance(c["arguments"], dict) for c in p.calls)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(max_size=200))
def test_parse_never_raises_on_any_text(text):
    p = parse_calls(text, FMT)
    assert p.strict or p.error
    assert parse_calls(None, FMT).calls == []


def test_model_output_that_python_warns_about_prints_nothing():
    """`1if` makes ast.parse print a SyntaxWarning to stderr; a training run must not."""
    import warnings

    from mrtpo.verifiers.toolcall.parse import parse_python_calls

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls, note = parse_python_calls("[f(x=1if 2 else 3)]")
    assert calls == [] and "unsupported value" in note
    assert not [w for w in caught if issubclass(w.category, SyntaxWarning)]
