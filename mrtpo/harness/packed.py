"""Decoding's products with their weights packed once for MKL, on CPU: the vocabulary head, and
on the lean decoding path (`harness.decode`) every layer's projections.

Each decoding step multiplies a few rows (B x G, 8 in SmolLM2's train settings) by the head's
[V, H] weight (49,152 x 576, 113 MB in float32). For so few rows MKL's sgemm re-packs the
whole weight on every call; `torch.ops.mkl._mkl_linear` takes a weight packed once for a
given row count instead. Measured on the head's shape: 9.6 -> 5.3 ms per step at 2 threads,
26 -> 12 ms at 1 thread (a 2-core Intel Xeon), about 1 s of a 64-token rollout at 1 thread.

The head is frozen under LoRA (tied to the input embedding in SmolLM2), so the packed copy is
made once and kept for the module (beside it, so that copies of the model do not carry it);
it is made again when the weight changes (its version counter moves, as it does when
full-weight training steps it). Logits equal `F.linear`'s to
float rounding (tested). Other devices, dtypes, builds without MKL, heads with a bias or
wrapped by an adapter, and calls with another row count keep the plain product.

The layers' projections (`packed_linear`, several of one input stacked into one product) are
packed at the start of each decoding and dropped after it: their weights change with every
step of training, and the adapter's fold writes them through `.data`, which moves no version
counter, so a kept copy could not tell it is stale. Measured on SmolLM2's 210 projections for
8 rows (2 threads): 56 -> 40 ms a decoding step for the products alone, after 0.17 s of
packing. With the lean path's other trims (`harness.decode`) 0.85x of its decoding at 2
threads and 0.79x at 1 (text2sql, 2 x 4, 64 new tokens, the same completions).
"""
from __future__ import annotations

import contextlib
import types
import weakref
from typing import Iterator

import torch
import torch.nn.functional as F

# head module -> ((rows, data_ptr, version), packed weight). Kept beside the module, not on it:
# a packed weight is an opaque tensor that deepcopy (Policy.sampler's bf16 copy) cannot copy.
_PACKED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def can_pack(weight: torch.Tensor) -> bool:
    """Whether `_mkl_linear` can take this weight: a float32 CPU tensor on a torch built with MKL."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_linear") and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


def _packed(head: torch.nn.Linear, rows: int) -> torch.Tensor:
    w = head.weight
    key = (rows, w.data_ptr(), w._version)
    cached = _PACKED.get(head)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            cached = (key, torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows))
        _PACKED[head] = cached
    return cached[1]


@contextlib.contextmanager
def packed_head(model, rows: int) -> Iterator[bool]:
    """Within the block, `model`'s output head multiplies `rows`-row inputs by an MKL-packed
    weight (gradients off); yields whether it does. The head's own forward is restored after."""
    head = model.get_output_embeddings()
    if (type(head) is not torch.nn.Linear or head.bias is not None or rows < 1 or torch.is_grad_enabled()
            or not can_pack(head.weight)):
        yield False
        return
    packed = _packed(head, rows)
    weight, version = head.weight, head.weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if weight._version != version:  # written meanwhile: the packed copy is stale
            return F.linear(x, weight)
        return _product(x, packed, weight, None, rows)  # [..., V]

    head.forward = types.MethodType(forward, head)
    try:
        yield True
    finally:
        del head.forward


def packed_linear(modules: list[torch.nn.Module], rows: int):
    """The products of `modules`, projections of one input, as one product for inputs of `rows`
    rows ([rows, ..., in] -> [rows, ..., sum of outs], each module's outputs in turn) with their
    weights stacked and packed for MKL now; None unless each is a plain float32 `nn.Linear`
    on a CPU torch with MKL (all with a bias or none). Each output column is its own module's
    product (tested equal). The packed copy lives as long as the returned function: for
    weights that stay fixed meanwhile (one rollout's decoding). Inputs of another row count
    or dtype take `F.linear`; gradients are not kept."""
    biases = [m.bias for m in modules]
    if (rows < 1 or any(type(m) is not torch.nn.Linear or not can_pack(m.weight) for m in modules)
            or len({b is None for b in biases}) != 1):
        return None
    with torch.no_grad():
        weight = torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight.detach()
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)

    return lambda x: _product(x, packed, weight, bias, rows)


def _product(x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor, bias, rows: int) -> torch.Tensor:
    """x [..., in] times the `rows`-row packed copy of `weight` [out, in] (+ bias) -> [..., out];
    inputs of another row count or dtype take `F.linear`."""
    flat = x.reshape(-1, x.shape[-1])  # [M, in]
    if flat.shape[0] != rows or x.dtype != torch.float32:
        return F.linear(x, weight, bias)
    return torch.ops.mkl._mkl_linear(flat.contiguous(), packed, weight, bias, rows).view(*x.shape[:-1], -1)
