"""The `instruct` task on IFBench's test set (../shared/data/ifbench): loading, rejection of
unsupported ids, and how many constraint sentences split cleanly out of the prompts."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mrtpo.tasks import get_task
from mrtpo.tasks.instruct import UnsupportedInstructions

PATH = Path(__file__).resolve().parents[3] / "shared" / "data" / "ifbench" / "IFBench_test.jsonl"
pytestmark = pytest.mark.skipif(not PATH.is_file(), reason="../shared is absent")


def test_unsupported_ids_are_rejected_with_the_supported_list():
    with pytest.raises(UnsupportedInstructions) as err:
        get_task("instruct").load(str(PATH))
    msg = str(err.value)
    assert "words:start_verb (6 rows, first at" in msg
    from mrtpo.verifiers.ifeval import supported_ids

    n = len(supported_ids())  # IFEval's 25, IFBench's 57 and open-instruct's IFTrain ids
    assert n == 25 + 57 + 29
    assert f"Supported ids ({n})" in msg and "count:numbers" in msg and "skip_unsupported=True" in msg


@pytest.fixture(scope="module")
def examples():
    return get_task("instruct", skip_unsupported=True).load(str(PATH))


def test_loads_every_row_without_unsupported_ids(examples):
    assert len(examples) == 294  # 300 rows, 6 use words:start_verb
    kwargs = [c["kwargs"] for e in examples for c in e.data["constraints"]]
    assert all(None not in kw.values() for kw in kwargs)  # unused keys dropped
    assert all(not isinstance(v, float) or not v.is_integer() for kw in kwargs for v in kw.values())


def test_constraint_sentences_split_cleanly(examples):
    task = get_task("instruct")
    how = Counter(c["match"] for e in examples for c in e.data["constraints"])
    assert sum(how.values()) == 337  # 344 less the 7 in rows using words:start_verb
    assert how["template"] >= 278  # the checker's own description, verbatim in the prompt
    assert how["template"] + how["close"] >= 330
    for e in examples:
        for k, c in enumerate(e.data["constraints"]):
            if not c["sentence"]:
                continue
            assert c["sentence"] in e.prompt
            without = task.prompt_without(e, k)
            assert c["sentence"] not in without or e.prompt.count(c["sentence"]) > 1
            assert len(without) < len(e.prompt)
