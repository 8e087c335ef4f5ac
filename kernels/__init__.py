"""Triton paged-attention kernel family ("The Anatomy of a Triton Attention Kernel").

`VARIANTS` maps each variant's name to its `Variant` (callable with the contract of
`kernels.reference.paged_attention_reference`, plus the features it supports), in the
paper's order. `paged_attention` is the production entry: the static-grid variant with the
per-vendor heuristics of `kernels.paged_attention.heuristics`.

Every variant takes optional host-side hints, never required, so that planning needs no
device read: `max_seqlen_q` / `max_seqlen_k` (ints the caller knows, as vLLM passes them)
sharpen the heuristics' batch features; `vendor` ("nvidia" | "amd") and `num_sms` plan
exactly what that vendor's GPU with that many SMs / CUs would run (cross-compilation from
a CPU), instead of the device this process sees; `config` (`heuristics.Config`, variants
with heuristics only) overrides the heuristics (sweeps, tests). `naive` and `qblock` plan
the same launches whatever the hints, except that `vendor` decides how `qblock` reads an fp8
cache (FNUZ on NVIDIA: as bytes it decodes itself). `check_values=True` checks the metadata's values on
that call (a host sync; `PAGED_ATTENTION_CHECK_VALUES=1` turns it on for every call).

Bad input raises before any launch, its message starting with the argument's name
(`kernels.inputs` lists the kinds: ValueError, `ArgumentTypeError` for a wrong type, TypeError
for an unknown keyword, NotImplementedError for a missing feature). Not caught on the serving
path (no host sync): metadata values, i.e. a block id outside the cache, a `seq_lens` entry
past the block table or below its query length, `cu_seqlens_q` not rising from 0 to
num_tokens. The kernels still never read or write outside the tensors given: every access is
bounded by what the shapes say (`kernels.paged_attention.common.shape_bounds`). A query range is
clamped into q's rows, a sequence whose `seq_lens` entry its block-table row cannot hold (or
below its query count) gets rows of zeros, and a block id outside the cache is read clamped
into it (by the warp-specialized prefill on sm_90: as zeros). The output of such metadata is
defined but meaningless: pass `check_values=True` (or set the switch) to have it refused
instead, at a host sync per call.

No cache slot a sequence does not own reaches its output: the tail of a sequence's last block
and the blocks no sequence uses may hold anything, NaN included (recycled memory); the kernels
read none of them, but for the warp-specialized prefill, whose whole-block copies bring K's tail
into shared memory, where the scores drop it by selection (the correctness grid poisons them
with NaN).
"""

from __future__ import annotations

from kernels import interpreter, platform
from kernels.paged_attention import flex_tile, naive, parallel, qblock, static_grid
from kernels.variant import Variant

if platform.interpreter_active():
    interpreter.install()  # its docstring: work Triton's interpreter does for nothing, skipped

HINTS = frozenset({"max_seqlen_q", "max_seqlen_k", "vendor", "num_sms", "config"})
_UNTUNED_HINTS = HINTS - {"config"}  # accepted by variants without heuristics; change nothing

VARIANTS: dict[str, Variant] = {
    "naive": Variant("naive", "4.3", naive.plan, naive.FEATURES, _UNTUNED_HINTS),
    "qblock": Variant("qblock", "4.4", qblock.plan, qblock.FEATURES, _UNTUNED_HINTS),
    "parallel": Variant("parallel", "4.5", parallel.plan, parallel.FEATURES, HINTS),
    "flex_tile": Variant("flex_tile", "4.6", flex_tile.plan, flex_tile.FEATURES, HINTS),
    "static_grid": Variant("static_grid", "4.7", static_grid.plan, static_grid.FEATURES, HINTS),
}

# The production path: the static grid with the per-vendor heuristics.
paged_attention = VARIANTS["static_grid"]

__all__ = ["HINTS", "VARIANTS", "Variant", "paged_attention"]
