"""Timing helpers the speed benchmarks share (scripts in this folder import it by name)."""
from __future__ import annotations

import time

import torch

from mrtpo.replay import decoder_of, head_and_js, head_of, plan_item, replay_groups
from mrtpo.replay.js import js_against_first, js_chunk_bytes, js_distance_log_probs


def _random_hidden(model, items):
    """(plans, hidden [C, T, H] per item): random hidden states at each item's response
    positions under each distinct context (the head costs the same on any values; the JS
    step does not quite: its elementwise functions are slower on some ranges)."""
    width, param = model.config.hidden_size, next(model.parameters())
    g = torch.Generator(device=param.device).manual_seed(0)
    plans = [plan_item(item, n) for n, item in enumerate(items)]
    hidden = [torch.randn(len(p.contexts), len(it.response_ids), width, generator=g, device=param.device,
                          dtype=param.dtype) for p, it in zip(plans, items)]  # [C, T, H] each
    return plans, hidden


def replay_hidden(model, items):
    """(plans, hidden [C, T, H] per item): the model's own hidden states at each item's
    response positions under each distinct context (one full forward per context), so that
    the head and the JS step are timed on the distributions the replay really compares
    (P_all and P_without_k are close at most positions)."""
    decoder, device = decoder_of(model), next(model.parameters()).device
    plans = [plan_item(item, n) for n, item in enumerate(items)]
    hidden = []
    with torch.no_grad():
        for plan, item in zip(plans, items):
            rows = []
            for ctx in plan.contexts:
                ids = torch.as_tensor(list(ctx) + list(item.response_ids[:-1]), dtype=torch.long, device=device)[None]
                rows.append(decoder(input_ids=ids).last_hidden_state[0, len(ctx) - 1:])  # [T, H]
            hidden.append(torch.stack(rows))  # [C, T, H]
    return plans, hidden


def sync(device=None) -> None:
    """Wait for the accelerator's queued work (a GPU's kernels run after Python moves on):
    `device`'s, or, with none given, the GPU's if one is in use."""
    if (device.type == "cuda") if device is not None else (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.synchronize()


def time_head_and_js(model, items, chunk_tokens: int = 256, temperature: float = 1.0, states=None) -> float:
    """Seconds of the replay's work outside the model body (`mrtpo.replay.head_and_js`: the
    vocabulary head and the JS step) on as many positions as `distances` computes: each
    item's distinct contexts x its response tokens, from `states` ((plans, hidden), e.g.
    `replay_hidden`'s) or random hidden states."""
    plans, hidden = states or _random_hidden(model, items)
    param = next(model.parameters())
    k = max(it.num_rewards for it in items)
    q = torch.zeros(len(items), k, max(len(it.response_ids) for it in items), device=param.device)  # [N, K, T]
    t = time.perf_counter()
    with torch.no_grad():
        for n, (plan, h) in enumerate(zip(plans, hidden)):
            head_and_js(q, n, plan, h, head_of(model), temperature, chunk_tokens)
    sync(param.device)
    return time.perf_counter() - t


def time_head_and_js_parts(model, items, chunk_tokens: int = 256, temperature: float = 1.0,
                           states=None) -> dict[str, float]:
    """The parts of `time_head_and_js`, each timed on its own over the same chunks as
    `head_and_js` cuts: "head" (the vocabulary head), "log_softmax" (each context's, in
    fp32), "js" (P_all against each P_without_k: `js_against_first`, the landed step) and
    "js_pairwise" (the same distances by one `js_distance_log_probs` call per comparison,
    the step as it was before each context's probabilities were shared) -> seconds. `states`
    as in `time_head_and_js`."""
    plans, hidden = states or _random_hidden(model, items)
    head, device = head_of(model), next(model.parameters()).device
    out = dict.fromkeys(("head", "log_softmax", "js", "js_pairwise"), 0.0)

    def add_time(part, fn):
        sync(device)
        t = time.perf_counter()
        result = fn()
        sync(device)
        out[part] += time.perf_counter() - t
        return result

    with torch.no_grad():
        for plan, h in zip(plans, hidden):
            others = [j for j in plan.which if j is not None]
            step = max(1, chunk_tokens // h.shape[0])
            for t0 in range(0, h.shape[1], step):
                x = h[:, t0:t0 + step]  # [C, c, H]
                logits = add_time("head", lambda: head(x.reshape(-1, x.shape[-1])).view(x.shape[0], x.shape[1], -1))
                lp = add_time("log_softmax", lambda: torch.log_softmax(
                    logits.float() if temperature == 1.0 else logits.float() / temperature, -1))  # [C, c, V]
                del logits
                chunk = js_chunk_bytes(lp.device)
                add_time("js", lambda: js_against_first(lp, others, chunk_bytes=chunk))
                add_time("js_pairwise", lambda: [js_distance_log_probs(lp[0], lp[j], chunk_bytes=chunk) for j in others])
    return out


def time_prefixes(model, items) -> tuple[float, int]:
    """(seconds, tokens) of encoding each replay group's common prefix once, as the shared
    replay does first: the part of the model body's time that is the prompts' prefixes."""
    decoder, device = decoder_of(model), next(model.parameters()).device
    seconds, tokens = 0.0, 0
    with torch.no_grad():
        for group in replay_groups(items, True):
            if not group.prefix:
                continue
            ids = torch.as_tensor(group.prefix, dtype=torch.long, device=device)[None]  # [1, L]
            sync(device)
            t = time.perf_counter()
            decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
            sync(device)
            seconds += time.perf_counter() - t
            tokens += len(group.prefix)
    return seconds, tokens


def train_setup(model: str, task_name: str, options: list[str] | None, max_new_tokens: int | None = None):
    """(TrainConfig, task, task_args, the first batch's examples): `mrtpo train`'s settings for
    `model` (a built-in brings the settings of the recorded experiments, its task options only
    for its own task) on `task_name` with `-o` options."""
    from mrtpo.harness.config import TrainConfig
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, with_train_defaults
    from mrtpo.tasks import get_task
    from mrtpo.tasks.options import read_options

    values = with_train_defaults({"model": model, "task": task_name}, EXPERIMENT_DEFAULTS)
    task_args = {**values.get("task_args", {}), **read_options(options or [])}
    cfg = TrainConfig(**{**values, "task": task_name, "task_args": task_args,
                         **({"max_new_tokens": max_new_tokens} if max_new_tokens else {})})
    task = get_task(task_name, **task_args)
    return cfg, task, task_args, task.load()[: cfg.batch_prompts]


def step_parser(doc: str, repeats: int | None = None):
    """The arguments every one-step speed script takes (--model, --task, -o, --threads, --json),
    with `repeats`: also --repeats (that default) and --seed (0), for scripts that alternate
    settings over rounds; the script adds its own."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", dest="options", action="append", default=None, metavar="KEY=VALUE")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats)
        ap.add_argument("--seed", type=int, default=0)
    return ap


def parse_step_args(ap, argv: list[str] | None):
    """(`ap`'s arguments, the 1-minute load average before the run), with --threads applied:
    another job on the cores slows every setting alike, but says how to read the times."""
    import os

    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args, os.getloadavg()[0]


def move_adapter(policy, seed: int) -> None:
    """Set every LoRA B matrix of `policy` to seeded noise (0.01 x normal): an adapter away from
    its zero start, as after some training, so that its gradients are all non-trivial and
    folding it changes the weights. The same seed gives the same adapter."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)


def current_commit() -> str | None:
    """The short hash of the checkout's HEAD (the code a result was measured on), None outside git."""
    import subprocess
    from pathlib import Path

    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or None


def step_settings(cfg, task_args: dict) -> dict:
    """The train settings a speed result was measured with, as its JSON records them."""
    return {k: getattr(cfg, k) for k in ("batch_prompts", "num_generations", "max_new_tokens",
                                         "temperature")} | {"task_args": task_args}


def write_result(path: str | None, doc: dict) -> None:
    """Write a result's JSON to `path` (its folder made, written whole or not at all); None: nothing."""
    if not path:
        return
    import json
    from pathlib import Path

    from mrtpo.textio import write_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), json.dumps(doc, indent=1) + "\n")


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), for speed results: machines lent to this
    project differ by 4x in float32 rate, so every table names the CPU it was measured on."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def timed(fn):
    """(fn(), seconds it took), the accelerator's queued work included."""
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t
