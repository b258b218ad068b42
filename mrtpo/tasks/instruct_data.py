"""The `instruct` task's bundled prompt sets and the completion budget's rule.

- `generated_rows(n, seed)`: seeded training prompts in the spirit of open-instruct's IF-RLVR
  data (Lambert et al., Tulu 3): a short writing task from `TASKS` with 1-3 constraints drawn
  from `SAMPLERS`, IFEval's and IFTrain's checkers with sampled kwargs. Each constraint's
  sentence is the checker's own description (`describe`), appended to the task as the
  project's "base" layout does, so the block of every reward is a sentence of P0. Constraints
  that would contradict each other (all lowercase and all capitals; two layouts; a last word
  and an end phrase) share a group, and a prompt draws at most one of each group. Every
  drawn constraint fits a completion of `GENERATED_BUDGET_TOKENS` tokens (`fits`).
- `IFEVAL`: IFEval's 541 prompts (google-research instruction_following_eval, Apache-2.0;
  LICENSE-IFEVAL beside the file), as published.
- `needed_words` / `fits`: the rule that keeps a prompt only when every one of its constraints
  can be met inside a completion budget (`-o fit_tokens=N`). A budget of N tokens is taken as
  floor(0.75 N) words (SmolLM2's tokenizer spends about 1.3 tokens per English word); a
  constraint's need in words is written per instruction id below (a sentence about 8 words, a
  paragraph or a section 10, a bullet 4, a highlight 3, a placeholder 2, a repeated prompt its
  own length plus 10). Constraints with no minimum need 1 word.
"""
from __future__ import annotations

import random
from typing import Any, Callable

SAMPLE = "data/instruct/sample.jsonl"
IFEVAL = "data/instruct/ifeval_input_data.jsonl"
PROMPT_SETS = ("sample", "generated", "ifeval")  # `-o prompts=...`: what `load()` reads without a path
GENERATED_ROWS = 1200
GENERATED_BUDGET_TOKENS = 128  # every generated constraint fits a completion this long (`fits`)
WORDS_PER_TOKEN = 0.75


# ------------------------------------------------------------------------------ the budget rule
def budget_words(tokens: int) -> int:
    """The words a completion of `tokens` tokens holds, by the rule's rate."""
    return int(tokens * WORDS_PER_TOKEN)


def needed_words(instruction_id: str, kwargs: dict[str, Any]) -> int:
    """The fewest words a response that follows this constraint can have (the rule above)."""
    kw = {k: v for k, v in (kwargs or {}).items() if v is not None}
    at_least = "at least" in (kw.get("relation"), kw.get("let_relation"), kw.get("capital_relation"))
    need: dict[str, Callable[[], int]] = {
        "length_constraints:number_words": lambda: int(kw["num_words"]) if at_least else 1,
        "length_constraints:number_sentences": lambda: 8 * int(kw["num_sentences"]) if at_least else 1,
        "length_constraints:number_paragraphs": lambda: 10 * int(kw["num_paragraphs"]),
        "length_constraints:nth_paragraph_first_word": lambda: 10 * int(kw["num_paragraphs"]),
        "detectable_format:multiple_sections": lambda: 10 * int(kw["num_sections"]),
        "detectable_format:number_bullet_lists": lambda: 4 * int(kw["num_bullets"]),
        "detectable_format:number_highlighted_sections": lambda: 3 * int(kw["num_highlights"]),
        "detectable_content:number_placeholders": lambda: 2 * int(kw["num_placeholders"]),
        "keywords:frequency": lambda: 2 * int(kw["frequency"]) if at_least else 1,
        "keywords:word_count_different_numbers": lambda: 2 * int(kw["frequency"]) if at_least else 1,
        "change_case:capital_word_frequency": lambda: int(kw["capital_frequency"]) if at_least else 1,
        "keywords:letter_frequency": lambda: int(kw["let_frequency"]) // 4 if at_least else 1,
        "letters:letter_counting2": lambda: int(kw["let_frequency"]) // 4 if at_least else 1,
        "letters:letter_counting": lambda: int(kw["N"]) // 5 if at_least else 1,
        "combination:repeat_prompt": lambda: len(str(kw["prompt_to_repeat"]).split()) + 10,
        "combination:two_responses": lambda: 20,
        "paragraphs:paragraphs": lambda: 20,
        "paragraphs:paragraphs2": lambda: 20,
        "count:counting_composition": lambda: 3 * int(kw["n_sent"]) * int(kw["n_words"]),
    }
    return need[instruction_id]() if instruction_id in need else 1


def fits(constraints: list[dict], tokens: int) -> bool:
    """Whether every constraint ({"id", "kwargs"}) can be met inside `tokens` new tokens."""
    words = budget_words(tokens)
    return all(needed_words(c["id"], c.get("kwargs") or {}) <= words for c in constraints)


# ------------------------------------------------------------------------------ the generator
#: short writing tasks (the base request of a generated prompt), answerable in a few sentences
TASKS = (
    "Write a short note to a neighbour about a lost cat.", "Describe your favourite season.",
    "Explain how to make a cup of tea.", "Give advice to someone starting their first job.",
    "Write a short poem about the sea.", "Describe a busy market in the morning.",
    "Explain why people keep diaries.", "Write a thank-you message to a teacher.",
    "Describe the view from a mountain top.", "Explain how a bicycle works.",
    "Write a short story about a robot who learns to paint.", "Give three tips for saving money.",
    "Describe a quiet library.", "Explain what a rainbow is.", "Write an invitation to a birthday picnic.",
    "Describe how to plant a tree.", "Write a product description for a reusable water bottle.",
    "Explain why sleep matters.", "Write a short review of a film you imagine.",
    "Describe a train journey through the countryside.", "Explain how to care for a houseplant.",
    "Write a message welcoming new members to a chess club.", "Describe the smell of fresh bread.",
    "Explain what a library card is for.", "Write a short speech for a school sports day.",
    "Describe a winter evening at home.", "Explain how to pack for a weekend trip.",
    "Write a riddle about the moon.", "Describe a city park on a sunny afternoon.",
    "Explain why bees are important.", "Write an apology for missing a meeting.",
    "Describe your ideal breakfast.", "Explain how to stay calm before an exam.",
    "Write a short letter to your future self.", "Describe a thunderstorm.",
    "Explain what recycling is.", "Write a motto for a hiking club.", "Describe an old clock.",
    "Explain how to learn a new word every day.", "Write a short fable about a fox and a crow.",
    "Describe a lighthouse at night.", "Explain the rules of a simple card game.",
    "Write a postcard from a seaside town.", "Describe a friendly dog.",
    "Explain why people enjoy music.", "Write a short advertisement for a bakery.",
    "Describe a snowy street.", "Explain how to write a shopping list.",
    "Write a lullaby for a small child.", "Describe a garden after rain.",
    "Explain how to be a good listener.", "Write a short toast for a wedding.",
    "Describe a school classroom.", "Explain what a volcano is.",
    "Write a note asking a friend to water your plants.", "Describe a campfire.",
    "Explain how to fold a paper plane.", "Write a short biography of an imaginary inventor.",
    "Describe the first day of spring.", "Explain why exercise is healthy.",
    "Write a weather report for a sunny day.", "Describe a bridge over a river.",
    "Explain how to keep a room tidy.", "Write a short message to cheer up a friend.",
    "Describe a museum you would like to visit.", "Explain what makes a good story.",
    "Write a haiku about autumn leaves.", "Describe a farm at sunrise.",
    "Explain how a compass helps travellers.", "Write a short announcement for a lost umbrella.",
)
KEYWORDS = ("river", "lamp", "window", "garden", "journey", "silver", "morning", "basket", "bridge",
            "candle", "forest", "pocket", "harbor", "meadow", "ladder", "orange", "whistle", "blanket")
FIRST_WORDS = ("today", "first", "imagine", "yes", "well", "sometimes", "here")
LAST_WORDS = ("tomorrow", "goodbye", "peace", "home", "forever", "done")
END_PHRASES = ("Is there anything else I can help with?", "Let me know if you have additional questions.",
               "That is all for now.")
SECTION_WORDS = ("Section", "SECTION", "Part", "PART")

Sampler = Callable[[random.Random, str], dict]

#: instruction id -> (groups it takes, kwargs sampler(rng, base)). A prompt holds at most one
#: constraint of each group; every sampled kwargs fits GENERATED_BUDGET_TOKENS (test).
SAMPLERS: dict[str, tuple[tuple[str, ...], Sampler]] = {
    # IFEval's checkers
    "change_case:english_lowercase": (("case", "end"), lambda r, b: {}),
    "change_case:english_capital": (("case", "end"), lambda r, b: {}),
    "change_case:capital_word_frequency": (("case",), lambda r, b: r.choice([
        {"capital_relation": "at least", "capital_frequency": r.randint(1, 3)},
        {"capital_relation": "less than", "capital_frequency": r.randint(2, 5)}])),
    "detectable_content:number_placeholders": (("placeholders",), lambda r, b: {"num_placeholders": r.randint(1, 2)}),
    "detectable_content:postscript": (("end",), lambda r, b: {"postscript_marker": r.choice(["P.S.", "P.P.S"])}),
    "detectable_format:multiple_sections": (("layout",), lambda r, b: {
        "section_spliter": r.choice(SECTION_WORDS), "num_sections": r.randint(2, 3)}),
    "detectable_format:number_bullet_lists": (("layout",), lambda r, b: {"num_bullets": r.randint(2, 4)}),
    "detectable_format:number_highlighted_sections": (("highlight",), lambda r, b: {"num_highlights": r.randint(1, 3)}),
    "detectable_format:title": (("title",), lambda r, b: {}),
    "keywords:existence": (("keywords",), lambda r, b: {"keywords": r.sample(KEYWORDS, r.randint(1, 2))}),
    "keywords:forbidden_words": (("forbidden",), lambda r, b: {"forbidden_words": r.sample(KEYWORDS, 2)}),
    "keywords:frequency": (("keywords",), lambda r, b: r.choice([
        {"keyword": r.choice(KEYWORDS), "relation": "at least", "frequency": r.randint(1, 3)},
        {"keyword": r.choice(KEYWORDS), "relation": "less than", "frequency": r.randint(2, 3)}])),
    "keywords:letter_frequency": (("letters",), lambda r, b: r.choice([
        {"letter": r.choice("aeiost"), "let_relation": "at least", "let_frequency": r.randint(2, 8)},
        {"letter": r.choice("jqxz"), "let_relation": "less than", "let_frequency": r.randint(2, 4)}])),
    "length_constraints:number_paragraphs": (("layout",), lambda r, b: {"num_paragraphs": r.randint(2, 3)}),
    "length_constraints:nth_paragraph_first_word": (("layout",), lambda r, b: (lambda n: {
        "num_paragraphs": n, "nth_paragraph": r.randint(1, n), "first_word": r.choice(FIRST_WORDS)})(r.randint(2, 3))),
    "length_constraints:number_sentences": (("length", "sentences"), lambda r, b: r.choice([
        {"relation": "less than", "num_sentences": r.randint(3, 6)},
        {"relation": "at least", "num_sentences": r.randint(2, 4)}])),
    "length_constraints:number_words": (("length",), lambda r, b: r.choice([
        {"relation": "less than", "num_words": r.choice([40, 50, 60, 80])},
        {"relation": "at least", "num_words": r.choice([15, 20, 30, 40])}])),
    "punctuation:no_comma": (("punctuation",), lambda r, b: {}),
    "startend:end_checker": (("end",), lambda r, b: {"end_phrase": r.choice(END_PHRASES)}),
    "startend:quotation": (("start", "end", "title"), lambda r, b: {}),
    # IFTrain's checkers (open-instruct's IFEvalG)
    "first_word:first_word_answer": (("start",), lambda r, b: {"first_word": r.choice(FIRST_WORDS)}),
    "last_word:last_word_answer": (("end",), lambda r, b: {"last_word": r.choice(LAST_WORDS)}),
    "keywords:word_once": (("keywords",), lambda r, b: {"keyword": r.choice(KEYWORDS)}),
    "keywords:palindrome": (("palindrome",), lambda r, b: {}),
    # its keyword is matched case-sensitively: no all-capitals or all-lowercase rule beside it
    "keywords:keyword_specific_position": (("sentences", "case"), lambda r, b: {
        "keyword": [r.choice(KEYWORDS)], "n": r.randint(1, 2), "m": r.randint(1, 4)}),
    "punctuation:punctuation_exclamation": (("punctuation",), lambda r, b: {}),
    "punctuation:punctuation_dot": (("punctuation", "sentences"), lambda r, b: {}),
    "letters:letter_counting": (("length",), lambda r, b: r.choice([
        {"relation": "less than", "N": r.choice([200, 300, 400])},
        {"relation": "at least", "N": r.choice([60, 100, 150])}])),
    "paragraphs:paragraphs2": (("layout",), lambda r, b: {}),
}


def draw_constraints(rng: random.Random, base: str) -> list[dict]:
    """1-3 constraints ({"id", "kwargs"}) that share no group, ids in SAMPLERS."""
    want = rng.choice((1, 2, 2, 3))
    taken: set[str] = set()
    out = []
    for iid in rng.sample(sorted(SAMPLERS), len(SAMPLERS)):
        groups, sampler = SAMPLERS[iid]
        if taken & set(groups):
            continue
        out.append({"id": iid, "kwargs": sampler(rng, base)})
        taken |= set(groups)
        if len(out) == want:
            break
    return out


def generated_rows(n: int = GENERATED_ROWS, seed: int = 0) -> list[dict]:
    """`n` training rows in the project's "base" layout ({"id", "base", "constraints"}): the
    same `seed` gives the same rows. The task composes each P0 from the base and the
    constraints' own sentences."""
    if n < 1:
        raise ValueError(f"generated_rows needs n >= 1, got {n}")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        base = rng.choice(TASKS)
        rows.append({"id": f"gen{seed}-{i:05d}", "base": base, "constraints": draw_constraints(rng, base)})
    return rows
