"""Bad input files get an error naming the file, the line and the fix,
valid JSON Lines are read as JSON defines them, and duplicate ids are refused, in every command
that takes --data or --responses."""
from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.tasks import get_task

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SAMPLES = {"instruct": "instruct/sample.jsonl", "text2sql": "text2sql/questions.jsonl",
           "toolcall": "toolcall/sample.jsonl"}
TASKS = list(SAMPLES)


def _invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    return result, " ".join(ANSI.sub("", result.output).split())


def _sample_lines(task: str) -> list[str]:
    text = (resources.files("mrtpo") / "data" / SAMPLES[task]).read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _data(tmp_path, task, edit_second=None) -> tuple:
    """A copy of the task's sample, its second row optionally edited; and a responses file."""
    rows = _sample_lines(task)[:3]
    if edit_second:
        rows[1] = edit_second(rows[1])
    data = tmp_path / f"{task}.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    if task == "text2sql":  # the databases' scripts go beside the questions
        for script in (resources.files("mrtpo") / "data" / "text2sql").iterdir():
            if script.name.endswith(".sql"):
                (tmp_path / script.name).write_text(script.read_text(encoding="utf-8"), encoding="utf-8")
    ids = [ex.id for ex in get_task(task).load(str(data))]
    resp = tmp_path / f"{task}-responses.jsonl"
    resp.write_text("".join(json.dumps({"id": i, "response": "hello"}) + "\n" for i in ids), encoding="utf-8")
    return data, resp, ids


def _latin1(path, row=2):
    """Rewrite line `row` of a UTF-8 file with a Latin-1 byte in it (a careless export)."""
    lines = path.read_bytes().split(b"\n")
    lines[row - 1] = lines[row - 1].replace(b'"', b'"\xe9', 1)
    path.write_bytes(b"\n".join(lines))


# --- non-UTF-8 files ---------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_non_utf8_data_names_file_line_and_fix(tmp_path, task):
    data, resp, _ = _data(tmp_path, task)
    _latin1(data)
    for cmd in (("eval", task, "--data", data, "--responses", resp), ("blocks", "lint", task, "--data", data)):
        result, out = _invoke(*cmd)
        assert result.exit_code == 2, (cmd, out)
        assert f"{data}, line 2: not UTF-8 text (byte 0xe9" in out and "iconv" in out, (cmd, out)


@pytest.mark.parametrize("task", TASKS)
def test_non_utf8_responses_name_the_file(tmp_path, task):
    data, resp, _ = _data(tmp_path, task)
    _latin1(resp, row=1)
    for cmd in (("eval", task, "--data", data, "--responses", resp),
                ("blocks", "preview", task, "--data", data, "--responses", resp),
                ("blocks", "lint", task, "--data", data, "--responses", resp)):
        result, out = _invoke(*cmd)
        assert result.exit_code == 2, (cmd, out)
        assert f"{resp}, line 1: not UTF-8 text" in out and "Traceback" not in out, (cmd, out)
        assert not isinstance(result.exception, UnicodeDecodeError)


# --- JSON strings may hold U+2028 and U+0085 raw ----------------------------------------------
def test_instruct_data_with_raw_line_separators_loads(tmp_path):
    data, _, ids = _data(tmp_path, "instruct", lambda line: line.replace(
        '"base": "', '"base": "Two\u2028lines and a next-line\u0085mark. ', 1))
    examples = get_task("instruct").load(str(data))
    assert len(examples) == 3 and "\u2028" in examples[1].prompt and "\u0085" in examples[1].prompt


@pytest.mark.parametrize("task", TASKS)
def test_responses_with_raw_line_separators_are_read(tmp_path, task):
    data, resp, ids = _data(tmp_path, task)
    resp.write_text("".join(json.dumps({"id": i, "response": "a\u2028b\u0085c\rd"}, ensure_ascii=False) + "\n"
                            for i in ids), encoding="utf-8")
    result, out = _invoke("eval", task, "--data", data, "--responses", resp, "--json")
    assert result.exit_code == 0, out


# --- duplicate ids --------------------------------------------------------------------------------
def test_instruct_refuses_duplicate_ids_naming_both_rows(tmp_path):
    first = json.loads(_sample_lines("instruct")[0])["id"]
    data, _, _ = _data(tmp_path, "instruct")
    rows = data.read_text(encoding="utf-8").split("\n")
    row = json.loads(rows[1])
    row["id"] = first
    rows[1] = json.dumps(row)
    data.write_text("\n".join(rows), encoding="utf-8")
    result, out = _invoke("eval", "instruct", "--data", data, "--responses", tmp_path / "none.jsonl")
    assert result.exit_code == 2
    assert f"{data}:2: id {first!r} is already the id of {data}:1" in out, out


# --- errors name the file and what is wrong with it ------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_empty_or_directory_responses_are_named(tmp_path, task):
    data, resp, _ = _data(tmp_path, task)
    resp.write_text("", encoding="utf-8")
    for cmd in (("blocks", "preview", task, "--data", data, "--responses", resp),
                ("blocks", "lint", task, "--data", data, "--responses", resp),
                ("eval", task, "--data", data, "--responses", resp)):
        result, out = _invoke(*cmd)
        assert result.exit_code == 2 and f"{resp}: the file holds no responses" in out, (cmd, out)
    for cmd in (("eval", task, "--data", data, "--responses", tmp_path),
                ("blocks", "preview", task, "--data", data, "--responses", tmp_path)):
        result, out = _invoke(*cmd)
        assert result.exit_code == 2 and f"{tmp_path}: is a directory" in out, (cmd, out)


@pytest.mark.parametrize("task", TASKS)
def test_empty_data_is_named(tmp_path, task):
    data = tmp_path / "empty.jsonl"
    data.write_text("\n", encoding="utf-8")
    resp = tmp_path / "r.jsonl"
    resp.write_text('{"id": "x", "response": "y"}\n', encoding="utf-8")
    for cmd in (("eval", task, "--data", data, "--responses", resp), ("blocks", "lint", task, "--data", data)):
        result, out = _invoke(*cmd)
        assert result.exit_code == 2 and f"{data}:" in out and "no" in out and "rows" in out, (cmd, out)


# --- the streaming reader reads as read_text does, and ids are checked by digest ---------------
LINES_CASES = {
    "crlf-and-blank": b'{"a": 1}\r\n\n  \n{"b": "x\xe2\x80\xa8y"}',
    "bom": b'\xef\xbb\xbf{"a": 1}\n{"b": 2}\n',
    "bad-byte-line-3": b'\xef\xbb\xbf{"a": 1}\n{"b": 2}\n{"c": "\xe9"}\n',
    "bad-byte-after-bom": b'\xef\xbb\xbf{"\xe9": 1}\n',
    "empty": b"",
    "long-line": b'{"a": 1}\n' + b"x" * 5000 + b"\n",
    "big-file": b'{"a": 1}\n' * 300,
}


@pytest.mark.parametrize("case", list(LINES_CASES))
def test_read_lines_gives_read_texts_lines_and_errors(tmp_path, monkeypatch, case):
    from mrtpo.tasks import files

    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2048)
    path = tmp_path / "f.jsonl"
    path.write_bytes(LINES_CASES[case])

    def outcome(read):
        try:
            return list(read())
        except ValueError as exc:
            return str(exc)
    streamed = outcome(lambda: files.read_lines(path))
    assert streamed == outcome(lambda: files.lines(files.read_text(path)))
    assert outcome(lambda: files.read_lines(tmp_path)) == outcome(lambda: files.read_text(tmp_path))
    assert outcome(lambda: files.read_lines(tmp_path / "no")) == outcome(lambda: files.read_text(tmp_path / "no"))


def test_unique_ids_confirm_a_repeat_by_reading_again(monkeypatch):
    """Every id given the same digest: a digest seen before is confirmed by the rows read again,
    so a different id passes and a repeat names its first row."""
    import hashlib

    from mrtpo.tasks.files import UniqueIds

    class OneDigest:
        def __init__(self, *args, **kwargs):
            pass

        def digest(self):
            return b"\0" * 8
    monkeypatch.setattr(hashlib, "blake2b", OneDigest)
    rows = [("a", "f:1"), ("b", "f:2"), ("c", "f:3"), ("b", "f:4")]
    ids = UniqueIds(lambda: iter(rows))
    assert [ids.earlier(rid, where) for rid, where in rows] == [None, None, None, "f:2"]


def _outcome(read):
    try:
        return list(read())
    except ValueError as exc:
        return str(exc)


def test_read_json_array_gives_json_loads_rows_across_any_read_size(tmp_path, monkeypatch):
    """Reads of 7 bytes: every row (objects, numbers a read could cut short, text with raw
    U+2028 and non-ASCII letters, a byte-order mark) comes back as `json.loads` gives it."""
    import random

    from mrtpo.tasks import files

    monkeypatch.setattr(files, "_CHUNK", 7)
    rng = random.Random(0)
    values = [{"id": "x" * 30, "n": 0.25}, 12345678, "h\u00e9llo\u2028", [1, [2, [3]]], None, True, -1.5e10]
    path = tmp_path / "rows.json"
    for trial in range(200):
        rows = [rng.choice(values) for _ in range(rng.randint(0, 8))]
        text = json.dumps(rows, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
        path.write_bytes((b"\xef\xbb\xbf" if trial % 5 == 0 else b"") + text.encode("utf-8"))
        assert [v for _, v in files.read_json_array(path)] == rows, text


@pytest.mark.parametrize("text, said", [
    ("", r"row 1 \(line 1\): the file is empty"),
    ('{"a": 1}', r"row 1 \(line 1\): the file starts with '\{', not '\['"),
    ("[1,\n2", r"after row 2 \(line 2\): expected ',' or '\]', found the end of the file"),
    ("[1,\n\n,2]", r"row 2 \(line 3\): not valid JSON \(Expecting value\)"),
    ("[1,]", r"row 2 \(line 1\): a value is missing"),
    ("[1 2]", r"after row 1 \(line 1\): expected ',' or '\]', found '2'"),
    ("[1] x", r"after row 1 \(line 1\): 'x' after the array's closing '\]'"),
    ('[{"a": 1},\n {"b": tru}, {"c": 3}]', r"row 2 \(line 2\): not valid JSON"),
    ('[{"a": "abc', r"row 1 \(line 1\): not valid JSON \(Unterminated string"),
    ("[" + "[" * 100_000 + "]" * 100_000 + "]", r"row 1 \(line 1\): not valid JSON \(nested too deeply"),
])
def test_read_json_array_names_file_row_and_line_of_a_mistake(tmp_path, monkeypatch, text, said):
    from mrtpo.tasks import files

    monkeypatch.setattr(files, "_CHUNK", 5)
    path = tmp_path / "rows.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ", " + said):
        list(files.read_json_array(path))


def test_read_json_array_refuses_what_read_text_refuses_in_the_same_words(tmp_path, monkeypatch):
    from mrtpo.tasks import files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2048)
    path = tmp_path / "big.json"
    path.write_text("[" + ", ".join(['{"a": 1}'] * 300) + "]")
    assert _outcome(lambda: files.read_json_array(path)) == _outcome(lambda: files.read_text(path))
    assert _outcome(lambda: files.read_json_array(tmp_path)) == _outcome(lambda: files.read_text(tmp_path))
    assert _outcome(lambda: files.read_json_array(tmp_path / "no")) == _outcome(lambda: files.read_text(tmp_path / "no"))
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1000)
    path.write_text('[{"a": 1}, {"b": "' + "x" * 5000 + '"}]')
    with pytest.raises(ValueError, match=r"big.json, row 2: longer than 1,000 bytes, the most mrtpo reads as one row"):
        list(files.read_json_array(path))
    path.write_bytes(b'[1,\n "ab\xff"]')
    assert _outcome(lambda: files.read_json_array(path)) == _outcome(lambda: files.read_text(path))
    monkeypatch.setattr(files, "_CHUNK", 2)  # the line begun in an earlier read
    assert "line 2: not UTF-8 text (byte 0xff at column 5)" in _outcome(lambda: files.read_json_array(path))


def test_read_json_array_gives_the_rows_before_a_mistake(tmp_path):
    """Streamed: the rows before a broken one are given before the error is raised."""
    from mrtpo.tasks.files import read_json_array

    path = tmp_path / "rows.json"
    path.write_text('[{"a": 1}, {"a": 2}, {"a": ]')
    rows = read_json_array(path)
    assert [next(rows)[1], next(rows)[1]] == [{"a": 1}, {"a": 2}]
    with pytest.raises(ValueError, match="row 3"):
        next(rows)


def test_digest_table_is_a_set_in_about_16_bytes_a_digest():
    """`UniqueIds`' store: the same answers as a set on 100,000 digests (a quarter repeats, 0
    included), at most 32 bytes a distinct digest where a set of ints takes about 100."""
    import random

    from mrtpo.tasks.files import _DigestTable

    rng = random.Random(1)
    digests = [rng.getrandbits(64) for _ in range(75_000)] + [0, 1]
    digests += [rng.choice(digests) for _ in range(25_000)]
    rng.shuffle(digests)
    table, seen = _DigestTable(), set()
    for d in digests:
        assert table.add(d) == ((d or 1) not in seen)
        seen.add(d or 1)
    assert table._slots.itemsize * len(table._slots) <= 32 * len(seen)


@pytest.mark.parametrize("task", ["toolcall", "text2sql"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_data_that_is_a_fifo_or_a_device_is_said_as_what_it_is(tmp_path, task, kind):
    """Not "no such file or directory" (toolcall), and no wait for a writer on a FIFO (text2sql)."""
    import os

    if kind == "fifo":
        data = tmp_path / "rows.jsonl"
        os.mkfifo(data)
    else:
        data = "/dev/zero"
    result, out = _invoke("blocks", "lint", task, "--data", data)
    words = "is a named pipe (FIFO)" if kind == "fifo" else "is a device"
    assert result.exit_code == 2 and f"{data}: {words}" in out and "no such file" not in out, out
