"""Planted slowdowns of known size, made by a real change to the production kernel.

`plant(root, percent)` edits kernels/paged_attention/common.py in the checkout at `root`:
every program of `q_block_kernel` (the attention kernel static_grid launches persistent,
and parallel and flex_tile on a 3-D grid) reads its SM's cycle counter when it starts and,
when its work is done, spins until `percent` % more cycles have passed. Every program is
stretched by the same fraction, so the attention kernel takes about `percent` % longer in
every scenario, short or long (the reduce kernel of split decodes is left alone, so there
the whole call slows by a little less). The gate self-test (perf/latency/selftest.py)
commits this on a temporary branch and gates it against the same plant of 0 %: what the
gate reports must be that slowdown.

The percentage reaches the kernel through an inline-assembly move of an immediate, which the
compiler cannot fold, so plants of every size compile to the same code but for that number,
and head and base differ by the spin alone. Against the unplanted commit (`perf bisect`'s
demo range still plants that way) the added code itself moved some cases (NVIDIA H100, 2026-11-23, a 2 %
plant: phi-3-mini mixed 0.98x, gpt-oss-20b mixed 1.006-1.032x across commits;
docs/latency.md).

The counter is NVIDIA's `%clock64` (PTX); on AMD `s_memtime`. Only the NVIDIA form has run
(docs/latency.md).
"""

from __future__ import annotations

import os
import re

TARGET = os.path.join("kernels", "paged_attention", "common.py")
KERNEL = "q_block_kernel"
CLOCK = {
    "nvidia": ('"mov.u64 $0, %clock64;"', '"=l"'),
    "amd": ('"s_memtime $0\\n s_waitcnt lgkmcnt(0)"', '"=s"'),
}
IMMEDIATE = {  # an int32 the compiler cannot see through: the planted percentage
    "nvidia": ('"mov.u32 $0, {percent};"', '"=r"'),
    "amd": ('"s_mov_b32 $0, {percent}"', '"=s"'),
}

_HELPERS = '''

# --- planted slowdown (perf/latency/plant.py): not for production ---------------------------


@triton.jit
def _selftest_clock():
    return tl.inline_asm_elementwise({asm}, {constraint}, [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _selftest_percent():
    return tl.inline_asm_elementwise({percent_asm}, {percent_constraint}, [], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _selftest_delay(t0):
    """Spin until the planted percentage more cycles than this program has used have passed."""
    now = _selftest_clock()
    target = now + (now - t0) * _selftest_percent().to(tl.int64) // 100
    while now < target:
        now = _selftest_clock()
'''


class PlantError(RuntimeError):
    pass


def plant_source(source: str, percent: int, vendor: str = "nvidia") -> str:
    """The module's source with the slowdown planted (module docstring)."""
    if not 0 <= percent <= 1000:
        raise PlantError(f"percent {percent}: must be 0..1000")
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"def {KERNEL}(")), None)
    if start is None:
        raise PlantError(f"{TARGET}: no `def {KERNEL}(`; point perf/latency/plant.py at the kernel's "
                         f"new name")
    body = next(i for i in range(start, len(lines)) if re.match(r"^\)\s*(->.*)?:\s*$", lines[i])) + 1
    end = next((i for i in range(body, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    while end > body and not lines[end - 1].strip():
        end -= 1
    if any(re.match(r"^\s+return\b", line) for line in lines[body:end]):
        raise PlantError(f"{TARGET}: {KERNEL} returns early; the planted delay would be skipped")
    indent = re.match(r"^(\s*)", lines[body]).group(1)
    body = _after_docstring(lines, body, end)
    out = (lines[:body] + [f"{indent}_selftest_t0 = _selftest_clock()"] + lines[body:end]
           + [f"{indent}_selftest_delay(_selftest_t0)"] + lines[end:])
    asm, constraint = CLOCK[vendor]
    percent_asm, percent_constraint = IMMEDIATE[vendor]
    return "\n".join(out) + "\n" + _HELPERS.format(
        asm=asm, constraint=constraint, percent_asm=percent_asm.format(percent=int(percent)),
        percent_constraint=percent_constraint)


def _after_docstring(lines: list[str], body: int, end: int) -> int:
    """The first line of the body after its docstring, if it has one."""
    first = lines[body].strip()
    for quote in ('"""', "'''"):
        if first.startswith(quote):
            if first.count(quote) >= 2 and len(first) > 3:
                return body + 1
            return next(i for i in range(body + 1, end) if quote in lines[i]) + 1
    return body


def plant(root: str, percent: int, vendor: str = "nvidia") -> str:
    """Plant the slowdown in the checkout at `root`; returns the edited file's path."""
    path = os.path.join(root, TARGET)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(plant_source(source, percent, vendor))
    return path
