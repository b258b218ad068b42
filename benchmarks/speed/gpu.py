"""GPU figures in one command: `mrtpo train` on a 0.5B-shaped policy, then the replay benchmark.

The policy is a random-initialised Qwen2 with Qwen2.5-0.5B's shape (24 layers, 896 wide,
14 heads / 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings), built with
`from_config` so nothing is downloaded, in bf16, with the built-in policy's tokenizer (its
ids are a subset of the 151,936; the cached `mrtpo-tiny` one when present, else the same
kind of byte-level BPE trained here on the bundled tasks' text in a few seconds). It trains
three steps of MRTPO (on GDPO) with `mrtpo train`'s loop on the bundled toolcall sample with
B = 8 prompts x G = 8 completions and up to 256 new tokens (a random policy rarely stops, so
most completions run to 256), LoRA r 16, then three GDPO steps (`--no-mrtpo`) for MRTPO's
overhead, and runs `benchmarks/speed/replay.py` on the same device. Printed: per step and phase
the seconds, completion tokens and peak GPU memory; MRTPO's overhead; the replay speedup
and its token-count ideal. A JSON summary goes to `--out` (default: $OUT/gpu.json when $OUT
is set, else benchmarks/results/gpu.json; with --smoke benchmarks/out/gpu-smoke.json).

    python benchmarks/speed/gpu.py                 # on a machine with a CUDA GPU (~5 minutes on one H200)
    python benchmarks/speed/gpu.py --smoke         # the same code on CPU at a tiny scale (~1 minute)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                  rms_norm_eps=1e-6, tie_word_embeddings=True)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, rms_norm_eps=1e-6,
             tie_word_embeddings=True)


def tokenizer():
    """The built-in policy's tokenizer if it is cached, else one trained the same way here."""
    from mrtpo.models.default import RECIPES, DEFAULT_MODEL, is_built, model_dir

    built = model_dir(RECIPES[DEFAULT_MODEL])
    if is_built(built):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(built), f"mrtpo-tiny's ({built})"
    from mrtpo.models.tiny import train_tokenizer
    from mrtpo.tasks import get_task

    texts = []
    for name in ("toolcall", "text2sql", "instruct"):
        task = get_task(name)
        for ex in task.load():
            texts += [ex.prompt, ex.system or ""]
            try:
                texts.append(task.reference(ex))
            except Exception:  # a task without references
                pass
    return train_tokenizer(texts, vocab_size=RECIPES[DEFAULT_MODEL].vocab_size), "trained here (mrtpo-tiny not cached)"


def build_policy(path: Path, shape: dict) -> str:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from mrtpo.models.tiny import save_policy

    tok, where = tokenizer()
    config = Qwen2Config(**shape, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    save_policy(model, tok, path)
    n = sum(p.numel() for p in model.parameters())
    return f"Qwen2 from_config, {n / 1e6:.0f}M parameters, vocabulary {shape['vocab_size']}, bf16; tokenizer {where}"


def train_steps(model: str, mrtpo: bool, args, out_dir: Path) -> dict:
    import torch

    from mrtpo.harness import TrainConfig, train

    cfg = TrainConfig(model=model, task="toolcall", steps=args.steps, batch_prompts=args.batch_prompts,
                      num_generations=args.num_generations, max_new_tokens=args.max_new_tokens, lr=1e-5,
                      advantage="gdpo", mrtpo=mrtpo, output_dir=str(out_dir), save_every=0,
                      log_completions_every=0, device=args.device, dtype="auto")
    steps = []
    cuda = torch.cuda.is_available() and args.device != "cpu"
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def on_step(record: dict) -> None:
        phases = {k.split("/", 1)[1]: round(v, 3) for k, v in record.items()
                  if k.startswith("time/") and isinstance(v, float)}
        tokens = record["completions/mean_length"] * args.batch_prompts * args.num_generations
        steps.append({"step": record["step"], "seconds": phases, "completion_tokens": round(tokens)})
        print(f"  {'MRTPO' if mrtpo else 'GDPO '} step {record['step']}: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + f", {tokens:.0f} completion tokens", flush=True)

    t0 = time.perf_counter()
    train(cfg, on_step=on_step)
    out = {"steps": steps, "wall_seconds": round(time.perf_counter() - t0, 1)}
    if cuda:
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    kept = steps[1:] or steps  # the first step warms kernels and the allocator
    out["median_step_seconds"] = statistics.median(s["seconds"].get("step", 0.0) for s in kept)
    out["median_phase_seconds"] = {p: statistics.median(s["seconds"].get(p, 0.0) for s in kept)
                                   for p in ("generate", "verify", "replay", "update")}
    out["s_per_1k_tokens"] = 1000 * sum(s["seconds"].get("step", 0.0) for s in kept) / max(
        1, sum(s["completion_tokens"] for s in kept))
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shape, B=2 G=2, 16 new tokens, on CPU")
    ap.add_argument("--device", default=None, help="default: cuda when available (cpu with --smoke)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-prompts", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--no-gdpo", action="store_true", help="skip the GDPO steps (no overhead figure)")
    ap.add_argument("--no-replay-bench", action="store_true", help="skip benchmarks/speed/replay.py")
    ap.add_argument("--out", default=None, help="JSON summary path")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    import torch

    if args.smoke:
        args.steps, args.batch_prompts, args.num_generations, args.max_new_tokens = 2, 2, 2, 16
    if args.device is None:
        args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if args.device != "cpu" and not torch.cuda.is_available():
        sys.exit("no CUDA device here; pass --smoke to run the same code on CPU at a tiny scale")
    here = Path(__file__).resolve().parents[1]  # benchmarks/ (this script is in benchmarks/speed/)
    out_path = Path(args.out or (Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT")
                                 else here / "out" / "gpu-smoke.json" if args.smoke  # never taken for a GPU result
                                 else here / "results" / "gpu.json"))
    summary: dict = {"device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
                     "settings": {k: getattr(args, k) for k in ("steps", "batch_prompts", "num_generations",
                                                                "max_new_tokens")},
                     "versions": {"torch": torch.__version__}}
    with tempfile.TemporaryDirectory(prefix="mrtpo-gpu-") as tmp:
        policy = Path(tmp) / "policy"
        summary["policy"] = build_policy(policy, SMOKE if args.smoke else QWEN25_05B)
        print(f"policy: {summary['policy']}; device {summary['device']}", flush=True)
        summary["mrtpo"] = train_steps(str(policy), True, args, Path(tmp) / "run-mrtpo")
        if not args.no_gdpo:
            summary["gdpo"] = train_steps(str(policy), False, args, Path(tmp) / "run-gdpo")
            summary["mrtpo_overhead"] = round(summary["mrtpo"]["s_per_1k_tokens"] / summary["gdpo"]["s_per_1k_tokens"], 3)
    if not args.no_replay_bench:
        cmd = [sys.executable, str(Path(__file__).parent / "replay.py"), "--device", args.device]
        cmd += ["--quick", "--groups", "1"] if args.smoke else ["--repeats", "3", "--groups", "4",
                                                                "--dtype", "bfloat16"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        print(proc.stdout[-2000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
        summary["replay_bench"] = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else f"failed: {proc.returncode}"
    for name in ("mrtpo", "gdpo"):
        if name in summary:
            r = summary[name]
            print(f"{name}: median step {r['median_step_seconds']:.2f} s, phases "
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["median_phase_seconds"].items())
                  + f" s, {r['s_per_1k_tokens']:.3f} s per 1k tokens"
                  + (f", peak GPU memory {r['peak_gpu_memory_gib']} GiB" if "peak_gpu_memory_gib" in r else ""))
    if "mrtpo_overhead" in summary:
        print(f"MRTPO overhead: {summary['mrtpo_overhead']:.2f}x a GDPO step per token")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"summary written to {out_path}")


if __name__ == "__main__":
    main()
