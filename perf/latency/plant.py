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

Planted changes for the change plan (perf/change/, docs/latency.md "What is timed
at all"): `python -m perf.latency.plant --make-commits DIR` clones this checkout into DIR/repo
and commits, each on its own branch off the checkout's HEAD (`plan-base`): `plan-docs` (the
README only), `plan-heuristic` (one branch of NVIDIA's decision tree: short prefills get 8
warps instead of 4), `plan-kernel` (LOG2E, a constant every attention kernel reads, moved by
one ulp) and `plan-slow` (the slowdown above, `--percent`). `--compare-fails A B` tells whether
two gates' findings fail the same cases (the change-aware gate against `--all-cases` on one
commit). The tests plant the same edits (tests/change/test_change_plan.py).
"""

from __future__ import annotations

import argparse
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


# --- planted changes for the change plan ----------------------------------------------------

HEURISTICS = os.path.join("kernels", "paged_attention", "heuristics.py")
# NVIDIA's short prefills (a query of at most 64 tokens next to decodes): one branch of `_nvidia`
SHORT_PREFILL = ('num_warps=4, num_stages=2, programs_per_sm=2,\n'
                 '                    source="nvidia/short-prefill')
LOG2E = "LOG2E = tl.constexpr(1.4426950408889634)"
BRANCHES = {"docs": "README.md only", "heuristic": "one heuristic branch (NVIDIA short prefills: 8 warps)",
            "kernel": "every attention kernel (LOG2E moved by one ulp)", "slow": "planted slowdown"}


def _replace(root: str, path: str, old: str, new: str) -> str:
    file = os.path.join(root, path)
    with open(file, encoding="utf-8") as f:
        text = f.read()
    if text.count(old) != 1:
        raise PlantError(f"{path}: the planted edit's anchor {old[:50]!r} is not there once; point "
                         f"perf/latency/plant.py at the code as it is now")
    with open(file, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    return file


def plant_heuristic(root: str) -> str:
    """One branch of NVIDIA's decision tree changed: short prefills launch 8 warps, not 4."""
    return _replace(root, HEURISTICS, SHORT_PREFILL, SHORT_PREFILL.replace("num_warps=4", "num_warps=8"))


def plant_kernel_wide(root: str) -> str:
    """A change every attention kernel compiles differently: LOG2E one ulp lower."""
    return _replace(root, TARGET, LOG2E, LOG2E.replace("1.4426950408889634", "1.442694902420044"))


def plant_docs(root: str) -> str:
    path = os.path.join(root, "README.md")
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n<!-- a docs-only change (perf/latency/plant.py) -->\n")
    return path


def make_commits(dest: str, percent: int = 10, vendor: str = "nvidia") -> dict[str, str]:
    """DIR/repo: a clone of this checkout with one branch per planted change (module docstring);
    branch -> commit."""
    from perf.checkout import ROOT
    from perf.errors import ConfigError
    from perf.git import commit_all, git

    repo = os.path.join(os.path.abspath(dest), "repo")
    if os.path.exists(repo):
        raise ConfigError(f"{repo}: exists; name a new DIR for the planted commits")
    os.makedirs(os.path.dirname(repo), exist_ok=True)
    git(os.path.dirname(repo), "clone", "-q", "--no-hardlinks", ROOT, repo, check=True)
    base = git(repo, "rev-parse", "HEAD", check=True)
    git(repo, "branch", "-f", "plan-base", base, check=True)
    edits = {"docs": plant_docs, "heuristic": plant_heuristic, "kernel": plant_kernel_wide,
             "slow": lambda root: plant(root, percent, vendor)}
    made = {"plan-base": base}
    for name, edit in edits.items():
        git(repo, "checkout", "-q", "-B", f"plan-{name}", base, check=True)
        edit(repo)
        made[f"plan-{name}"] = commit_all(repo, f"planted: {BRANCHES[name]}", "perf-plant")
    git(repo, "checkout", "-q", "plan-base", check=True)
    return made


# --- a planted wrong result --------------------------------------------------------------------

WRONG_TARGET = os.path.join("kernels", "paged_attention", "naive.py")
WRONG_STORE = "(acc / l_i).to(out_ptr.dtype.element_ty)"  # the naive kernel's output, as stored


def plant_wrong(root: str, factor: float = 1.1) -> str:
    """Make the checkout at `root` compute a wrong result: the naive variant's kernel stores its
    output times `factor` (every other variant unchanged). What the output check must catch
    (perf/measure/check.py); returns the edited file's path."""
    return _replace(root, WRONG_TARGET, WRONG_STORE,
                    f"(acc / l_i * {float(factor)!r}).to(out_ptr.dtype.element_ty)")


def fails(path: str) -> set[tuple[str, str, str]]:
    """The failing cases of a gate's findings.json."""
    from perf.verdicts import Verdict, load_findings

    return {(f.variant, f.scenario, f.metric) for f in load_findings(path)[1] if f.verdict is Verdict.FAIL}


def compare_fails(a: str, b: str) -> tuple[set, set, set]:
    """(failing in both, only in `a`, only in `b`) of two gates' findings."""
    fa, fb = fails(a), fails(b)
    return fa & fb, fa - fb, fb - fa


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m perf.latency.plant",
                                description="planted changes for the change plan's checks on a GPU")
    p.add_argument("--make-commits", metavar="DIR", help="clone this checkout into DIR/repo with one branch "
                   "per planted change: plan-base, plan-docs, plan-heuristic, plan-kernel, plan-slow")
    p.add_argument("--percent", type=int, default=10, help="plan-slow's slowdown in percent (default 10)")
    p.add_argument("--vendor", default="nvidia", help="plan-slow's cycle counter: nvidia | amd")
    p.add_argument("--compare-fails", nargs=2, metavar=("A", "B"),
                   help="two findings.json: exit 0 when they fail the same cases, else 1 with the difference")
    return p


def main(argv: list[str] | None = None) -> int:
    from perf.errors import ConfigError

    args = _parser().parse_args(argv)
    if bool(args.make_commits) == bool(args.compare_fails):
        raise ConfigError("python -m perf.latency.plant: pass --make-commits DIR or --compare-fails A B")
    if args.make_commits:
        for branch, sha in make_commits(args.make_commits, args.percent, args.vendor).items():
            print(f"{branch} {sha}")
        return 0
    both, only_a, only_b = compare_fails(*args.compare_fails)
    a, b = args.compare_fails
    for name, rows in ((a, only_a), (b, only_b)):
        for v, s, m in sorted(rows):
            print(f"fails only in {name}: {v} {s} {m}")
    print(f"{len(both)} cases fail in both; {len(only_a)} only in {a}; {len(only_b)} only in {b}")
    return 0 if not (only_a or only_b) else 1


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
