"""Why the paged kernel's KV loop is not warp-specialized on sm_90: the facts, compiled on a CPU.

Triton's automatic warp specialization (`tl.range(..., warp_specialize=True)`) on Hopper
runs the `NVGPUWarpSpecialization` pass. tests/warp_specialize_probe.py compiles, for sm_90
in a subprocess, the paged loop `python -m perf.lab.warp_specialize` times (one cache block
per tile, its id read from the block table) and the paged kernel's NVIDIA prefill; this
checks what docs/lab/2026-11-27.md ("Warp specialization on sm_90") states from it:

- the pass partitions the loop when Q, K and V come through TMA tensor descriptors, at 4
  warps: a producer warp group and two consumer groups (12 warps), `setmaxnreg` moving
  registers from the producer to the consumers (the lab's `specialized` configuration);
- at 8 warps (the NVIDIA prefill's) it leaves the loop alone; at 4 warps, K and V read
  through pointer tensors (the paged kernel's block-table gather) fail the pass;
- the paged prefill kernel itself has 8 warps, `scf.if` with else blocks and an `scf.while`
  (the Q-block's binary search), each of which the pass declines, and no descriptor load.

When a Triton changes any of these, this test fails and the lever is worth measuring again.
About 10-20 s cold (four small kernels and one prefill kernel); skipped where the installed
Triton has no `warp_specialize` on `tl.range`.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys

import pytest
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.skipif("warp_specialize" not in inspect.signature(tl.range).parameters,
                                 reason="this Triton's tl.range has no warp_specialize (added in 3.5)"),
              pytest.mark.slow]  # starts processes
if importlib.util.find_spec("xdist") is not None:  # one worker runs the probe once for all tests
    pytestmark.append(pytest.mark.xdist_group("warp_specialize"))


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))  # compiled here, not read back
    done = subprocess.run([sys.executable, "-m", "tests.warp_specialize_probe"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_descriptor_loop_at_4_warps_is_partitioned(probe):
    facts = probe["lab_loops"]["descriptors/4"]
    assert facts["status"] == "ok", facts
    assert facts["warp_specialize_ops"] >= 1, facts
    assert facts["num_warps"] == 12 and facts["partition_warps"] == [4, 4], facts  # 4 default + 2 x 4
    assert any(s.startswith("dec ") for s in facts["setmaxnreg"]), facts  # the producer gives registers
    assert any(s.startswith("inc ") for s in facts["setmaxnreg"]), facts  # to the consumers


@pytest.mark.parametrize("case", ["pointers/8", "descriptors/8"])
def test_eight_warps_are_left_alone(probe, case):
    facts = probe["lab_loops"][case]
    assert facts["status"] == "ok", facts
    assert facts["warp_specialize_ops"] == 0 and facts["num_warps"] == 8 and not facts["setmaxnreg"], facts
    assert facts["loop_attribute_kept"] >= 1, facts  # the request reached the pass, which declined it


def test_pointer_loads_at_4_warps_fail_the_pass(probe):
    assert probe["lab_loops"]["pointers/4"]["status"] == "error", probe["lab_loops"]["pointers/4"]


def test_paged_prefill_has_what_the_pass_declines(probe):
    facts = probe["paged_prefill"]
    assert facts["num_warps"] == 8, facts
    assert facts["else_blocks"] >= 1 and facts["while_loops"] >= 1, facts
    assert facts["descriptor_loads"] == 0 and facts["pointer_loads"] > 0, facts
    assert facts["warp_specialize_ops"] == 0, facts
