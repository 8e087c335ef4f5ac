"""Variant: one member of the kernel family, its planner and the features it supports.

Calling a variant validates the inputs (`kernels.inputs`: every mistake the host can see
raises before any launch, its message starting with the argument's name), refuses features
it lacks with a `NotImplementedError` naming them, plans its launches and runs them. An
empty batch (no tokens or no sequences) plans no launch and returns its (empty or
untouched) output.

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
from kernels.paged_attention.heuristics import Config

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

    def check_keywords(self, options) -> None:
        """TypeError naming a keyword this variant does not take (`config` for one without heuristics)."""
        unknown = sorted(set(options) - inputs.CONTRACT_OPTIONS)
        if unknown:
            takes = ", ".join(sorted(inputs.CONTRACT_OPTIONS | self.hints | {"out", "check_values"}))
            raise TypeError(f"{unknown[0]}: not a keyword argument of variant {self.name!r} "
                            f"(it takes {takes})")

    def plan(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
             out: torch.Tensor | None = None, check_values: bool | None = None,
             **options) -> tuple[torch.Tensor, list[KernelLaunch]]:
        """Validate and plan without launching; returns (out, launches).

        `check_values`: check the metadata's values (a host sync); None follows the
        environment switch `kernels.inputs.CHECK_VALUES_ENV` (off by default).
        """
        hints = {name: options.pop(name) for name in self.hints if name in options}
        # The hints a serving loop changes every step: checked on every call, inline for plain ints.
        max_q, max_k = hints.get("max_seqlen_q"), hints.get("max_seqlen_k")
        if not ((max_q is None or type(max_q) is int and max_q >= 0)
                and (max_k is None or type(max_k) is int and max_k >= 0)
                and (check_values is None or check_values is True or check_values is False)):
            inputs.validate_step_hints(max_q, max_k, check_values)
        config = hints.get("config")
        if config is not None and not isinstance(config, Config):
            raise inputs.ArgumentTypeError(f"config: expected a kernels.paged_attention.heuristics.Config, "
                                           f"got {type(config).__name__}")
        args = (q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens)
        layout = inputs.layout_key(*args, out=out, **options)
        checked = (self.name, layout, hints.get("vendor"), hints.get("num_sms"))
        try:
            known = layout is not None and checked in _PASSED
        except TypeError:  # an unhashable hint: the checks below name it
            known, layout = False, None
        if not known:
            self.check_keywords(options)
            inputs.validate(*args, out=out, **options)
            inputs.validate_target(hints.get("vendor"), hints.get("num_sms"))
            self.check_supported(q, k_cache, **options)
            if layout is not None:
                inputs.keep(_PASSED, checked, True)
        if out is not None:  # pointers change from call to call: checked on every call
            inputs.check_out_apart(out, args, options, layout)
        inputs.check_values_if_asked(check_values, *args, options)
        out = torch.empty_like(q) if out is None else out
        if inputs.is_empty(q, block_table):
            return out, []
        return out, self.planner(*args, out=out, layout=layout, **options, **hints)

    def __call__(self, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
                 out: torch.Tensor | None = None, **options) -> torch.Tensor:
        """Attention of the batch into `out` (allocated when None), returned.

        Raises before any launch, the message starting with the argument's name: ValueError
        (a wrong value), `inputs.ArgumentTypeError` (a TypeError and a ValueError: a wrong
        type), TypeError (a keyword this variant does not take), NotImplementedError (a
        feature it lacks); the kinds are listed in `kernels.inputs`. What no host check sees
        without the value checks (`check_values=True` or PAGED_ATTENTION_CHECK_VALUES=1, a
        host sync each call): block ids outside the cache, `seq_lens` past the block table
        or below the query lengths, `cu_seqlens_q` not rising from 0 to num_tokens. The
        kernels then stay inside the tensors given (`common.shape_bounds`): query ranges are
        clamped into q's rows, a sequence its block-table row cannot hold gets rows of zeros,
        a block id outside the cache is read clamped into it.
        """
        out, launches = self.plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,
                                  out=out, **options)
        for launch in launches:
            launch()
        return out
