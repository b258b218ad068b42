"""`mrtpo credit` through the real typer app: on a run directory written by a real one-step
training run of a tiny model, and fresh, replaying responses through that model."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app
from mrtpo.credit.records import compute, read_run, responses_for
from credit_runs import PageReader, run_dir  # noqa: F401 (run_dir: a fixture)

harness_task.register()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(args):
    result = CliRunner().invoke(app, ["credit", *args], env=ENV, prog_name="mrtpo")
    return result, ANSI.sub("", result.output)


def _shown(out: str) -> int:
    """How many completions the terminal view printed (one heading rule each)."""
    return len(re.findall(r"^example \S+ · .*advantage [+-]\d", out, re.M))


def _log(run):
    return [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]


def _check_page(path, records):
    reader = PageReader()
    reader.feed(path.read_text(encoding="utf-8"))
    reader.close()
    for i, rec in enumerate(records):
        for k in range(len(rec["reward_names"])):
            assert reader.rows[(i, k)] == rec["tokens"], (i, k)
    assert len(reader.rows) == sum(len(r["reward_names"]) for r in records)


def test_credit_on_a_run_directory(run_dir, tmp_path):
    page, fig = tmp_path / "credit.html", tmp_path / "heat.png"
    result, out = _invoke([str(run_dir), "--html", str(page), "--png", str(fig), "--index", "2"])
    log = _log(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 2 and "needs matplotlib" in out
        return
    assert result.exit_code == 0, out
    assert f"run {run_dir} · step 1" in out and "task harness-words" in out
    assert _shown(out) == len(log) == 4
    for row in log:
        for name, score, credit in zip(row["reward_names"], row["scores"], row["credit"]):
            assert re.search(rf"^{re.escape(name)}\s+{score:.3f}\s+{re.escape(f'{credit:+.3f}')}\s", out, re.M), name
    assert "all rewards" in out and "not the paper's" in out
    _check_page(page, log)
    assert fig.read_bytes()[:4] == b"\x89PNG"

    # the summary's concentration equals the statistic computed on the logged distances
    from mrtpo.statistics import ALL, summarize

    view = read_run(run_dir)
    pooled = next(r for r in summarize(view.records) if r.name == ALL)
    assert re.search(rf"^all rewards\s+{pooled.responses}\s+{pooled.located}\s.*{100 * pooled.share_mean:.1f}%",
                     out, re.M)


def test_step_limit_and_quiet(run_dir):
    result, out = _invoke([str(run_dir), "--step", "1", "--limit", "1"])
    assert result.exit_code == 0, out
    assert _shown(out) == 1 and "1 completion" in out
    result, out = _invoke([str(run_dir), "--quiet"])
    assert result.exit_code == 0 and _shown(out) == 0 and "all rewards" in out
    result, out = _invoke([str(run_dir), "--step", "2"])
    assert result.exit_code == 2 and "step 2 was not logged" in out and "logged steps: 1" in out
    result, out = _invoke([str(run_dir), "--model", "x"])
    assert result.exit_code == 2 and "run directory" in out


def test_bad_run_directories_give_one_line_errors(run_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result, out = _invoke([str(empty)])
    assert result.exit_code == 2 and "--log-completions-every" in out and "Traceback" not in out

    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    rows = _log(run_dir)
    del rows[1]["credit"]
    (broken / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, out = _invoke([str(broken)])
    assert result.exit_code == 2 and "completions.jsonl, line 2: field 'credit' is missing" in out

    (broken / "completions.jsonl").write_text(json.dumps(_log(run_dir)[0]) + "\n{\"step\": 1, \"exa")
    result, out = _invoke([str(broken)])
    assert result.exit_code == 2 and "line 2: not valid JSON" in out


def test_a_run_without_mrtpo_shows_scores_and_says_why_nothing_is_shaded(run_dir, tmp_path):
    off = tmp_path / "off"
    shutil.copytree(run_dir, off)
    rows = _log(run_dir)
    for r in rows:  # what a --no-mrtpo run writes
        r["distances"] = r["token_weights"] = None
    (off / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = tmp_path / "off.html"
    result, out = _invoke([str(off), "--html", str(page)])
    assert result.exit_code == 0, out
    assert "MRTPO off" in out and "format" in out
    _check_page(page, rows)


def test_fresh_credit_for_a_task(tiny_qwen2_dir, tmp_path):
    page = tmp_path / "fresh.html"
    result, out = _invoke(["text2sql", "--model", str(tiny_qwen2_dir), "--limit", "2", "--html", str(page)])
    assert result.exit_code == 0, out
    assert "reference" in out and "corrupted" in out and "26-29%" in out
    assert _shown(out) == 4  # 2 examples x (reference, corrupted copy)
    reader = PageReader()
    reader.feed(page.read_text(encoding="utf-8"))
    assert len(reader.rows) == 4 * 3  # three rewards each


def test_fresh_records_keep_the_methods_invariants(tiny_qwen2_dir, tmp_path):
    from mrtpo.harness.policy import load_policy
    from mrtpo.tasks import get_task

    task = get_task("text2sql")
    examples = task.load()[:1]
    policy = load_policy(str(tiny_qwen2_dir), lora=False, device="cpu")
    recs = compute(task, examples, responses_for(task, examples, None), policy.model, policy.tokenizer)
    assert [r.name for r in recs] == ["reference", "corrupted"]
    ref, bad = recs
    assert ref.tokens[-1] == policy.tokenizer.eos_token  # a response ends with the stop token
    assert "".join(ref.tokens[:-1]) == ref.response
    for rec in recs:
        t = rec.num_tokens
        assert sum(rec.token_advantages) / t == pytest.approx(rec.advantage, abs=1e-5)
        assert sum(rec.credit) + rec.offset == pytest.approx(rec.advantage, abs=1e-6)
        for w in rec.token_weights:
            assert sum(w) / t == pytest.approx(1.0, abs=1e-5)
        for q in rec.distances:
            assert all(0.0 <= x <= 1.0 for x in q)
    ex = rec.reward_names.index("executes")
    assert ref.blocks[ex] == "" and not any(ref.distances[ex])  # the query ran: nothing to locate
    assert "no such" in bad.blocks[ex] and any(bad.distances[ex])  # SQLite's error points somewhere
    assert ref.advantage > 0 > bad.advantage  # GDPO over the pair


def test_fresh_credit_from_a_responses_file(tiny_qwen2_dir, tmp_path):
    from mrtpo.tasks import get_task

    ex = get_task("instruct").load()[0]
    responses = tmp_path / "mine.jsonl"
    responses.write_text(json.dumps({"id": ex.id, "responses": ["yes", "No, it is not.", ""]}) + "\n")
    result, out = _invoke(["instruct", "--model", str(tiny_qwen2_dir), "--responses", str(responses),
                           "--estimator", "grpo"])
    assert result.exit_code == 0, out
    assert _shown(out) == 3 and "response 3" in out and "grpo credit" in out

    responses.write_text(json.dumps({"id": "no-such-example", "response": "x"}) + "\n")
    result, out = _invoke(["instruct", "--model", str(tiny_qwen2_dir), "--responses", str(responses)])
    assert result.exit_code == 2 and "row 1: field 'id'" in out


def test_fresh_errors(tiny_qwen2_dir):
    result, out = _invoke(["no-such-task", "--model", str(tiny_qwen2_dir)])
    assert result.exit_code == 2 and "neither a run directory nor a task" in out
    result, out = _invoke(["runs/no-such-run"])
    assert result.exit_code == 2 and "runs/no-such-run: no such run directory" in out
    result, out = _invoke(["text2sql", "--model", str(tiny_qwen2_dir), "--step", "1"])
    assert result.exit_code == 2 and "--step" in out
