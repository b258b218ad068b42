"""A roofline for each phase of a training step: what the machine could do, what the step does.

First the machine's peaks, measured in the same run: the matrix-product rate (a square fp32
and bf16 product, the best of a few) and the memory bandwidth (a large tensor copy, bytes read
plus written). Then one step of `mrtpo train` on the policy with its train settings (default:
SmolLM2-135M-Instruct on text2sql with the worked example, B x G completions), split into its
phases and timed on their own:

- prefill: the B distinct prompts through the model once (their KV cache, as the rollout does:
  the beginning they all share once, then each prompt's rest);
- decode: the rest of generation, G completions per prompt, one token per row per forward,
  drawn by the loop's per-row seeded sampler (on CPU the lean decoding path the trainer takes);
- score: the verifiers (no model);
- replay: MRTPO's teacher-forced replay of every (completion, reward) pair (its tokens: those
  it feeds through the first layer, counted by a hook, so the rollout's encoded start that
  it takes instead of encoding it again is not counted);
- forward / backward: the update's log-probabilities with gradients (the prompts encoded as the
  prefill does, once for their group), then the backward pass;
- optimizer: AdamW over the LoRA parameters.

The update is then timed once more with the LoRA dropout off, since its random draws are a
large part of the forward on CPU (reported beside the table, not in it).

Per phase it prints the tokens, the FLOPs (2 per weight per token through the body, the
vocabulary head where logits are made, attention's 4 x layers x width x context; the
backward counts the forward once more, since the frozen base weights need only the
activations' gradients, plus the LoRA weights' own), the bytes of weights read (decode reads every weight once
per new token; the other phases read them once per pass), the measured seconds, the time each
peak allows, the bound (the larger of the two) and how far from it the phase runs; and how much
of each phase goes to prompt tokens. Nothing is asserted: these are measured figures.

    python -m benchmarks.speed.roofline [--model smollm2-135m] [--task text2sql] [-o demo=true]
        [--threads 2] [--json benchmarks/results/roofline-smollm2-135m.json]
"""
from __future__ import annotations

import contextlib
import sys
import time

import torch

from benchmarks.lib.results import command, cpu_name, write_result
from benchmarks.lib.setting import adapted_policy, sample_batch, step_parser, step_settings, train_setup
from benchmarks.speed.timing import sync, timed


def peak_flops(dtype: torch.dtype, n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """FLOP/s of the best of `repeats` square [n, n] products in `dtype`."""
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def bandwidth(mbytes: int = 512, repeats: int = 5, device: str = "cpu") -> float:
    """Bytes/s moved by the best of `repeats` copies of a `mbytes` MB fp32 tensor (read + write)."""
    src = torch.randn(mbytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - t)
    return 2 * src.numel() * 4 / best


def shape(model) -> dict:
    """What the FLOP count needs: weights in the body (every parameter but the embedding),
    layers, width, vocabulary, bytes per weight."""
    cfg = model.config
    emb = model.get_input_embeddings().weight
    params = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    return {"body": params - emb.numel(), "layers": cfg.num_hidden_layers, "width": cfg.hidden_size,
            "vocab": emb.shape[0], "weight_bytes": params * emb.element_size()}


def forward_flops(s: dict, tokens: int, context: float, logits: int) -> float:
    """2 per body weight per token, attention over `context` positions on average, the head
    on `logits` positions."""
    return 2 * s["body"] * tokens + 4 * s["layers"] * s["width"] * context * tokens + 2 * s["width"] * s["vocab"] * logits


@contextlib.contextmanager
def fed_tokens(model):
    """Within the block, counts the token positions every forward feeds through the decoder's
    first layer (padding included: it costs what a token costs); yields a one-item list."""
    from mrtpo.replay.plumbing import decoder_of

    count = [0]

    def hook(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]  # [B, L, H]
        count[0] += hidden.shape[:-1].numel()

    handle = decoder_of(model).layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield count
    finally:
        handle.remove()


def measure_step(policy, task, examples, cfg) -> tuple[list[dict], dict]:
    """The step's phases as rows (name, tokens, prompt_tokens, flops, bytes, seconds)."""
    from mrtpo.advantages import estimate, place
    from mrtpo.harness.forward import token_logps
    from mrtpo.harness.loss import policy_loss
    from mrtpo.harness.rollout import prompt_cache, prompt_token_ids, render_prompt
    from mrtpo.harness.scoring import Scorer
    from mrtpo.harness.token_credit import policy_replayer, replay_distances
    from mrtpo.replay.planning import common_prefix

    s = shape(policy.model)
    G = cfg.num_generations
    ids = [prompt_token_ids(policy.tokenizer, render_prompt(policy.tokenizer, task, ex)) for ex in examples]
    p = max(map(len, ids))
    policy.model.eval()
    with torch.no_grad(), policy.merged() as model:
        _, t_prefill = timed(lambda: prompt_cache(model, ids, G, policy.pad_id, max_new_tokens=cfg.max_new_tokens))
    torch.manual_seed(0)
    # the loop's sampler: on CPU the lean decoding path
    rollout, t_sample = timed(lambda: sample_batch(policy, task, examples, cfg, 0))
    new = sum(len(r) for r in rollout.response_ids)
    steps = rollout.max_length
    common = common_prefix([x[:-1] for x in ids])
    prompt_tokens = common + sum(len(x) - common for x in ids)  # the shared beginning once, then each rest
    scorer = Scorer(task, 0)
    scored, t_score = timed(lambda: scorer.score(rollout.examples, rollout.responses))
    credit = estimate(scored.scores, G, "gdpo", weights=scored.weights, floors=scored.floors)
    # what the shared replay feeds through the body (not the rollout's encoded start it takes)
    with fed_tokens(policy.model) as fed:
        (q, _), t_replay = timed(lambda: replay_distances(policy_replayer(policy), task, rollout, scored,
                                                          cfg.temperature))
    fed = fed[0]
    mask = rollout.response_mask()
    adv = place(credit, q, mask)
    batch = rollout.batch(policy.pad_id, policy.device)
    t = batch.response_mask.shape[1]
    params = policy.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    policy.model.train()
    (logp, _), t_forward = timed(lambda: token_logps(policy.model, batch.input_ids, batch.attention_mask,
                                                     batch.position_ids, t, cfg.temperature, share_prompts=True))
    loss, _ = policy_loss(logp, logp.detach(), adv.to(logp.device), batch.response_mask.float(), num_sequences=len(rollout),
                          num_tokens=float(mask.sum()), max_completion_length=cfg.max_new_tokens)
    _, t_backward = timed(loss.backward)
    _, t_opt = timed(optimizer.step)
    no_dropout = None
    if cfg.lora_dropout:  # what the LoRA dropout's draws cost: the same update without them
        drops = [m for m in policy.model.modules() if isinstance(m, torch.nn.Dropout) and m.p]
        old_p = [m.p for m in drops]
        for m in drops:
            m.p = 0.0
        policy.model.zero_grad(set_to_none=True)
        (logp, _), f0 = timed(lambda: token_logps(policy.model, batch.input_ids, batch.attention_mask,
                                                  batch.position_ids, t, cfg.temperature, share_prompts=True))
        loss, _ = policy_loss(logp, logp.detach(), adv.to(logp.device), batch.response_mask.float(), num_sequences=len(rollout),
                              num_tokens=float(mask.sum()), max_completion_length=cfg.max_new_tokens)
        _, b0 = timed(loss.backward)
        for m, p_old in zip(drops, old_p):
            m.p = p_old
        no_dropout = {"lora_dropout": cfg.lora_dropout, "forward": f0, "backward": b0}
    lora = sum(x.numel() for x in params)
    update_tokens = prompt_tokens + new  # the prompts as the prefill encodes them, then the responses
    rows = [
        {"phase": "prefill", "tokens": prompt_tokens, "prompt_tokens": prompt_tokens,
         "flops": forward_flops(s, prompt_tokens, p / 2, 0), "bytes": s["weight_bytes"], "seconds": t_prefill},
        {"phase": "decode", "tokens": new, "prompt_tokens": 0,
         "flops": forward_flops(s, new, p + steps / 2, new), "bytes": s["weight_bytes"] * steps,
         "seconds": t_sample - t_prefill},
        {"phase": "score", "tokens": new, "prompt_tokens": 0, "flops": 0.0, "bytes": 0.0, "seconds": t_score},
        {"phase": "replay", "tokens": fed or new, "prompt_tokens": None,
         "flops": forward_flops(s, fed or new, p, new * len(scored.names)), "bytes": s["weight_bytes"],
         "seconds": t_replay},
        {"phase": "forward", "tokens": update_tokens, "prompt_tokens": prompt_tokens,
         "flops": forward_flops(s, update_tokens, p / 2, new), "bytes": s["weight_bytes"], "seconds": t_forward},
        {"phase": "backward", "tokens": update_tokens, "prompt_tokens": prompt_tokens,
         "flops": forward_flops(s, update_tokens, p / 2, new) + 6 * lora * update_tokens,
         "bytes": s["weight_bytes"], "seconds": t_backward},
        {"phase": "optimizer", "tokens": 0, "prompt_tokens": 0, "flops": 10.0 * lora, "bytes": 16.0 * lora,
         "seconds": t_opt},
    ]
    return rows, {"prompt_tokens_per_prompt": p, "completion_tokens": new, "decode_steps": steps,
                  "lora_parameters": lora, "without_lora_dropout": no_dropout, **s}


def main(argv: list[str] | None = None) -> dict:
    ap = step_parser(__doc__)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (benchmarks/speed/gpu.py runs it on a lent GPU)")
    ap.add_argument("--dtype", default="float32", help="the weights' dtype (the CPU's train setting: float32)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's train setting")
    ap.add_argument("--quick", action="store_true", help="small peak benchmarks and no warm-up step (tests)")
    ap.add_argument("--lora-dropout", type=float, default=None,
                    help="default: the model's train setting (a built-in: the recorded experiments' 0.05)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.models.builtin import builtin_name

    cfg, task, task_args, examples = train_setup(args.model, args.task, args.options, args.max_new_tokens)
    if args.lora_dropout is not None:
        import dataclasses

        cfg = dataclasses.replace(cfg, lora_dropout=args.lora_dropout)
    dev = args.device
    # a GPU reaches its peak only on large products (an H200's bf16: ~790 TFLOP/s at 8192)
    n, mb = (256, 16) if args.quick else (8192, 2048) if dev.startswith("cuda") else (2048, 512)
    machine = {"fp32_flops": peak_flops(torch.float32, n, device=dev), "bf16_flops": peak_flops(torch.bfloat16, n, device=dev),
               "bandwidth": bandwidth(mb, device=dev), "threads": torch.get_num_threads(), "device": dev,
               "dtype": args.dtype, "cpu": cpu_name()}
    if dev.startswith("cuda"):
        machine["gpu"] = torch.cuda.get_device_name(dev)
    policy = adapted_policy(args.model, cfg, None, lora_dropout=cfg.lora_dropout, device=dev, dtype=args.dtype)
    if not args.quick:
        measure_step(policy, task, examples, cfg)  # warm-up: allocations, first-call paths
    rows, sizes = measure_step(policy, task, examples, cfg)
    peak = machine["bf16_flops"] if args.dtype == "bfloat16" else machine["fp32_flops"]
    print(f"machine: {machine.get('gpu', machine['cpu'])}: fp32 {machine['fp32_flops'] / 1e9:.0f} GFLOP/s, bf16 "
          f"{machine['bf16_flops'] / 1e9:.0f} GFLOP/s (square {n} products), copy {machine['bandwidth'] / 1e9:.1f} "
          f"GB/s, {machine['threads']} threads; the bound uses {args.dtype}'s")
    print(f"step: {builtin_name(args.model) or args.model} on {args.task}, {cfg.batch_prompts} x "
          f"{cfg.num_generations}, prompts {sizes['prompt_tokens_per_prompt']} tokens, "
          f"{sizes['completion_tokens']} completion tokens in {sizes['decode_steps']} decode steps")
    print(f"{'phase':<10} {'tokens':>7} {'GFLOP':>8} {'GB read':>8} {'seconds':>8} {'compute s':>9} "
          f"{'memory s':>9} {'bound':>7} {'x bound':>8} {'prompt':>7}")
    for r in rows:
        r["compute_seconds"] = r["flops"] / peak
        r["memory_seconds"] = r["bytes"] / machine["bandwidth"]
        r["bound"] = "compute" if r["compute_seconds"] >= r["memory_seconds"] else "memory"
        floor = max(r["compute_seconds"], r["memory_seconds"])
        r["times_bound"] = r["seconds"] / floor if floor > 0 else None
        share = r["prompt_tokens"] / r["tokens"] if r["prompt_tokens"] is not None and r["tokens"] else None
        r["prompt_share"] = share
        print(f"{r['phase']:<10} {r['tokens']:>7} {r['flops'] / 1e9:>8.1f} {r['bytes'] / 1e9:>8.2f} "
              f"{r['seconds']:>8.2f} {r['compute_seconds']:>9.2f} {r['memory_seconds']:>9.2f} {r['bound']:>7} "
              + (f"{r['times_bound']:>8.1f}" if r["times_bound"] else f"{'':>8}")
              + (f" {share:>6.0%}" if share is not None else ""))
    total = sum(r["seconds"] for r in rows)
    print(f"total {total:.1f} s")
    if sizes.get("without_lora_dropout"):
        nd = sizes["without_lora_dropout"]
        print(f"the update without LoRA dropout ({nd['lora_dropout']} in the train settings): forward "
              f"{nd['forward']:.2f} s, backward {nd['backward']:.2f} s")
    doc = {"model": builtin_name(args.model) or args.model, "task": args.task,
           "settings": step_settings(cfg, task_args),
           "machine": machine, "sizes": sizes, "rows": rows, "total_seconds": total,
           "command": command("benchmarks.speed.roofline", sys.argv[1:] if argv is None else argv)}
    return write_result(args.json, "roofline", doc)


if __name__ == "__main__":
    main()
