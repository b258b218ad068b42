"""Custom code that breaks the task contract (a verifier that dies, a task that returns the wrong
things), bounded contexts, sandboxed data scripts and clear errors for what `--model` is given."""
from __future__ import annotations

import os
import signal
import time

import pytest

from harness_task import WordTask
from mrtpo.harness.scoring import Scorer
from mrtpo.tasks.base import Reward, Verdict

pytestmark = pytest.mark.timeout(300)


# --- a verifier worker that dies is seen as dead at once ----------------------------------
class DyingTask(WordTask):
    """WordTask with a 'fragile' reward that kills its process on the response 'die'."""

    name = "robust-dying"

    def __init__(self, how: str, n: int = 2):
        super().__init__(n)
        self.how = how

    def rewards(self, example):
        def verify(ex, response):
            if response == "die":
                if self.how == "exit":
                    os._exit(3)
                if self.how == "systemexit":
                    raise SystemExit(4)
                os.kill(os.getpid(), signal.SIGSEGV if self.how == "segv" else signal.SIGKILL)
            return Verdict(1.0, "fine")

        return super().rewards(example) + [Reward("fragile", verify, lambda ex, v: "")]


@pytest.mark.parametrize("how, detail", [("exit", "exited with code 3"), ("systemexit", "SystemExit(4)"),
                                         ("segv", "SIGSEGV"), ("oom", "SIGKILL")])
def test_a_dead_verifier_scores_its_floor_at_once_and_the_pool_recovers(how, detail):
    task = DyingTask(how)
    ex = task.load()
    with Scorer(task, workers=2, timeout=60.0) as scorer:
        t0 = time.perf_counter()
        s = scorer.score([ex[0], ex[1], ex[0]], ["die", "<answer>select</answer>", "die"])
        elapsed = time.perf_counter() - t0
        col = s.column("fragile")
        assert s.scores[:, col].tolist() == [0.0, 1.0, 0.0]
        for row in (0, 2):
            fb = s.verdicts[row][-1].feedback
            assert "the verifier died" in fb and detail in fb, fb
        assert s.scores[1, s.column("format")] == 1.0  # the other rewards scored normally
        assert elapsed < 10, f"{elapsed:.1f} s: the death was taken for a timeout"
        again = scorer.score([ex[0], ex[1]], ["ok", "ok"])  # the same pool, recovered
        assert again.scores[:, again.column("fragile")].tolist() == [1.0, 1.0]


def test_systemexit_in_process_scores_the_floor_too():
    task = DyingTask("systemexit")
    with Scorer(task, workers=0) as scorer:
        s = scorer.score(task.load()[:1], ["die"])
    assert "the verifier died" in s.verdicts[0][-1].feedback


# --- data scripts build under the sandbox ---------------------------------------------------
from limits import time_limit  # noqa: E402
from mrtpo.tasks.text2sql_data import DataError, build_database, read_rows  # noqa: E402

HANG = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;"


@pytest.mark.parametrize("script, message", [
    ("CREATE TABLE t (a);\n" + HANG, "ran past the 1 s limit"),
    ("CREATE TABLE t (a); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
     "INSERT INTO t SELECT zeroblob(9000) FROM c;", "byte cap"),
    ("ATTACH 'evil.db' AS e; CREATE TABLE e.t (a);", "ATTACH of 'evil.db' is not allowed"),
    ("CREATE TABLE t (a); VACUUM INTO 'evil.db';", "is not allowed"),
    ("PRAGMA max_page_count = 1000000000; CREATE TABLE t (a);", "PRAGMA max_page_count"),
    ("PRAGMA temp_store_directory = '/tmp'; CREATE TABLE t (a);", "PRAGMA temp_store_directory"),
    ("SELECT load_extension('x');", "load_extension() is not allowed"),
])
def test_a_data_script_runs_in_the_sandbox_and_leaves_nothing(tmp_path, monkeypatch, script, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.sql").write_text(script)
    cache = tmp_path / "cache"
    with time_limit(20.0, "build_database"):
        with pytest.raises(DataError, match="evil.sql: the SQL script fails") as err:
            build_database(tmp_path / "evil.sql", cache, timeout=1.0, max_bytes=4_000_000)
    assert message in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "evil.sql"]  # no evil.db
    assert list((cache / "text2sql").iterdir()) == []  # no .building file left


def test_jsonl_rows_with_a_script_database_are_sandboxed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "shop.sql").write_text("ATTACH 'outside.db' AS o; CREATE TABLE o.t (a);")
    (tmp_path / "q.jsonl").write_text('{"question": "q", "query": "SELECT 1", "db_id": "shop"}\n')
    with pytest.raises(DataError, match="not allowed in a data script"):
        read_rows(tmp_path / "q.jsonl")
    assert not (tmp_path / "outside.db").exists()


def test_an_interrupted_build_cleans_up_and_a_killed_ones_leftover_goes(tmp_path):
    cache = tmp_path / "cache"
    (cache / "text2sql").mkdir(parents=True)
    dead = cache / "text2sql" / ".shop-999999999-abc123.building"  # a builder killed outright
    dead.write_text("half")
    (tmp_path / "shop.sql").write_text("CREATE TABLE t (a);\n" + HANG)
    # Ctrl-C arrives after 0.2 s of this process's own CPU time (SIGVTALRM, so neither a slow
    # host nor a starved timer thread can delay it past the build's deadline, set far off)
    def ctrl_c(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGVTALRM, ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            with time_limit(150.0):
                signal.setitimer(signal.ITIMER_VIRTUAL, 0.2)
                build_database(tmp_path / "shop.sql", cache, timeout=120.0)
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)
    assert list((cache / "text2sql").iterdir()) == []
    (tmp_path / "ok.sql").write_text("CREATE TABLE t (a); INSERT INTO t VALUES (1); PRAGMA foreign_keys = ON;")
    built = build_database(tmp_path / "ok.sql", cache)
    assert [p.name for p in (cache / "text2sql").iterdir()] == [built.name]


# --- a custom task that breaks the contract, on every command ---------------------
import json  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from mrtpo.cli import app  # noqa: E402
from mrtpo.tasks import register_task  # noqa: E402

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


class ContractTask(WordTask):
    """WordTask whose 'fragile' reward (or block, or reference, or reward list) breaks the
    contract in the way `mode` says (`-o mode=...`)."""

    name = "robust-contract"

    def __init__(self, mode: str = "ok", n: int = 2):
        super().__init__(n)
        self.mode = mode

    def rewards(self, example):
        if self.mode == "norewards":
            return []

        def verify(ex, response):
            if self.mode.startswith("feedback"):  # feedback of 14.7 KB or 4 MB, echoed as the block
                size = 4_000_000 if self.mode == "feedback4mb" else 14_700
                return Verdict(0.0, ("the response " + response + " differs: ") * (size // 30))
            bad = {"none": None, "tuple": (Verdict(1.0), "x"), "string": "1.0",
                   "nan": Verdict(float("nan"))}
            if self.mode == "raise":
                raise KeyError("gold")
            if self.mode == "systemexit":
                raise SystemExit(3)
            if self.mode in bad:
                return bad[self.mode]
            return Verdict(1.0, "fine")

        def block(ex, v):
            if self.mode.startswith("feedback"):
                return v.feedback
            return {"block_int": 7, "block_none": None}.get(self.mode, "Say the word.")

        return super().rewards(example) + [Reward("fragile", verify, block)]

    def reference(self, example):
        return None if self.mode == "noref" else super().reference(example)

    def messages(self, example):
        msgs = super().messages(example)
        if self.mode == "longprompt":  # a prompt past the tiny model's 2,048 positions
            msgs[-1]["content"] += " Some more words to read." * 700
        return msgs


register_task("robust-contract")(ContractTask)


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    return result, result.output + (result.stderr if result.stderr_bytes is not None else "")


def assert_clean_error(result, out, *names):
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), out
    assert "Traceback" not in out, out
    for name in names:
        assert name in out, (name, out)


@pytest.fixture
def responses_file(tmp_path):
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": f"w{i}", "response": "<answer>select</answer>"}) + "\n"
                            for i in range(2)))
    return path


@pytest.mark.parametrize("mode", ["raise", "none", "tuple", "string", "nan"])
def test_eval_refuses_a_verify_that_breaks_the_contract(responses_file, mode):
    result, out = invoke("eval", "robust-contract", "-o", f"mode={mode}", "--responses", responses_file)
    assert_clean_error(result, out, "'fragile'", "'robust-contract'", "example 'w0'")
    assert "n/a" not in out


def test_eval_scores_a_verify_raising_systemexit_its_floor(responses_file):
    """A SystemExit is a dead verifier (mrtpo.tasks.runner), as in training: the floor, and on."""
    result, out = invoke("eval", "robust-contract", "-o", "mode=systemexit", "--responses", responses_file,
                         "--json")
    assert result.exit_code == 0, out
    assert json.loads(result.stdout)["metrics"]["rewards/fragile/mean"] == 0.0
    assert "the verifier died (it raised SystemExit(3))" in result.stderr, result.stderr


@pytest.mark.parametrize("mode, words", [("block_int", "returned int"), ("block_none", "returned NoneType"),
                                         ("norewards", "no rewards")])
def test_the_contract_helpers_name_task_reward_and_example(mode, words):
    from mrtpo.contexts import block_texts
    from mrtpo.tasks.contract import RewardError, checked_rewards

    task = ContractTask(mode)
    ex = task.load()[0]
    with pytest.raises(RewardError, match=words) as err:
        if mode == "norewards":
            checked_rewards(task, ex)
        else:
            block_texts(task, ex, [Verdict(1.0)] * len(task.rewards(ex)))
    assert "'robust-contract'" in str(err.value) and "'w0'" in str(err.value)
    if mode != "norewards":
        assert "'fragile'" in str(err.value)


@pytest.mark.parametrize("mode, words", [("norewards", "no rewards"), ("block_int", "returned int"),
                                         ("systemexit", None)])
def test_train_refuses_a_task_that_breaks_the_contract(tiny_qwen2_dir, tmp_path, mode, words):
    result, out = invoke("train", "--task", "robust-contract", "-o", f"mode={mode}", "--model", tiny_qwen2_dir,
                         "--output-dir", tmp_path / "run", "--steps", 1, "--batch-prompts", 2,
                         "--num-generations", 2, "--max-new-tokens", 4, "--verify-workers", 0)
    if words is None:  # a SystemExit verifier is a dead verifier: the floor, and training goes on
        assert result.exit_code == 0, out
        return
    assert result.exit_code in (1, 2), (result.exit_code, out)
    assert "Traceback" not in out and not isinstance(result.exception, (TypeError, RuntimeError)), out
    assert words in out and "'robust-contract'" in out and "example" in out, out


def test_probe_names_a_task_without_references(tiny_qwen2_dir):
    result, out = invoke("probe", "robust-contract", "-o", "mode=noref", "--model", tiny_qwen2_dir,
                         "--no-control")
    assert_clean_error(result, out, "'robust-contract'")
    assert "reference" in out


@pytest.mark.parametrize("mode, check", [("none", "bad-verdict"), ("noref", "no-reference"),
                                         ("block_none", "not-text"), ("norewards", "no-rewards")])
def test_lint_reports_what_training_refuses(mode, check):
    result, out = invoke("blocks", "lint", "robust-contract", "-o", f"mode={mode}")
    assert "Traceback" not in out and not isinstance(result.exception, Exception), out
    assert check in out, out


def test_preview_of_a_verifier_raising_systemexit_shows_it():
    result, out = invoke("blocks", "preview", "robust-contract", "-o", "mode=systemexit")
    assert "SystemExit" in out and "fragile" in out, (result.exit_code, out)


# --- a --model that is not a model says what it lacks and what --model takes ---------------
@pytest.fixture
def not_models(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.jsonl").write_text("{}\n")
    run = tmp_path / "runs" / "x"  # a run directory with no checkpoint yet
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("steps: 1\n")
    no_tok = tmp_path / "no_tokenizer"
    no_tok.mkdir()
    (no_tok / "config.json").write_text("{}")
    (no_tok / "model.safetensors").write_bytes(b"")
    return {"data": (data, "no config.json"), "run": (run, "run directory"),
            "no_tok": (no_tok, "no tokenizer files"), "nope": (tmp_path / "nope", "no such local directory"),
            "file": (data / "rows.jsonl", "is a file")}


@pytest.mark.parametrize("which", ["data", "run", "no_tok", "nope", "file"])
@pytest.mark.parametrize("command", ["eval", "probe", "credit", "train"])
def test_a_model_argument_that_is_not_a_model_is_explained(not_models, responses_file, tmp_path,
                                                           command, which):
    path, lacks = not_models[which]
    args = {"eval": ["eval", "robust-contract", "--model", path],
            "probe": ["probe", "robust-contract", "--model", path],
            "credit": ["credit", "robust-contract", "--model", path],
            "train": ["train", "--task", "robust-contract", "--model", path,
                      "--output-dir", tmp_path / "out", "--steps", 1]}[command]
    result, out = invoke(*args)
    assert_clean_error(result, out, "--model takes a model directory", "hub id")
    assert lacks in out, out
    assert "sentencepiece" not in out and "tiktoken" not in out


# --- credit says what it replayed ----------------------------------------------------------
def test_credit_header_says_a_single_response_was_replayed_without_references(tiny_qwen2_dir):
    result, out = invoke("credit", "robust-contract", "-o", "mode=noref", "--model", tiny_qwen2_dir,
                         "--plain")
    assert result.exit_code == 0, out
    assert "reference + corrupted copy" not in out, out
    assert "a single empty response (no reference) per example" in out, out


def test_credit_header_with_references_names_both(tiny_qwen2_dir):
    result, out = invoke("credit", "robust-contract", "--model", tiny_qwen2_dir, "--plain")
    assert result.exit_code == 0, out
    assert "reference + corrupted copy per example" in out, out


# --- every block and context is bounded -----------------------------------------------------
from mrtpo.contexts import CUT_MARKER, MAX_BLOCK_CHARS, build_item, cut_block  # noqa: E402


def test_a_huge_block_is_cut_with_a_visible_marker():
    text = "x" * 4_000_000
    out = cut_block(text)
    assert len(out) <= MAX_BLOCK_CHARS and out.endswith(" more characters cut]")
    assert f"{4_000_000 - out.index(' [...'):,}" in out
    assert cut_block("short") == "short"


@pytest.mark.parametrize("mode", ["feedback", "feedback4mb"])
def test_contexts_fit_the_models_positions(tiny_qwen2_dir, mode):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    task = ContractTask(mode)
    ex = task.load()[0]
    response = tok.encode("<answer>select</answer>", add_special_tokens=False)
    verdicts = [r.verify(ex, "x") for r in task.rewards(ex)]
    with time_limit(60.0, "build_item"):
        item = build_item(task, tok, ex, response, verdicts, max_positions=2048)
    assert max(len(c) for c in item.context_ids) + len(response) <= 2048
    assert item.blocks[-1].endswith(" more characters cut]"), item.blocks[-1][-80:]
    assert len(item.context_ids[0]) > len(item.context_ids[-1])  # the cut block is still there


def test_training_on_huge_feedback_cuts_it_and_a_too_long_prompt_is_refused(tiny_qwen2_dir, tmp_path):
    tiny = ["--model", tiny_qwen2_dir, "--steps", 1, "--batch-prompts", 2, "--num-generations", 2,
            "--max-new-tokens", 16, "--verify-workers", 0]
    result, out = invoke("train", "--task", "robust-contract", "-o", "mode=feedback",
                         "--output-dir", tmp_path / "a", *tiny)
    assert result.exit_code == 0, out
    rows = [json.loads(x) for x in (tmp_path / "a" / "completions.jsonl").read_text().splitlines()]
    assert any("more characters cut]" in json.dumps(r) for r in rows)
    result, out = invoke("train", "--task", "robust-contract", "-o", "mode=longprompt",
                         "--output-dir", tmp_path / "b", *tiny)
    assert_clean_error(result, out, "'robust-contract'", "example 'w0'", "2,048 positions")


def test_sql_workers_killed_while_idle_are_replaced(tmp_path):
    import sqlite3

    from mrtpo.verifiers.sql_pool import SQLPool

    db = tmp_path / "t.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a)")
    conn.close()
    pool = SQLPool(2)
    try:
        pool.run([(str(db), "SELECT 1")] * 2)
        for w in pool._workers:  # the OOM killer takes both idle workers
            os.kill(w.pid, signal.SIGKILL)
        with time_limit(30.0, "the pool after its workers died"):
            res = pool.run([(str(db), "SELECT 2")] * 3)
        assert [r.rows for r in res] == [[(2,)]] * 3
    finally:
        pool.close()


def test_verifier_workers_killed_while_idle_are_replaced_and_nothing_is_blamed():
    task = DyingTask("exit")
    ex = task.load()
    with Scorer(task, workers=2, timeout=60.0) as scorer:
        scorer.score([ex[0]], ["ok"])
        for proc in scorer._pool.procs:  # the OOM killer takes both idle workers
            os.kill(proc.pid, signal.SIGKILL)
        with time_limit(30.0, "scoring after the workers died"):
            s = scorer.score([ex[0], ex[1], ex[0]], ["ok", "ok", "ok"])
    assert s.scores[:, s.column("fragile")].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("mode", ["raise", "nan", "block_int"])
def test_credit_refuses_a_task_that_breaks_the_contract(tiny_qwen2_dir, mode):
    result, out = invoke("credit", "robust-contract", "-o", f"mode={mode}", "--model", tiny_qwen2_dir,
                         "--plain")
    assert_clean_error(result, out, "'fragile'", "'robust-contract'", "example 'w0'")


def test_a_hub_id_with_dots_is_not_taken_for_a_missing_directory():
    from mrtpo.harness.policy import model_arg_problem

    assert model_arg_problem("Qwen/Qwen2.5-0.5B-Instruct", trained=False) is None
    assert model_arg_problem("gpt2", trained=True) is None
    assert "no such local directory" in model_arg_problem("./nope", trained=True)
    assert "no such local directory" in model_arg_problem("weights.v2", trained=False)
