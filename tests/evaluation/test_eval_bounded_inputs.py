"""What `mrtpo eval` and `mrtpo credit` read and write, bounded: near matching of `--responses`
rows to prompts is bounded by characters compared; every reader of user files caps a file's size
and a line's, naming the file and line; lone surrogates in model output are scored, written
escaped (valid UTF-8 JSON) and shown; `eval --out` and `credit --html` name a path they cannot
write, and write atomically."""
from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from limits import time_limit
from mrtpo.cli import app
from mrtpo.verifiers.ifeval import supported_ids
from mrtpo.verifiers.ifeval.examples import EXAMPLE_KWARGS

pytestmark = pytest.mark.timeout(300)
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
N = 100_000

# --- near matching is bounded by characters compared ------------------------------------------
def _prompt(rng, words, n):
    return " ".join(rng.choice(words) for _ in range(n))


def test_near_matching_stops_at_its_character_budget():
    from mrtpo.evaluation.responses import ResponseRow, pair_responses
    from mrtpo.tasks.base import Example

    rng = random.Random(5)
    words = "the a sea ocean wave tide of and to in write describe poem story about each".split()
    examples = [Example(f"e{i}", _prompt(rng, words, 700)) for i in range(400)]  # ~4 KB prompts
    rows = [ResponseRow(i + 1, "r", None, _prompt(rng, words, 700)) for i in range(600)]
    with time_limit(30.0, "pair_responses"):  # the 250k-pair cap allowed ~21 hours here
        pairing = pair_responses(examples, rows, source="r.jsonl")
    assert any("near matching of prompts stopped" in w for w in pairing.warnings), pairing.warnings
    assert any("600 row(s) match no example" in w for w in pairing.warnings)


def test_near_matching_still_pairs_a_reworded_prompt():
    from mrtpo.evaluation.responses import ResponseRow, pair_responses
    from mrtpo.tasks.base import Example

    examples = [Example("shinto", "Write an essay about Shinto shrines in Japan, in 300 words."),
                Example("other", "List three rivers.")]
    rows = [ResponseRow(1, "essay", None, "Write an essay about the Shinto shrines in Japan, in 300 words.")]
    pairing = pair_responses(examples, rows)
    assert pairing.responses == ["essay", None] and "near match" in pairing.warnings[0]


# --- every reader of user files caps a file and a line --------------------------------------
# Reading /dev/zero in full never ends: the old readers reached 22 GB. These run in a child
# process with its address space capped at 2 GB, so a regression fails instead of exhausting
# the machine.
_CAPPED = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
"""


def test_dev_zero_is_refused_at_once_with_bounded_memory():
    from limits import peak_rss_mb

    code = _CAPPED + """
from mrtpo.blocks.samples import ResponsesFileError, read_responses as read_sample_responses
from mrtpo.evaluation.responses import ResponsesError, read_responses
for read in (lambda: read_responses("/dev/zero"), lambda: read_sample_responses("/dev/zero", [])):
    try:
        read()
    except (ResponsesError, ResponsesFileError) as exc:
        print("REFUSED", exc)
"""
    rss, out = peak_rss_mb(code, timeout=60)
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 2 and all("/dev/zero: is a device, not a file" in r for r in refused), out
    assert rss < 600, f"peak RSS {rss:.0f} MB"


def test_file_and_line_caps_name_the_file_and_line(tmp_path, monkeypatch):
    from mrtpo.evaluation.responses import ResponsesError, read_responses
    from mrtpo.tasks import files

    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "response": "x"}\n' * 3 + '{"id": "b", "response": "' + "y" * 5000 + '"}\n')
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    with pytest.raises(ResponsesError, match=r"r\.jsonl, line 4: longer than 4 KiB"):
        read_responses(path)
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2048)
    with pytest.raises(ResponsesError, match=r"r\.jsonl: larger than 2 KiB"):
        read_responses(path)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1 << 20)
    assert len(read_responses(path)) == 4


@pytest.mark.parametrize("task_name", ["instruct", "toolcall", "text2sql"])
def test_data_files_have_the_line_cap_too(tmp_path, monkeypatch, task_name):
    from mrtpo.tasks import files, get_task

    path = tmp_path / "data.jsonl"
    path.write_text('{"id": "a", "prompt": "' + "y" * 5000 + '"}\n')
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    with pytest.raises(Exception, match=r"data\.jsonl, line 1: longer than 4 KiB"):
        get_task(task_name).load(str(path))


def test_credit_reads_its_log_through_the_capped_reader(tmp_path, monkeypatch):
    from mrtpo.credit.records import CreditError, read_run
    from mrtpo.tasks import files

    (tmp_path / "completions.jsonl").write_text('{"step": 1, "x": "' + "y" * 5000 + '"}\n')
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    with pytest.raises(CreditError, match=r"completions\.jsonl, line 1: longer than 4 KiB"):
        read_run(tmp_path)


def test_eval_responses_dev_zero_exits_2():
    import subprocess
    import sys

    code = _CAPPED + "from mrtpo.cli import main; main()"
    r = subprocess.run([sys.executable, "-c", code, "eval", "toolcall", "--responses", "/dev/zero"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "/dev/zero: is a device" in r.stderr and "Traceback" not in r.stderr, r.stderr


# --- lone surrogates in model output -----------------------------------------------------------
SURROGATE_RESPONSES = {
    # the JSON escape in the call (parsed into a lone surrogate) and a raw one after it
    "toolcall": '<tool_call>{"name": "f\\ud800", "arguments": {"a": "\\udfff"}}</tool_call> \ud800',
    "text2sql": "```sql\nSELECT '\ud800' FROM book\n```",
    "instruct": "Hello \ud800 world.",
}


def _responses_file(tmp_path, task_name):
    from mrtpo.tasks import get_task

    path = tmp_path / f"{task_name}.jsonl"
    text = SURROGATE_RESPONSES[task_name]
    rows = [json.dumps({"id": ex.id, "response": text}) for ex in get_task(task_name).load()[:3]]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("task_name", list(SURROGATE_RESPONSES))
def test_eval_scores_lone_surrogates_and_writes_them_escaped(tmp_path, task_name):
    responses = _responses_file(tmp_path, task_name)
    out = tmp_path / "o.jsonl"
    r = CliRunner().invoke(app, ["eval", task_name, "--responses", str(responses), "--missing", "skip",
                                 "--out", str(out)], env=ENV)
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    raw.decode("utf-8")  # valid UTF-8
    rows = [json.loads(line) for line in raw.decode().splitlines()]
    assert len(rows) == 3
    assert any(ch in rows[0]["response"] for ch in "\ud800\udfff")  # the data, as it was
    r = CliRunner().invoke(app, ["eval", task_name, "--responses", str(responses), "--missing", "skip",
                                 "--json"], env=ENV)
    assert r.exit_code == 0 and json.JSONDecoder().raw_decode(r.output)[0]["n"] == 3, r.output
    assert not list(tmp_path.glob(".o.jsonl*")), "a temporary file was left behind"


def test_every_checker_scores_lone_surrogates():
    from mrtpo.verifiers.ifeval import verify

    for text in ("Hello \ud800 world. Das ist gut \udfff.", "\ud800" * 100, "A\ud800B.\n\n* x \udfff\n"):
        for iid in supported_ids():
            ok, feedback = verify(iid, EXAMPLE_KWARGS[iid], text, "Describe the sea.", loose=True)
            assert isinstance(ok, bool) and isinstance(feedback, str)


@pytest.mark.parametrize("style", ["--plain", "--rich", "--json", "--jsonl"])
def test_blocks_preview_shows_lone_surrogates(tmp_path, style):
    responses = _responses_file(tmp_path, "toolcall")
    r = CliRunner().invoke(app, ["blocks", "preview", "toolcall", "--responses", str(responses), "-n", "1",
                                 style], env=ENV)
    assert r.exit_code == 0, r.output
    r.output.encode("utf-8")
    if style in ("--json", "--jsonl"):
        json.loads(r.output.splitlines()[0] if style == "--jsonl" else r.output)


def test_tokenizer_inputs_are_scrubbed(tiny_tokenizer):
    from mrtpo.contexts import render_ids
    from mrtpo.harness.rollout import prompt_token_ids

    messages = [{"role": "user", "content": "Say \ud800 twice \udfff."}]
    if getattr(tiny_tokenizer, "chat_template", None):
        assert render_ids(tiny_tokenizer, messages)
    assert prompt_token_ids(tiny_tokenizer, "Say \ud800 twice.") == prompt_token_ids(tiny_tokenizer, "Say \ufffd twice.")


def test_json_text_round_trips_lone_surrogates():
    from mrtpo.textio import json_text

    obj = {"r": "a\ud800b\udfffc \u00e9 \U0001F600", "k\udc80": ["\ud83d"]}
    text = json_text(obj)
    text.encode("utf-8")
    assert json.loads(text) == obj and "\u00e9" in text  # other text stays readable


# --- output paths ------------------------------------------------------------------------------
def test_eval_out_paths_that_cannot_be_written(tmp_path):
    responses = _responses_file(tmp_path, "instruct")
    (tmp_path / "afile").write_text("keep")
    cases = {str(tmp_path): "is a directory", "/proc/x.jsonl": "cannot write",
             str(tmp_path / "afile" / "sub.jsonl"): "afile is a file, not a directory"}
    for out, why in cases.items():
        r = CliRunner().invoke(app, ["eval", "instruct", "--responses", str(responses), "--missing", "skip",
                                     "--out", out], env=ENV)
        assert r.exit_code == 2 and why in r.output and out in r.output, (out, r.output)
        assert "Traceback" not in r.output
    assert (tmp_path / "afile").read_text() == "keep"
    # checked before the work: a model that does not exist is not even looked at
    r = CliRunner().invoke(app, ["eval", "instruct", "--model", str(tmp_path / "nope"), "--out",
                                 "/proc/x.jsonl"], env=ENV)
    assert r.exit_code == 2 and "--out /proc/x.jsonl" in r.output and "nope" not in r.output, r.output
    assert not list(tmp_path.glob(".*"))  # no probe or temporary file left behind


def test_credit_html_directory_is_refused_before_the_work(tmp_path):
    r = CliRunner().invoke(app, ["credit", "instruct", "--html", str(tmp_path)], env=ENV)
    assert r.exit_code == 2 and "is a directory" in r.output and str(tmp_path) in r.output, r.output


def test_write_text_atomic_keeps_the_old_file_on_failure(tmp_path):
    from mrtpo.textio import OutputPathError, write_text_atomic

    target = tmp_path / "o.jsonl"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, "new \ud800\n")  # callers escape first; nothing is written
    assert target.read_text() == "old\n" and not list(tmp_path.glob(".o.jsonl*"))
    with pytest.raises(OutputPathError, match="/proc/x.html"):
        write_text_atomic("/proc/x.html", "<p>", "HTML page")
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    # a link (like /dev/stdout) is written through, not replaced by a file
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    write_text_atomic(link, "via link\n")
    assert link.is_symlink() and target.read_text() == "via link\n"


def test_training_on_a_prompt_with_a_lone_surrogate(tiny_qwen2_dir, tmp_path):
    import harness_task
    from mrtpo.harness import TrainConfig, train

    harness_task.register()
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "Write the word poem \\ud800 inside <answer></answer> tags.", "word": "po\\udfffem"}\n'
                    '{"prompt": "Write any word \\udfff in lowercase.", "word": null}\n')
    train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(tmp_path / "run"), task="harness-words",
                      data=str(data), steps=1, batch_prompts=2, num_generations=2, max_new_tokens=4,
                      verify_workers=0, lora_r=4, save_every=0, mrtpo=True, log_completions_every=1))
    run = tmp_path / "run"
    assert (run / "metrics.jsonl").is_file()
    # the run's log feeds `credit`: its page is written whole, in UTF-8; bad --html paths are named
    page = tmp_path / "credit.html"
    r = CliRunner().invoke(app, ["credit", str(run), "--html", str(page), "--quiet"], env=ENV)
    assert r.exit_code == 0, r.output
    page.read_bytes().decode("utf-8")
    for view in ("--plain", "--json", "--rich"):
        r = CliRunner().invoke(app, ["credit", str(run), view], env=ENV)
        assert r.exit_code == 0, (view, r.output)
    for bad, why in (("/proc/x.html", "cannot write the HTML page"), (str(run), "is a directory")):
        r = CliRunner().invoke(app, ["credit", str(run), "--html", bad, "--quiet"], env=ENV)
        assert r.exit_code == 2 and why in r.output and bad in r.output, r.output
