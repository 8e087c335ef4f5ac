"""The warp specialization lab (perf/lab/warp_specialize.py) in Triton's interpreter: every
configuration it would time computes the attention of the paged cache, a wrong output is
reported and never timed, bad options are one line and exit 2.

Its compile for sm_90 (the `specialized` configuration is warp-specialized, the others not)
is tests/kernels/test_warp_specialize.py's; its timing needs an H100 (docs/lab/2026-11-27.md, "Warp
specialization on sm_90").
"""

from __future__ import annotations

import pytest
import torch

from perf.errors import ConfigError
from perf.lab import warp_specialize as lab
from tests.interpreter_support import needs_interpreter

TINY = dict(block_m=16, heads=4, kv_heads=2, head=16)  # the interpreter's size: seconds, not minutes


@needs_interpreter
@pytest.mark.parametrize("block", sorted(lab.STAGES))
def test_every_configuration_matches_the_reference(block):
    rows = lab.measure(2 * block, [block], samples=1, device="cpu", **TINY)
    assert [r["variant"] for r in rows] == [v.name for v in lab.INTERPRETED]
    assert all(r["error"] == "" and r["ms"] is None for r in rows), rows  # checked, not timed on a CPU


@needs_interpreter
def test_a_wrong_output_is_reported_not_timed(monkeypatch):
    right = lab.reference
    monkeypatch.setattr(lab, "reference", lambda inputs: right(inputs) + 1.0)
    rows = lab.measure(128, [64], samples=1, device="cpu", **TINY)
    assert rows and all(r["error"].startswith("output differs") for r in rows), rows
    assert "output differs" in lab.table(rows)


@needs_interpreter
def test_a_kernel_ignoring_the_block_table_is_caught(monkeypatch):
    """The check is tight enough to see the table ignored: the reference given the cache's
    first blocks in storage order (attention without a mask does not see the order, but a
    spare block and a missing one it does), the kernels the table."""
    right = lab.reference

    def first_blocks(inputs):
        n = len(inputs["table"])
        return right({**inputs, "table": torch.arange(n, dtype=torch.int32)})

    monkeypatch.setattr(lab, "reference", first_blocks)
    rows = lab.measure(256, [64], samples=1, device="cpu", **TINY)
    assert rows and all(r["error"].startswith("output differs") for r in rows), rows


def test_the_reference_reads_only_the_blocks_the_table_lists():
    """The cache has a spare block on each side of the sequence's (shuffled) blocks: filling
    a spare one with large values changes nothing, so a kernel ignoring the table fails."""
    inputs = lab.make_inputs(128, 64, "cpu", heads=2, kv_heads=1, head=16, seed=3)
    listed = inputs["table"].tolist()
    spare = next(b for b in range(inputs["k"].shape[0] // 64) if b not in listed)
    k, v = inputs["k"].clone(), inputs["v"].clone()
    k[spare * 64:(spare + 1) * 64] = 1e4
    v[spare * 64:(spare + 1) * 64] = 1e4
    assert torch.equal(lab.reference(inputs), lab.reference({**inputs, "k": k, "v": v}))


@pytest.mark.parametrize("argv, says", [
    (["--blocks", "48", "--allow-cpu"], "--blocks"),
    (["--blocks", "x", "--allow-cpu"], "--blocks"),
    (["--keys", "0", "--allow-cpu"], "--keys"),
])
def test_bad_options_are_one_line(argv, says):
    with pytest.raises(ConfigError, match=says):
        lab.main(argv)


def test_keys_must_fill_whole_blocks():
    with pytest.raises(ConfigError, match="multiple of the block size"):
        lab.make_inputs(100, 64, "cpu")


def test_a_mismatch_says_where_the_output_is_wrong():
    expected = torch.zeros(8, 2 * 4)  # 8 query rows (Q-blocks of 4), 2 heads of 4
    out = expected.clone()
    out[2:4, 4:] = 1.0  # the second half of the first Q-block's rows, second head
    out[7, 0] = float("nan")
    said = lab.mismatch(out, expected, atol=1e-3, rtol=0.0, block_m=4, head=4)
    assert said.startswith("14.1% of elements off, max error inf")
    assert "1 not finite" in said and "first half of rows 0.0%, second half 28.1%" in said
    assert said.endswith("heads off: 2 of 2")
