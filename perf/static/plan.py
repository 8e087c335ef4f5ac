"""Plan every variant x scenario "as if on" each compile target, bound as Triton binds it.

For each target of thresholds.yaml the variant's own planner (`Variant.plan`) runs with
that target's vendor and SM/CU count (`plan_as_if_on`), on the scenario's batch built
without values (`kernels.batch.build_batch(fill=False)`), an fp8 cache in the target's
native format (`fp8_format`: FNUZ on gfx942). Each planned launch is bound the
way Triton's launcher binds it on that vendor (`create_function_from_signature` and
`JITFunction._pack_args`: integers equal to 1 become constants, multiples of 16 and
16-byte-aligned pointers get divisibility hints, AMD adds its buffer-op pointer ranges)
and keyed by Triton's own compile cache key, so identical specializations compile once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from typing import Any

from perf.errors import ConfigError
from perf.static import metrics as sm


@dataclasses.dataclass(frozen=True)
class Target:
    """A compile target of thresholds.yaml with the hardware facts this package knows."""

    name: str  # sm_90, gfx942
    vendor: str  # nvidia | amd
    backend: str  # cuda | hip
    arch: int | str  # what GPUTarget takes: 90 | "gfx942"
    warp_size: int
    max_shared_memory_bytes: int
    max_registers_per_thread: int
    default_variants: tuple[str, ...] | None = None  # compiled when --variants names none; None: all

    @property
    def facts(self) -> sm.TargetFacts:
        return sm.TARGET_FACTS[self.name]

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


def load_targets(thresholds, only: str | None = None, registered=None) -> list[Target]:
    """Every vendor's compile targets (thresholds.yaml), optionally filtered by `--targets`;
    with `registered` (a checkout's variant names), their `default_variants` are checked
    against it."""
    from perf import validate

    out = []
    for vendor, vt in thresholds.vendors.items():
        for i, t in enumerate(vt.targets):
            where = f"{thresholds.path}: {vendor}.compile.targets[{i}]"
            if t.name not in sm.TARGET_FACTS:
                raise ConfigError(
                    f"{where}.name: no hardware facts for "
                    f"{t.name!r} (known: {', '.join(sm.TARGET_FACTS)}); add it to "
                    f"perf/vendor.py TARGETS or use a known name")
            if registered is not None and t.default_variants:
                validate.variants(",".join(t.default_variants), registered, flag=f"{where}.default_variants:")
            out.append(Target(t.name, vendor, t.backend, t.arch, t.warp_size, t.max_shared_memory_bytes,
                              t.max_registers_per_thread, t.default_variants))
    if only is not None:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        have = ", ".join(t.name for t in out)
        unknown = [n for n in wanted if n not in {t.name for t in out}]
        if unknown or not wanted:
            raise ConfigError(f"--targets {only!r}: {', '.join(unknown) or 'no target'} not in "
                              f"{thresholds.path}; pass some of: {have}")
        out = [t for t in out if t.name in wanted]
    return out


def plan_as_if_on(target: Target, variant, batch, *, num_sms: int | None = None, out=None, **hints) -> list:
    """The launches `variant` plans for `batch` on `target`: its vendor's decision trees
    sized for its SM/CU count (`num_sms`: another count than the target's product, e.g. the
    GPU a gate runs on), through the kernels' own `vendor=` / `num_sms=` hints. `out`: the
    output buffer (default: a new one); `hints`: further host-side hints the call passes
    (the latency gate's `max_seqlen_q` / `max_seqlen_k`, perf/change/latency.py).

    What the planner decides by the GPU in its own process (the Gluon kernel is sm_90's) follows the
    process only on the target's own architecture: on a GPU of another one (an H100 planning sm_100)
    the active kernels' `platform.current()` is a CPU's while it plans, as from a CPU (CI), where the
    platform stays as it is."""
    import torch

    out = torch.empty_like(batch.q) if out is None else out
    with _off_target_as_from_a_cpu(target):
        _, launches = variant.plan(*batch.args(), out=out, vendor=target.vendor,
                                   num_sms=num_sms or target.facts.num_sms, **batch.options, **hints)
    return launches


@contextlib.contextmanager
def _off_target_as_from_a_cpu(target: Target):
    """Where this process runs on a GPU of another architecture than `target`, the active kernels'
    `platform.current()` is a CPU's while planning, as CI plans (`plan_as_if_on`)."""
    from kernels import platform

    here = platform.current()
    if here.vendor == "cpu" or here.arch == target.name:
        yield
        return
    current = platform.current
    # what `current()` returns without a GPU, written out: a base checkout's platform module is the one active
    cpu = platform.Platform("cpu", "interpreter", "Triton interpreter", 32, 0)
    platform.current = lambda: cpu
    try:
        yield
    finally:
        platform.current = current


def fp8_format(target: Target) -> dict:
    """`build_batch`'s fp8 cache format for `target`: the one native to it (FNUZ on gfx942),
    chosen by the checkout's `kernels.inputs.fp8_dtype_for`; none for a checkout older than
    that, whose kernels read only OCP e4m3 (its build_batch's only format)."""
    from kernels import inputs

    choose = getattr(inputs, "fp8_dtype_for", None)
    return {} if choose is None else {"fp8_dtype": choose(target.name)}


@dataclasses.dataclass
class Job:
    """One kernel specialization for one target: what a worker process compiles."""

    key: str  # cache key
    target: Target
    module: str  # the JITFunction's module and name, importable in the worker
    qualname: str
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict


def bind(launch, target: Target) -> tuple[dict, dict, dict, Any]:
    """(signature, constexprs, attrs, options) exactly as Triton's launcher derives them."""
    from triton import knobs
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    backend = make_backend(target.gpu_target())
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, **launch.vendor_options}
    kwargs["debug"] = kwargs.get("debug", kernel.debug) or knobs.runtime.debug  # as JITFunction.run
    if hasattr(knobs.compilation, "instrumentation_mode"):  # Triton >= 3.6 (3.5 has no such option)
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    bound, specialization, options = binder(**launch.args, **launch.constexprs, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return signature, constexprs, attrs, options


def source(kernel, signature, constexprs, attrs):
    """What `triton.compile` takes for a planned kernel: Gluon's source for a Gluon kernel (its IR is
    built another way), Triton's for the rest."""
    from triton.compiler import ASTSource

    if getattr(kernel, "is_gluon", lambda: False)():  # Tritons before Gluon's have no such method
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(kernel, signature, constexprs, attrs)
    return ASTSource(kernel, signature, constexprs, attrs)


def cache_key(launch, target: Target, signature, constexprs, attrs, options) -> str:
    """Triton's own compile cache key (source + dependencies, specialization, options,
    backend, Triton build) plus the metric parser's version."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import make_backend
    from triton.runtime.cache import get_cache_key

    src = source(launch.kernel, signature, constexprs, attrs)
    backend = make_backend(target.gpu_target())
    env = get_cache_invalidating_env_vars()
    env = {k: v for k, v in env.items() if k not in ("TRITON_ALWAYS_COMPILE", "TRITON_CACHE_DIR")}
    key = f"static-{sm.METRICS_VERSION}-{target.name}-{get_cache_key(src, backend, options, env)}"
    return hashlib.sha256(key.encode()).hexdigest()


def job_of(launch, target: Target) -> Job:
    """What compiles one planned launch for `target`: bound as the launcher binds it, keyed by
    Triton's compile key."""
    signature, constexprs, attrs, options = bind(launch, target)
    key = cache_key(launch, target, signature, constexprs, attrs, options)
    fn = launch.kernel.fn
    return Job(key, target, fn.__module__, fn.__qualname__, signature, constexprs, attrs,
               dict(options.__dict__))


def variants_for(target: Target, variants: list[str], named: bool) -> list[str]:
    """The variants compiled for `target`: all of `variants` when `--variants` named them
    (`named`), else those of them in the target's `default_variants` (thresholds.yaml)."""
    if named or target.default_variants is None:
        return variants
    return [v for v in variants if v in target.default_variants]


def plan_side(variants: list[str], scenarios: list, targets: list[Target],
              named: bool = False) -> tuple[list[dict], list[Job]]:
    """Entries (one per variant x scenario x target x launched kernel) and the unique jobs.

    `variants` may name ones this checkout lacks (a base older than the variant): their
    entries are skipped with the reason. The caller refuses names the head does not register.
    `named`: `--variants` named them, so a target's `default_variants` does not apply.
    """
    import kernels

    entries: list[dict] = []
    jobs: dict[str, Job] = {}
    from kernels.batch import build_batch
    from perf.measure.cases import host_hints

    for target in targets:
        batches = {s.name: build_batch(s.spec(), "cpu", fill=False, **fp8_format(target)) for s in scenarios}
        for name in variants_for(target, variants, named):
            variant = kernels.VARIANTS.get(name)
            for scenario in scenarios:
                base = {"variant": name, "scenario": scenario.name, "target": target.name,
                        "vendor": target.vendor}
                if variant is None:
                    entries.append({**base, "status": "skip", "kernel": "",
                                    "error": f"variant {name!r} is not registered in this checkout"})
                    continue
                try:  # with the host hints the harness passes: the launches the latency gate times
                    launches = plan_as_if_on(target, variant, batches[scenario.name],
                                             **host_hints(variant, scenario.spec()))
                except NotImplementedError as e:
                    entries.append({**base, "status": "skip", "kernel": "", "error": str(e)})
                    continue
                except Exception as e:  # a planner that breaks is a finding, not a crash
                    entries.append({**base, "status": "error", "kernel": "(plan)",
                                    "error": f"plan failed: {type(e).__name__}: {e}"[:2000]})
                    continue
                digest = scenario.spec().digest()
                seen: dict[str, int] = {}
                for index, launch in enumerate(launches):
                    occurrence = seen.get(launch.name, 0)
                    seen[launch.name] = occurrence + 1
                    entry = {**base, "kernel": launch.name, "occurrence": occurrence, "launch": index,
                             "config": launch.config(), "batch_digest": digest}
                    try:
                        job = job_of(launch, target)
                    except Exception as e:
                        entries.append({**entry, "status": "error",
                                        "error": f"bind failed: {type(e).__name__}: {e}"[:2000]})
                        continue
                    entry["key"] = job.key
                    entries.append(entry)
                    jobs.setdefault(job.key, job)
    return entries, list(jobs.values())
