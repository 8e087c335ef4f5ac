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

import contextlib
import inspect
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import roofline
from perf import vendor as vendor_mod
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
    expected: object = None  # the batch's fp32 reference outputs (check.Reference)
    work: dict = field(default_factory=dict)  # {"bytes", "flops"} of the batch (perf/roofline.py), in records
    inputs: dict = field(default_factory=dict)  # check.fingerprint of the batch before the first call
    launches: tuple | None = None  # the kernels one call plans (check.LaunchLog); None: a peer's case
    logs: dict = field(default_factory=dict)  # metric -> check.LaunchLog of its timed calls
    other: tuple | None = None  # (q values, their check.Reference) for check.other_values, made at recheck

    @property
    def out(self):
        """The output buffer every call of a variant's case writes (None for a peer's case)."""
        return self.keep[1] if len(self.keep) > 1 else None

    @property
    def tolerance(self) -> tuple[float, float] | None:
        """The (atol, rtol) its output is checked with: its dtype's, or that of the e4m3 operands
        its plan multiplies (`check.tolerance`); None for a peer's case."""
        return None if self.out is None else check.tolerance(self.out.dtype, self.config)

    @property
    def reference(self):
        """The reference output its output is held to (`check.Reference.of` its plan); None without one."""
        return None if self.expected is None else self.expected.of(self.config)


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
    """The fp32 reference outputs for `batch` (`check.Reference`; None without a batch), by the
    `kernels` active now (perf/checkout.py): computed once per scenario and shared by its cases."""
    if batch is None:
        return None
    from kernels.reference import paged_attention_reference

    return check.references(paged_attention_reference, batch)


def make_case(kernels, variant_name: str, scenario, device: str, batch=None, expected=None) -> Case:
    """Validate, compile and check one (variant, scenario); `batch` is shared by the variants,
    `expected` (its reference outputs, `reference_for`) too; computed here when not given.

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
        inputs = check.fingerprint(check.input_tensors(batch))
        config, planned = [], None
        if hasattr(variant, "plan"):
            _, launches = variant.plan(*args, out=out, **options)
            config = [launch.config() for launch in launches]
            planned = tuple(sorted(launch.name for launch in launches))
        log = check.LaunchLog(planned)
        with log.recording():  # validates the batch once, compiles
            log.wrap(lambda: variant(*args, out=out, **options, **value_checks))()

        def fn(variant=variant, args=args, out=out, options=options):
            variant(*args, out=out, **options)

        import torch

        if not bool(torch.isfinite(out).all()):
            return Case(variant_name, scenario.name, digest, None,
                        skip="output has NaN/Inf (unwritten or wrong): not timed", kind="error")
        expected = reference_for(batch) if expected is None else expected
        with log.recording():
            found = check.check_call(log.wrap(fn), out, expected.of(config), None,
                                     check.tolerance(out.dtype, config))
        found = (log.verdict("before timing") or check.changed_inputs(inputs, check.input_tensors(batch))
                 or found)
        if not found.ok:
            return Case(variant_name, scenario.name, digest, None, kind="error",
                        skip=check.wrong_reason(found, "before timing") + ": not timed")
    except NotImplementedError as e:
        return Case(variant_name, scenario.name, digest, None, skip=str(e))
    except Exception as e:  # a broken kernel is a finding, not a crash of the harness
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return Case(variant_name, scenario.name, digest, None, skip=msg, kind="error")
    return Case(variant_name, scenario.name, digest, fn, config, keep=(batch, out), expected=expected,
                work=roofline.work(getattr(batch, "spec", spec)), inputs=inputs, launches=log.expected)


def recheck(case: Case, metrics) -> list[tuple[str, check.Check]]:
    """After timing, per metric it was timed with, the first check that fails (else the last,
    passed): the inputs as they were before the first call; every timed call's launches as
    planned, on its own stream; the call (the captured graph's replay) right on the inputs it
    was timed on, then with other values in the same input buffers (`check.other_values`),
    then on its inputs again, its output poisoned first each time. Peers' cases (no output buffer) are checked
    before timing only."""
    if case.fn is None or case.out is None or case.expected is None:
        return []
    batch = case.keep[0]
    found = []
    for metric in metrics:
        if metric == "graph" and case.graph is not None:
            import torch

            call, sync = case.graph.replay, torch.cuda.synchronize
        elif metric == "eager":
            call, sync = case.fn, None
        else:
            continue
        log = case.logs.get(metric)
        bad = check.changed_inputs(case.inputs, check.input_tensors(batch)) if case.inputs else None
        bad = bad or (log.verdict("while timed") if log is not None else None)
        if bad is None and check.check_call(call, case.out, case.reference, sync, case.tolerance).ok:
            bad = _with_other_values(case, call, sync)
        # last, whatever failed before: the output of the inputs it was timed on, which the gate
        # compares with base's (left holding the other values' output, that comparison named a
        # difference of inputs as head's error)
        last = check.check_call(call, case.out, case.reference, sync, case.tolerance)
        found.append((metric, bad or last))
    return found


def _with_other_values(case: Case, call, sync) -> check.Check | None:
    """`call` checked while the case's input buffers hold other values (check.other_values,
    their reference computed the first time); a failed check, or None when it is right."""
    batch = case.keep[0]
    if case.other is None:
        case.other = _other_for(batch)
    with check.other_values(batch, case.other[0]):
        found = check.check_call(call, case.out, case.other[1].of(case.config), sync, case.tolerance)
    if found.ok:
        return None
    return check.failed(f"with other values in the same input buffers: {found.describe()}")


_OTHER: dict[int, tuple] = {}  # id(batch) -> (a weak reference to it, its other q values and their reference)


def _other_for(batch) -> tuple:
    """(other q values, their reference) for `batch`: made once per batch, shared by the cases on
    it (both sides of the gate, every variant), as the reference of its own values is."""
    kept = _OTHER.get(id(batch))
    if kept is None or kept[0]() is not batch:
        q_other = check.other_q(batch)
        with check.other_values(batch, q_other):
            kept = _OTHER[id(batch)] = (weakref.ref(batch), (q_other, reference_for(batch)))
        weakref.finalize(batch, _OTHER.pop, id(batch), None)  # freed with the batch
    return kept[1]


@contextlib.contextmanager
def _watched(case: Case, metric: str):
    """Wraps the calls made inside with the case's launch log for `metric` (a variant's case)."""
    if case.launches is None or case.out is None:
        yield lambda fn: fn
        return
    log = case.logs.setdefault(metric, check.LaunchLog(case.launches))
    with log.recording():
        yield log.wrap


def timed_callable(case: Case, metric: str):
    """What `metric` times of a ready case: the call, or its captured graph's replay (captured
    with its launches recorded: a replay makes no launch of its own to see)."""
    from perf.measure import timing

    if metric == "graph":
        if case.graph is None:
            with _watched(case, metric) as watch:
                case.graph = timing.capture_graph(watch(case.fn))
        return case.graph.replay
    return case.fn


def plan_case(case: Case, metric: str, warmup: int = 3):
    """Warm the case's metric up and fix how it is timed (timing.plan); None off the GPU."""
    from perf.measure import timing

    if not vendor_mod.on_gpu():
        return None
    if metric not in case.plans:
        fn = timed_callable(case, metric)
        if metric != "eager":  # a replay launches nothing the hook sees
            case.plans[metric] = timing.plan(fn, warmup)
        else:
            with _watched(case, metric) as watch:
                case.plans[metric] = timing.plan(watch(fn), warmup)
    return case.plans[metric]


def time_case(case: Case, metric: str, samples: int, budget_ms: float | None, warmup: int = 3,
              plan=None):
    """One repeat of `metric` on a ready case: its Samples. An eager call's launches are
    recorded (host work only, hidden from device time as the rest of the host's is)."""
    from perf.measure import timing

    fn = timed_callable(case, metric)
    if metric == "graph":
        return timing.time_graph(case.fn, samples=samples, warmup=warmup, budget_ms=budget_ms,
                                 graph=case.graph, plan_=plan or plan_case(case, metric, warmup))
    plan = None if not vendor_mod.on_gpu() else plan or plan_case(case, metric, warmup)
    with _watched(case, metric) as watch:
        if plan is None:  # wall clock (interpreter): make_case warmed the call up already
            return timing.time_eager(watch(fn), samples=samples, warmup=1)
        return timing.time_eager(watch(fn), samples=samples, warmup=warmup, budget_ms=budget_ms, plan_=plan)


