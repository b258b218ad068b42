"""Decoding's vocabulary head with its weight packed once for MKL, on CPU.

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
        flat = x.reshape(-1, x.shape[-1]).contiguous()  # [M, H]
        if flat.shape[0] != rows or x.dtype != torch.float32 or weight._version != version:
            return F.linear(x, weight)
        return torch.ops.mkl._mkl_linear(flat, packed, weight, None, rows).reshape(*x.shape[:-1], -1)  # [..., V]

    head.forward = types.MethodType(forward, head)
    try:
        yield True
    finally:
        del head.forward
