"""Variant: one member of the kernel family, its planner and the features it supports.

Calling a variant validates the inputs, refuses features it lacks with a
`NotImplementedError` naming them, plans its launches and runs them. An empty batch (no
tokens or no sequences) plans no launch and returns its (empty or untouched) output.

A serving engine calls with the same shapes, strides and options step after step, and
checking them cost about as much host time as Triton's launch (H100 host, 2026-11-23:
validation and planning about 45 us of a 85-220 us call). So a call whose
`inputs.layout_key` already passed skips those checks (value checks, when asked, still
run), and the planners get the key to keep their own work under it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import inputs
from kernels.launch import KernelLaunch

Planner = Callable[..., list[KernelLaunch]]

# (variant, layout key, target hints) of the calls whose checks passed (`inputs.keep`).
_PASSED: dict[tuple, bool] = {}


@dataclass(frozen=True)
class Variant:
    name: str
    paper_section: str  # where "The Anatomy of a Triton Attention Kernel" describes it
    # (q, k_cache, ..., out=..., layout=..., **options) -> launches; `layout`: the call's
    # `inputs.layout_key` (None: none), under which a planner may keep what it planned
    planner: Planner
    features: frozenset[str]  # subset of kernels.inputs.FEATURES
    # Optional host-side keyword hints the planner takes besides the contract (e.g.
    # max_seqlen_q, vendor); they go to the planner, not to the contract's checks.
    hints: frozenset[str] = frozenset()

    def check_supported(self, q, k_cache, **options) -> None:
        missing = inputs.required_features(q, k_cache, **options) - self.features
        if missing:
            raise NotImplementedError(
                f"variant {self.name!r} does not support {', '.join(sorted(missing))}"
            )

    def plan(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
             out: torch.Tensor | None = None, check_values: bool | None = None,
             **options) -> tuple[torch.Tensor, list[KernelLaunch]]:
        """Validate and plan without launching; returns (out, launches).

        `check_values`: check the metadata's values (a host sync); None follows the
        environment switch `kernels.inputs.CHECK_VALUES_ENV` (off by default).
        """
        hints = {name: options.pop(name) for name in self.hints if name in options}
        args = (q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens)
        layout = inputs.layout_key(*args, out=out, **options)
        checked = (self.name, layout, hints.get("vendor"), hints.get("num_sms"))
        try:
            known = layout is not None and checked in _PASSED
        except TypeError:  # an unhashable hint: the checks below name it
            known, layout = False, None
        if not known:
            inputs.validate(*args, out=out, **options)
            inputs.validate_target(hints.get("vendor"), hints.get("num_sms"))
            self.check_supported(q, k_cache, **options)
            if layout is not None:
                inputs.keep(_PASSED, checked, True)
        inputs.check_values_if_asked(check_values, q, k_cache, block_table, cu_seqlens_q, seq_lens)
        out = torch.empty_like(q) if out is None else out
        if inputs.is_empty(q, block_table):
            return out, []
        return out, self.planner(*args, out=out, layout=layout, **options, **hints)

    def __call__(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
                 out: torch.Tensor | None = None, **options) -> torch.Tensor:
        out, launches = self.plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,
                                  out=out, **options)
        for launch in launches:
            launch()
        return out
