"""IFEval's 25 checkers: official semantics (relations, quirks), empty responses, loose mode,
kwargs validation, and that no model output makes a checker raise."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrtpo.verifiers.ifeval import (
    UnsupportedInstruction,
    check,
    describe,
    loose_variants,
    normalize_kwargs,
    supported_ids,
    verify,
)
from mrtpo.verifiers.ifeval.examples import EXAMPLE_KWARGS

IFEVAL_IDS = supported_ids("ifeval")

CASES = [
    # keywords: raw regex, case-insensitive, substring matches count
    ("keywords:existence", {"keywords": ["war"]}, "Software is great.", True),
    ("keywords:existence", {"keywords": ["ocean", "tide"]}, "The OCEAN is calm.", False),
    ("keywords:frequency", {"keyword": "war", "frequency": 2, "relation": "at least"}, "war and software", True),
    ("keywords:frequency", {"keyword": "tide", "frequency": 2, "relation": "less than"}, "tide, tide", False),
    ("keywords:frequency", {"keyword": "tide", "frequency": 2, "relation": "less than"}, "one tide", True),
    ("keywords:forbidden_words", {"forbidden_words": ["war"]}, "Software is great.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["war"]}, "No WAR here.", False),
    ("keywords:letter_frequency", {"letter": "a", "let_frequency": 3, "let_relation": "at least"}, "A banana", True),
    ("keywords:letter_frequency", {"letter": "a", "let_frequency": 3, "let_relation": "less than"}, "A banana", False),
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 2, "let_relation": "at least"}, "#a #b", True),
    # length: relation 'less than' is <, 'at least' is >=
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "at least"}, "One. Two.", True),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"}, "One. Two.", False),
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "one two", True),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "one, two, three", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "First.\n***\nSecond.", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "***\nFirst.\n***\nSecond.\n***", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "First.\n***\n***\nSecond.", False),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}, "Hi.\n\n\"Then, bye.", True),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}, "Hi.\n\nNow bye.", False),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}, "Hi.\n\nThen.\n\nMore.", False),
    # content and format
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[name] lives at [address]", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[name] only", False),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\n\nP.S. bye", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\np. p. s more", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi. PS bye", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}, "* a\n* b\n- c", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}, "* a\n** b\n- c", False),
    ("detectable_format:constrained_response", {}, "Sure. My answer is maybe.", True),
    ("detectable_format:constrained_response", {}, "My answer is perhaps.", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and ** **", False),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nA\nSection 2\nB", True),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2}, "Section 1\nA", False),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', True),
    ("detectable_format:json_format", {}, "Here: {\"a\": 1}", False),
    ("detectable_format:title", {}, "<<My Title>>\ntext", True),
    ("detectable_format:title", {}, "<<  >>\ntext", False),
    ("combination:two_responses", {}, "first\n******\nsecond", True),
    ("combination:two_responses", {}, "same\n******\nsame", False),
    ("combination:two_responses", {}, "a\n******\n******\nb", False),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Describe the sea."}, "describe the sea. It is big.", True),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Describe the sea."}, "Sure! Describe the sea.", False),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, '"Done. Any other questions?"', True),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Any other questions? Bye.", False),
    ("startend:quotation", {}, '  "quoted"  ', True),
    ("startend:quotation", {}, '"', False),
    # change case
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"},
     "I DON'T know", True),  # I, DO, N'T
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "less than"},
     "I DON'T know", False),
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER TODAY.", True),
    ("change_case:english_capital", {}, "THIS IS an English sentence.", False),
    ("change_case:english_lowercase", {}, "this is an english sentence about the weather today.", True),
    ("change_case:english_lowercase", {}, "ceci est une phrase en français sur la météo.", False),
    ("punctuation:no_comma", {}, "No commas here.", True),
    ("punctuation:no_comma", {}, "One, two.", False),
    ("language:response_language", {"language": "de"}, "Das ist ein kurzer Satz auf Deutsch über das Wetter.", True),
    ("language:response_language", {"language": "de"}, "This is a short English sentence about the weather.", False),
    ("language:response_language", {"language": "de"}, "12345 !!!", True),  # undetectable counts as followed
]


@pytest.mark.parametrize("iid,kwargs,response,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_official_semantics(iid, kwargs, response, expected):
    ok, feedback = verify(iid, kwargs, response)
    assert ok is expected, feedback
    assert isinstance(feedback, str) and feedback


def test_cases_cover_every_ifeval_id():
    assert len(IFEVAL_IDS) == 25
    assert {c[0] for c in CASES} == set(IFEVAL_IDS)


@pytest.mark.parametrize("iid", supported_ids())
def test_empty_response_fails_every_check(iid):
    for empty in ("", "   \n\t"):
        assert verify(iid, EXAMPLE_KWARGS[iid], empty) == (False, "the response is empty")
        assert not check(iid, EXAMPLE_KWARGS[iid], empty, loose=True)


def test_example_kwargs_cover_every_supported_id():
    assert set(EXAMPLE_KWARGS) == set(supported_ids())
    for iid, kw in EXAMPLE_KWARGS.items():
        assert describe(iid, kw).strip()


def test_loose_variants_are_the_official_eight():
    v = loose_variants("Sure!\n*bold* body\nBye")
    assert v == ["Sure!\n*bold* body\nBye", "Sure!\nbold body\nBye", "*bold* body\nBye", "Sure!\n*bold* body",
                 "*bold* body", "bold body\nBye", "Sure!\nbold body", "bold body"]


def test_loose_mode_forgives_a_preamble_line_and_asterisks():
    resp = "Here is my answer:\n\"All done now.\""
    assert not check("startend:quotation", {}, resp)
    ok, feedback = verify("startend:quotation", {}, resp, loose=True)
    assert ok and "without its first line" in feedback
    resp = "**My answer is yes.**"
    assert check("detectable_format:constrained_response", {}, resp)
    assert not check("punctuation:no_comma", {}, "a, b", loose=True)


def test_relation_boundaries():
    kw = {"num_words": 3, "relation": "less than"}
    assert check("length_constraints:number_words", kw, "a b")
    assert not check("length_constraints:number_words", kw, "a b c")
    kw = {"num_words": 3, "relation": "at least"}
    assert check("length_constraints:number_words", kw, "a b c")
    assert not check("length_constraints:number_words", kw, "a b")


def test_kwargs_are_normalised_like_benchmark_rows():
    row = {"num_words": 3.0, "relation": "at least", "keywords": None, "end_phrase": None}
    assert normalize_kwargs("length_constraints:number_words", row) == {"num_words": 3, "relation": "at least"}


@pytest.mark.parametrize("iid,kwargs,needle", [
    ("length_constraints:number_words", {"relation": "at least"}, "missing kwarg(s) ['num_words']"),
    ("length_constraints:number_words", {"num_words": 2.5, "relation": "at least"}, "must be an integer"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at most"}, "must be one of"),
    ("keywords:existence", {"keywords": [1, 2]}, "list of strings"),
    ("keywords:existence", {"keywords": ["smile("]}, "used as a regular expression"),
])
def test_bad_kwargs_raise_with_the_field(iid, kwargs, needle):
    with pytest.raises(ValueError, match=None) as err:
        check(iid, kwargs, "some text")
    assert needle in str(err.value) and iid in str(err.value)


def test_unknown_id_lists_supported_ids_and_suggests():
    with pytest.raises(UnsupportedInstruction) as err:
        check("keywords:existance", {}, "text")
    msg = str(err.value)
    assert "did you mean 'keywords:existence'" in msg.lower()
    assert "punctuation:no_comma" in msg and "count:numbers" in msg


def test_language_detection_is_deterministic():
    text = "Bonjour, je suis Marie. Ich komme aus Berlin und I like tea."
    first = verify("language:response_language", {"language": "fr"}, text)
    for _ in range(5):
        assert verify("language:response_language", {"language": "fr"}, text) == first


def test_non_text_response_scores_zero():
    ok, feedback = verify("punctuation:no_comma", {}, None)  # type: ignore[arg-type]
    assert not ok and "not text" in feedback


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=120),
       iid=st.sampled_from(supported_ids()))
def test_no_model_output_makes_a_checker_raise(text, iid):
    for loose in (False, True):
        ok, feedback = verify(iid, EXAMPLE_KWARGS[iid], text, loose=loose)
        assert isinstance(ok, bool) and isinstance(feedback, str)
