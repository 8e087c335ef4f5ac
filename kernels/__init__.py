"""Triton paged-attention kernel family ("The Anatomy of a Triton Attention Kernel").

`VARIANTS` maps each variant's name to its `Variant` (callable with the contract of
DESIGN section 4, plus the features it supports), in the paper's order.
`paged_attention` is the production entry: the most optimized variant available.
"""

from __future__ import annotations

from kernels.paged_attention import naive, qblock
from kernels.variant import Variant

VARIANTS: dict[str, Variant] = {
    "naive": Variant("naive", "4.3", naive.plan, naive.FEATURES),
    "qblock": Variant("qblock", "4.4", qblock.plan, qblock.FEATURES),
}

# The production path; the static-grid variant with per-vendor heuristics replaces it.
paged_attention = VARIANTS["qblock"]

__all__ = ["VARIANTS", "Variant", "paged_attention"]
