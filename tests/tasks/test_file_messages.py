"""What a reader says of a file it cannot read names the file, the row and the fix (issue 61, F):
UTF-16 text is told to convert from UTF-16 (not latin1), and a row with an id of thousands of
digits is invalid JSON at its row, not Python's int-conversion advice."""
from __future__ import annotations

import pytest

from cli_runs import clean_error, invoke

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _tasks():
    import harness_task

    harness_task.register()


@pytest.mark.parametrize("encoding, source", [("utf-16", "utf-16"), ("utf-16-le", "utf-16le")])
@pytest.mark.parametrize("flag", ["--responses", "--data"])
def test_a_utf16_file_is_told_to_convert_from_utf16(tmp_path, encoding, source, flag):
    path = tmp_path / "rows.jsonl"
    row = '{"id": "w0", "response": "x", "prompt": "Say x."}\n'
    path.write_bytes(row.encode(encoding))
    result, out = invoke("eval", "toolcall" if flag == "--data" else "harness-words", flag, path,
                         *(["--responses", path] if flag == "--data" else []), with_stderr=True)
    clean_error(result, out, f"{path}, line 1: not UTF-8 text", f"iconv -f {source} -t utf-8")
    assert "latin1" not in out


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_an_id_of_thousands_of_digits_is_named_at_its_row(tmp_path, layout):
    path = tmp_path / "responses.jsonl"
    row = '{"id": ' + "9" * 5000 + ', "response": "x"}'
    path.write_text('{"id": "w0", "response": "x"}\n' + row + "\n" if layout == "jsonl"
                    else '[{"id": "w0", "response": "x"}, ' + row + "]")
    result, out = invoke("eval", "harness-words", "--responses", path, with_stderr=True)
    clean_error(result, out, str(path), "row 2" if layout == "array" else "line 2", "thousands of digits")
    assert "set_int_max_str_digits" not in out and "4300" not in out
