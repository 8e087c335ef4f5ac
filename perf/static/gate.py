"""Static gate: cross-compile every variant for every target, compare head with base (CPU only).

For every registered variant and every scenario of a suite (default `pr`), the variant's
own planner (`Variant.plan`) is run *as if on* each target of thresholds.yaml (sm_90 and
gfx942 to start): `kernels.platform.current()` answers with that target's vendor, arch
and SM/CU count, so the vendor's heuristics pick the configuration they would pick there.
Each planned launch is bound the way Triton's launcher binds it on that vendor (the same
`create_function_from_signature` binder and `_pack_args`: integer arguments equal to 1
become constants, multiples of 16 and 16-byte-aligned pointers get divisibility hints,
AMD adds its buffer-op pointer ranges), then `triton.compile(ASTSource(...),
target=GPUTarget(...))` produces PTX/cubin or AMDGCN/hsaco on this CPU, and
perf/static/metrics.py reads registers, spills, shared memory/LDS and occupancy.

Identical specializations across scenarios compile once; results are cached in
.perf-cache/compile/ under Triton's own cache key (source hash with dependencies,
signature, constants, attributes, options, backend and Triton version) plus the metric
parser's version. Head and base are compiled by the same driver (this file), each in its
own process importing that side's `kernels/` (the base from a `git worktree`), so a
change in the driver can never show up as a kernel regression.

`python -m perf compile` gates the working tree against the merge base; `--emit-json`
compiles one side only. Exit codes: 0 pass (warnings allowed), 1 regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from perf import checkout, git
from perf.checkout import ROOT
from perf.errors import EXIT_BAD_INPUT, ConfigError
from perf.static import metrics as sm

SIDE_SCHEMA = "perf-static/1"  # the per-side JSON this module writes and reads
DEFAULT_CACHE = ".perf-cache/compile"
DEFAULT_SUITE = "pr"


# ------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class Target:
    """A compile target of thresholds.yaml with the hardware facts this module knows."""

    name: str  # sm_90, gfx942
    vendor: str  # nvidia | amd
    backend: str  # cuda | hip
    arch: int | str  # what GPUTarget takes: 90 | "gfx942"
    warp_size: int
    max_shared_memory_bytes: int
    max_registers_per_thread: int

    @property
    def facts(self) -> sm.TargetFacts:
        return sm.TARGET_FACTS[self.name]

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


def load_targets(thresholds, only: str | None = None) -> list[Target]:
    """Every vendor's compile targets (thresholds.yaml), optionally filtered by name."""
    out = []
    for vendor, vt in thresholds.vendors.items():
        for i, t in enumerate(vt.targets):
            if t.name not in sm.TARGET_FACTS:
                raise ConfigError(
                    f"{thresholds.path}: {vendor}.compile.targets[{i}].name: no hardware facts for "
                    f"{t.name!r} (known: {', '.join(sm.TARGET_FACTS)}); add it to "
                    f"perf/static/metrics.py TARGET_FACTS or use a known name")
            out.append(Target(t.name, vendor, t.backend, t.arch, t.warp_size, t.max_shared_memory_bytes,
                              t.max_registers_per_thread))
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in {t.name for t in out}]
        if unknown:
            raise ConfigError(f"--targets: {', '.join(unknown)} not in {thresholds.path} "
                              f"(have: {', '.join(t.name for t in out)})")
        out = [t for t in out if t.name in wanted]
    return out


@contextlib.contextmanager
def planning_for(target: Target):
    """Make `kernels.platform.current()` describe `target` while planning on this CPU.

    The heuristics read the vendor and the SM/CU count from `platform.current()` at plan
    time; it is `functools.cache`d, so the function itself is swapped (in kernels.platform
    and in any kernels module that imported the name) and restored afterwards.
    """
    from kernels import platform

    facts = target.facts
    fake = platform.Platform(facts.vendor, target.name, facts.device_name, target.warp_size, facts.num_sms)
    original = platform.current
    swapped = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kernels" or name.startswith("kernels.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                swapped.append((module, attr))
    for module, attr in swapped:
        setattr(module, attr, lambda: fake)
    try:
        yield fake
    finally:
        for module, attr in swapped:
            setattr(module, attr, original)


# ------------------------------------------------------------------------- planning


def planning_batch(spec):
    """The batch `spec` describes, with q and the caches left unwritten (`torch.empty`).

    Shapes, dtypes, strides and metadata equal `kernels.batch.build_batch`'s (a test checks
    it); only the values a compiler never sees are skipped, so the pr suite's multi-GB
    caches cost no memory here (pages of an untouched allocation are never mapped).
    """
    import math

    import torch

    from kernels.batch import FP8_DTYPE, PagedBatch

    blocks = spec.blocks_per_seq()
    num_blocks = sum(blocks) + 3  # kernels.batch.SPARE_BLOCKS
    block_table = torch.zeros(spec.num_seqs, max(blocks), dtype=torch.int32)
    start = 0
    for i, n in enumerate(blocks):
        block_table[i, :n] = torch.arange(start, start + n, dtype=torch.int32)
        start += n
    cache_dtype = FP8_DTYPE if spec.fp8_kv else spec.torch_dtype
    cache_shape = (num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size)
    options: dict = {"scale": 1.0 / math.sqrt(spec.head_size)}
    if spec.fp8_kv:
        options["k_scale"], options["v_scale"] = torch.ones(1), torch.ones(1)
    if spec.sliding_window is not None:
        options["sliding_window"] = spec.sliding_window
    if spec.softcap is not None:
        options["softcap"] = spec.softcap
    if spec.sinks:
        options["sinks"] = torch.zeros(spec.num_q_heads)
    cu = [0]
    for n in spec.query_lens:
        cu.append(cu[-1] + n)
    return PagedBatch(
        spec=spec,
        q=torch.empty(spec.num_tokens, spec.num_q_heads, spec.head_size, dtype=spec.torch_dtype),
        k_cache=torch.empty(cache_shape, dtype=cache_dtype),
        v_cache=torch.empty(cache_shape, dtype=cache_dtype),
        block_table=block_table,
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(spec.kv_lens, dtype=torch.int32),
        options=options,
    )


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
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    bound, specialization, options = binder(**launch.args, **launch.constexprs, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return signature, constexprs, attrs, options


def cache_key(launch, target: Target, signature, constexprs, attrs, options) -> str:
    """Triton's own compile cache key (source + dependencies, specialization, options,
    backend, Triton build) plus this module's metric version."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.cache import get_cache_key

    src = ASTSource(launch.kernel, signature, constexprs, attrs)
    backend = make_backend(target.gpu_target())
    env = get_cache_invalidating_env_vars()
    env = {k: v for k, v in env.items() if k not in ("TRITON_ALWAYS_COMPILE", "TRITON_CACHE_DIR")}
    key = f"static-{sm.METRICS_VERSION}-{target.name}-{get_cache_key(src, backend, options, env)}"
    return hashlib.sha256(key.encode()).hexdigest()


def plan_side(variants: list[str] | None, scenarios: list,
              targets: list[Target]) -> tuple[list[dict], list[Job]]:
    """Entries (one per variant x scenario x target x launched kernel) and the unique jobs."""
    import torch

    import kernels

    names = list(kernels.VARIANTS) if not variants else variants
    entries: list[dict] = []
    jobs: dict[str, Job] = {}
    batches = {s.name: planning_batch(s.spec()) for s in scenarios}
    for target in targets:
        with planning_for(target):
            for name in names:
                variant = kernels.VARIANTS.get(name)
                for scenario in scenarios:
                    base = {"variant": name, "scenario": scenario.name, "target": target.name,
                            "vendor": target.vendor}
                    if variant is None:
                        entries.append({**base, "status": "skip", "kernel": "",
                                        "error": f"variant {name!r} is not registered in this checkout"})
                        continue
                    batch = batches[scenario.name]
                    try:
                        _, launches = variant.plan(*batch.args(), out=torch.empty_like(batch.q),
                                                   **batch.options)
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
                            signature, constexprs, attrs, options = bind(launch, target)
                            key = cache_key(launch, target, signature, constexprs, attrs, options)
                        except Exception as e:
                            entries.append({**entry, "status": "error",
                                            "error": f"bind failed: {type(e).__name__}: {e}"[:2000]})
                            continue
                        entry["key"] = key
                        entries.append(entry)
                        fn = launch.kernel.fn
                        jobs.setdefault(key, Job(key, target, fn.__module__, fn.__qualname__, signature,
                                                 constexprs, attrs, dict(options.__dict__)))
    return entries, list(jobs.values())


# ------------------------------------------------------------------------- compiling


def _first_line(err: BaseException) -> str:
    """The message a reader needs; Triton's compile errors put it after the source excerpt."""
    text = f"{err}".strip() or type(err).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    where = re.match(r"at (\d+:\d+):", lines[0]) if lines else None
    for line in reversed(lines):  # CompilationError: "at 27:11:", source, "^", the message
        if not set(line) <= set("^~ ") and not line.startswith("at "):
            loc = f" at {where.group(1)} (line:col from the def)" if where else ""
            return f"{type(err).__name__}{loc}: {line}"[:400]
    return f"{type(err).__name__}: {lines[0]}"[:400]


def compile_job(job: Job) -> dict:
    """Compile one job and read its metrics (runs in a worker process)."""
    import triton
    from triton.compiler import ASTSource

    kernel = getattr(importlib.import_module(job.module), job.qualname)
    start = time.perf_counter()
    log = io.StringIO()  # triton prints its own `ptxas -v` log (TRITON_DUMP_PTXAS_LOG=1)
    try:
        src = ASTSource(kernel, job.signature, job.constexprs, job.attrs)
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=job.target.gpu_target(), options=job.options)
    except Exception as e:  # the compiler's verdict on this kernel for this target
        message = _first_line(e)
        unsupported = "not supported" in message.lower()  # e.g. an fp8 type the arch lacks
        return {"status": "unsupported" if unsupported else "error", "error": message,
                "detail": str(e)[-4000:], "metrics": {}}
    # Outside the try: a metric this driver cannot read is a harness bug, never a kernel's.
    metrics = sm.metrics_of(compiled, job.target.name, time.perf_counter() - start, log.getvalue())
    return {"status": "ok", "metrics": metrics, "error": ""}


@contextlib.contextmanager
def _fresh_triton_cache():
    """Triton compiles for real (honest compile times) into a throwaway cache directory,
    printing the `ptxas -v` log of each cubin it builds."""
    with tempfile.TemporaryDirectory(prefix="perf-static-triton-") as tmp:
        env = {"TRITON_CACHE_DIR": tmp, "TRITON_ALWAYS_COMPILE": "1", "TRITON_DUMP_PTXAS_LOG": "1"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class DiskCache:
    """Compiled metrics by cache key, one small JSON file each (safe for parallel writers)."""

    def __init__(self, root: str | None):
        self.root = root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], f"{key}.json")

    def get(self, key: str) -> dict | None:
        if not self.root:
            return None
        try:
            with open(self._path(key), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, json.JSONDecodeError):
            return None

    def put(self, key: str, value: dict) -> None:
        if not self.root:
            return
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f, sort_keys=True)
        os.replace(tmp, path)


def compile_all(jobs: list[Job], cache: DiskCache, workers: int, quiet: bool = False) -> tuple[dict, int]:
    """key -> compile result for every job; returns (results, number compiled now)."""
    results = {}
    todo = []
    for job in jobs:
        hit = cache.get(job.key)
        if hit is not None:
            results[job.key] = {**hit, "cached": True}
        else:
            todo.append(job)
    if not todo:
        return results, 0
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("compiling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=_console(stderr=True), disable=quiet)
    with _fresh_triton_cache(), progress:
        task = progress.add_task("", total=len(todo))

        def done(job: Job, result: dict) -> None:
            cache.put(job.key, result)
            results[job.key] = {**result, "cached": False}
            progress.update(task, advance=1, description=f"{job.target.name} {job.qualname}")

        if workers <= 1 or len(todo) == 1:
            for job in todo:
                done(job, compile_job(job))
        else:
            import multiprocessing

            # spawn: a clean interpreter per worker (fork after torch has started threads can hang)
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(compile_job, job): job for job in todo}
                for future in as_completed(futures):
                    done(futures[future], future.result())
    return results, len(todo)


def _console(stderr: bool = False):
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:  # CI logs: wide enough that the table's rows stay on one line
        console.width = max(160, int(os.environ.get("COLUMNS", "0") or 0))
    return console


# ------------------------------------------------------------------------- one side


def run_side(args: argparse.Namespace, thresholds) -> dict:
    """Plan and compile this process's kernels (from --source) for every target."""
    import triton

    from perf import scenarios as sc

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise ConfigError("TRITON_INTERPRET=1 is set: --emit-json compiles real kernels in this process; "
                          "unset it (without --emit-json the gate unsets it for its subprocesses)")
    targets = load_targets(thresholds, args.targets)
    scen = sc.select(sc.suite(args.suite), args.scenarios)
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
    source = os.path.abspath(args.source or os.getcwd())
    doc = {"schema": SIDE_SCHEMA, "triton": triton.__version__, "source": source,
           "commit": git.head(source), "suite": args.suite,
           "targets": [dataclasses.asdict(t) for t in targets], "comparable": True, "reason": "",
           "variants": [], "entries": []}
    import kernels

    registered = getattr(kernels, "VARIANTS", None)
    if not registered or not all(hasattr(v, "plan") for v in registered.values()):
        doc.update(comparable=False, reason="its kernels package has no VARIANTS with Variant.plan")
        return doc
    doc["variants"] = list(registered)
    start = time.perf_counter()
    entries, jobs = plan_side(variants, scen, targets)
    results, compiled = compile_all(jobs, DiskCache(None if args.no_cache else args.cache_dir),
                                    args.jobs, quiet=args.quiet)
    for e in entries:
        if "key" in e:
            r = results[e["key"]]
            e.update(status=r["status"], metrics=r["metrics"], error=r.get("error", ""),
                     cached=r.get("cached", False))
    doc.update(entries=entries, jobs=len(jobs), compiled=compiled,
               wall_s=round(time.perf_counter() - start, 2))
    return doc


def write_doc(path: str, doc: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


def read_doc(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not a static-gate side file ({e}); rerun `python -m perf compile`"
                          ) from None
    if doc.get("schema") != SIDE_SCHEMA:
        raise ConfigError(f"{path}: schema {doc.get('schema')!r}, expected {SIDE_SCHEMA!r}; recompile it")
    return doc


# ------------------------------------------------------------------------- two sides


def _side_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return env


def compile_in_subprocess(source: str, out: str, args: argparse.Namespace, label: str) -> dict:
    """Run this driver on `source`'s kernels in a fresh process; returns its side document."""
    cmd = [sys.executable, "-m", "perf.static.gate", "--emit-json", out, "--source", source,
           "--thresholds", os.path.abspath(args.thresholds), "--suite", args.suite,
           "--jobs", str(args.jobs), "--cache-dir", os.path.abspath(args.cache_dir)]
    for flag in ("targets", "variants", "scenarios"):
        if getattr(args, flag):
            cmd += [f"--{flag}", getattr(args, flag)]
    if args.no_cache:
        cmd.append("--no-cache")
    if args.quiet:
        cmd.append("--quiet")
    _console(stderr=True).print(f"[bold]{label}[/]: compiling {source}")
    done = subprocess.run(cmd, cwd=ROOT, env=_side_env())
    if done.returncode == EXIT_BAD_INPUT:
        raise ConfigError(f"{label} side ({source}): bad input (see the line above)")
    if done.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"{label} side ({source}) crashed with exit code {done.returncode}")
    return read_doc(out)


def gate(args: argparse.Namespace, thresholds) -> int:
    """Compile base and head, compare, report; the exit code of perf.verdicts."""
    from perf.verdicts import exit_code

    root = git.repo_root(os.getcwd())
    base, ref = git.resolve_base(root, args.base_ref)
    load_targets(thresholds, args.targets)  # bad targets fail before anything compiles
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()
    with git.worktree(root, base) as tree:
        base_doc = compile_in_subprocess(tree, os.path.join(out_dir, "base.json"), args, f"base {base[:10]}")
    head_doc = compile_in_subprocess(root, os.path.join(out_dir, "head.json"), args, "head (working tree)")
    wall = time.perf_counter() - start
    findings = sm.compare(base_doc, head_doc, thresholds)
    notes = _notes(base, ref, base_doc, head_doc, wall)
    _print_table(head_doc)
    markdown = _markdown(findings, base_doc, head_doc, notes)
    from perf.report import publish

    publish(markdown)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(markdown)
    write_doc(os.path.join(out_dir, "findings.json"), {"findings": [f.to_dict() for f in findings]})
    _write_results(os.path.join(out_dir, "static.jsonl"), head_doc, root)
    return exit_code(findings)


def _notes(base: str, ref: str, base_doc: dict, head_doc: dict, wall: float) -> list[str]:
    notes = [f"base {base[:12]} ({ref}) vs head {head_doc.get('commit', '?')[:12]} + working tree; "
             f"suite `{head_doc['suite']}`; Triton {head_doc['triton']}; targets "
             + ", ".join(t["name"] for t in head_doc["targets"]),
             f"compiled {base_doc.get('compiled', 0)} (base) + {head_doc.get('compiled', 0)} (head) "
             f"specializations of {head_doc.get('jobs', 0)}, the rest from .perf-cache; wall {wall:.1f} s"]
    if not base_doc.get("comparable", True):
        notes.append(f"base not comparable: {base_doc['reason']}; every finding is ok, its note says "
                     f"what it would be")
    return notes


# ------------------------------------------------------------------------- output


def _short(entry: dict) -> dict[str, str]:
    m = entry.get("metrics") or {}
    if entry["status"] != "ok":
        return {"status": entry["status"], "note": entry.get("error", "")[:80]}
    if entry["vendor"] == "nvidia":
        spills = f"{m['spill_stores']}/{m['spill_loads']} B"
    else:
        spills = f"{m['vgpr_spills']}v/{m['sgpr_spills']}s"
    regs = str(m["registers"])
    if entry["vendor"] == "amd":
        regs += f" ({m['agprs']}a) {m['sgprs']}s"
    return {"status": "ok", "registers": regs, "spills": spills,
            "shared": f"{m['shared_memory'] / 1024:.1f} KiB",
            "occupancy": f"{m['occupancy']} {sm.occupancy_unit(entry['vendor'])}",
            "time": f"{m['compile_time_s']:.2f}" + ("*" if entry.get("cached") else "")}


def compile_rows(doc: dict) -> list[dict]:
    """One row per (variant, kernel, target, specialization), with the scenarios using it."""
    rows: dict[tuple, dict] = {}
    for e in doc["entries"]:
        if e["status"] == "skip":
            continue
        k = (e["variant"], e["kernel"], e["target"], e.get("key") or e.get("error"))
        row = rows.setdefault(k, {**e, "scenarios": []})
        row["scenarios"].append(e["scenario"])
    return sorted(rows.values(), key=lambda r: (r["variant"], r["kernel"], r["target"], r["scenarios"][0]))


def summary_rows(doc: dict) -> list[dict]:
    """Variants x targets: specializations, worst registers/spills/shared/occupancy, compile time."""
    rows: dict[tuple, dict] = {}
    for r in compile_rows(doc):
        s = rows.setdefault((r["variant"], r["target"]), {
            "variant": r["variant"], "target": r["target"], "vendor": r["vendor"], "kernels": 0,
            "registers": 0, "spilling": 0, "shared": 0, "occupancy": None, "compile_s": 0.0, "failed": 0})
        s["kernels"] += 1
        if r["status"] != "ok":
            s["failed"] += 1
            continue
        m = r["metrics"]
        s["registers"] = max(s["registers"], m["registers"])
        s["spilling"] += any(m.get(k) for k in sm.SPILL_METRICS)
        s["shared"] = max(s["shared"], m["shared_memory"])
        s["occupancy"] = m["occupancy"] if s["occupancy"] is None else min(s["occupancy"], m["occupancy"])
        s["compile_s"] += m["compile_time_s"]
    return list(rows.values())


def _summary_cells(s: dict) -> list[str]:
    occupancy = "–" if s["occupancy"] is None else f"{s['occupancy']} {sm.occupancy_unit(s['vendor'])}"
    return [s["variant"], s["target"], str(s["kernels"]), str(s["registers"]), str(s["spilling"]),
            f"{s['shared'] / 1024:.1f} KiB", occupancy, f"{s['compile_s']:.1f}", str(s["failed"])]


SUMMARY_COLUMNS = ("variant", "target", "specializations", "max registers", "spilling", "max shared/LDS",
                   "min occupancy", "compile s (sum)", "not compiled")


def _scenario_label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1})"


def _print_table(doc: dict) -> None:
    from rich.table import Table

    table = Table(title=f"Static metrics of the head, variants x targets (Triton {doc['triton']}; "
                        f"per specialization in report.md)")
    for col in SUMMARY_COLUMNS:
        table.add_column(col, overflow="fold")
    for s in summary_rows(doc):
        cells = _summary_cells(s)
        if s["spilling"] or s["failed"]:
            cells = [f"[red]{c}[/]" for c in cells]
        table.add_row(*cells)
    _console().print(table)


def _markdown_table(doc: dict) -> list[str]:
    lines = ["| variant | kernel | target | scenarios | registers | spills | shared/LDS | occupancy | "
             "compile s | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in compile_rows(doc):
        s = _short(r)
        cells = [r["variant"], r["kernel"], r["target"], _scenario_label(r["scenarios"]),
                 *(s.get(c, "") for c in ("registers", "spills", "shared", "occupancy", "time")),
                 s["status"] if s["status"] == "ok" else f"{s['status']}: {s['note']}"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def _markdown(findings, base_doc: dict, head_doc: dict, notes: list[str]) -> str:
    from perf.report import render_markdown

    text = render_markdown(findings, "Static gate: registers, spills, shared memory/LDS, occupancy", notes)
    skipped = sorted({(e["variant"], e["error"]) for e in head_doc["entries"] if e["status"] == "skip"})
    lines = ["", "### Variants x targets (head)", "", "| " + " | ".join(SUMMARY_COLUMNS) + " |",
             "|" + "---|" * len(SUMMARY_COLUMNS),
             *("| " + " | ".join(_summary_cells(s)) + " |" for s in summary_rows(head_doc)),
             "", "registers: NVIDIA per thread, AMD VGPRs incl. AGPRs; spilling: specializations with any "
             "spill; occupancy: warps/SM (NVIDIA), waves/SIMD (AMD).",
             "", "<details><summary>Compiled kernels of the head (registers: NVIDIA per thread; AMD "
             "VGPRs incl. AGPRs, then SGPRs; spills: NVIDIA store/load bytes, AMD VGPR/SGPR counts; "
             "occupancy: warps/SM or waves/SIMD; * = from cache)</summary>", "",
             *_markdown_table(head_doc), ""]
    if skipped:
        lines += [f"- skipped: {v}: {why}" for v, why in skipped]
    lines += ["", "</details>", ""]
    return text + "\n".join(lines)


def _write_results(path: str, doc: dict, root: str) -> None:
    """The head's metrics in the shared results schema (perf/results.py), one record per metric."""
    from perf.latency.timing import Samples
    from perf.results import ResultsWriter, environment

    header = {"environment": {**environment(root), "gate": "static", "suite": doc["suite"],
                              "compile_targets": [t["name"] for t in doc["targets"]]}}
    with ResultsWriter(path, header, resume=False) as w:
        for e in doc["entries"]:
            if e["status"] == "skip":
                w.skip(variant=e["variant"], scenario=e["scenario"], reason=f"{e['target']}: {e['error']}")
            elif e["status"] != "ok":
                w.skip(variant=e["variant"], scenario=e["scenario"], kind="error",
                       reason=f"{e['target']} {e['kernel']}: {e['status']}: {e['error']}")
            else:
                for metric, value in e["metrics"].items():
                    w.record(variant=e["variant"], scenario=e["scenario"],
                             metric=f"{e['target']}/{e['kernel']}/{metric}", repeat=e["occurrence"],
                             samples=Samples((float(value),), clock="static"), config=[e["config"]],
                             digest=e["batch_digest"], compile_key=e["key"], gate="static",
                             target=e["target"], kernel=e["kernel"],
                             unit=sm.UNITS.get(metric, sm.occupancy_unit(e["vendor"])))


# ------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--base-ref", default=None,
      help="base commit (default: merge base of HEAD with origin/main, else main, else HEAD)")
    a("--emit-json", default=None, metavar="PATH",
      help="compile one side (this checkout or --source) into PATH; no gate")
    a("--source", default=None, help="checkout whose kernels/ to compile (with --emit-json)")
    a("--suite", default=DEFAULT_SUITE, help=f"suite of perf/suites.yaml (default: {DEFAULT_SUITE})")
    a("--variants", default=None, help="comma-separated variants (default: every registered)")
    a("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    a("--targets", default=None, help="comma-separated targets (default: all of thresholds.yaml)")
    a("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes (default: CPUs)")
    a("--cache-dir", default=DEFAULT_CACHE, help=f"metrics cache (default: {DEFAULT_CACHE})")
    a("--no-cache", action="store_true", help="compile everything again")
    a("--out", default="results/static", help="directory for base/head JSON, report, findings")
    a("--quiet", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    from perf.thresholds import load_thresholds

    thresholds = load_thresholds(args.thresholds)
    if args.emit_json:
        checkout.import_kernels(args.source)
        doc = run_side(args, thresholds)
        write_doc(args.emit_json, doc)
        if not args.quiet and doc["comparable"]:
            _print_table(doc)
        return 0
    return gate(args, thresholds)


if __name__ == "__main__":  # `python -m perf.static.gate`: the side processes of the gate
    from perf.thresholds import DEFAULT_PATH

    _parser = argparse.ArgumentParser(prog="python -m perf.static.gate", description=__doc__.splitlines()[0])
    _parser.add_argument("--thresholds", default=DEFAULT_PATH)
    add_arguments(_parser)
    try:
        sys.exit(main(_parser.parse_args()))
    except ConfigError as _e:
        print(f"error: {_e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
