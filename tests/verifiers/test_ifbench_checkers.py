"""IFBench's out-of-distribution checkers, with the semantics of allenai/IFBench @db69a6f."""
from __future__ import annotations

import unicodedata

import pytest

from mrtpo.verifiers.ifeval import UnsupportedInstruction, check, describe, supported_ids, verify

IFBENCH_IDS = supported_ids("ifbench")

CASES = [
    ("count:word_count_range", {"min_words": 3, "max_words": 4}, "one two three", True),
    ("count:word_count_range", {"min_words": 3, "max_words": 4}, "one two three four five", False),
    ("count:unique_word_count", {"N": 3}, "The cat, the dog.", True),  # the, cat, dog
    ("count:unique_word_count", {"N": 4}, "The cat, the dog.", False),
    ("ratio:stop_words", {"percentage": 50}, "the cat and the dog", True),  # 3 of 5 = 60%? see below
    ("ratio:stop_words", {"percentage": 60}, "the cat and the dog", True),
    ("ratio:stop_words", {"percentage": 59}, "the cat and the dog", False),
    ("ratio:stop_words", {"percentage": 50}, "!!!", False),
    ("ratio:sentence_type", {}, "It rains. It pours. Why?", True),
    ("ratio:sentence_type", {}, "It rains. Why?", False),
    ("ratio:sentence_balance", {}, "Yes. No? Wow!", True),
    ("ratio:sentence_balance", {}, "Yes. No. Wow!", False),
    ("count:conjunctions", {"small_n": 2}, "tea and cake, but no coffee", True),
    ("count:conjunctions", {"small_n": 2}, "and and and", False),
    ("count:conjunctions", {"small_n": 2}, "and, and", True),  # distinct raw tokens, as the original
    ("count:person_names", {"N": 2}, "Emma met Liam.", True),
    ("count:person_names", {"N": 2}, "Emmanuel met Liam.", False),  # word boundaries
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 100}, "abcd", True),
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 100}, "abcx", False),
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 50}, "ab", False),
    ("count:numbers", {"N": 2}, "I have 3 cats and 1.5 dogs", True),  # '1.5' -> '15' after stripping '.'
    ("count:numbers", {"N": 2}, "7 8 9", False),
    ("words:alphabet", {}, "Ants build colonies.", True),
    ("words:alphabet", {}, "Ants build dens.", False),
    ("words:alphabet", {}, "Zebras always.", True),  # loops back to A
    ("words:vowel", {}, "Tall grass sways as warm wind passes.", True),
    ("words:vowel", {}, "one paragraph\nsecond line", False),
    ("words:consonants", {}, "strong black cliffs", True),
    ("words:consonants", {}, "strong tea", False),
    ("sentence:alliteration_increment", {}, "Big cat. Silly sly snake.", True),
    ("sentence:alliteration_increment", {}, "Silly sly snake. Big cat.", False),
    ("words:palindrome", {}, " ".join(["level", "radar", "civic", "kayak", "refer", "rotor", "madam",
                                       "stats", "tenet", "sagas"]), True),
    ("words:palindrome", {}, "level radar civic", False),
    ("count:punctuation", {}, "Wait?! Yes, a list: one; two. Wow!?", True),
    ("count:punctuation", {}, "Wait?! Yes, a list: one. Wow!", False),
    ("format:parentheses", {}, "(a [b {c (d [e])}])", True),
    ("format:parentheses", {}, "(a [b {c}])", False),
    ("format:quotes", {}, "He said \"she said 'they said \"hi\"'\"", True),
    ("format:quotes", {}, "He said \"hi\"", False),
    ("words:prime_lengths", {}, "we are all in", True),  # 2 3 3 2
    ("words:prime_lengths", {}, "this word", False),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", True),
    ("format:options", {"options": "yes/no/maybe"}, "maybe not", False),
    ("format:options", {"options": "a), b), c), d)"}, "b)", True),
    ("format:options", {"options": "a), b), c), d)"}, "b", False),
    ("format:newline", {}, "one\ntwo\nthree", True),
    ("format:newline", {}, "one two\nthree", False),
    ("format:emoji", {}, "I love tea 🍵. Rain is nice 🌧️!", True),
    ("format:emoji", {}, "I love tea 🍵. Rain is nice!", False),
    ("ratio:sentence_words", {}, "Cats nap. Dogs run. Fish go.", False),
    ("ratio:sentence_words", {}, "Cats nap. Dogs run. Owls fly.", True),
    ("count:words_japanese", {"N": 2}, "I 愛 you 猫", True),
    ("count:words_japanese", {"N": 2}, "I love you cat", False),
    ("words:repeats", {"small_n": 2}, "a b a b", True),
    ("words:repeats", {"small_n": 2}, "a a a", False),
    ("sentence:keyword", {"word": "river", "N": 2}, "Hi. The River flows.", True),
    ("sentence:keyword", {"word": "river", "N": 2}, "Hi. The rivers flow.", False),
    ("count:pronouns", {"N": 3}, "She gave it to them/us.", True),  # she it them us
    ("count:pronouns", {"N": 3}, "The cat sleeps.", False),
    ("words:odd_even_syllables", {}, "cat rabbit dog", True),  # 1 2 1
    ("words:odd_even_syllables", {}, "cat dog", False),
    ("words:last_first", {}, "I like tea. Tea is warm.", True),
    ("words:last_first", {}, "I like tea. Coffee is warm.", False),
    ("words:paragraph_last_first", {}, "Rain falls on the rain\n\nSun sets on the sun.", True),
    ("words:paragraph_last_first", {}, "Rain falls on the ground", False),
    ("sentence:increment", {"small_n": 2}, "I run. I run very fast. I run very fast every day.", True),
    ("sentence:increment", {"small_n": 2}, "I run. I run fast.", False),
    ("words:no_consecutive", {}, "big red apple", True),
    ("words:no_consecutive", {}, "big brown apple", False),
    ("format:line_indent", {}, "a\n b\n  c", True),
    ("format:line_indent", {}, "a\n b\n c", False),
    ("format:quote_unquote", {}, '"To be" is about existence.', True),
    ("format:quote_unquote", {}, 'He said "to be"', False),
    ("format:list", {"sep": "->"}, "-> tea\n-> cake", True),
    ("format:list", {"sep": "->"}, "-> tea", False),
    ("format:thesis", {}, "<i>Cats rule.</i> Here is why.", True),
    ("format:thesis", {}, "<i>Cats rule.</i>", False),
    ("format:sub-bullets", {}, "* one\n  - detail\n* two\n  - more", True),
    ("format:sub-bullets", {}, "* one\n  - detail\n* two", False),
    ("format:no_bullets_bullets", {}, "First point. Second point.\n* a\n* b", True),
    ("format:no_bullets_bullets", {}, "Only one.\n* a\n* b", False),
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", True),
    ("custom:multiples", {}, "7, 14, 21", False),
    ("custom:mcq_count_length", {}, "\n".join(
        f"Question {i}: {'Why ' * i}?\nA. x\nB. x\nC. x\nD. x\nE. x" for i in range(1, 5)), True),
    ("custom:mcq_count_length", {}, "Here are questions.\nQuestion 1: Why?", False),
    ("custom:word_reverse", {}, "eagle bald the is symbol national The", True),
    ("custom:word_reverse", {}, "The national symbol is the bald eagle.", False),
    ("custom:character_reverse", {}, ".elgae dlab ehT", True),
    ("custom:character_reverse", {}, "The bald eagle.", False),
    ("custom:sentence_alphabet", {}, " ".join(f"{chr(65 + i)}x went home." for i in range(26)), True),
    ("custom:sentence_alphabet", {}, "Apples grow. Cats purr.", False),
    ("custom:european_capitals_sort", {}, "Reykjavik, Helsinki, Oslo, Tallinn, Stockholm, Riga, Moscow, "
     "Copenhagen, Vilnius, Minsk, Dublin, Berlin, Amsterdam, Warsaw, London, Brussels, Prague, Luxembourg, "
     "Paris, Vienna, Bratislava, Budapest, Vaduz, Chișinău, Bern, Ljubljana, Zagreb", True),
    ("custom:european_capitals_sort", {}, "Oslo, Helsinki", False),
    ("custom:csv_city", {}, "ID,Country,City,Year,Count\n" + "\n".join(f"{i},X,Y,2000,{i}" for i in range(7)), True),
    ("custom:csv_city", {}, "ID,Country,City,Year,Count\n1,X,Y,2000,1", False),
    ("custom:csv_special_character", {}, "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
        f'{i},"Tools & more",B,1,2' if i == 3 else f"{i},Tools,B,1,2" for i in range(14)), True),
    ("custom:csv_special_character", {}, "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
        f"{i},Tools,B,1,2" for i in range(14)), False),
    ("custom:csv_quotes", {}, '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n' + "\n".join(
        '"1"\t"Math"\t"A"\t"Fall"\t"90"' for _ in range(3)), True),
    ("custom:csv_quotes", {}, '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n' + "\n".join(
        '"1"\t""\t"A"\t"Fall"\t"90"' for _ in range(3)), True),
    ("custom:csv_quotes", {}, 'StudentID\tSubject\tGrade\tSemester\tScore\n1\tMath\tA\tFall\t90', False),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", True),
    ("custom:date_format_list", {}, "1796-04-12, 1805-02-30", False),
    ("count:keywords_multiple", {"keyword1": "sun", "keyword2": "moon", "keyword3": "star", "keyword4": "sky",
                                 "keyword5": "cloud"},
     "sun " + "moon " * 2 + "star " * 3 + "sky " * 5 + "cloud " * 7, True),
    ("count:keywords_multiple", {"keyword1": "sun", "keyword2": "moon", "keyword3": "star", "keyword4": "sky",
                                 "keyword5": "cloud"}, "sun moon star sky cloud", False),
    ("words:keywords_specific_position", {"keyword": "river", "n": 2, "m": 3}, "Hi. See the River now.", True),
    ("words:keywords_specific_position", {"keyword": "river", "n": 2, "m": 3}, "Hi. See, the river.", True),
    ("words:keywords_specific_position", {"keyword": "river", "n": 2, "m": 3}, "Hi. The river now.", False),
    ("words:words_position", {"keyword": "river"}, "The river is wide, river now.", True),
    ("words:words_position", {"keyword": "river"}, "The river is wide.", False),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem about the sea."}, "Compose a poem about the sea.", True),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem about the sea."}, "Write a poem about the sea.", False),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.", True),
    ("repeat:repeat_simple", {}, "Only output this sentence.", False),
    # @db69a6f compares the *character* span prompt[n_start:n_end+1] (the prompts say "word indices")
    ("repeat:repeat_span", {"prompt_to_repeat": "Write a poem about the sea.", "n_start": 6, "n_end": 11},
     "a poem", True),
    ("repeat:repeat_span", {"prompt_to_repeat": "Write a poem about the sea.", "n_start": 1, "n_end": 3},
     "a poem about", False),
    ("format:title_case", {}, "The Secret Of The Harbor", True),
    ("format:title_case", {}, "The secret of the harbor", False),
    ("format:output_template", {}, "My Answer: yes My Conclusion: fine Future Outlook: good", True),
    ("format:output_template", {}, "My Answer: yes", False),
    ("format:no_whitespace", {}, "no_spaces_here", True),
    ("format:no_whitespace", {}, "a b", False),
]

# the first ratio:stop_words row: 'the', 'and', 'the' are stop words: 3/5 = 60% > 50%
CASES[4] = ("ratio:stop_words", {"percentage": 50}, "the cat and the dog", False)


@pytest.mark.parametrize("iid,kwargs,response,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_ifbench_semantics(iid, kwargs, response, expected):
    ok, feedback = verify(iid, kwargs, response)
    assert ok is expected, feedback
    assert feedback


def test_reverse_newline_needs_52_countries_in_reverse_order():
    countries = sorted(["Zimbabwe", "Zambia", "Uganda", "Tunisia", "Togo", "Tanzania", "South Sudan",
                        "South Africa", "Somalia", "Sierra Leone", "Seychelles", "Senegal", "São Tomé and Príncipe",
                        "Rwanda", "Nigeria", "Niger", "Namibia", "Mozambique", "Morocco", "Mauritius",
                        "Mauritania", "Mali", "Malawi", "Madagascar", "Libya", "Liberia", "Lesotho", "Kenya",
                        "Guinea-Bissau", "Guinea", "Ghana", "Gambia", "Gabon", "Ethiopia", "Eswatini", "Eritrea",
                        "Equatorial Guinea", "Egypt", "Djibouti", "DR Congo", "Côte d'Ivoire", "Congo",
                        "Comoros", "Chad", "Central African Republic", "Cameroon", "Cabo Verde", "Burundi",
                        "Burkina Faso", "Botswana", "Benin", "Angola", "Algeria"],
                       key=lambda c: unicodedata.normalize("NFKD", c).encode("ascii", "ignore"), reverse=True)
    assert check("custom:reverse_newline", {}, "\n".join(countries))
    assert not check("custom:reverse_newline", {}, "\n".join(reversed(countries)))
    assert not check("custom:reverse_newline", {}, "\n".join(countries[:20]))


def test_cases_cover_every_supported_ifbench_id():
    covered = {c[0] for c in CASES} | {"custom:reverse_newline"}
    assert covered == set(IFBENCH_IDS)
    assert len(IFBENCH_IDS) == 57  # all 58 but words:start_verb


def test_start_verb_is_rejected_not_scored():
    with pytest.raises(UnsupportedInstruction) as err:
        check("words:start_verb", {}, "Run fast.")
    assert "count:numbers" in str(err.value)


def test_descriptions_are_ifbench_templates():
    assert describe("count:word_count_range", {"min_words": 71.0, "max_words": 73.0}) == \
        "The response must contain between 71 and 73 words."
    assert describe("count:words_japanese", {"N": 21}) == "Every 21st of your response must be in Japanese."
    assert describe("ratio:stop_words", {"percentage": 27.0}) == \
        "Ensure that stop words constitute no more than 27% of the total words in your response."
