"""Data-parallel `mrtpo train`: what each process does, and what the processes share.

Launched by `accelerate launch` (or `torchrun`), every process runs the same loop on its own
share of the step's prompts. What must hold is that a step on W processes computes what one
process computes on the whole global batch:

- prompts: the step's B prompts are cut into W contiguous shares (B must divide by W), so
  the global batch, rank by rank, is the single-process batch in the same order;
- sampling: each completion is sampled from its own generator seeded by (seed, step, row
  of the global batch) (`RowSeededSampling`), so which completions a row gets does not
  depend on how many processes share the batch (nor on the other rows);
- scores: each process verifies its own completions; the scores are gathered, aligned on
  the reward columns of the whole batch (`gather_scores`), and every process computes the
  credit of the whole batch with the same `estimate(...)` call (GDPO's batch z-score, SAW's
  coefficients of variation), then keeps its own rows (`Distributed.rows`);
- loss: per-token losses are normalised by the whole batch (its token count for dapo, its
  number of sequences for grpo / dr_grpo) and gradients are averaged over processes before
  clipping, which is what DDP does; with equal shares this is the gradient of the global
  batch's loss.

Replay (MRTPO's distances) and the policy update run on each process's own completions.
With one process every method here is a no-op and `Distributed()` costs nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from mrtpo.advantages import Credit
from mrtpo.harness.config import ConfigError


class DistributedError(ConfigError):
    """A setting that cannot be split across processes, or a failure on the main process."""


@dataclass
class Distributed:
    """This process's place in the world of processes (rank 0 of 1 when not launched)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device | None = None  # the device this process trains on (None: not distributed)
    backend: str = ""  # "gloo" (CPU) or "nccl" (GPUs)

    @classmethod
    def from_env(cls, batch_prompts: int | None = None) -> "Distributed":
        """Join the process group that `accelerate launch` / `torchrun` set up, if any.

        `batch_prompts` (the global B) is checked to split evenly, before any model is loaded.

        accelerate's `PartialState` joins the group and picks the backend (nccl on GPUs, gloo
        on a machine without them) and this process's device (cuda:<local rank>). Without
        `cpu=True` on a GPU-less machine it would quietly stay a single process, and every
        process would train the whole batch on its own.
        """
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())
        if state.num_processes != world or not torch.distributed.is_initialized():
            raise DistributedError(f"launched as {world} processes (WORLD_SIZE) but accelerate set up "
                                   f"{state.num_processes} ({state.distributed_type}); launch with "
                                   "`accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`")
        dist = cls(state.process_index, state.num_processes, state.local_process_index,
                   torch.device(state.device), torch.distributed.get_backend())
        if batch_prompts is not None:
            dist.shard(range(batch_prompts))
        return dist

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    # -------------------------------------------------------------------- devices and data
    def policy_device(self, requested: str) -> str:
        """The device to load the policy on: this process's own GPU when launched on GPUs."""
        if not self.active or requested not in ("auto", "cuda"):
            return requested
        return str(self.device)

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This process's contiguous share of the step's prompts."""
        if not self.active:
            return list(items)
        if len(items) % self.world_size:
            raise DistributedError(
                f"--batch-prompts {len(items)} does not split over {self.world_size} processes; "
                f"use a multiple of {self.world_size} so every process gets the same number of prompts")
        share = len(items) // self.world_size
        return list(items[self.rank * share:(self.rank + 1) * share])

    def rows(self, n_local: int) -> slice:
        """This process's rows of the global batch (every process holds `n_local` of them)."""
        return slice(self.rank * n_local, (self.rank + 1) * n_local)

    # ---------------------------------------------------------------------------- gathering
    def gather_objects(self, items: list[Any]) -> list[Any]:
        """Every process's list, concatenated in rank order (picklable items)."""
        if not self.active:
            return list(items)
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, list(items))
        return [x for part in parts for x in part]

    def gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of every process, in rank order; the last dim is zero-padded to the longest.

        For per-token tensors ([n, T] masks, [n, K, T] distances) whose T differs between
        processes (each pads to its own longest completion). Returns a CPU tensor.
        """
        if not self.active:
            return x
        parts = self.gather_objects([x.detach().cpu()])
        t = max(p.shape[-1] for p in parts)
        return torch.cat([torch.nn.functional.pad(p, (0, t - p.shape[-1])) for p in parts])

    def gather_scores(self, scored):
        """(this process's rows on the global reward columns, the whole batch's `Scored`).

        Columns follow the order in which rewards first appear in the global batch, which is
        the single-process order; a reward a process never saw is NaN on its rows (it does not
        apply there). Verdicts and row names stay per row.
        """
        if not self.active:
            return scored, scored
        from mrtpo.harness.scoring import Scored

        parts = self.gather_objects([scored])
        names: list[str] = []
        weights: dict[str, float] = {}
        floors: dict[str, float] = {}
        for part in parts:
            for k, name in enumerate(part.names):
                if name not in weights:
                    names.append(name)
                    weights[name] = float(part.weights[k])
                    floors[name] = float(part.floors[k])

        def on_global_columns(part) -> torch.Tensor:
            table = torch.full((part.scores.shape[0], len(names)), float("nan"))  # [n, K]
            for k, name in enumerate(part.names):
                table[:, names.index(name)] = part.scores[:, k]
            return table

        w = torch.tensor([weights[n] for n in names])  # [K]
        f = torch.tensor([floors[n] for n in names])  # [K]
        seconds: dict[str, float] = {}
        for part in parts:
            for name, s in part.seconds.items():
                seconds[name] = seconds.get(name, 0.0) + s
        everyone = Scored(names, torch.cat([on_global_columns(p) for p in parts]), w, f,
                          [r for p in parts for r in p.row_names], [v for p in parts for v in p.verdicts],
                          seconds)
        mine = replace(scored, names=names, scores=on_global_columns(scored), weights=w, floors=f)
        return mine, everyone

    # --------------------------------------------------------------------------- reductions
    def _comm(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.device) if self.backend == "nccl" else x.cpu()

    def sum(self, value: float) -> float:
        if not self.active:
            return float(value)
        t = self._comm(torch.tensor([float(value)], dtype=torch.float64))
        torch.distributed.all_reduce(t)
        return float(t.item())

    def mean(self, value: float) -> float:
        return self.sum(value) / self.world_size

    def average_gradients(self, params: Sequence[torch.nn.Parameter], bucket_numel: int = 2**25) -> None:
        """Replace every gradient by its mean over processes (what DDP does), in flat buckets.

        A parameter without a gradient counts as a zero gradient, so all processes reduce the
        same buckets in the same order.
        """
        if not self.active:
            return
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        buckets: list[list[torch.Tensor]] = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            g, last = p.grad, buckets[-1] if buckets else None
            if last and g.dtype == last[0].dtype and g.device == last[0].device \
                    and sum(x.numel() for x in last) + g.numel() <= bucket_numel:
                last.append(g)
            else:
                buckets.append([g])
        for bucket in buckets:
            flat = _flatten_dense_tensors(bucket)
            comm = self._comm(flat)
            torch.distributed.all_reduce(comm)
            comm.div_(self.world_size)
            for dst, src in zip(bucket, _unflatten_dense_tensors(comm.to(flat.device), bucket)):
                dst.copy_(src)

    def broadcast_parameters(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Make every process start from rank 0's trainable weights (as DDP does)."""
        if not self.active:
            return
        with torch.no_grad():
            for p in params:
                t = self._comm(p.data)
                torch.distributed.broadcast(t, src=0)
                p.data.copy_(t.to(p.device))

    def broadcast_object(self, obj: Any) -> Any:
        if not self.active:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def run_on_main(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on rank 0 only and hand its result to every process.

        If it raises there, every process raises (the same type when it can be rebuilt from
        the message), so no process waits forever for one that stopped.
        """
        if not self.active:
            return fn()
        result, error = None, None
        if self.is_main:
            try:
                result = fn()
            except Exception as exc:  # re-raised below on every process
                error = exc
        result, error_info = self.broadcast_object(
            (result, None if error is None else (type(error), str(error))))
        if self.is_main and error is not None:
            raise error
        if error_info is not None:
            kind, message = error_info
            try:
                raise kind(message)
            except TypeError:
                raise DistributedError(f"on the main process: {kind.__name__}: {message}") from None
        return result

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()

    # ----------------------------------------------------------------------------- sampling
    def sampler(self, seed: int, step: int, first_row: int, temperature: float = 1.0,
                top_p: float = 1.0, record_logps: bool = False) -> list:
        """The logits processors for sampling this process's rows (see RowSeededSampling)."""
        return [RowSeededSampling(seed, step, first_row, temperature, top_p, record_logps)]


def leave_process_group() -> None:
    """Destroy the process group that `accelerate launch` / `torchrun` set up, if any: what
    torch and accelerate (`Accelerator.end_training`) ask a launched script to do once it needs
    no more communication. Without it gloo's threads can still be running while the
    interpreter shuts down, and a process that trained and saved aborts at exit ("terminate
    called without an active exception", pytorch/pytorch#190489). Called after a run that
    ended well only: a process that failed leaves the group as it is, since destroying it
    while another process waits in a collective can hang (torchtitan #1342)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def is_main_process() -> bool:
    """True unless this is a non-zero rank of a launched run (RANK is set by the launcher)."""
    return int(os.environ.get("RANK", "0")) == 0


def local_credit(credit: Credit, rows: slice) -> Credit:
    """The rows of the whole batch's credit that this process trains on."""
    return Credit(credit.per_reward[rows], credit.offset[rows], credit.weights)


def row_seed(seed: int, step: int, row: int) -> int:
    """The generator seed of one completion: a pure function of (run seed, step, global row)."""
    return ((seed * 1_000_003 + step) * 1_000_033 + row) % (2**63 - 1)


class RowSeededSampling:
    """A transformers logits processor that samples each row from its own seeded generator.

    `generate` samples all rows of a batch from one generator, so a row's completion depends
    on which other rows share its batch; split the batch over processes and every completion
    changes. Here row i of the batch is global row `first_row + i` and draws its uniforms from
    a generator seeded by `row_seed(seed, step, first_row + i)`, one per decoding step: its
    completion depends only on its prompt, the weights and that seed.

    It applies the sampling temperature and top-p filter itself (the same warpers transformers
    uses), draws the token by inverting the row's CDF, and returns scores that are -inf
    everywhere but that token (`draws_tokens`: rollout.sample then decodes greedily, which
    picks that token; transformers' own warpers and multinomial draw would have had a single
    choice left as well). Must be the last processor that changes the distribution.

    Each row's uniforms are drawn `BLOCK` decoding steps at a time (one `torch.rand(BLOCK)`
    per row gives the same numbers as BLOCK successive `torch.rand(1)`, tested) and moved to
    the device once per block, not once per token.

    `record_logps`: also keep each drawn token's log-probability under the sampling model,
    log softmax(logits / temperature) as `forward.token_logps` computes it (top-p not applied,
    as TRL's sampling log-probs), for the update's importance-sampling correction when the
    sampling model is not the trained one (--rollout-dtype); `logps()` returns them.
    """

    draws_tokens = True
    BLOCK = 64

    def __init__(self, seed: int, step: int, first_row: int, temperature: float = 1.0, top_p: float = 1.0,
                 record_logps: bool = False):
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.seed, self.step, self.first_row = seed, step, first_row
        self.temperature = temperature
        self.record_logps = record_logps
        self._logps: list[torch.Tensor] = []  # per decoding step: [n] the drawn tokens' log-probs
        self.warpers = []
        if temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=top_p))
        self.generators: list[torch.Generator] = []
        self.calls = 0  # decoding steps so far
        self._block: torch.Tensor | None = None  # [n, BLOCK] uniforms of the current block

    def _uniforms(self, n: int, device) -> torch.Tensor:
        """Row i's uniform for this decoding step -> [n] (float64)."""
        while len(self.generators) < n:
            g = torch.Generator().manual_seed(row_seed(self.seed, self.step, self.first_row + len(self.generators)))
            self.generators.append(g)
        col = self.calls % self.BLOCK
        if col == 0 or self._block is None or self._block.shape[0] < n:
            if self._block is not None and self._block.shape[0] < n:
                raise ValueError("RowSeededSampling: the batch grew between decoding steps")
            self._block = torch.stack([torch.rand(self.BLOCK, generator=g, dtype=torch.float64)
                                       for g in self.generators[:n]]).to(device)  # [n, BLOCK]
        self.calls += 1
        return self._block[:n, col]  # [n]

    def logps(self) -> torch.Tensor | None:
        """[n, steps] float32: row i's drawn tokens' log-probs, one column per decoding step
        (columns after a row stopped are the padding's); None unless `record_logps`."""
        return torch.stack(self._logps, 1).float() if self.record_logps and self._logps else None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        raw = scores  # [n, V] the model's logits
        for warp in self.warpers:
            scores = warp(input_ids, scores)  # [n, V]
        probs = torch.softmax(scores.double(), dim=-1)  # [n, V]
        cdf = probs.cumsum(-1)  # [n, V]
        u = self._uniforms(scores.shape[0], scores.device)  # [n]
        token = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True)  # [n, 1]
        last = (probs > 0).cumsum(-1).argmax(-1, keepdim=True)  # [n, 1] the last token it may pick
        token = torch.minimum(token, last)  # u * total rounded up to the total: take the last one
        if self.record_logps:
            logp = torch.log_softmax(raw.double() / self.temperature, dim=-1)  # [n, V]
            self._logps.append(logp.gather(-1, token).squeeze(-1))  # [n]
        out = torch.full_like(scores, float("-inf"))  # [n, V]
        return out.scatter_(-1, token, 0.0)
