"""Decoding's products with their weights packed once, on CPU: the vocabulary head, and on the
lean decoding path (`harness.decode`) every layer's projections.

Each decoding step multiplies a few rows (B x G, 8 in SmolLM2's train settings) by the head's
[V, H] weight (49,152 x 576, 113 MB in float32). For so few rows MKL's sgemm re-packs the
whole weight on every call; a weight packed once for a given row count saves that. Two
libraries in torch's CPU build can do it (`BACKENDS`), and which is faster depends on the CPU:

- MKL (`torch.ops.mkl._mkl_linear`), on Intel CPUs. Measured on the head's shape on a 2-core
  Intel Xeon: 9.6 -> 5.3 ms per step at 2 threads, 26 -> 12 ms at 1 thread.
- oneDNN (`torch.ops.mkldnn._linear_pointwise`), on other x86 CPUs, where MKL's small-row
  products take slow code paths. Measured on a 2-core AMD EPYC (AVX2): SmolLM2's 210
  projections and head for 8 rows take 98 ms a decoding step at 2 threads packed for oneDNN,
  206 ms packed for MKL and 249 ms unpacked (the head alone 19, 60 and 66 ms).

`default_backend` picks by the CPU's vendor, not by timing, so that a seeded run takes the
same arithmetic every time on one machine.

The head is frozen under LoRA (tied to the input embedding in SmolLM2), so the packed copy is
made once and kept for the module (beside it, so that copies of the model do not carry it);
it is made again when the weight changes (its version counter moves, as it does when
full-weight training steps it). Logits equal `F.linear`'s to
float rounding (tested, for each backend). Other devices, dtypes, builds without the
library, heads with a bias or wrapped by an adapter keep the plain product, and so do calls
with another row count where the library's packed weight serves only the count it was packed
for (MKL's; oneDNN's serves any, each row's output the same bitwise, so decoding can drop the
rows that have stopped).

The layers' projections (`packed_linear`, several of one input stacked into one product) are
packed at the start of each decoding and dropped after it: their weights change with every
step of training, and the adapter's fold writes them through `.data`, which moves no version
counter, so a kept copy could not tell it is stale. Measured on SmolLM2's 210 projections for
8 rows (2 threads, the Intel Xeon, MKL): 56 -> 40 ms a decoding step for the products alone,
after 0.17 s of packing. With the lean path's other trims (`harness.decode`) 0.85x of its
decoding at 2 threads and 0.79x at 1 (text2sql, 2 x 4, 64 new tokens, the same completions).
"""
from __future__ import annotations

import contextlib
import functools
import platform
import types
import weakref
from typing import Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F

# head module -> ((backend, rows, data_ptr, version), packed weight). Kept beside the module, not
# on it: a packed weight is an opaque tensor that deepcopy (Policy.sampler's bf16 copy) cannot copy.
_PACKED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


class Backend(NamedTuple):
    """A library that packs a float32 weight [out, in] for `rows`-row inputs, and multiplies by it."""
    available: Callable[[], bool]
    pack: Callable  # (weight, rows) -> packed
    product: Callable  # (x [M, in] contiguous, packed, weight, bias, rows) -> [M, out]
    any_rows: bool  # whether the packed weight serves inputs of any row count M, not only `rows`


BACKENDS = {
    "mkl": Backend(lambda: torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
                   and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"),
                   lambda weight, rows: torch.ops.mkl._mkl_reorder_linear_weight(weight, rows),
                   lambda x, packed, weight, bias, rows: torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows),
                   False),  # another row count: torch's op falls back to the unpacked product
    "onednn": Backend(lambda: torch.backends.mkldnn.is_available() and _x86()
                      and hasattr(torch.ops.mkldnn, "_linear_pointwise")
                      and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"),
                      lambda weight, rows: torch.ops.mkldnn._reorder_linear_weight(weight, rows),
                      lambda x, packed, weight, bias, rows: torch.ops.mkldnn._linear_pointwise(
                          x, packed, bias, "none", [], ""),
                      True),  # a row's output does not depend on the row count (tested bitwise)
}


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def cpu_vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...; "" where unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def backend_for(vendor: str) -> str | None:
    """The packing library for a CPU of this vendor (module doc): MKL on Intel's and where the
    vendor is unknown, oneDNN on other x86 CPUs, whichever this torch build has if it lacks
    the first choice; None when it has neither."""
    order = ("mkl", "onednn") if vendor in ("GenuineIntel", "") else ("onednn", "mkl")
    return next((name for name in order if BACKENDS[name].available()), None)


@functools.lru_cache(maxsize=None)
def default_backend() -> str | None:
    """`backend_for` this machine's CPU."""
    return backend_for(cpu_vendor())


def packs_any_rows(backend: str | None = None) -> bool:
    """Whether `backend`'s (None: `default_backend()`'s) packed weights serve inputs of any row
    count at the packed speed (oneDNN's), so that decoding can drop the rows that have stopped
    (`harness.decode`); MKL's serve only the count they were packed for."""
    backend = backend or default_backend()
    return backend is not None and BACKENDS[backend].any_rows


def can_pack(weight: torch.Tensor, backend: str | None = None) -> bool:
    """Whether `backend` (None: `default_backend()`) can take this weight: a float32 CPU tensor."""
    backend = backend or default_backend()
    return (backend is not None and BACKENDS[backend].available() and weight.device.type == "cpu"
            and weight.dtype == torch.float32)


def _packed(head: torch.nn.Linear, rows: int, backend: str) -> torch.Tensor:
    w = head.weight
    key = (backend, rows, w.data_ptr(), w._version)
    cached = _PACKED.get(head)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            cached = (key, BACKENDS[backend].pack(w.detach(), rows))
        _PACKED[head] = cached
    return cached[1]


@contextlib.contextmanager
def packed_head(model, rows: int, backend: str | None = None) -> Iterator[bool]:
    """Within the block, `model`'s output head multiplies `rows`-row inputs by a weight packed
    by `backend` (None: `default_backend()`), gradients off; yields whether it does. The head's
    own forward is restored after."""
    head = model.get_output_embeddings()
    backend = backend or default_backend()
    if (type(head) is not torch.nn.Linear or head.bias is not None or rows < 1 or torch.is_grad_enabled()
            or not can_pack(head.weight, backend)):
        yield False
        return
    packed = _packed(head, rows, backend)
    weight, version = head.weight, head.weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if weight._version != version:  # written meanwhile: the packed copy is stale
            return F.linear(x, weight)
        return _product(x, packed, weight, None, rows, backend)  # [..., V]

    head.forward = types.MethodType(forward, head)
    try:
        yield True
    finally:
        del head.forward


def packed_linear(modules: list[torch.nn.Module], rows: int, backend: str | None = None):
    """The products of `modules`, projections of one input, as one product for inputs of `rows`
    rows ([rows, ..., in] -> [rows, ..., sum of outs], each module's outputs in turn) with their
    weights stacked and packed now by `backend` (None: `default_backend()`); None unless each
    is a plain float32 `nn.Linear` on the CPU and the backend is in this torch build (all with
    a bias or none). Each output column is its own module's
    product (tested equal). The packed copy lives as long as the returned function: for
    weights that stay fixed meanwhile (one rollout's decoding). Inputs of another dtype, or of
    another row count where the backend cannot serve it (`packs_any_rows`), take `F.linear`;
    gradients are not kept."""
    biases = [m.bias for m in modules]
    backend = backend or default_backend()
    if (rows < 1 or any(type(m) is not torch.nn.Linear or not can_pack(m.weight, backend) for m in modules)
            or len({b is None for b in biases}) != 1):
        return None
    with torch.no_grad():
        weight = torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight.detach()
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        packed = BACKENDS[backend].pack(weight, rows)

    return lambda x: _product(x, packed, weight, bias, rows, backend)


def _product(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor, bias, rows: int,
             backend: str) -> torch.Tensor:
    """x [..., in] times the `rows`-row copy of `weight` [out, in] that `backend` packed (+ bias)
    -> [..., out]; inputs of another dtype, or of another row count where the backend's packed
    weight serves only `rows` (`Backend.any_rows`), take `F.linear`."""
    flat = x.reshape(-1, x.shape[-1])  # [M, in]
    m = flat.shape[0]
    if x.dtype != torch.float32 or m == 0 or (m != rows and not BACKENDS[backend].any_rows):
        return F.linear(x, weight, bias)
    return BACKENDS[backend].product(flat.contiguous(), packed, weight, bias, rows).view(*x.shape[:-1], -1)
