"""Differential tests against open-instruct's IFEvalG, the checkers IF-RLVR was trained with.

The reference is vendored in tests/oracle/vendor (open-instruct's `open_instruct/IFEvalG`,
unchanged, and `IFEvalVerifier` from its `ground_truth_utils.py`; see the README there). It
needs NLTK, immutabledict, absl-py and langdetect (the `oracle` extra) and NLTK's punkt_tab
data, which is written offline (tests/helpers/nltk_offline.py); without them these tests skip.

Cases: the 200 rows of tests/data/if_rlvr_sample.jsonl (built by the reference itself, so every
kwarg has the data set's shape) with, per constraint, a response written to follow it, responses
written to break it, mutations of those, and the responses written for the same id in another
row and for the row's other constraints; then generated responses from words that matter to
these checkers. Every one of the 54 ids is compared; target agreement: 100%. Last, open-
instruct's fraction-of-constraints reward is compared with `open_instruct_reward` on whole rows.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nltk_offline import use_offline_punkt  # tests/helpers is on sys.path (pyproject's pytest `pythonpath`)

from mrtpo.verifiers.ifeval import check, normalize_kwargs, supported_ids
from mrtpo.verifiers.ifeval.iftrain_checks import reference_is_random
from mrtpo.verifiers.ifeval.open_instruct import open_instruct_reward

pytestmark = pytest.mark.oracle
HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "data" / "if_rlvr_sample.jsonl"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    for mod in ("nltk", "immutabledict", "absl", "langdetect", "punkt"):
        pytest.importorskip(mod)
    use_offline_punkt(tmp_path_factory.mktemp("nltk_data"))
    sys.path.insert(0, str(HERE / "vendor"))
    from open_instruct import ground_truth_utils
    from open_instruct.IFEvalG import instructions_registry

    return instructions_registry.INSTRUCTION_DICT, ground_truth_utils.IFEvalVerifier()


def _ref_check(registry, iid: str, kwargs: dict | None, response: str) -> bool:
    """The reference's verdict, called as IFEvalVerifier calls it (None kwargs dropped)."""
    inst = registry[iid](iid)
    inst.build_description(**{k: v for k, v in (kwargs or {}).items() if v is not None})
    return bool(inst.check_following(response))


def _rows() -> list[dict]:
    rows = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gt = ast.literal_eval(row["ground_truth"])[0]
        base = row["messages"][0]["content"][: -len(row["constraint"]) - 1]
        rows.append({"row": row, "base": base, "constraints": list(zip(gt["instruction_id"], gt["kwargs"]))})
    return rows


# --- responses written to follow (first) or break each IFTrain constraint -------------------------
def _written(iid: str, kw: dict, base: str) -> list[str]:
    kw = kw or {}
    k = (kw.get("keyword") or "")
    if iid == "copy:repeat_phrase":
        words = kw["phrase"].split()
        mid = len(words) // 2
        copies = [" ".join(words[:mid] + [f"new{j}"] + words[mid + 1:]) for j in range(kw["small_n"])]
        return ["\n".join(copies), "\n".join(copies[:-1] + [kw["phrase"]]), " ".join(copies),
                "\n".join(copies + copies[:1]), kw["phrase"]]
    if iid in ("copy:copy", "copy:copying_simple"):
        p = kw["prompt_to_repeat"]
        return [p, p.upper() + "  ", p + " Sure!", p[:-1], f"\n{p}\n"]
    if iid == "copy:copying_multiple":
        p, n = kw["prompt_to_repeat"], kw["N"]
        return ["******".join([p] * n), " ****** ".join([p] * n), "******".join([p] * (n + 1)),
                "******".join([p] * n) + "******", "******".join([p] * (n - 1) + ["Answer."])]
    if iid == "new:copy_span_idx":
        p = kw["prompt_to_repeat"]
        span = p[kw["n_start"]:kw["n_end"]]
        return [span, span.lower(), p[kw["n_start"]:kw["n_end"] + 1], p[kw["n_start"] - 1:kw["n_end"]], p]
    if iid == "detectable_format:sentence_hyphens":
        return ["The sun rose.-Birds sang.-We walked home.", "The sun rose. -Birds sang.",
                "The sun rose.-Birds sang-We walked.", "One sentence only.", "Dr. Who came.-He left."]
    if iid == "keywords:no_adjacent_consecutive":
        return ["apple cat egg goat", "apple banana", "Zebra Apple", "The cat ran.", "a b"]
    if iid == "detectable_format:square_brackets":
        return ["[The] [sea] [is] [calm]", "[The] sea", "[The][sea]", "[a] [b]!", "[ ]"]
    if iid == "keywords:word_once":
        return [k, f"{k} and {k}", f"I like {k.upper()}s.", "nothing", f"{k}{k}"]
    if iid == "keywords:word_count_different_numbers":
        n = kw["frequency"]
        return [" ".join([k] * n), " ".join([k] * max(n - 1, 0)) or "none", " ".join([k] * (n + 1)),
                f"{k.title()} " * n, "nothing"]
    if iid == "keywords:exclude_word_harder":
        return ["Nothing here.", f"I say {k} now.", f"{k} at the start", f"ends with {k}", f"({k}) here"]
    if iid == "paragraphs:paragraphs":
        return ["First paragraph.\n***\nSecond paragraph.", "One.\n***\nTwo.\n***\nThree.", "Only one.",
                "***\nOne.\n***\nTwo.\n***", "One.\n***\n\n***\nTwo."]
    if iid == "paragraphs:paragraphs2":
        return ["First.\n\nSecond.", "First.\nSecond.", "A.\n\nB.\n\nC.", "\n\nA.\n\nB.\n\n", "A.\n\n\n\nB."]
    if iid in ("first_word:first_word_sent", "first_word:first_word_answer"):
        w = kw["first_word"] if isinstance(kw["first_word"], str) else kw["first_word"][0]
        return [f"{w} sun rose. {w.capitalize()} birds sang.", f"{w} sun rose. Birds sang.",
                f"{w}, hello there.", f"The {w} is here.", f"{w.upper()}! yes."]
    if iid in ("last_word:last_word_sent", "last_word:last_word_answer"):
        w = kw["last_word"] if isinstance(kw["last_word"], str) else kw["last_word"][0]
        return [f"I love the {w}. We saw a {w}!", f"I love the {w}. We saw it.", f"The end is {w}",
                f"{w} is first.", f"Quote: \"{w}\""]
    if iid == "detectable_format:bigram_wrapping":
        return ["<<I am>> <<at home>>", "<<I am>> at home", "<<I am>> <<at home>> alone", "<<I>> <<am>>", "I am"]
    if iid == "punctuation:punctuation_dot":
        return ["No dots here", "One dot.", "3.14 is pi", "Wow! Really?", "..."]
    if iid == "punctuation:punctuation_exclamation":
        return ["No marks here.", "Wow!", "Is it?", "!!!", "Yes."]
    if iid == "count:lowercase_counting":
        n = kw["N"]
        return ["The " + " ".join(["sea"] * n), " ".join(["sea"] * (n + 1)), "ALL CAPS HERE", "it's don't",
                "Sea-level rise"]
    if iid == "letters:letter_counting":
        n = kw["N"]
        return ["a" * n, "a" * max(n - 1, 0) or "1", "b" * (n + 1), "ab1 " * n, "123 456"]
    if iid == "count:counting_composition":
        s, w = kw["n_sent"], kw["n_words"]
        sent = " ".join(["word"] * (w - 1)) + "." if w > 1 else "."
        para = " ".join([sent] * s)
        good = " *** ".join([para] * 3)
        return [good, "\n***\n".join([para] * 3), " *** ".join([para] * 2), good.replace("word", "two words", 1),
                "* * *".join([para] * 3)]
    if iid == "count:count_unique":
        return ["Alpha beta gamma delta.", "Alpha beta alpha.", "The the", "One. Two.", "a b c"]
    if iid == "count:count_increment_word":
        k1, k2 = kw["keyword1"], kw["keyword2"]
        return [f"{k1} and {k2} {k2}", f"{k1} {k1} {k2} {k2}", f"{k1} {k2}", f"{k2} {k1} {k2}", "none"]
    if iid == "keywords:palindrome":
        return ["level up", "no palindromes here", "Racecar", "a", "abba."]
    if iid == "keywords:keyword_specific_position":
        kw_ = kw["keyword"] if isinstance(kw["keyword"], str) else kw["keyword"][0]
        n, m = kw["n"], kw["m"]
        good = " ".join(["Filler here."] * (n - 1) + [" ".join(["w"] * (m - 1) + [kw_]) + "."])
        return [good, good.replace(kw_, kw_.upper()), " ".join(["Filler here."] * (n - 1)) or "x",
                good.replace(" " + kw_, " x " + kw_), good.replace(".", "!")]
    if iid == "keywords:start_end":
        return ["hello world hello", "Hello world hello.", "hello", "Start and START", "a, b, a"]
    return []


def _mutations(r: str) -> list[str]:
    return [r.upper(), r.lower(), r.title(), r + " ", " " + r, r + "\n", r.replace(" ", "  "), r.replace(" ", "-"),
            r.replace(".", ""), r + ".", r + "!", r[: len(r) // 2], r[1:], r + " " + r, r.replace("\n", " "),
            r.replace("***", "* * *"), f"<<{r}>>", f"[{r}]", '"' + r + '"', r[::-1]]


def _all_responses(iid, kw, base):
    written = _written(iid, kw, base)
    out = list(written)
    for r in written[:2]:
        out += _mutations(r)
    return [r for r in dict.fromkeys(out) if r.strip()]


def test_ids_are_the_reference_registry(reference):
    registry, _ = reference
    assert set(supported_ids("ifeval")) | set(supported_ids("iftrain")) == set(registry)
    assert len(supported_ids("iftrain")) == 29


def test_agrees_with_the_reference_on_written_and_mutated_responses(reference):
    registry, _ = reference
    total, on_iftrain, disagree = 0, 0, []
    outcomes: dict[str, set] = {}
    rows = _rows()
    for n, r in enumerate(rows):
        prompt = r["row"]["messages"][0]["content"]
        for iid, kw in r["constraints"]:
            if reference_is_random(iid, normalize_kwargs(iid, kw)):
                continue
            responses = _all_responses(iid, kw, r["base"]) if iid in supported_ids("iftrain") else []
            # responses written for the same id in another row (other kwargs, another request)
            other = next((o for o in rows[n + 1:] + rows[:n] if iid in dict(o["constraints"])), None)
            if other is not None:
                responses += _written(iid, dict(other["constraints"])[iid], other["base"])
            # IFEval ids and every id again: the written responses of the row's other constraints
            for other, okw in r["constraints"]:
                if other != iid:
                    responses += _written(other, okw, r["base"])[:2]
            for resp in responses:
                if not resp.strip():
                    continue
                want = _ref_check(registry, iid, kw, resp)
                total += 1
                on_iftrain += iid in supported_ids("iftrain")
                outcomes.setdefault(iid, set()).add(want)
                if check(iid, kw, resp, prompt) != want:
                    disagree.append((iid, kw, resp[:80], want))
    assert total > 5000
    assert not disagree, f"{len(disagree)}/{total} disagree, e.g. {disagree[:3]}"
    both = {iid for iid, seen in outcomes.items() if seen == {True, False}}
    assert set(supported_ids("iftrain")) <= both, sorted(set(supported_ids("iftrain")) - both)
    print(f"\nIFTrain oracle: {total} verdicts ({on_iftrain} on IFTrain ids), {len(disagree)} disagreements; "
          f"ids with passing and failing cases: {len(both)}")


_WORDS = ["The", "the", "sea", "Sea", "level", "a", "I", "DON'T", "Dr.", "Mr.", "U.S.", "3.14", "It", "We",
          "-", "--", ".", "!", "?", ",", "'", '"', "***", "* * *", "******", "\n", "\n\n", "<<", ">>", "<<I", "am>>",
          "[x]", "[", "]", "(", ")", "early", "bird", "catches", "worm", "new", "tackle", "picture", "abba",
          "b", "c", "Ph.D.", "e.g.", "...", "Inc.", "He", "This", "ab-cd", "x.com"]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=30),
       joiner=st.sampled_from([" ", "", "-", "\n"]), iid=st.sampled_from(sorted(
           set(supported_ids("iftrain")) | {"length_constraints:number_sentences", "change_case:capital_word_frequency"})))
def test_agrees_on_generated_responses(reference, parts, joiner, iid):
    registry, _ = reference
    kw = {
        "copy:repeat_phrase": {"phrase": "The early bird catches the worm", "small_n": 1},
        "copy:copy": {"prompt_to_repeat": "The sea"},
        "copy:copying_simple": {"prompt_to_repeat": "The sea"},
        "copy:copying_multiple": {"prompt_to_repeat": "The sea", "N": 2},
        "new:copy_span_idx": {"prompt_to_repeat": "Look at The sea now", "n_start": 8, "n_end": 15},
        "keywords:word_once": {"keyword": "sea"},
        "keywords:word_count_different_numbers": {"keyword": "the", "frequency": 2, "relation": "at least"},
        "keywords:exclude_word_harder": {"keyword": "sea"},
        "first_word:first_word_sent": {"first_word": "the"},
        "first_word:first_word_answer": {"first_word": "the"},
        "last_word:last_word_sent": {"last_word": "sea"},
        "last_word:last_word_answer": {"last_word": "sea"},
        "count:lowercase_counting": {"N": 3},
        "letters:letter_counting": {"N": 10, "relation": "less than"},
        "letters:letter_counting2": {"letter": "e", "let_frequency": 3, "let_relation": "at least"},
        "count:counting_composition": {"n_sent": 1, "n_words": 2},
        "count:count_increment_word": {"keyword1": "bird", "keyword2": "sea"},
        "keywords:keyword_specific_position": {"keyword": "sea", "n": 1, "m": 2},
        "length_constraints:number_sentences": {"num_sentences": 2, "relation": "at least"},
        "change_case:capital_word_frequency": {"capital_frequency": 2, "capital_relation": "at least"},
    }.get(iid, {})
    resp = joiner.join(parts)
    if resp.strip():
        assert check(iid, kw, resp) == _ref_check(registry, iid, kw, resp), (iid, resp)


def test_open_instruct_reward_equals_the_reference_verifier(reference):
    _, verifier = reference
    total, disagree = 0, []
    for r in _rows():
        cons = r["constraints"]
        if any(reference_is_random(i, normalize_kwargs(i, k)) for i, k in cons):
            continue
        ours = [(i, normalize_kwargs(i, k)) for i, k in cons]
        written = [w for i, k in cons for w in _written(i, k, r["base"])[:1]]
        candidates = written + [" ".join(written), "\n\n".join(written), "",
                                "<think>plan</think>" + (written[0] if written else "x"),
                                "<|assistant|>" + " ".join(written) + " <answer></answer>", "   "]
        for resp in candidates:
            want = verifier([], resp, r["row"]["ground_truth"]).score
            total += 1
            got = open_instruct_reward(ours, resp)
            if got != pytest.approx(want):
                disagree.append((r["row"]["key"], resp[:60], got, want))
    assert total > 1000
    assert not disagree, f"{len(disagree)}/{total} disagree, e.g. {disagree[:3]}"
    print(f"\nIFEvalVerifier reward: {total} responses, {len(disagree)} disagreements")


def test_ifevalg_scores_ifeval_ids_as_googles_code(reference):
    """IFEvalG's copies of IFEval's 25 classes decide as Google's (lm-eval's copy) does."""
    lm_eval_registry = pytest.importorskip("lm_eval.tasks.ifeval.instructions_registry")
    registry, _ = reference
    total, disagree = 0, []
    for r in _rows():
        responses = [w for i, k in r["constraints"] for w in _written(i, k, r["base"])]
        responses += [r["base"], r["base"].upper(), r["base"].lower(), '"' + r["base"] + '"']
        for iid, kw in r["constraints"]:
            if iid not in supported_ids("ifeval") or reference_is_random(iid, normalize_kwargs(iid, kw)):
                continue
            for resp in responses:
                total += 1
                if _ref_check(registry, iid, kw, resp) != _ref_check(lm_eval_registry.INSTRUCTION_DICT, iid, kw, resp):
                    disagree.append((iid, kw, resp[:60]))
    assert total > 1000 and not disagree, f"{len(disagree)}/{total}: {disagree[:3]}"
    print(f"\nIFEvalG vs Google on IFEval ids: {total} verdicts, {len(disagree)} disagreements")
