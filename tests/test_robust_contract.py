"""Issue 30, items 3, 6, 8, 19, 20, 24, 25b: custom code that breaks the contract (a verifier
that dies, a task that returns the wrong things), bounded contexts, sandboxed data scripts and
clear errors for what `--model` is given."""
from __future__ import annotations

import os
import signal
import time

import pytest

from harness_task import WordTask
from mrtpo.harness.scoring import Scorer
from mrtpo.tasks.base import Reward, Verdict

pytestmark = pytest.mark.timeout(300)


# --- 3: a verifier worker that dies is seen as dead at once ----------------------------------
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
