"""A split launch's reduction as a programmatic dependent of the attention kernel
(`Config.pdl_reduce`).

The one property that keeps PDL safe: a reduction launched with `launch_pdl` waits on the device
for the attention grid (WAIT_PRIMARY), and only then; the attention kernel lets it launch early
(LAUNCH_DEPENDENTS) only where one follows. Checked over every combination of the fields that
decide it, on every vendor, in and out of the interpreter (plans only), then on a GPU against the
fp32 reference (the sm_90 PTX: test_pdl_compile.py).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference

DECODES = BatchSpec((1, 1, 1), (700, 33, 1500), num_q_heads=8, num_kv_heads=2, head_size=64)
BASE = Config(16, 32, 1, num_warps=2, num_stages=2, seq_items=True)


def _plan(monkeypatch, config: Config, vendor: str, interpreted: bool):
    monkeypatch.setattr(platform, "interpreter_active", lambda: interpreted)
    planning.release_buffers()  # plans are kept by shapes and config, not by the interpreter's state
    b = build_batch(DECODES)
    _, launches = VARIANTS["static_grid"].plan(*b.args(), out=b.new_output(), config=config, vendor=vendor,
                                               num_sms=132, **b.options)
    return launches


@pytest.mark.parametrize("vendor,interpreted,segments,fused,pdl",
                         list(itertools.product(("nvidia", "amd"), (False, True), (1, 3), (False, True),
                                                (False, True))))
def test_a_reduction_launched_early_always_waits_for_the_attention(monkeypatch, vendor, interpreted, segments,
                                                                   fused, pdl):
    config = dataclasses.replace(BASE, num_segments=segments, fused_reduce=fused, pdl_reduce=pdl)
    attention, *rest = _plan(monkeypatch, config, vendor, interpreted)
    applies = pdl and segments > 1 and not fused and vendor == "nvidia" and not interpreted
    assert attention.constexprs["LAUNCH_DEPENDENTS"] == applies
    assert "launch_pdl" not in attention.vendor_options
    if rest:
        (reduce,) = rest
        assert reduce.constexprs["WAIT_PRIMARY"] == applies
        assert reduce.vendor_options.get("launch_pdl", False) == applies
    else:
        assert segments == 1 or fused
        assert not applies


@pytest.mark.parametrize("arch,applies", [("sm_80", False), ("sm_89", False), ("sm_90", True),
                                          ("sm_100", True)])
def test_nvidia_gpus_before_hopper_launch_the_reduction_after_the_attention(monkeypatch, arch, applies):
    """`griddepcontrol` is sm_90's: planned on an older NVIDIA GPU, the reduction is an ordinary launch."""
    gpu = platform.Platform("nvidia", arch, arch, 32, 108)
    monkeypatch.setattr(platform, "current", lambda: gpu)
    config = dataclasses.replace(BASE, num_segments=3, pdl_reduce=True)
    attention, reduce = _plan(monkeypatch, config, "nvidia", False)
    assert attention.constexprs["LAUNCH_DEPENDENTS"] == reduce.constexprs["WAIT_PRIMARY"] == applies
    assert reduce.vendor_options.get("launch_pdl", False) == applies


@pytest.mark.parametrize("config", [
    dataclasses.replace(BASE, num_segments=3, pdl_reduce=True),
    dataclasses.replace(BASE, num_segments=4, pdl_reduce=True, reduce_by_query=True),
    dataclasses.replace(BASE, num_segments=2, pdl_reduce=True, programs_per_sm=0),
], ids=["persistent", "by-query", "grid-per-item"])
def test_dependent_reductions_match_the_reference(device, config):
    if device == "cpu":
        pytest.skip("programmatic dependent launch runs on NVIDIA GPUs; the interpreter plans the reduction "
                    "without it (test_a_reduction_launched_early_always_waits_for_the_attention)")
    b = build_batch(DECODES, device)
    expected = paged_attention_reference(*b.args(), **b.options).float()
    call = lambda out: VARIANTS["static_grid"](*b.args(), out=out, config=config, **b.options)  # noqa: E731
    for _ in range(3):  # back to back: each call's reduction must wait for its own attention grid
        out = b.new_output()  # poisoned with NaN
        call(out)
        torch.testing.assert_close(out.float(), expected, atol=3e-3, rtol=3e-3)
    graph = torch.cuda.CUDAGraph()  # as a serving engine replays it: the dependency is a graph edge
    with torch.cuda.graph(graph):
        call(out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), expected, atol=3e-3, rtol=3e-3)
