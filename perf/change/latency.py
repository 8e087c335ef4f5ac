"""The latency gate's change plan: which of its cases can differ in device time, found on a CPU.

The gate hands both sides the very same input tensors (the head's `kernels.batch` builds each
batch once, perf/latency/worker.py), so a case whose launches are identical on base and head
(perf/change/keys.py) cannot differ in device time: it is reported `unchanged` (identical
launches) and not timed. Both checkouts' kernels are loaded side by side in one process
(perf/checkout.py), as the gate's workers do, and planned on the one batch the head builds, as if
on the runner's target, with the host hints the gate's call passes (`max_seqlen_q` /
`max_seqlen_k`).

Each side's `platform.current()` answers as the runner's GPU while it plans (`side.as_if_on`), so a
planner that asks the platform (the Gluon kernel is planned only on sm_90) plans on a CPU what the runner
launches; a plan made as from a CPU compared the Q-block kernel on both sides where the runner launches the
Gluon kernel, and called a change to it identical.

`python -m perf gate --plan-only` writes the plan (a plan of kind "latency", `plan.json`:
perf/change/plan.py); the gate plans first by default (perf/latency/ab.py, which reads this
module as `changes`) or reads one (`--plan FILE`, `read_plan`, `check_plan`).
"""

from __future__ import annotations

import os

from perf import checkout
from perf.change import keys, plan, side
from perf.change.plan import IDENTICAL, summary, write_plan
from perf.change.side import runner_target
from perf.errors import ConfigError
from perf.scenarios import Scenario

PLAN_FILE = plan.KINDS[plan.LATENCY].file
# what perf/latency/ab.py reads of the gate's plan here, under the names it has always used
__all__ = ["IDENTICAL", "PLAN_FILE", "check_plan", "make_plan", "measure_all", "plan_cases", "read_plan",
           "runner_target", "summary", "write_plan"]


def read_plan(path: str) -> dict:
    """A latency gate's plan, every field checked (perf/change/plan.py)."""
    return plan.read_plan(path, plan.LATENCY)


def check_plan(doc: dict, path: str, *, vendor: str, target: str, base: str, head: str,
               cases: list[tuple[str, str]]) -> dict:
    """`doc` if it is the plan of this gate (vendor, target, commits) and covers every case it
    selects; its other cases (a plan of more variants or scenarios) name registered variants and
    well-formed scenarios, never dropped without a word. ConfigError naming what differs otherwise."""
    fix = plan.KINDS[plan.LATENCY].fix
    for key, want in (("vendor", vendor), ("target", target), ("base", base), ("head", head)):
        if doc[key] != want:
            raise ConfigError(f"--plan {path}: planned for {key} {doc[key][:12]}, this gate's is "
                              f"{want[:12]}; {fix}")
    known = {*plan.cases(doc, "measure"), *plan.cases(doc, "unchanged")}
    lacking = [c for c in cases if c not in known]
    if lacking:
        v, s = lacking[0]
        raise ConfigError(f"--plan {path}: has no case {v} {s} ({len(lacking)} missing); plan the same "
                          f"--suite, --variants and --scenarios, or drop --plan")
    registered = checkout.variant_names()  # the gate's own registry, as for --variants
    for v, s in sorted(known - set(cases)):  # another selection's case: registered and well formed
        if v not in registered:
            raise ConfigError(f"--plan {path}: case {v} {s} names no registered variant "
                              f"({', '.join(registered)}); {fix}")
        try:
            Scenario.parse(s)
        except (ConfigError, ValueError) as e:
            raise ConfigError(f"--plan {path}: case {v} {s}: {e}; {fix}") from None
    return doc


def measure_all(vendor: str, target: str, base: str, head: str, cases: list[tuple[str, str]],
                why: str) -> dict:
    """A plan that times every case, for `why` (no target to plan for, a toolchain A/B)."""
    return plan.document(plan.LATENCY, [{"variant": v, "scenario": s, "why": why} for v, s in cases],
                         vendor=vendor, target=target, base=base, head=head)


def make_plan(*, vendor: str, target, num_sms: int, base: str, head: str, base_root: str, head_root: str,
              suite: str, variants: str | None, scenarios: str | None, thresholds_path: str,
              work_dir: str) -> dict:
    """The plan of base against head for the gate's cases, planned as if on `target` in the
    planning process (perf/change/side.py)."""
    done = side.plan(plan.LATENCY, os.path.join(work_dir, "launches.json"), target=target, num_sms=num_sms,
                     thresholds=thresholds_path, base=base_root, head=head_root, suite=suite,
                     variants=variants, scenarios=scenarios)
    return plan.document(plan.LATENCY, done["rows"], vendor=vendor, target=target.name, base=base, head=head)


# --------------------------------------------------------------------------- in the planning process


def plan_cases(args) -> list[dict]:
    """{variant, scenario, why} of every case of the gate (`--suite`, `--variants`, `--scenarios`),
    both sides keyed on the head's batch (`why` None: identical launches); a case whose sides differ
    only in kernels' source keys is decided by their machine code (`keys.Code`), compiled here."""
    import torch

    from perf import checkout, scenarios
    from perf.measure.cases import host_hints
    from perf.static.plan import fp8_format

    torch.set_num_threads(1)  # the compile workers are the parallelism; no thread pools before the fork
    target = side.target_of(args)
    code = keys.Code(target)
    chosen = scenarios.select(scenarios.suite(args.suite), args.scenarios)
    sides = {s: checkout.load_side(getattr(args, s), f"kernels_plan_{s}") for s in ("base", "head")}
    for checkout_side in sides.values():  # what the runner plans, Gluon's sm_90 kernel included
        if "kernels.platform" in checkout_side.modules:
            side.as_if_on(checkout_side.modules["kernels.platform"], target, args.num_sms)
    if args.variants:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    else:  # as the gate's workers: the head's, then any only the base has
        variants = list(dict.fromkeys([*getattr(sides["head"].kernels, "VARIANTS", {}),
                                       *getattr(sides["base"].kernels, "VARIANTS", {})]))
    planned = []
    for scenario in chosen:
        with sides["head"].active():
            from kernels.batch import build_batch

            try:
                batch = build_batch(scenario.spec(), "cpu", fill=False, **fp8_format(target))
                failed = None
            except Exception as e:  # the gate's workers meet it too and report it per variant
                batch, failed = None, f"batch failed: {type(e).__name__}: {e}".splitlines()[0][:300]
        for name in variants:
            key = {}
            for s, checkout_side in sides.items():
                if failed:
                    key[s] = {"status": "error", "reason": failed}
                    continue
                with checkout_side.active() as kernels:
                    variant = getattr(kernels, "VARIANTS", {}).get(name)
                    hints = host_hints(variant, batch.spec) if variant is not None else {}
                    key[s] = keys.case_key(kernels, name, batch, target, args.num_sms, hints, code=code)
            planned.append((name, scenario.name, key["base"], key["head"]))
    code.compile({n for _, _, b, h in planned for n in code.wanted(b, h)})
    return [{"variant": v, "scenario": s, "why": keys.difference(b, h, code)} for v, s, b, h in planned]
