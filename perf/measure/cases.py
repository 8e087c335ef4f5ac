"""Cases: one (variant, scenario) made ready to be timed, and one repeat of timing it.

A `Case` is one (variant, scenario) made ready outside any timed region: the batch built
on the device, the public entry (`VARIANTS[name]`, `kernels.paged_attention` for
static_grid) called once with value checks where the variant takes `check_values`
(validation is not part of what is timed, and an older base without that hint validates
the way it always did), compiled by that call, its output checked for unwritten (NaN)
values, the launch configuration it plans recorded (`Variant.plan`, `KernelLaunch.config()`),
its work (bytes and flops of its batch, perf/roofline.py) recorded with every measurement,
and its output checked against the fp32 reference on the same tensors (perf/measure/check.py:
a wrong case is never timed; `recheck` checks what was timed again after timing).
What is timed is exactly what a user calls: the public entry with a preallocated `out=` and
the host-side hints a serving engine passes (`max_seqlen_q`, `max_seqlen_k`, where the
variant takes them), eagerly (`eager`) and as a captured CUDA/HIP graph (`graph`), both as
device time (perf/measure/timing.py).

The rounds that time cases are perf/measure/rounds.py; `perf run` (perf/measure/run.py) and
the A/B gate's worker (perf/latency/worker.py, both sides in one process) use them.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import roofline
from perf import vendor as vendor_mod
from perf.errors import NothingMeasured
from perf.measure import check

BATCH_BUDGET_BYTES = int(float(os.environ.get("PERF_BATCH_BUDGET_GB", "24")) * 2**30)



@dataclass
class Case:
    variant: str
    scenario: str
    digest: str  # BatchSpec.digest() of the batch the case runs on
    fn: Callable[[], object] | None  # the public call; None when skipped
    config: list[dict] = field(default_factory=list)
    skip: str | None = None  # reason the variant cannot run the scenario
    kind: str = "skip"  # "skip" (unsupported feature), "error" (it broke) or "missing"
    graph: object = None  # captured CUDA/HIP graph, made on first use
    broken: set = field(default_factory=set)  # metrics that raised once: recorded, not retried
    keep: tuple = ()  # the batch and output the call points into
    plans: dict = field(default_factory=dict)  # metric -> timing.Plan
    expected: object = None  # the fp32 reference's output for the batch (perf/measure/check.py)
    work: dict = field(default_factory=dict)  # {"bytes", "flops"} of the batch (perf/roofline.py), in records

    @property
    def out(self):
        """The output buffer every call of a variant's case writes (None for a peer's case)."""
        return self.keep[1] if len(self.keep) > 1 else None


def takes(variant, option: str) -> bool:
    """Whether the variant's public entry takes `option` (a hint, or a keyword of `plan`)."""
    if option in getattr(variant, "hints", ()):
        return True
    try:
        return option in inspect.signature(variant.plan).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def host_hints(variant, spec) -> dict:
    """What a serving engine knows on the host and passes (vLLM does), where the variant takes it."""
    known = {"max_seqlen_q": max(spec.query_lens), "max_seqlen_k": max(spec.kv_lens)}
    return {k: v for k, v in known.items() if takes(variant, k)}


def reference_for(batch):
    """The fp32 reference's output for `batch` (None without a batch), by the `kernels` active
    now (perf/checkout.py): computed once per scenario and shared by its cases."""
    if batch is None:
        return None
    from kernels.reference import paged_attention_reference

    return check.reference_output(paged_attention_reference, batch)


def make_case(kernels, variant_name: str, scenario, device: str, batch=None, expected=None) -> Case:
    """Validate, compile and check one (variant, scenario); `batch` is shared by the variants,
    `expected` (its reference output, `reference_for`) too; computed here when not given.

    Call it with the `kernels` of the side being prepared active (perf/checkout.py)."""
    from kernels.batch import build_batch

    spec = scenario.spec()
    digest = spec.digest()
    variants = getattr(kernels, "VARIANTS", {})
    if variant_name not in variants:
        return Case(variant_name, scenario.name, digest, None,
                    skip=f"variant {variant_name!r} is not registered in this checkout", kind="missing")
    variant = variants[variant_name]
    try:
        batch = batch if batch is not None else build_batch(spec, device)
        digest = batch.spec.digest() if hasattr(batch, "spec") else digest
        out = batch.new_output()
        args, options = batch.args(), dict(batch.options, **host_hints(variant, batch.spec))
        value_checks = {"check_values": True} if takes(variant, "check_values") else {}
        variant(*args, out=out, **options, **value_checks)  # validates the batch once, compiles
        config = []
        if hasattr(variant, "plan"):
            _, launches = variant.plan(*args, out=out, **options)
            config = [launch.config() for launch in launches]

        def fn(variant=variant, args=args, out=out, options=options):
            variant(*args, out=out, **options)

        import torch

        if not bool(torch.isfinite(out).all()):
            return Case(variant_name, scenario.name, digest, None,
                        skip="output has NaN/Inf (unwritten or wrong): not timed", kind="error")
        expected = reference_for(batch) if expected is None else expected
        found = check.check_call(fn, out, expected)
        if not found.ok:
            return Case(variant_name, scenario.name, digest, None, kind="error",
                        skip=check.wrong_reason(found, "before timing") + ": not timed")
    except NotImplementedError as e:
        return Case(variant_name, scenario.name, digest, None, skip=str(e))
    except Exception as e:  # a broken kernel is a finding, not a crash of the harness
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return Case(variant_name, scenario.name, digest, None, skip=msg, kind="error")
    return Case(variant_name, scenario.name, digest, fn, config, keep=(batch, out), expected=expected,
                work=roofline.work(getattr(batch, "spec", spec)))


def recheck(case: Case, metrics) -> list[tuple[str, check.Check]]:
    """After timing: each of `metrics` this case was timed with (the call, the captured graph's
    replay) runs once more on the case's tensors, its output poisoned first and then checked
    against the reference. Peers' cases (no output buffer) are checked before timing only."""
    if case.fn is None or case.out is None or case.expected is None:
        return []
    found = []
    for metric in metrics:
        if metric == "graph" and case.graph is not None:
            import torch

            found.append((metric, check.check_call(case.graph.replay, case.out, case.expected,
                                                   sync=torch.cuda.synchronize)))
        elif metric == "eager":
            found.append((metric, check.check_call(case.fn, case.out, case.expected)))
    return found


def timed_callable(case: Case, metric: str):
    """What `metric` times of a ready case: the call, or its captured graph's replay."""
    from perf.measure import timing

    if metric == "graph":
        if case.graph is None:
            case.graph = timing.capture_graph(case.fn)
        return case.graph.replay
    return case.fn


def plan_case(case: Case, metric: str, warmup: int = 3):
    """Warm the case's metric up and fix how it is timed (timing.plan); None off the GPU."""
    from perf.measure import timing

    if not vendor_mod.on_gpu():
        return None
    if metric not in case.plans:
        case.plans[metric] = timing.plan(timed_callable(case, metric), warmup)
    return case.plans[metric]


def time_case(case: Case, metric: str, samples: int, budget_ms: float | None, warmup: int = 3,
              plan=None):
    """One repeat of `metric` on a ready case: its Samples."""
    from perf.measure import timing

    fn = timed_callable(case, metric)
    if metric == "graph":
        return timing.time_graph(case.fn, samples=samples, warmup=warmup, budget_ms=budget_ms,
                                 graph=case.graph, plan_=plan or plan_case(case, metric, warmup))
    if not vendor_mod.on_gpu():  # wall clock (interpreter): make_case warmed the call up already
        return timing.time_eager(fn, samples=samples, warmup=1)
    return timing.time_eager(fn, samples=samples, warmup=warmup, budget_ms=budget_ms,
                             plan_=plan or plan_case(case, metric, warmup))


def usable_metrics(metrics: list[str]) -> list[str]:
    """The metrics this machine can measure (graph replay needs a GPU)."""
    return [m for m in metrics if m == "eager" or vendor_mod.on_gpu()]


def require_metrics(metrics: list[str], option: str = "--metrics") -> list[str]:
    """`usable_metrics`, refused when none is left: a run that could measure nothing must not start."""
    usable = usable_metrics(metrics)
    if not usable:
        raise NothingMeasured(f"{option} {','.join(metrics)}: graph replay needs a GPU (found none); pass "
                              f"{option} eager to run in Triton's interpreter")
    return usable
