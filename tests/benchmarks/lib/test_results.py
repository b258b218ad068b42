"""benchmarks/lib/results.py: a results file declares its kind first and is written whole or not
at all; the command and the CPU a result records."""
from __future__ import annotations

import json
import math
import shlex

import pytest

from benchmarks.lib.results import command, cpu_name, declared, print_table, write_result


def test_a_results_file_declares_its_kind_first_and_a_rewrite_keeps_it(tmp_path):
    path = tmp_path / "deep" / "speed-step.json"
    doc = {"schema": "stale", "rows": [{"ratio": 0.55}], "notes": ["measured side by side"]}
    out = write_result(path, "speed-step", doc)
    text = path.read_text()
    assert text.startswith('{\n "schema": "mrtpo.speed-step/1"') and text.endswith("}\n")
    assert json.loads(text) == out == {"schema": "mrtpo.speed-step/1", "rows": [{"ratio": 0.55}],
                                       "notes": ["measured side by side"]}
    # the page reads the kind from the file, and a rerun of the script writes the same kind
    assert declared("speed-step", json.loads(text)) == out
    assert write_result(None, "table", {"rows": []}) == {"schema": "mrtpo.table/1", "rows": []}
    assert [p.name for p in path.parent.iterdir()] == ["speed-step.json"]  # no temporary file left


def test_strict_results_are_strict_json(tmp_path):
    path = tmp_path / "r.json"
    write_result(path, "table", {"rows": [math.nan, math.inf, 1.0]}, strict=True)
    assert json.loads(path.read_text()) == {"schema": "mrtpo.table/1", "rows": [None, None, 1.0]}
    write_result(path, "table", {"rows": [math.nan]})  # not strict: Python's NaN, as json writes it
    assert "NaN" in path.read_text()


def test_the_recorded_command_reruns_from_the_root():
    argv = ["--tasks", "toolcall", "--json", "a b.json"]
    assert command("benchmarks.speed.step", argv) == "python -m benchmarks.speed.step --tasks toolcall --json a b.json"
    quoted = command("benchmarks.speed.step", argv, quoted=True)
    assert shlex.split(quoted) == ["python", "-m", "benchmarks.speed.step", *argv]


def test_the_cpu_is_named_with_its_vector_instructions_and_its_family_when_asked():
    plain, full = cpu_name(), cpu_name(family=True)
    assert plain and full.startswith(plain)
    try:
        cpuinfo = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if "cpu family" in cpuinfo and "model name" in cpuinfo:
        family = next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("cpu family"))
        assert full.endswith(")") and f"(family {family}, model " in full
    if "avx512_bf16" in cpuinfo and "amx_bf16" not in cpuinfo:  # the two AMD EPYC kinds are told apart
        assert plain.endswith(" with AVX512-BF16")
    elif "avx2" in cpuinfo and "avx512f" not in cpuinfo:
        assert plain.endswith(" with AVX2")


def test_a_table_prints_its_title_rows_and_notes(capsys):
    print_table({"title": "T", "rows": [["generate", 106.4, 1.0], ["lean", 87.42, 0.8216]], "notes": ["n1"]})
    assert capsys.readouterr().out.splitlines() == [
        "T", f"{'generate':<40}   106.40     1.00", f"{'lean':<40}    87.42     0.82", "- n1"]
