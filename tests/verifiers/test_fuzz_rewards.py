"""Every reward of every built-in task, on hostile text up to 1 MB, under a time and a
memory bound per call.

Each parametrized case is one reward of one task (the instruct task contributes one example per
supported instruction id, so every checker is a reward here). Hypothesis draws responses from
hostile units repeated to a size between 1 character and 1 MB (the characters that made
regexes backtrack, unclosed tags, deep nesting, odd line breaks), random text, and a task's
reference with hostile text around it. A call must return one Verdict with a finite score in
[floor, 1] and feedback, within CALL_SECONDS, allocating at most CALL_BYTES of Python memory at
its peak (tracemalloc; SQLite runs in worker processes whose heap sql_pool caps).
"""
from __future__ import annotations

import json
import math
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from limits import time_limit
from mrtpo.tasks.contract import check_verdict
from mrtpo.tasks import get_task
from mrtpo.verifiers.ifeval import supported_ids
from mrtpo.verifiers.ifeval.examples import EXAMPLE_KWARGS

pytestmark = pytest.mark.timeout(600)

CALL_SECONDS = 10.0  # generous: the machine running the suite may be busy; typical is < 1 s
CALL_BYTES = 256 * 2**20
SIZES = [1, 60, 3_000, 45_000, 1_000_000]
UNITS = ["[", "\n", " ", "A. ", "<", "<<", "{", "[{", "*", "- ", "\n* ", "<tool_call>", "</tool_call>",
         "```sql\n", "```", "SELECT ", "/**/ ", "'", '"', "(", "\\", "🙂", "\u2028", "\r\n", "é",
         "<think>", "</think>", "P.S. ", "******", "***", ", ", "\x00", "\t", "a", "A", "WITH RECURSIVE "]


#: the reported reproducers for text verifiers, run on every reward as well
REPRODUCERS = ["[" * 9999 + "]" * 9999, "[" * 100_000, "x" + "\n" * 100_000 + "x", "x" + " " * 100_000 + "x",
               "A. " * 300_000, "<" * 100_000, "<tool_call>" * 20_000,
               "/**/" + " " * 30 + "(SELECT 1)"]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """(task, example, reward index, reward name) for every reward of every built-in task."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MRTPO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    out = []
    for name in ("text2sql", "toolcall"):
        task = get_task(name, **({"timeout": 2.0} if name == "text2sql" else {}))
        ex = task.load()[0]
        out += [(task, ex, k, r.name) for k, r in enumerate(task.rewards(ex))]
    rows = tmp_path_factory.mktemp("instruct") / "all_ids.jsonl"
    rows.write_text("".join(json.dumps({"id": iid, "base": "Write about the sea.",
                                        "constraints": [{"id": iid, "kwargs": EXAMPLE_KWARGS[iid]}]}) + "\n"
                            for iid in supported_ids()), encoding="utf-8")
    task = get_task("instruct")
    out += [(task, ex, 0, ex.id) for ex in task.load(str(rows))]
    yield {f"{t.name}:{n}": (t, ex, k) for t, ex, k, n in out}
    mp.undo()


def _reward_ids():
    return ([f"text2sql:{n}" for n in ("format", "executes", "result")]
            + [f"toolcall:{n}" for n in ("format", "schema", "correct")]
            + [f"instruct:{iid}" for iid in supported_ids()])


@st.composite
def hostile(draw) -> str:
    size = draw(st.sampled_from(SIZES))
    kind = draw(st.sampled_from(["unit", "units", "text"]))
    if kind == "unit":
        seed = draw(st.sampled_from(UNITS))
    elif kind == "units":
        seed = "".join(draw(st.lists(st.sampled_from(UNITS), min_size=2, max_size=6)))
    else:
        seed = draw(st.text(min_size=1, max_size=40))
    body = (seed * (size // len(seed) + 1))[:size]
    return draw(st.sampled_from(["", "x", "```sql\n", "<tool_call>"])) + body + draw(st.sampled_from(["", "x", "]", "\n```"]))


@pytest.mark.parametrize("rid", _reward_ids())
def test_every_reward_is_bounded_on_hostile_text(cases, rid):
    task, ex, k = cases[rid]
    reward = task.rewards(ex)[k]
    reference = task.reference(ex) or ""

    @settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @seed(zlib.crc32(rid.encode()))  # reproducible, and a different draw for each reward
    @given(text=hostile(), around=st.booleans())
    def run(text, around):
        response = (text[: len(text) // 2] + reference + text[len(text) // 2:]) if around else text
        tracemalloc.start()
        try:
            with time_limit(CALL_SECONDS, f"{rid} on a {len(response):,}-character response"):
                verdict = reward.verify(ex, response)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        verdict = check_verdict(reward, verdict, ex, response)
        assert reward.floor <= verdict.score <= 1.0 and math.isfinite(verdict.score)
        assert verdict.score == 1.0 or verdict.feedback, "a floor score must say why"
        assert peak <= CALL_BYTES, f"{rid}: {peak / 2**20:.0f} MB at peak on {len(response):,} characters"

    for text in REPRODUCERS:
        run.hypothesis.inner_test(text, False)
    run()
