"""The `toolcall` task end to end: loading (bundled sample, BFCL v4 layout, project JSONL), P0,
the three rewards and their blocks, the reference, and clear errors on bad data."""
from __future__ import annotations

import json
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest

from mrtpo.formats import ToolCallFormat
from mrtpo.tasks import Task, get_task
from mrtpo.tasks.toolcall_data import ToolCallDataError

BFCL_SAMPLE = Path(str(resources.files("mrtpo") / "data" / "toolcall" / "bfcl_v4_sample"))


@pytest.fixture(scope="module")
def task():
    return get_task("toolcall")


@pytest.fixture(scope="module")
def sample(task):
    return task.load()


def scores(task, ex, response):
    return [v.score for v in task.score(ex, response)]


def test_task_is_registered_with_its_contract(task):
    assert isinstance(task, Task) and task.name == "toolcall" and task.placement == "append"
    assert isinstance(task.format, ToolCallFormat)
    assert tuple(task.reward_names) == ("format", "schema", "correct")
    assert get_task("toolcall", think=True).format.think


def test_bundled_sample_loads_with_single_and_parallel_requests(task, sample):
    assert len(sample) >= 30 and len({e.id for e in sample}) == len(sample)
    cats = {e.data["category"] for e in sample}
    assert cats == {"simple", "multiple", "parallel", "parallel_multiple"}
    names = {f["name"] for e in sample for f in e.data["functions"]}
    assert len(names) >= 12
    assert [e.id for e in task.load(split="test")] == [e.id for e in sample if e.id in
                                                       {x.id for x in task.load(split="test")}]
    assert 0 < len(task.load(split="test")) < len(sample)
    with pytest.raises(ToolCallDataError, match="no row has split 'dev'; splits present: test, train"):
        task.load(split="dev")


def test_prompt_holds_the_request_the_tools_as_json_and_the_format_instruction(task, sample):
    ex = sample[0]
    assert ex.prompt.startswith("What's the weather like in Lisbon")
    tools = re.search(r"<tools>\n(.*)\n</tools>", ex.prompt, re.S).group(1).splitlines()
    assert [json.loads(t)["function"]["name"] for t in tools] == [f["name"] for f in ex.data["functions"]]
    assert json.loads(tools[0])["function"]["parameters"]["type"] == "object"
    assert ex.prompt.endswith(task.format.instruction)
    assert task.messages(ex) == [{"role": "user", "content": ex.prompt}]


@pytest.mark.parametrize("think", [False, True])
def test_every_reference_scores_one_on_every_reward(think):
    task = get_task("toolcall", think=think)
    for ex in task.load():
        ref = task.reference(ex)
        assert task.format.check(ref)
        assert scores(task, ex, ref) == [1.0, 1.0, 1.0], (ex.id, ref, task.score(ex, ref))


def test_rewards_separate_format_schema_and_correctness(task, sample):
    ex = next(e for e in sample if e.id == "toolcall-002")  # Chicago, Fahrenheit
    fmt = task.format
    good = {"name": "get_current_weather", "arguments": {"location": "chicago, il", "unit": "fahrenheit"}}
    assert scores(task, ex, fmt.render([good])) == [1.0, 1.0, 1.0]
    wrong_value = dict(good, arguments={"location": "Chicago", "unit": "celsius"})
    assert scores(task, ex, fmt.render([wrong_value])) == [1.0, 1.0, 0.0]
    off_schema = dict(good, arguments={"location": "Chicago", "unit": "kelvin"})
    v = task.score(ex, fmt.render([off_schema]))
    assert [x.score for x in v] == [1.0, 0.0, 0.0] and "'kelvin' is not one of" in v[1].feedback
    unknown = {"name": "get_weather", "arguments": {"location": "Chicago"}}
    v = task.score(ex, fmt.render([unknown]))
    assert [x.score for x in v] == [1.0, 0.0, 0.0] and "not one of the provided functions" in v[1].feedback
    python = '[get_current_weather(location="Chicago", unit="fahrenheit")]'
    v = task.score(ex, python)
    assert [x.score for x in v] == [0.0, 1.0, 1.0] and "no <tool_call>" in v[0].feedback
    chatty = "Let me check.\n" + fmt.render([good])
    assert scores(task, ex, chatty) == [0.0, 1.0, 1.0]


def test_bad_output_scores_zero_with_feedback_and_never_raises(task, sample):
    ex = sample[0]
    for response in ["", "I don't know", "<tool_call>{not json}</tool_call>", "<tool_call>", None, 42,
                     '<tool_call>\n{"name": "get_current_weather", "arguments": "x"}\n</tool_call>',
                     "<think>unclosed", "[" * 3000, '<tool_call>' + '[' * 5000 + '</tool_call>']:
        verdicts = task.score(ex, response)
        assert [v.score for v in verdicts] == [0.0, 0.0, 0.0], response
        assert all(v.feedback for v in verdicts)


def test_parallel_calls_score_in_any_order(task, sample):
    ex = next(e for e in sample if e.data["category"] == "parallel" and len(e.data["ground_truth"]) == 3)
    calls = json.loads(json.dumps([{"name": "get_current_weather", "arguments": {"location": c}}
                                   for c in ("Kyoto", "Tokyo, Japan", "osaka")]))
    assert scores(task, ex, task.format.render(calls)) == [1.0, 1.0, 1.0]
    v = task.score(ex, task.format.render(calls[:2]))
    assert [x.score for x in v] == [1.0, 1.0, 0.0] and "expected 3 function calls, got 2" in v[2].feedback


def test_blocks_write_the_rule_the_used_schemas_and_the_reference(task, sample):
    ex = next(e for e in sample if e.data["category"] == "parallel_multiple" and len(e.data["functions"]) == 3)
    blocks = {r.name: r.block(ex, r.verify(ex, "nothing")) for r in task.rewards(ex)}
    assert blocks["format"] == task.format.instruction and blocks["format"] in ex.prompt  # P0's sentence
    shown = blocks["schema"].splitlines()
    prompt_lines = re.search(r"<tools>\n(.*)\n</tools>", ex.prompt, re.S).group(1).splitlines()
    expected_names = [next(iter(c)) for c in ex.data["ground_truth"]]
    assert [json.loads(s)["function"]["name"] for s in shown] == expected_names
    assert all(s in prompt_lines for s in shown)  # the same JSON the prompt shows
    assert blocks["correct"].endswith(task.reference(ex))
    assert [r.name for r in task.rewards(ex)] == list(task.reward_names)


def test_schema_follows_the_in_prompt_rule(task, sample):
    """The tool schema is in P0 already: it is not appended again, and P_without_schema is
    P_all with the called functions' lines taken out of the tool list (nothing else)."""
    from mrtpo.contexts import block_texts, context_messages

    ex = next(e for e in sample if e.data["category"] == "parallel_multiple" and len(e.data["functions"]) == 3)
    blocks = block_texts(task, ex, task.score(ex, task.reference(ex)))
    p_all, without = context_messages(task, ex, blocks)
    names = [r.name for r in task.rewards(ex)]
    all_text = p_all[-1]["content"]
    assert all_text.count(blocks[names.index("schema")].splitlines()[0]) == 1  # listed once, in P0
    no_schema = without[names.index("schema")][-1]["content"]
    tools_left = re.search(r"<tools>\n(.*?)\n?</tools>", no_schema, re.S).group(1).splitlines()
    called = {next(iter(c)) for c in ex.data["ground_truth"]}
    assert tools_left and all(json.loads(s)["function"]["name"] not in called for s in tools_left)
    assert no_schema.replace("\n", "") == "".join(
        line for line in all_text.splitlines() if line not in blocks[names.index("schema")].splitlines())


def test_bfcl_layout_directory_file_and_categories(task):
    exs = task.load(str(BFCL_SAMPLE))
    cats = {e.data["category"] for e in exs}
    assert cats == {"simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
                    "live_multiple", "live_parallel", "live_parallel_multiple"}
    assert all(e.source.startswith(str(BFCL_SAMPLE)) and re.search(r"\.json:\d+$", e.source) for e in exs)
    par = task.load(str(BFCL_SAMPLE), split="parallel,live_parallel")
    assert {e.data["category"] for e in par} == {"parallel", "live_parallel"}
    one = task.load(str(BFCL_SAMPLE / "BFCL_v4_simple_python.json"))
    assert [e.id for e in one] == [e.id for e in exs if e.data["category"] == "simple_python"]
    with_system = [e for e in exs if e.system]
    assert with_system and all(e.system not in e.prompt for e in with_system)
    assert task.messages(with_system[0])[0]["role"] == "system"
    for ex in exs:  # the first possible values form a correct call in this sample
        assert scores(task, ex, task.reference(ex))[::2] == [1.0, 1.0], ex.id
    with pytest.raises(ToolCallDataError, match="no file for category 'simple_java'"):
        task.load(str(BFCL_SAMPLE), split="simple_java")


def test_bfcl_dotted_names_and_dict_arguments(task):
    exs = task.load(str(BFCL_SAMPLE))
    ex = next(e for e in exs if e.data["category"] == "simple_python" and "." in e.data["functions"][0]["name"])
    ref = task.reference(ex)
    assert scores(task, ex, ref) == [1.0, 1.0, 1.0]
    name = ex.data["functions"][0]["name"]
    underscored = ref.replace(json.dumps(name), json.dumps(name.replace(".", "_")))
    assert scores(task, ex, underscored) == [1.0, 0.0, 0.0]  # names are compared as given
    dict_ex = next(e for e in exs if any(
        p["type"] == "dict" for f in e.data["functions"] for p in f["parameters"]["properties"].values()))
    assert scores(task, dict_ex, task.reference(dict_ex))[2] == 1.0


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


ROW = {"id": "r1", "question": "Weather in Paris?",
       "functions": [{"name": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]}}],
       "ground_truth": [{"w": {"city": ["Paris"]}}]}


def test_project_jsonl_reads_and_infers_the_category(task, tmp_path):
    msgs = dict(ROW, id="r2", question=[{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Paris and Rome?"}],
                ground_truth=[{"w": {"city": ["Paris"]}}, {"w": {"city": ["Rome"]}}])
    exs = task.load(str(_write_jsonl(tmp_path / "d.jsonl", [ROW, msgs])))
    assert [e.data["category"] for e in exs] == ["simple", "parallel"]
    assert exs[1].system == "Be brief." and exs[1].prompt.startswith("Paris and Rome?")
    assert exs[0].source == f"{tmp_path / 'd.jsonl'}:1"


@pytest.mark.parametrize("row, words", [
    ("{not json", ":1: not valid JSON"),
    ({k: v for k, v in ROW.items() if k != "ground_truth"}, ':1: field "ground_truth" is missing'),
    (dict(ROW, ground_truth=[{"x": {}}]), ":1: ground_truth[0] calls 'x', which is not among the functions (w)"),
    (dict(ROW, ground_truth=[{"w": {"city": "Paris"}}]), 'ground_truth[0].city: possible values must be a list'),
    (dict(ROW, ground_truth=[{"w": {"town": ["Paris"]}}]), "function 'w' has no parameter 'town'"),
    (dict(ROW, functions=[]), 'field "functions" must be a non-empty list'),
    (dict(ROW, functions=[{"name": "w", "parameters": {"properties": {"c": {"type": "datetime"}}}}]),
     "functions[0] (w).parameters.properties.c: type 'datetime' is not supported"),
    (dict(ROW, question=[{"role": "assistant", "content": "hi"}]), 'field "question" must be a string'),
    (dict(ROW, category="simple", ground_truth=[{"w": {"city": ["P"]}}, {"w": {"city": ["R"]}}]),
     "category 'simple' expects one call"),
    (dict(ROW, category="irrelevance"), "unknown category 'irrelevance'"),
])
def test_bad_jsonl_rows_raise_naming_file_line_and_field(task, tmp_path, row, words):
    path = _write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(ToolCallDataError) as exc:
        task.load(str(path))
    assert str(path) in str(exc.value) and words in str(exc.value)


def test_duplicate_ids_and_missing_paths(task, tmp_path):
    with pytest.raises(ToolCallDataError, match=r"bad.jsonl:2: id 'r1' is used twice"):
        task.load(str(_write_jsonl(tmp_path / "bad.jsonl", [ROW, ROW])))
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        task.load(str(tmp_path / "absent.jsonl"))


def test_bad_bfcl_layouts_raise_with_the_fix(task, tmp_path):
    qfile = tmp_path / "BFCL_v4_simple_python.json"
    shutil.copy(BFCL_SAMPLE / qfile.name, qfile)
    with pytest.raises(ToolCallDataError, match="no possible-answer file at .*possible_answer"):
        task.load(str(qfile))
    (tmp_path / "possible_answer").mkdir()
    lines = (BFCL_SAMPLE / "possible_answer" / qfile.name).read_text().splitlines()
    (tmp_path / "possible_answer" / qfile.name).write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(ToolCallDataError, match=r"simple_python.json:1: id 'simple_python_0' has no row"):
        task.load(str(qfile))
    java = tmp_path / "BFCL_v4_simple_java.json"
    java.write_text(qfile.read_text())
    with pytest.raises(ToolCallDataError, match="category 'simple_java' is not supported"):
        task.load(str(java))


def test_format_follows_the_in_prompt_rule(task, sample):
    """P0 ends with the format sentence: P_all states it once, and P_without_format is P_all
    without it (nothing else removed); the other rewards' contexts keep it."""
    from mrtpo.contexts import block_texts, context_messages

    ex = sample[0]
    blocks = block_texts(task, ex, task.score(ex, task.reference(ex)))
    p_all, without = context_messages(task, ex, blocks)
    names = [r.name for r in task.rewards(ex)]
    sentence = task.format.instruction
    assert p_all[-1]["content"].count(sentence) == 1 and task.format.rule not in p_all[-1]["content"]
    no_format = without[names.index("format")][-1]["content"]
    assert sentence not in no_format
    assert no_format == p_all[-1]["content"].replace("\n\n" + sentence, "")
    for k in (names.index("schema"), names.index("correct")):
        assert sentence in without[k][-1]["content"]


def test_demo_shows_the_format_with_a_tool_no_example_uses(sample):
    """`demo=True`: one worked exchange before the user turn, with a made-up tool that no
    example offers; its answer scores full format; P_without_format drops it with the sentence."""
    from mrtpo.contexts import block_texts, context_messages
    from mrtpo.tasks.toolcall import DEMO_TOOL

    task = get_task("toolcall", demo=True)
    offered = {f["name"] for e in sample for f in e.data["functions"]}
    assert DEMO_TOOL["name"] not in offered
    ex = task.load()[0]
    p0 = task.messages(ex)
    assert [m["role"] for m in p0] == ["user", "assistant", "user"] and p0[-1]["content"] == ex.prompt
    demo_answer = p0[1]["content"]
    assert task.format.parse(demo_answer).strict
    blocks = block_texts(task, ex, task.score(ex, task.reference(ex)))
    p_all, without = context_messages(task, ex, blocks)
    names = [r.name for r in task.rewards(ex)]
    assert p_all[:2] == p0[:2]
    assert without[names.index("format")] == [p_all[-1] | {"content": without[names.index("format")][-1]["content"]}]
    assert task.format.instruction not in without[names.index("format")][-1]["content"]
    assert without[names.index("correct")][:2] == p0[:2]  # the other rewards keep the demo
    plain = get_task("toolcall")
    assert plain.messages(ex) == p0[2:]


def test_the_categories_option_is_the_split_when_none_is_given():
    """`-o categories=...`: the BFCL categories read, in that order (the bundled excerpt has 4
    of each); a split given to load() wins; an empty list is refused."""
    from importlib import resources

    with resources.as_file(resources.files("mrtpo") / "data" / "toolcall" / "bfcl_v4_sample") as root:
        task = get_task("toolcall", categories="multiple,simple_python")
        cats = [ex.data["category"] for ex in task.load(str(root))]
        assert cats == ["multiple"] * 4 + ["simple_python"] * 4
        assert {ex.data["category"] for ex in task.load(str(root), split="parallel")} == {"parallel"}
        assert len(get_task("toolcall").load(str(root))) == 32
    with pytest.raises(ValueError, match="name BFCL categories"):
        get_task("toolcall", categories=" , ")
