"""Triton paged-attention kernel family ("The Anatomy of a Triton Attention Kernel").

`VARIANTS` maps each variant's name to its `Variant` (callable with the contract of
DESIGN section 4, plus the features it supports), in the paper's order.
`paged_attention` is the production entry: the static-grid variant with the per-vendor
heuristics of `kernels.paged_attention.heuristics`.

The variants from `parallel` on also take optional host-side hints, never required:
`max_seqlen_q` / `max_seqlen_k` (ints the caller knows without a device read, as vLLM
passes them) sharpen the heuristics' batch features, `config` (`heuristics.Config`)
overrides the heuristics (sweeps, tests), and `vendor` ("nvidia" | "amd") plans for
another vendor's decision tree (cross-compilation from a CPU by the static gate).
"""

from __future__ import annotations

from kernels.paged_attention import flex_tile, naive, parallel, qblock, static_grid
from kernels.variant import Variant

HINTS = frozenset({"max_seqlen_q", "max_seqlen_k", "config", "vendor"})

VARIANTS: dict[str, Variant] = {
    "naive": Variant("naive", "4.3", naive.plan, naive.FEATURES),
    "qblock": Variant("qblock", "4.4", qblock.plan, qblock.FEATURES),
    "parallel": Variant("parallel", "4.5", parallel.plan, parallel.FEATURES, HINTS),
    "flex_tile": Variant("flex_tile", "4.6", flex_tile.plan, flex_tile.FEATURES, HINTS),
    "static_grid": Variant("static_grid", "4.7", static_grid.plan, static_grid.FEATURES, HINTS),
}

# The production path: the static grid with the per-vendor heuristics.
paged_attention = VARIANTS["static_grid"]

__all__ = ["HINTS", "VARIANTS", "Variant", "paged_attention"]
