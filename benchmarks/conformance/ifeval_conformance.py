"""Print the instruction-following checkers' conformance figures (nothing is asserted here).

    python -m benchmarks.conformance.ifeval_conformance [--shared ../shared]

IFEval: per-instruction agreement with the official strict/loose results on GPT-4's responses
(prompts 1122 and 1129 excluded, where the official code draws a random letter) and the four
headline accuracies next to the official ones. IFBench: how many test constraints split cleanly
(the checker's description verbatim in the prompt, a close paraphrase, or not found).
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from mrtpo.tasks import get_task
from mrtpo.verifiers.ifeval import evaluate

OFFICIAL = {"prompt_level_strict_acc": 0.76710, "inst_level_strict_acc": 0.83453,
            "prompt_level_loose_acc": 0.79482, "inst_level_loose_acc": 0.85492}


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def ifeval(data: Path) -> None:
    inputs = _jsonl(data / "input_data.jsonl")
    responses = _jsonl(data / "gpt4_responses.jsonl")
    start = time.perf_counter()
    ev = evaluate((i["instruction_id_list"], i["kwargs"], i["prompt"], r["response"])
                  for i, r in zip(inputs, responses))
    seconds = time.perf_counter() - start
    for mode, ours in (("strict", ev.strict), ("loose", ev.loose)):
        official = _jsonl(data / f"gpt4_official_results_{mode}.jsonl")
        pairs = [(a, b) for inp, mine, off in zip(inputs, ours, official) if inp["key"] not in (1122, 1129)
                 for a, b in zip(mine, off["follow_instruction_list"])]
        agree = sum(a == b for a, b in pairs)
        print(f"IFEval {mode:6s} agreement: {agree}/{len(pairs)} = {agree / len(pairs):.4f}")
    for name, value in ev.summary().items():
        print(f"  {name:24s} ours {value:.5f}  official {OFFICIAL[name]:.5f}  diff {value - OFFICIAL[name]:+.5f}")
    print(f"  scored 541 prompts strict and loose in {seconds:.2f} s")


def ifbench(path: Path) -> None:
    examples = get_task("instruct", skip_unsupported=True).load(str(path))
    how = Counter(c["match"] or "not found" for e in examples for c in e.data["constraints"])
    rows = _jsonl(path)
    total = sum(len(r["instruction_id_list"]) for r in rows)
    print(f"IFBench: {len(rows)} prompts, {total} constraints; {len(examples)} prompts load "
          f"(rows using unsupported ids dropped)")
    for name, n in how.most_common():
        print(f"  {name:10s} {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    args = parser.parse_args()
    data = args.shared / "data"
    if not data.is_dir():
        raise SystemExit(f"{data} not found; pass --shared")
    ifeval(data / "ifeval")
    ifbench(data / "ifbench" / "IFBench_test.jsonl")


if __name__ == "__main__":
    main()
