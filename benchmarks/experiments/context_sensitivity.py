"""Does removing the format rule move the policy's prediction of an argument value because of
what the rule says, or because any change to the context does?

On toolcall, for each bundled reference and each argument value that the probe edits
(`Task.probe_edits`, kind "argument value"), the reference is replayed (`mrtpo.replay.distances`)
under P_all and four other contexts, and the JS distance to P_all is read at the value's first
token (the position where the policy predicts the value from the unedited prefix):

- P_all without the format rule (the `format` reward's P_without_k, what MRTPO uses);
- P_all with the rule replaced by an unrelated sentence (`mrtpo.credit.probe.TEXT_CONTROL`,
  108 characters against the rule's 164; no information about the call at all);
- P_all with the rule paraphrased (the same information, other words);
- P_all without the reference (the `correct` reward's P_without_k: the block that does
  inform the value).

For a policy that reads the blocks for their content, the first two would move the value
little, the paraphrase hardly at all and the reference's removal most. Nothing is asserted;
it prints the mean and median distances and writes them as JSON with `--json PATH`.

    python -m benchmarks.experiments.context_sensitivity [--model smollm2-135m] [--json PATH] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.lib.results import command, write_result
from mrtpo.credit.probe import TEXT_CONTROL as UNRELATED  # the probe's own text control sentence

PARAPHRASE = ('Write every function call as a single JSON object that has the keys "name" and "arguments", '
              "put each inside its own <tool_call></tool_call> tags, and write nothing else.")
CONTEXTS = ("without the format rule", "rule -> an unrelated sentence", "rule -> a paraphrase",
            "without the reference")


def measure(model_name: str) -> dict:
    from mrtpo.contexts import ReplayItem, block_texts, context_messages, render_ids
    from mrtpo.credit.probe import first_token_mask
    from mrtpo.spans import span_token_mask
    from mrtpo.credit.records import response_ids
    from mrtpo.harness.policy import load_policy
    from mrtpo.models.builds import resolve_model
    from mrtpo.replay import distances
    from mrtpo.tasks import get_task

    task = get_task("toolcall")
    path = resolve_model(model_name)
    policy = load_policy(path, lora=False)
    tok = policy.tokenizer
    items, firsts = [], []
    for ex in task.load(None):
        ref = task.reference(ex)
        if ref is None:
            continue
        blocks = block_texts(task, ex, task.score(ex, ref))
        names = [r.name for r in task.rewards(ex)]
        rule, reference = names.index("format"), names.index("correct")
        p_all, without = context_messages(task, ex, blocks)

        def rule_as(text: str):
            changed = list(blocks)
            changed[rule] = text
            return context_messages(task, ex, changed)[0]

        contexts = [p_all, without[rule], rule_as(UNRELATED), rule_as(PARAPHRASE), without[reference]]
        ids = response_ids(tok, ref)
        for edit in task.probe_edits(ex):
            if edit.kind != "argument value":
                continue
            enc = tok(edit.response, add_special_tokens=False, return_offsets_mapping=True)
            first = first_token_mask(span_token_mask([tuple(o) for o in enc["offset_mapping"]], edit.span))
            at = first.index(True)
            if enc["input_ids"][:at] != ids[:at]:  # read on the reference: the prefixes must agree
                continue
            firsts.append(at)
            items.append(ReplayItem([render_ids(tok, m) for m in contexts], ids, list(CONTEXTS), ["x"] * 4))
    q = distances(policy.model, items).float()  # [N, 4, T]
    out = {"model": model_name if str(path) == model_name else f"{model_name} ({path})", "value_edits": len(items), "contexts": {}}
    for k, name in enumerate(CONTEXTS):
        at = [float(q[i, k, f]) for i, f in enumerate(firsts)]
        whole = [float(q[i, k, :len(it.response_ids)].mean()) for i, it in enumerate(items)]
        out["contexts"][name] = {"at_value_mean": statistics.mean(at), "at_value_median": statistics.median(at),
                                 "response_mean": statistics.mean(whole)}
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="policy (default: the default built-in one)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return ap


def main() -> None:
    args = parser().parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.model)
    print(f"model {result['model']}: JS distance to P_all on {result['value_edits']} argument values "
          "of the toolcall references")
    print("| context | at the value's first token (mean) | (median) | mean over the response |")
    print("|---|---|---|---|")
    for name, r in result["contexts"].items():
        print(f"| {name} | {r['at_value_mean']:.3f} | {r['at_value_median']:.3f} | {r['response_mean']:.3f} |")
    write_result(args.json, "context-sensitivity",
                 {**result, "command": command("benchmarks.experiments.context_sensitivity", sys.argv[1:])})


if __name__ == "__main__":
    main()
