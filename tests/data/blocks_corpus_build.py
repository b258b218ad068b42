"""Writes blocks_corpus.jsonl: good and bad blocks, each with the context the lint needs.

Run `python tests/data/blocks_corpus_build.py` after editing; the JSONL is what the tests read
(tests/blocks/test_blocks_corpus.py). Each record: `id`, `expect` (null for a good block, else the
one rule it breaks, "R1".."R6"), `kind`, `format`, `think`, `placement`, `prompt`, `data`
(the example's label), `feedback` (the verifier's words for the response, "" for none),
`block`, and `note` (why it is bad). SQL examples run on blocks_corpus.sql; tool examples are
BFCL-style (`functions`, `answer` as possible answers, `category`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from mrtpo.formats import CodeBlockFormat, DelimitedFormat, TextFormat, ToolCallFormat  # noqa: E402

SQL = CodeBlockFormat("sql")
SQL_T = CodeBlockFormat("sql", think=True)
TOOL = ToolCallFormat()
TOOL_T = ToolCallFormat(think=True)
TEXT = TextFormat()

SCHEMA = "\n".join(line for line in (HERE / "blocks_corpus.sql").read_text().splitlines()
                   if not line.startswith(("--", "INSERT", "  (")))

SQL_EX = [
    ("How many singers are there?", "SELECT count(*) FROM singer"),
    ("List the names of singers older than 30, oldest first.",
     "SELECT name FROM singer WHERE age > 30 ORDER BY age DESC"),
    ("What is the average capacity of the stadiums in Berlin?",
     "SELECT avg(capacity) FROM stadium WHERE city = 'Berlin'"),
    ("Which singers have no known country?", "SELECT name FROM singer WHERE country IS NULL"),
    ("How many concerts took place in each year?", "SELECT year, count(*) FROM concert GROUP BY year"),
    ("Which stadiums hosted a concert in 2014?",
     "SELECT DISTINCT s.name FROM stadium AS s JOIN concert AS c ON c.stadium_id = s.stadium_id "
     "WHERE c.year = 2014"),
    ("What is the name of the youngest singer whose age is known?",
     "SELECT name FROM singer WHERE age IS NOT NULL ORDER BY age ASC LIMIT 1"),
    ("How many singers performed in each concert?",
     "SELECT concert_id, count(*) FROM singer_in_concert GROUP BY concert_id"),
]

FUNCS = {
    "get_current_weather": {
        "name": "get_current_weather", "description": "Get the current weather for a location.",
        "parameters": {"type": "dict", "properties": {
            "location": {"type": "string", "description": "City and country, e.g. 'Paris, France'."},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit."}},
            "required": ["location"]}},
    "convert_currency": {
        "name": "convert_currency", "description": "Convert an amount between two currencies.",
        "parameters": {"type": "dict", "properties": {
            "amount": {"type": "float", "description": "The amount to convert."},
            "from_currency": {"type": "string", "description": "ISO code of the source currency."},
            "to_currency": {"type": "string", "description": "ISO code of the target currency."}},
            "required": ["amount", "from_currency", "to_currency"]}},
    "book_table": {
        "name": "book_table", "description": "Book a table at a restaurant.",
        "parameters": {"type": "dict", "properties": {
            "restaurant": {"type": "string", "description": "Please give the restaurant's name."},
            "party_size": {"type": "integer", "description": "Number of guests."},
            "time": {"type": "string", "description": "Time in HH:MM, 24-hour clock."}},
            "required": ["restaurant", "party_size", "time"]}},
    "calculate_bmi": {
        "name": "calculate_bmi", "description": "Body mass index from weight and height.",
        "parameters": {"type": "dict", "properties": {
            "weight_kg": {"type": "float", "description": "Weight in kilograms."},
            "height_m": {"type": "float", "description": "Height in metres."}},
            "required": ["weight_kg", "height_m"]}},
}

TOOL_EX = [
    ("What's the weather like in Lisbon right now, in celsius?", ["get_current_weather"],
     [{"get_current_weather": {"location": ["Lisbon", "Lisbon, Portugal"], "unit": ["celsius", ""]}}],
     [{"name": "get_current_weather", "arguments": {"location": "Lisbon, Portugal", "unit": "celsius"}}],
     "simple"),
    ("How much is 250 euros in Japanese yen?", ["convert_currency", "get_current_weather"],
     [{"convert_currency": {"amount": [250.0], "from_currency": ["EUR"], "to_currency": ["JPY"]}}],
     [{"name": "convert_currency", "arguments": {"amount": 250.0, "from_currency": "EUR", "to_currency": "JPY"}}],
     "multiple"),
    ("Book a table for 4 at Nopa at 19:30.", ["book_table"],
     [{"book_table": {"restaurant": ["Nopa"], "party_size": [4], "time": ["19:30"]}}],
     [{"name": "book_table", "arguments": {"restaurant": "Nopa", "party_size": 4, "time": "19:30"}}],
     "simple"),
    ("What's the BMI of someone weighing 70 kg at 1.75 m, and of someone weighing 82.5 kg at 1.8 m?",
     ["calculate_bmi"],
     [{"calculate_bmi": {"weight_kg": [70.0], "height_m": [1.75]}},
      {"calculate_bmi": {"weight_kg": [82.5], "height_m": [1.8]}}],
     [{"name": "calculate_bmi", "arguments": {"weight_kg": 70.0, "height_m": 1.75}},
      {"name": "calculate_bmi", "arguments": {"weight_kg": 82.5, "height_m": 1.8}}],
     "parallel"),
]

TEXT_EX = [
    ("Write a short note to a neighbour about a lost cat.",
     ["Your entire response should be in English, and in all lowercase letters. No capital letters are allowed.",
      "Include the keywords 'whiskers' and 'garden' in the response."],
     [{"instruction_id": "change_case:english_lowercase", "kwargs": {}},
      {"instruction_id": "keywords:existence", "kwargs": {"keywords": ["whiskers", "garden"]}}]),
    ("Describe a morning at the harbour.",
     ["There should be 3 paragraphs. Paragraphs are separated with the markdown divider: ***",
      "At the end of your response, please explicitly add a postscript starting with P.S."],
     [{"instruction_id": "length_constraints:number_paragraphs", "kwargs": {"num_paragraphs": 3}},
      {"instruction_id": "detectable_content:postscript", "kwargs": {"postscript_marker": "P.S."}}]),
    ("Explain how tides work to a ten-year-old.",
     ["Answer with less than 120 words.",
      "Your answer must contain exactly 3 bullet points. Use the markdown bullet points such as:\n* This is point 1.\n* This is point 2",
      "Do not include keywords 'moon' in the response."],
     [{"instruction_id": "length_constraints:number_words", "kwargs": {"num_words": 120, "relation": "less than"}},
      {"instruction_id": "detectable_format:number_bullet_lists", "kwargs": {"num_bullets": 3}},
      {"instruction_id": "keywords:forbidden_words", "kwargs": {"forbidden_words": ["moon"]}}]),
    ("Write a product description for a reusable water bottle.",
     ["Wrap your entire response with double quotation marks.",
      "In your response, the word 'reward' should appear at least 2 times.",
      "Finish your response with this exact phrase Is there anything else I can help with?. No other words should follow this phrase."],
     [{"instruction_id": "startend:quotation", "kwargs": {}},
      {"instruction_id": "keywords:frequency", "kwargs": {"keyword": "reward", "frequency": 2, "relation": "at least"}},
      {"instruction_id": "startend:end_checker", "kwargs": {"end_phrase": "Is there anything else I can help with?"}}]),
]

records: list[dict] = []


def sql_ctx(i: int, think: bool = False) -> dict:
    q, gold = SQL_EX[i]
    fmt = SQL_T if think else SQL
    return {"format": "sql", "think": think,
            "prompt": f"Database schema:\n{SCHEMA}\n\nQuestion: {q}\n\n{fmt.instruction}",
            "data": {"question": q, "query": gold}}


def tool_ctx(i: int, think: bool = False) -> dict:
    q, names, answer, calls, cat = TOOL_EX[i]
    fmt = TOOL_T if think else TOOL
    funcs = [FUNCS[n] for n in names]
    tools = "\n".join(json.dumps(f) for f in funcs)
    return {"format": "tool_call", "think": think,
            "prompt": f"{q}\n\nYou can call these functions:\n<tools>\n{tools}\n</tools>\n\n{fmt.instruction}",
            "data": {"functions": funcs, "answer": answer, "category": cat, "calls": calls}}


def text_ctx(i: int) -> dict:
    base, sentences, constraints = TEXT_EX[i]
    return {"format": "text", "think": False, "prompt": base + " " + " ".join(sentences),
            "data": {"constraints": constraints}}


def add(rid: str, expect: str | None, kind: str, block: str, ctx: dict, feedback: str = "",
        placement: str = "append", note: str = "") -> None:
    records.append({"id": rid, "expect": expect, "kind": kind, "placement": placement, **ctx,
                    "feedback": feedback, "block": block, "note": note})


def sql_ref(i: int, fmt=SQL, pretty: bool = False) -> str:
    gold = SQL_EX[i][1]
    if pretty:
        import sqlglot
        gold = sqlglot.transpile(gold, read="sqlite", write="sqlite", pretty=True)[0]
    return fmt.render_body(gold)


def tool_ref(i: int) -> str:
    return TOOL.render_body(TOOL_EX[i][3])


def schema_json(i: int) -> str:
    names = TOOL_EX[i][1][:1]
    return "\n".join(json.dumps(FUNCS[n]) for n in names)


# ------------------------------------------------------------------------------------- good
add("g-format-sql", None, "format", SQL.rule, sql_ctx(0))
add("g-format-sql-think", None, "format", SQL_T.rule, sql_ctx(1, think=True))
add("g-format-tool", None, "format", TOOL.rule, tool_ctx(0))
add("g-format-tool-think", None, "format", TOOL_T.rule, tool_ctx(2, think=True))
add("g-format-text", None, "format", TEXT.rule, text_ctx(0))
add("g-format-sql-reworded", None, "format",
    "A correct response ends with one ```sql code block that holds the whole query.", sql_ctx(2))
for i in range(len(SQL_EX)):
    add(f"g-ref-sql-{i}", None, "reference", sql_ref(i), sql_ctx(i))
add("g-ref-sql-pretty-5", None, "reference", sql_ref(5, pretty=True), sql_ctx(5))
add("g-ref-sql-pretty-4", None, "reference", sql_ref(4, pretty=True), sql_ctx(4))
add("g-ref-sql-think", None, "reference", sql_ref(1), sql_ctx(1, think=True))
add("g-ref-sql-alias", None, "reference",
    SQL.render_body("SELECT T1.name FROM singer AS T1 WHERE T1.age > 30 ORDER BY T1.age DESC"), sql_ctx(1))
for i in range(len(TOOL_EX)):
    add(f"g-ref-tool-{i}", None, "reference", tool_ref(i), tool_ctx(i))
add("g-ref-tool-think", None, "reference", tool_ref(2), tool_ctx(2, think=True))
add("g-ref-tool-int-for-float", None, "reference",
    TOOL.render_body([{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "EUR",
                                                                 "to_currency": "JPY"}}]), tool_ctx(1))
for i in range(len(TOOL_EX)):
    add(f"g-schema-{i}", None, "schema", schema_json(i), tool_ctx(i))
add("g-schema-two", None, "schema", json.dumps([FUNCS["convert_currency"], FUNCS["get_current_weather"]]),
    tool_ctx(1))
add("g-schema-pretty", None, "schema", json.dumps(FUNCS["book_table"], indent=2), tool_ctx(2))

feedbacks = [
    ("no such column: nme", "The query fails on this database with the SQLite error: no such column: nme"),
    ('near "FROM": syntax error', 'SQLite rejects the query: near "FROM": syntax error'),
    ("no such table: singers", "The query stops with the SQLite error no such table: singers."),
    ("no such column: score", "Running the query on this database gives the SQLite error: no such column: score"),
    ("ambiguous column name: name", "The query fails with the SQLite error: ambiguous column name: name"),
    ("misuse of aggregate: count()", "SQLite refuses the query with the error: misuse of aggregate: count()"),
    ("interrupted: the query ran longer than 5.0 s", "The query does not finish: interrupted: the query ran longer than 5.0 s"),
    ("refused: the statement writes to the database (DELETE)",
     "The database refuses the statement: refused: the statement writes to the database (DELETE)"),
]
for j, (fb, blk) in enumerate(feedbacks):
    add(f"g-feedback-{j}", None, "feedback", blk, sql_ctx(j % len(SQL_EX)), feedback=fb)
add("g-feedback-empty", None, "feedback", "", sql_ctx(0), feedback="")
add("g-feedback-empty-with-fb", None, "feedback", "", sql_ctx(3),
    feedback="the query ran and returned 2 rows")
add("g-feedback-tool", None, "feedback",
    "The call's arguments fail the function's schema: '4' is not of type 'integer'", tool_ctx(2),
    feedback="'4' is not of type 'integer'")
add("g-feedback-verbatim", None, "feedback", "no such column: nme", sql_ctx(2), feedback="no such column: nme")

for i, (base, sentences, _) in enumerate(TEXT_EX):
    for j, s in enumerate(sentences):
        add(f"g-constraint-{i}-{j}", None, "constraint", s, text_ctx(i), placement="in_prompt")

appended = [
    (0, "A correct response is written entirely in lowercase letters."),
    (0, "A correct response mentions both keywords: whiskers and garden."),
    (1, "The response has 3 paragraphs separated by the markdown divider ***."),
    (1, "The response ends with a postscript that starts with P.S."),
    (2, "The response has fewer than 120 words."),
    (2, "The word moon does not appear in the response."),
    (3, "The whole response is wrapped in double quotation marks."),
    (3, "The response ends with the exact phrase: Is there anything else I can help with?"),
]
for j, (i, s) in enumerate(appended):
    add(f"g-append-constraint-{j}", None, "constraint", s, text_ctx(i))
add("g-fact-not", None, "", "The singers whose age is unknown do not count as the youngest.", sql_ctx(6))
add("g-fact-colon", None, "", "The question counts singers per concert: singer_in_concert holds one row per performance.",
    sql_ctx(7))
add("g-fact-join", None, "", "The stadium names come from joining concert with stadium on stadium_id.", sql_ctx(5))
add("g-fact-tool", None, "", "The amount 250 converts from EUR to JPY.", tool_ctx(1))

# -------------------------------------------------------------------------------------- bad
# R1: one reward, one block
add("b1-feedback-plus-ref", "R1", "feedback",
    "The query fails with the SQLite error: no such column: nme.\n" + sql_ref(0), sql_ctx(0),
    feedback="no such column: nme", note="an error text plus a reference")
add("b1-two-refs", "R1", "reference", sql_ref(4) + "\n" + SQL.render_body("SELECT year, count(concert_id) FROM concert GROUP BY year"),
    sql_ctx(4), note="two reference queries in one block")
add("b1-two-constraints-append", "R1", "constraint",
    "The response is written in lowercase letters. It mentions whiskers and garden.", text_ctx(0),
    note="two constraints in one block")
add("b1-two-constraints-inprompt", "R1", "constraint",
    "Answer with less than 120 words. Do not include keywords 'moon' in the response.",
    {**text_ctx(2), "prompt": TEXT_EX[2][0] + " Answer with less than 120 words. Do not include keywords 'moon' in the response."},
    placement="in_prompt", note="two constraint sentences as one block")
add("b1-rubric-list", "R1", "", "- The query selects singer names.\n- The rows are ordered by age, oldest first.\n- Only singers older than 30 appear.",
    sql_ctx(1), note="a rubric list")
add("b1-schema-plus-ref", "R1", "schema", schema_json(2) + "\n\n" + tool_ref(2), tool_ctx(2),
    note="schema and reference call together")
add("b1-format-plus-feedback", "R1", "feedback",
    "The query fails with the SQLite error: near \"FROM\": syntax error. The response also has text outside the code block.",
    sql_ctx(1), feedback='near "FROM": syntax error', note="two verifiers' feedback")
add("b1-format-plus-ref", "R1", "format", sql_ref(2) + "\nA correct response gives exactly one ```sql code block and nothing outside it.",
    sql_ctx(2), note="format rule plus the reference")
add("b1-numbered", "R1", "", "1. The call uses get_current_weather.\n2. The location is Lisbon, Portugal.\n3. The unit is celsius.",
    tool_ctx(0), note="a numbered rubric")
add("b1-two-schemas-prose", "R1", "schema",
    json.dumps(FUNCS["convert_currency"]) + " and also " + json.dumps(FUNCS["get_current_weather"]) +
    " plus the currencies EUR and JPY", tool_ctx(1), note="schemas and the answer's values")
add("b1-feedback-and-hint", "R1", "feedback",
    "The query fails with the SQLite error: no such table: singers. The table is called singer.",
    sql_ctx(0), feedback="no such table: singers", note="feedback plus a correction taken from the reference")
add("b1-constraints-semicolon", "R1", "constraint",
    "The whole response is wrapped in double quotation marks. It ends with Is there anything else I can help with?",
    text_ctx(3), note="two constraints")

# R2: specific information
add("b2-generic-result", "R2", "", "The query must return the same rows as the gold query.", sql_ctx(1),
    note="generic requirement")
add("b2-generic-format", "R2", "format", "The response follows the required output format.", sql_ctx(0),
    note="format block that does not state the format")
add("b2-generic-format-tool", "R2", "format", "A correct response is formatted properly.", tool_ctx(0),
    note="format block that does not state the format")
add("b2-generic-exec", "R2", "", "The query runs on the database without errors.", sql_ctx(3),
    note="generic requirement")
add("b2-generic-call", "R2", "", "The call uses the right function with the right arguments.", tool_ctx(2),
    note="generic requirement")
add("b2-generic-types", "R2", "", "Each argument has the type the function's schema declares.", tool_ctx(1),
    note="generic requirement")
add("b2-generic-constraints", "R2", "", "A correct answer satisfies every constraint in the prompt.", text_ctx(1),
    note="generic requirement")
add("b2-generic-rows", "R2", "", "The result has the right number of rows and columns.", sql_ctx(4),
    note="generic requirement")
add("b2-generic-sql-style", "R2", "", "A correct query is short and readable.", sql_ctx(5),
    note="generic advice")
add("b2-generic-ref-desc", "R2", "", "The reference answer is a correct query for this question.",
    sql_ctx(6), note="a statement with nothing from the example")
add("b2-generic-tool-order", "R2", "", "The calls appear in a sensible order.", tool_ctx(3),
    note="generic requirement")
add("b2-generic-lang", "R2", "", "A correct response is clear, concise and helpful.", text_ctx(2),
    note="generic requirement")

# R3: a plain statement
r3 = [
    ("b3-make-sure", "Make sure the query selects name from singer and orders by age.", sql_ctx(1), ""),
    ("b3-please", "Please check the column name nme against the schema of singer.", sql_ctx(0), ""),
    ("b3-do-not", "Do not use the column nme; singer has no such column.", sql_ctx(0), ""),
    ("b3-you-must", "You must pass the location as Lisbon, Portugal.", tool_ctx(0), ""),
    ("b3-your-query", "Your query should filter stadium rows on city = 'Berlin'.", sql_ctx(2), ""),
    ("b3-use", "Use get_current_weather with unit celsius.", tool_ctx(0), ""),
    ("b3-remember", "Remember that country IS NULL marks an unknown country.", sql_ctx(3), ""),
    ("b3-write", "Write the words whiskers and garden somewhere in the note.", text_ctx(0), ""),
    ("b3-ensure", "The answer has 3 paragraphs; ensure that *** separates them.", text_ctx(1), ""),
    ("b3-label-reference", "Reference: the query counts the rows of singer.", sql_ctx(0), ""),
    ("b3-label-on-reference", "Reference:\n" + sql_ref(0), sql_ctx(0), ""),
    ("b3-label-heading", "## Expected result\nThe result has one row per year of concert.", sql_ctx(4), ""),
    ("b3-heading-on-reference", "## Expected query\n" + sql_ref(4), sql_ctx(4), ""),
    ("b3-label-bold", "**Hint:** the stadium table holds the city Berlin.", sql_ctx(2), ""),
    ("b3-label-note", "Note: singer_in_concert has one row per singer and concert.", sql_ctx(7), ""),
    ("b3-label-feedback", "Feedback: no such column: nme", sql_ctx(0), "no such column: nme"),
    ("b3-label-bracket", "[SCHEMA] " + schema_json(2), tool_ctx(2), ""),
    ("b3-label-tag", "<hint>The stadium table holds the city Berlin.</hint>", sql_ctx(2), ""),
    ("b3-tag-on-reference", "<reference>\n" + tool_ref(1) + "\n</reference>", tool_ctx(1), ""),
    ("b3-label-leadin", "The correct call is:\n" + tool_ref(2), tool_ctx(2), ""),
    ("b3-schema-leadin", "The function to call, as JSON:\n" + schema_json(2), tool_ctx(2), ""),
    ("b3-train-replay", "This block about the singer age order is left out during replay.", sql_ctx(1), ""),
    ("b3-train-reward", "The reward is 1 when the query returns avg(capacity) for Berlin.", sql_ctx(2), ""),
    ("b3-train-verifier", "The verifier compares the rows with those of SELECT count(*) FROM singer.", sql_ctx(0), ""),
    ("b3-train-score", "A response scores full marks when it calls book_table for Nopa.", tool_ctx(2), ""),
    ("b3-train-policy", "The policy learns that concert years are grouped with GROUP BY year.", sql_ctx(4), ""),
]
kinds = {"b3-label-on-reference": "reference", "b3-heading-on-reference": "reference",
         "b3-label-feedback": "feedback", "b3-label-bracket": "schema", "b3-tag-on-reference": "reference",
         "b3-label-leadin": "reference", "b3-schema-leadin": "schema"}
for rid, blk, ctx, fb in r3:
    add(rid, "R3", kinds.get(rid, ""), blk, ctx, feedback=fb, note="not a plain statement")

# R4: only this response's own feedback
r4 = [
    ("b4-invented-ok", "The query on singer ran without errors.", "", 0),
    ("b4-invented-wrong", "The query returned the wrong rows for singers older than 30.", "", 1),
    ("b4-other-error", "The query fails with the SQLite error: no such table: singers", "no such column: nme", 0),
    ("b4-paraphrase", "The query misspells a column of singer.", "no such column: nme", 0),
    ("b4-syntax-other", 'The query fails with the SQLite error: near "SELECT": syntax error', 'near "FROM": syntax error', 2),
    ("b4-invented-hint", "The query fails because stadium has no column town.", "", 2),
    ("b4-type-paraphrase", "The party_size argument has the wrong type.", "'4' is not of type 'integer'", None),
    ("b4-stale", "The query fails with the SQLite error: no such column: age", "no such column: nme", 1),
    ("b4-invented-timeout", "The query on singer_in_concert takes too long to finish.", "", 7),
    ("b4-generic-fail", "The query on concert fails with an SQLite error.", "no such column: yeer", 4),
]
for rid, blk, fb, i in r4:
    add(rid, "R4", "feedback", blk, tool_ctx(2) if i is None else sql_ctx(i), feedback=fb,
        note="feedback that is not this response's own")

# R5: references in the policy's own form
r5 = [
    ("b5-no-fence", SQL_EX[0][1], sql_ctx(0)),
    ("b5-wrong-tag", "```sqlite\n" + SQL_EX[1][1] + "\n```", sql_ctx(1)),
    ("b5-untagged", "```\n" + SQL_EX[3][1] + "\n```", sql_ctx(3)),
    ("b5-wrong-order", SQL.render_body("SELECT name FROM singer WHERE age > 30 ORDER BY age ASC"), sql_ctx(1)),
    ("b5-wrong-query", SQL.render_body("SELECT count(*) FROM concert"), sql_ctx(0)),
    ("b5-tool-bare-json", json.dumps(TOOL_EX[0][3][0]), tool_ctx(0)),
    ("b5-tool-parameters-key", "<tool_call>\n" + json.dumps({"name": "book_table", "parameters": {
        "restaurant": "Nopa", "party_size": 4, "time": "19:30"}}) + "\n</tool_call>", tool_ctx(2)),
    ("b5-tool-string-int", TOOL.render_body([{"name": "book_table", "arguments": {
        "restaurant": "Nopa", "party_size": "4", "time": "19:30"}}]), tool_ctx(2)),
    ("b5-tool-python", "[book_table(restaurant='Nopa', party_size=4, time='19:30')]", tool_ctx(2)),
    ("b5-tool-one-of-two", TOOL.render_body(TOOL_EX[3][3][:1]), tool_ctx(3)),
    ("b5-answer-tags", "<answer>\n" + SQL_EX[2][1] + "\n</answer>", sql_ctx(2)),
]
for rid, blk, ctx in r5:
    add(rid, "R5", "reference", blk, ctx, note="reference not in the policy's form or not correct")

# R6: consistency (in_prompt blocks must be P0's own text)
r6 = [
    ("b6-paraphrase-lower", "The response is in lowercase letters.", 0),
    ("b6-paraphrase-words", "Answer in fewer than 120 words.", 2),
    ("b6-edited-keywords", "Include the keywords 'whiskers' and 'garden'.", 0),
    ("b6-case-changed", "wrap your entire response with double quotation marks.", 3),
]
for rid, blk, i in r6:
    add(rid, "R6", "constraint", blk, text_ctx(i), placement="in_prompt",
        note="an in_prompt block that is not P0's own text")

# Custom formats: an answer marked with \\boxed{} or <answer> tags (math word problems), where
# `{}` and tags are answer markers, not JSON or labels; and generic requirements of every kind.
BOXED = DelimitedFormat("\\boxed{", "}", name="boxed")
TAGS = DelimitedFormat("<answer>", "</answer>", name="answer_tags")
MATH_EX = [
    ("Mia has 5 apples and buys 7 more. How many apples does she have now?", "She has 5 + 7 = 12 apples.", "12"),
    ("A box holds 6 eggs. How many eggs are in 4 boxes?", "4 boxes hold 4 * 6 = 24 eggs.", "24"),
    ("A train travels 60 km each hour. How far does it travel in 3 hours?", "It travels 60 * 3 = 180 km.", "180"),
]


def math_ctx(i: int, fmt_name: str = "boxed") -> dict:
    q, solution, answer = MATH_EX[i]
    fmt = BOXED if fmt_name == "boxed" else TAGS
    return {"format": fmt_name, "think": False, "prompt": f"{q}\n\n{fmt.instruction}",
            "data": {"question": q, "solution": solution, "answer": answer}}


add("g-format-boxed", None, "format", BOXED.rule, math_ctx(0))
add("g-format-boxed-reworded", None, "format",
    "A correct response ends with the final number inside \\boxed{}, and nothing follows it.", math_ctx(1))
add("g-format-tags", None, "format", TAGS.rule, math_ctx(2, "answer_tags"))
add("g-format-placeholder", None, "format",
    "A correct response ends with \\boxed{} holding the number, as in {} with the number in place of the braces.",
    math_ctx(0))
add("g-format-boxed-inferred", None, "", BOXED.rule, math_ctx(1))
add("g-ref-boxed", None, "reference", BOXED.render_body("12"), math_ctx(0))
add("g-ref-boxed-working", None, "reference", MATH_EX[1][1] + "\n" + BOXED.render_body("24"), math_ctx(1))
add("g-ref-tags", None, "reference", TAGS.render_body("180"), math_ctx(2, "answer_tags"))
add("g-fb-boxed-length", None, "feedback",
    "The response has 412 characters, 212 more than the 200 allowed.", math_ctx(0),
    feedback="the response has 412 characters, 212 more than the 200 allowed")
add("g-fb-boxed-wrong", None, "feedback", "The boxed answer is 13.", math_ctx(0), feedback="the boxed answer is 13")
add("g-constraint-chars", None, "constraint", "A correct response has at most 200 characters.", math_ctx(0))
add("g-fact-boxed", None, "", "The question adds 7 apples to 5.", math_ctx(0))

add("b2-must-be-correct", "R2", "", "The answer must be correct.", math_ctx(0),
    note="a generic requirement where the reference belongs")
add("b2-should-be-short", "R2", "constraint", "The response should be short and concise.", math_ctx(1),
    note="a generic length requirement: which length?")
add("b2-right-format", "R2", "format", "A correct response has the right format.", math_ctx(2),
    note="a format block that states no format")
add("b2-right-format-inferred", "R2", "", "The response follows the expected format.", math_ctx(0),
    note="a generic format requirement, kind left to inference")
add("b2-boxed-no-marker", "R2", "format", "A correct response ends with the final number alone.", math_ctx(1),
    note="a format block that never names the \\boxed{} marker")
add("b2-accurate", "R2", "constraint", "The answer should be accurate and complete.", math_ctx(2),
    note="a generic quality requirement")
add("b3-boxed-imperative", "R3", "format", "Put the final answer in \\boxed{}.", math_ctx(0),
    note="an instruction to the model")
add("b3-tags-label", "R3", "reference", "Answer: " + TAGS.render_body("180"), math_ctx(2, "answer_tags"),
    note="a label in front of the reference")
add("b1-boxed-and-length", "R1", "reference",
    BOXED.render_body("12") + "\nThe response has 412 characters, 212 more than the 200 allowed.", math_ctx(0),
    note="the reference merged with another reward's feedback")
add("b5-boxed-bare", "R5", "reference", "12", math_ctx(0), note="a bare number, not the policy's \\boxed{} form")
add("b5-boxed-wrong", "R5", "reference", BOXED.render_body("13"), math_ctx(0), note="a wrong reference")
add("b5-tags-in-boxed", "R5", "reference", TAGS.render_body("24"), math_ctx(1),
    note="the reference in another format than the task's")

if __name__ == "__main__":
    out = HERE / "blocks_corpus.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    good = sum(r["expect"] is None for r in records)
    print(f"wrote {len(records)} records ({good} good, {len(records) - good} bad) to {out}")


# ============================================================================================
# Held-out corpus: written after the rules were frozen, never used to tune them. Measured and
# reported apart (tests/blocks/test_blocks_corpus.py::test_heldout_corpus).
# ============================================================================================
dev_records, records = records, []

TEXT_EX += [
    ("Write a haiku about autumn.",
     ["Your response must be in Japanese, no other language is allowed.",
      "Highlight at least 2 sections in your answer with markdown, i.e. *highlighted section*."],
     [{"instruction_id": "language:response_language", "kwargs": {"language": "ja"}},
      {"instruction_id": "detectable_format:number_highlighted_sections", "kwargs": {"num_highlights": 2}}]),
    ("Give advice on learning the guitar.",
     ["Your response should contain 4 paragraphs. You separate paragraphs using the markdown divider: * * *",
      "In your response, the letter q should appear at least 3 times.",
      "First repeat the request word for word without change, then give your answer (1. do not say any words "
      "or characters before repeating the request; 2. the request you need to repeat does not include this sentence)"],
     [{"instruction_id": "length_constraints:number_paragraphs", "kwargs": {"num_paragraphs": 4}},
      {"instruction_id": "keywords:letter_frequency", "kwargs": {"letter": "q", "let_frequency": 3, "let_relation": "at least"}},
      {"instruction_id": "combination:repeat_prompt", "kwargs": {"prompt_to_repeat": "Give advice on learning the guitar."}}]),
]

# good
add("h-g-ref-cte", None, "reference", SQL.render_body(
    "WITH perf AS (SELECT concert_id FROM singer_in_concert)\nSELECT concert_id, count(*) FROM perf GROUP BY concert_id"),
    sql_ctx(7))
add("h-g-ref-lower", None, "reference", SQL.render_body("select name from singer where country is null"), sql_ctx(3))
add("h-g-ref-semicolon", None, "reference", SQL.render_body("SELECT count(*) FROM singer;"), sql_ctx(0))
add("h-g-ref-join-alias", None, "reference", SQL.render_body(
    "SELECT DISTINCT stadium.name FROM concert JOIN stadium USING (stadium_id) WHERE concert.year = 2014"), sql_ctx(5))
add("h-g-fb-function", None, "feedback", "SQLite stops the query with this message: no such function: YEAR",
    sql_ctx(4), feedback="no such function: YEAR")
add("h-g-fb-group", None, "feedback", 'The statement fails: near "GROUP": syntax error', sql_ctx(4),
    feedback='near "GROUP": syntax error')
add("h-g-fb-alias", None, "feedback", "The query fails with the SQLite error: no such column: T2.name", sql_ctx(5),
    feedback="no such column: T2.name")
add("h-g-fb-schema", None, "feedback",
    "The arguments do not validate against the schema of convert_currency: 'amount' is a required property",
    tool_ctx(1), feedback="'amount' is a required property")
add("h-g-fb-empty", None, "feedback", "", sql_ctx(1), feedback="the query ran and returned 5 rows")
add("h-g-fb-says", None, "feedback", "SQLite says: no such table: singers", sql_ctx(0), feedback="no such table: singers")
add("h-g-format-tool", None, "format",
    'A correct response gives the calls inside <tool_call></tool_call> tags, one JSON object with "name" and '
    '"arguments" per call.', tool_ctx(3))
add("h-g-format-think", None, "format",
    "A correct response starts with its reasoning inside <think></think> tags and ends with a single ```sql code block.",
    sql_ctx(2, think=True))
add("h-g-format-text", None, "format", "A correct response is plain text with no markup around it.", text_ctx(4))
add("h-g-ref-tool-think", None, "reference", tool_ref(0), tool_ctx(0, think=True))
add("h-g-ref-tool-parallel-swapped", None, "reference", TOOL.render_body(list(reversed(TOOL_EX[3][3]))), tool_ctx(3))
add("h-g-ref-tool-alt", None, "reference", TOOL.render_body(
    [{"name": "get_current_weather", "arguments": {"location": "Lisbon", "unit": "celsius"}}]), tool_ctx(0))
add("h-g-schema-list", None, "schema", json.dumps([FUNCS["book_table"]]), tool_ctx(2))
add("h-g-schema-pretty", None, "schema", json.dumps(FUNCS["convert_currency"], indent=2), tool_ctx(1))
for i in (4, 5):
    for j, s in enumerate(TEXT_EX[i][1]):
        add(f"h-g-constraint-{i}-{j}", None, "constraint", s, text_ctx(i), placement="in_prompt")
for j, (i, s) in enumerate([(4, "The response is in Japanese."),
                            (4, "The response highlights at least 2 sections with markdown, like *highlighted section*."),
                            (5, "The letter q appears at least 3 times in the response."),
                            (5, "The response has 4 paragraphs separated by * * *.")]):
    add(f"h-g-append-{j}", None, "constraint", s, text_ctx(i))
add("h-g-fact-youngest", None, "",
    "The youngest singer is found by ordering on age and taking the first row whose age is known.", sql_ctx(6))
add("h-g-fact-berlin", None, "", "Berlin has two stadiums in the database.", sql_ctx(2))
add("h-g-fact-capacity", None, "", "The capacity column of stadium holds the number of seats.", sql_ctx(2))
add("h-g-fact-not", None, "", "The question asks for the stadium names, not their ids.", sql_ctx(5))
add("h-g-fact-tool", None, "", "The party of 4 dines at Nopa at 19:30.", tool_ctx(2))
# first written as an R5 violation; on this database no 2014 stadium repeats, so the verifier
# rightly gives the query without DISTINCT full marks: relabelled good (a labelling error)
add("h-g-ref-no-distinct", None, "reference", SQL.render_body(SQL_EX[5][1].replace("DISTINCT ", "")), sql_ctx(5))

# bad
add("h-b1-fb-and-ref", "R1", "feedback",
    "The query fails with: no such column: nme. The correct query is " + sql_ref(0).replace("\n", " "), sql_ctx(0),
    feedback="no such column: nme")
add("h-b1-two-answers", "R1", "reference", tool_ref(0) + "\nor\n" + TOOL.render_body(
    [{"name": "get_current_weather", "arguments": {"location": "Lisbon"}}]), tool_ctx(0))
add("h-b1-one-sentence-two", "R1", "constraint", "The response is in Japanese and highlights 2 sections.", text_ctx(4))
add("h-b1-schema-and-value", "R1", "schema", json.dumps(FUNCS["convert_currency"]) + "\nThe amount is 250.", tool_ctx(1))
add("h-b1-bullets", "R1", "", "\u2022 The call uses book_table.\n\u2022 party_size is 4.\n\u2022 time is 19:30.", tool_ctx(2))
add("h-b1-two-errors", "R1", "feedback",
    "The query fails with no such column: nme; the response also has no code block around it.", sql_ctx(0),
    feedback="no such column: nme")
add("h-b2-valid", "R2", "", "The SQL is syntactically valid.", sql_ctx(1))
add("h-b2-checks", "R2", "", "A correct call passes all checks.", tool_ctx(2))
add("h-b2-wants", "R2", "", "The output matches what the user wants.", text_ctx(4))
add("h-b2-format", "R2", "format", "The response uses the expected format.", tool_ctx(1))
add("h-b2-null", "R2", "", "The query handles NULL values correctly.", sql_ctx(3))
add("h-b2-accurate", "R2", "", "The answer is accurate and complete.", sql_ctx(4))
for rid, blk, ctx in [
    ("h-b3-consider", "Consider joining concert with stadium on stadium_id.", sql_ctx(5)),
    ("h-b3-careful", "Be careful: age can be NULL for Ana Lima.", sql_ctx(6)),
    ("h-b3-hint-dash", "Hint - the city is stored as Berlin in stadium.", sql_ctx(2)),
    ("h-b3-important", "IMPORTANT: the singers are ordered by age descending.", sql_ctx(1)),
    ("h-b3-quote", "> Note the stadium table has a city column.", sql_ctx(2)),
    ("h-b3-think", "Think about which table holds capacity: stadium.", sql_ctx(2)),
    ("h-b3-the-model", "The model should call book_table for Nopa.", tool_ctx(2)),
    ("h-b3-training", "This hint is only shown during training: singer has an age column.", sql_ctx(1)),
    ("h-b3-full-marks", "Full marks need the keyword whiskers.", text_ctx(0)),
    ("h-b3-check", "Check that party_size is 4.", tool_ctx(2)),
]:
    add(rid, "R3", "", blk, ctx)
for rid, blk, fb, ctx in [
    ("h-b4-near-miss", "SQLite error: no such column: name", "no such column: nme", sql_ctx(0)),
    ("h-b4-no-error", "SQLite reports no error for the query on stadium.", "", sql_ctx(2)),
    ("h-b4-paraphrase", "The value 4 for party_size is not valid.", "'4' is not of type 'integer'", tool_ctx(2)),
    ("h-b4-embellished", 'The query fails with the SQLite error: near "FROM": syntax error at line 3',
     'near "FROM": syntax error', sql_ctx(1)),
    ("h-b4-slow", "The query on concert is too slow.", "interrupted", sql_ctx(4)),
]:
    add(rid, "R4", "feedback", blk, ctx, feedback=fb)
for rid, blk, ctx in [
    ("h-b5-upper-tag", "```SQL\n" + SQL_EX[0][1] + "\n```", sql_ctx(0)),
    ("h-b5-extra-key", "<tool_call>\n" + json.dumps({"name": "book_table", "id": "call_1", "arguments": {
        "restaurant": "Nopa", "party_size": 4, "time": "19:30"}}) + "\n</tool_call>", tool_ctx(2)),
    ("h-b5-string-amount", TOOL.render_body([{"name": "convert_currency", "arguments": {
        "amount": "250", "from_currency": "EUR", "to_currency": "JPY"}}]), tool_ctx(1)),
    ("h-b5-think-not-asked", "<think>\n</think>\n" + sql_ref(3), sql_ctx(3)),
]:
    add(rid, "R5", "reference", blk, ctx)
add("h-b6-curly-quotes", "R6", "constraint",
    "Include the keywords \u2018whiskers\u2019 and \u2018garden\u2019 in the response.", text_ctx(0), placement="in_prompt")
add("h-b6-double-space", "R6", "constraint", "Highlight at least 2 sections in your answer with  markdown, "
    "i.e. *highlighted section*.", text_ctx(4), placement="in_prompt")
add("h-b6-shortened", "R6", "constraint", "Your response should contain 4 paragraphs.", text_ctx(5),
    placement="in_prompt")
heldout_records = records
records = dev_records

if __name__ == "__main__":
    out = HERE / "blocks_corpus_heldout.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for r in heldout_records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    good = sum(r["expect"] is None for r in heldout_records)
    print(f"wrote {len(heldout_records)} records ({good} good, {len(heldout_records) - good} bad) to {out}")


# ============================================================================================
# Second held-out corpus: written after the rules were revised on the first one's misses, and
# not used to change them.
# ============================================================================================
dev_records, records = records, []
TEXT_EX += [
    ("Describe the rules of chess.",
     ["Answer with at least 50 words.",
      "Your ENTIRE response should be in French language, no other language is allowed.",
      "End your response with the phrase 'Any other questions?'. No other words should follow."],
     [{"instruction_id": "length_constraints:number_words", "kwargs": {"num_words": 50, "relation": "at least"}},
      {"instruction_id": "language:response_language", "kwargs": {"language": "fr"}},
      {"instruction_id": "startend:end_checker", "kwargs": {"end_phrase": "Any other questions?"}}]),
]
add("h2-g-fb-town", None, "feedback",
    "Running the statement on the concert database ends in the SQLite error no such column: stadium.town",
    sql_ctx(2), feedback="no such column: stadium.town")
add("h2-g-fb-type", None, "feedback", "The call fails schema validation: 19.30 is not of type 'string'",
    tool_ctx(2), feedback="19.30 is not of type 'string'")
add("h2-g-fb-none", None, "feedback", "", sql_ctx(5), feedback="")
add("h2-g-ref-limit", None, "reference",
    SQL.render_body("SELECT name FROM singer WHERE age > 30 ORDER BY age DESC LIMIT 100"), sql_ctx(1))
add("h2-g-ref-optional", None, "reference",
    TOOL.render_body([{"name": "get_current_weather", "arguments": {"location": "Lisbon, Portugal"}}]), tool_ctx(0))
add("h2-g-ref-pretty", None, "reference", sql_ref(7, pretty=True), sql_ctx(7))
add("h2-g-schema-bmi", None, "schema", json.dumps(FUNCS["calculate_bmi"]), tool_ctx(3))
add("h2-g-format-think", None, "format", SQL_T.rule, sql_ctx(6, think=True))
add("h2-g-format-tool", None, "format",
    "A correct response holds each call as a JSON object in its own <tool_call></tool_call> pair and nothing else.",
    tool_ctx(1))
for j, s in enumerate(TEXT_EX[6][1]):
    add(f"h2-g-constraint-{j}", None, "constraint", s, text_ctx(6), placement="in_prompt")
add("h2-g-append-fr", None, "constraint", "The response is written in French.", text_ctx(6))
add("h2-g-append-50", None, "constraint", "The response has at least 50 words.", text_ctx(6))
add("h2-g-append-end", None, "constraint", "The last words of the response are: Any other questions?", text_ctx(6))
add("h2-g-fact-ana", None, "", "Ana Lima has neither a country nor an age in the singer table.", sql_ctx(3))
add("h2-g-fact-2015", None, "", "Two concerts took place in 2015.", sql_ctx(4))
add("h2-g-fact-units", None, "", "Both BMI calls use weights in kilograms and heights in metres.", tool_ctx(3))
add("h2-g-fact-colon", None, "", "One row per year: 2014 has three concerts and 2015 has two.", sql_ctx(4))

add("h2-b1-inline-ref", "R1", "", "The reference query is ```sql SELECT count(*) FROM singer``` and it returns 7.",
    sql_ctx(0))
add("h2-b1-two-constraints", "R1", "constraint", "The response is in French. Its last words are Any other questions?",
    text_ctx(6))
add("h2-b1-schemas-and-pick", "R1", "schema",
    json.dumps(FUNCS["convert_currency"]) + "\n" + json.dumps(FUNCS["get_current_weather"])
    + "\nconvert_currency is the one to call.", tool_ctx(1))
add("h2-b1-list", "R1", "", "- party_size is 4\n- time is 19:30", tool_ctx(2))
add("h2-b2-correct-sql", "R2", "", "The query is correct SQL for SQLite.", sql_ctx(1))
add("h2-b2-format", "R2", "format", "A correct response follows the output rules.", sql_ctx(2))
add("h2-b2-args", "R2", "", "The call arguments match the user's request.", tool_ctx(1))
add("h2-b2-expects", "R2", "", "The result is what the question expects.", sql_ctx(6))
add("h2-b3-avoid", "R3", "", "Avoid selecting singer_id; the question asks for names.", sql_ctx(3))
add("h2-b3-solution", "R3", "reference", "Solution:\n" + sql_ref(2), sql_ctx(2))
add("h2-b3-tip", "R3", "", "Tip: stadium.city holds Berlin.", sql_ctx(2))
add("h2-b3-grader", "R3", "", "The grader compares rows with SELECT avg(capacity) FROM stadium WHERE city = 'Berlin'.",
    sql_ctx(2))
add("h2-b3-you", "R3", "", "You will need the keyword garden.", text_ctx(0))
add("h2-b4-typo", "R4", "feedback", "The query fails with the SQLite error: no such column: nmae", sql_ctx(0),
    feedback="no such column: nme")
add("h2-b4-invented", "R4", "feedback", "The query on concert returned no rows.", sql_ctx(4), feedback="")
add("h2-b4-paraphrase", "R4", "feedback", "The amount argument is missing from convert_currency.", tool_ctx(1),
    feedback="'amount' is a required property")
add("h2-b5-wrong-order", "R5", "reference",
    SQL.render_body("SELECT name FROM singer WHERE age IS NOT NULL ORDER BY age DESC LIMIT 1"), sql_ctx(6))
add("h2-b5-missing-time", "R5", "reference",
    TOOL.render_body([{"name": "book_table", "arguments": {"restaurant": "Nopa", "party_size": 4}}]), tool_ctx(2))
add("h2-b6-no-period", "R6", "constraint", "Answer with at least 50 words", text_ctx(6), placement="in_prompt")
add("h2-b6-case", "R6", "constraint",
    "Your entire response should be in French language, no other language is allowed.", text_ctx(6),
    placement="in_prompt")
heldout2_records = records
records = dev_records

if __name__ == "__main__":
    out = HERE / "blocks_corpus_heldout2.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for r in heldout2_records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    good = sum(r["expect"] is None for r in heldout2_records)
    print(f"wrote {len(heldout2_records)} records ({good} good, {len(heldout2_records) - good} bad) to {out}")
