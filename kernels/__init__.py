"""Triton paged-attention kernel family ("The Anatomy of a Triton Attention Kernel").

`VARIANTS` maps each variant's name to its `Variant` (callable with the contract of
DESIGN section 4, plus the features it supports), in the paper's order.
`paged_attention` is the production entry: the static-grid variant with the per-vendor
heuristics of `kernels.paged_attention.heuristics`.

The variants from `parallel` on also take optional host-side hints, never required:
`max_seqlen_q` / `max_seqlen_k` (ints the caller knows without a device read, as vLLM
passes them) sharpen the heuristics' batch features, and `config`
(`heuristics.Config`) overrides the heuristics (sweeps, tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import inputs
from kernels.launch import KernelLaunch
from kernels.paged_attention import flex_tile, naive, parallel, qblock, static_grid
from kernels.variant import Variant

HINTS = ("max_seqlen_q", "max_seqlen_k", "config")


@dataclass(frozen=True)
class HintedVariant(Variant):
    """A variant whose planner also accepts the HINTS; validation never sees them."""

    def plan(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
             out: torch.Tensor | None = None, **options) -> tuple[torch.Tensor, list[KernelLaunch]]:
        hints = {name: options.pop(name) for name in HINTS if name in options}
        args = (q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens)
        inputs.validate(*args, out=out, **options)
        self.check_supported(q, k_cache, **options)
        out = torch.empty_like(q) if out is None else out
        return out, self.planner(*args, out=out, **options, **hints)


VARIANTS: dict[str, Variant] = {
    "naive": Variant("naive", "4.3", naive.plan, naive.FEATURES),
    "qblock": Variant("qblock", "4.4", qblock.plan, qblock.FEATURES),
    "parallel": HintedVariant("parallel", "4.5", parallel.plan, parallel.FEATURES),
    "flex_tile": HintedVariant("flex_tile", "4.6", flex_tile.plan, flex_tile.FEATURES),
    "static_grid": HintedVariant("static_grid", "4.7", static_grid.plan, static_grid.FEATURES),
}

# The production path: the static grid with the per-vendor heuristics.
paged_attention = VARIANTS["static_grid"]

__all__ = ["HINTS", "VARIANTS", "HintedVariant", "Variant", "paged_attention"]
