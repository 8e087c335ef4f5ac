"""The A/B latency gate: head against base in the same processes, on the same tensors.

`python -m perf gate` checks out the base commit (default: the merge base of HEAD with
origin/main, else main; `--base-ref` overrides) in a temporary git worktree (perf/git.py)
and runs `statistics.processes` fresh measuring processes one after another on the GPU
(`python -m perf.latency.worker`); the head is this checkout, or with `--head-ref` a second
worktree (how `perf bisect` and the nightly's re-measure compare two commits). Each process
loads both checkouts' kernels side by side (perf/checkout.py), builds every batch once for
both, compiles each side once, and measures `statistics.repeats` paired rounds in which
base and head alternate (perf/latency/worker.py).
The unit of independence is the process: a case's verdict comes from the mean over processes
of each process's mean paired log ratio, tested against the spread between processes and
never below the noise calibrated for that case on this GPU (perf/stats.py,
perf/latency/analysis.py, calibration/<vendor>.yaml). Cases that fail are measured again,
in fresh processes, before they fail the gate (`statistics.retries`). A file lock keeps two
runs off one GPU.

`--toolchain triton==X` measures this checkout (or the commit `--head-ref` names) under two
Tritons instead: the installed one (base) and X (head, perf/toolchain.py). Two Tritons cannot
share a process, so each fresh process measures one side (`worker --side`), in the order
A B B A A B ... (`toolchain_schedule`) so that drift over the run falls on both sides alike,
and the verdict comes from an unpaired test of the process means (perf/latency/analysis.py
`unpaired_findings(by_process=True)`: the `perf compare` statistics at the process level),
with the vendor's uncalibrated thresholds (the calibration measures in-process pairs).
Processes per side: `toolchain_processes`.

Everything measured is appended to --out (base.jsonl, head.jsonl: perf/results.py) and the
completed processes are listed in gate.json (perf/latency/ledger.py): an interrupted gate keeps
them, and the same command resumes (same base, head and settings; otherwise it starts over).
`compare` applies the statistics to two results files of separate processes (unpaired);
`report` renders a findings file again (perf/latency/compare.py). Findings, results, the
Markdown report and the plot land in --out.

What a gate is asked is a `GateRequest` (perf/latency/request.py), from the command line or
from a caller (`perf bisect`, the nightly); `run_gate` checks it (`Gate`), resolves it against
the thresholds and this machine (`Settings`), and measures. Its parts: which cases to time
(perf/latency/selection.py), the ledger (perf/latency/ledger.py), the findings and their files
(perf/latency/compare.py), the progress lines (perf/latency/progress.py); the measuring
processes are below.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace

from perf import checkout, files, roofline, toolchain, validate, why
from perf import results as results_mod
from perf import vendor as vendor_mod
from perf.change import latency as changes
from perf.checkout import ROOT
from perf.errors import EXIT_FAIL, EXIT_INTERRUPTED, ConfigError
from perf.git import check_clean, git, repo_root, resolve_base, resolve_commit, worktree
from perf.latency import worker
from perf.latency.compare import (
    compare_results,
    compare_toolchain_results,
    threshold_lines,
    write_outputs,
    written,
)
from perf.latency.ledger import LEDGER, OUTPUTS, SIDE_FILES, Ledger, load_ledger
from perf.latency.progress import Reporter
from perf.latency.request import GateRequest
from perf.latency.selection import Selection, check_plan_options, plan_only, select_cases
from perf.process import child_env
from perf.report import publish
from perf.thresholds import Thresholds, calibration_for, load_thresholds
from perf.verdicts import Finding, Verdict, detectable_summary, exit_code

BATCH_CACHE_ENV = "PERF_BATCH_CACHE"  # a directory of saved batches kept across gates (else one per gate)
# In Triton's interpreter the gate is a self-test of the harness, not a measurement: the fewest
# rounds, samples and processes that exercise every step (pairs, processes, statistics).
INTERPRETER_SAMPLES, INTERPRETER_ROUNDS, INTERPRETER_PROCESSES = 3, 2, 2


# --- the GPU lock and the batches the processes share --------------------------------------
@contextlib.contextmanager
def batch_cache(enabled: bool):
    """Where the processes of one gate share built batches: $PERF_BATCH_CACHE (kept), else a
    temporary directory removed afterwards; None in the interpreter (tiny batches)."""
    if not enabled:
        yield None
    elif os.environ.get(BATCH_CACHE_ENV):
        os.makedirs(os.environ[BATCH_CACHE_ENV], exist_ok=True)
        yield os.environ[BATCH_CACHE_ENV]
    else:
        path = tempfile.mkdtemp(prefix="perf-batches-")
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def gpu_lock(key: str, timeout: float = 0.0):
    """An exclusive lock per GPU, so two A/B runs never share one (they would disturb each other)."""
    path = os.path.join(tempfile.gettempdir(), f"perf-gpu-{key}.lock")
    with files.lock(path, timeout, what=f"GPU {key} is locked",
                    fix="wait for that run to end or pass --lock-timeout SECONDS") as held:
        yield held


def gpu_key() -> str:
    import torch

    try:
        return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return (os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES") or "0")


# --- measuring processes --------------------------------------------------------------------

PLAN_KEYS = "plan-keys.json"  # the cases the change plan times (the workers' --keys), when not all


class GateCrash(RuntimeError):
    """A measuring process ended without finishing (it crashed, or the GPU failed it)."""


@dataclass(frozen=True)
class Settings:
    """A gate resolved against the thresholds and this machine: what each of its measuring
    processes is given (`job`) and what its ledger's identity holds (`_identity`)."""

    suite: str
    variants: str | None
    scenarios: str | None
    metrics: str  # checked, comma-separated
    processes: int  # per side in a toolchain A/B
    repeats: int  # rounds per process
    samples: int  # per side and round
    seed: int = 0
    budget_ms: float | None = None  # statistics.sample_budget_ms
    batch_cache: str | None = None  # `batch_cache` while the gate measures
    allow_dirty: bool = False  # the head is the working tree
    toolchain: str | None = None  # a toolchain A/B's "triton==X"

    def job(self, roots: dict[str, str], out_dir: str, **more) -> worker.Job:
        """A measuring process of these settings on the checkouts `roots` (`more`: its own options)."""
        job = worker.Job(base_from=roots["base"], head_from=roots["head"], out_dir=out_dir, suite=self.suite,
                         repeats=self.repeats, samples=self.samples, scenarios=self.scenarios,
                         variants=self.variants, metrics=self.metrics, budget_ms=self.budget_ms,
                         seed=self.seed, batch_cache=self.batch_cache)
        return replace(job, **more)


def settings(request: GateRequest, statistics, interpreter: bool, metrics: str) -> Settings:
    """The rounds, samples and processes of `request`'s gate: what it names, else the
    interpreter's self-test sizes there, else the vendor's `statistics` (thresholds.yaml); a
    toolchain A/B's processes per side raised to what its process-level test needs
    (`toolchain_processes`)."""
    processes = INTERPRETER_PROCESSES if interpreter else statistics.processes
    if request.toolchain and not interpreter:
        processes = toolchain_processes(processes, statistics.alpha)
    return Settings(
        request.suite, request.variants, request.scenarios, metrics, processes,
        request.repeats if request.repeats is not None else (
            INTERPRETER_ROUNDS if interpreter else statistics.repeats),
        # the interpreter's wall clock measures nothing: a smoke run needs few samples (--samples overrides)
        request.samples if request.samples is not None else (
            INTERPRETER_SAMPLES if interpreter else statistics.samples),
        request.seed, statistics.sample_budget_ms, None, request.allow_dirty, request.toolchain)


def toolchain_processes(configured: int, alpha: float) -> int:
    """Processes per side of a toolchain A/B: `statistics.processes`, raised until the exact
    one-sided Mann-Whitney U over n vs n process means can be significant with one pair out of
    order, 2 / C(2n, n) < alpha (alpha 0.01: n = 5, p 0.008; the gate's 3 could never reach it,
    1 / C(6, 3) = 0.05)."""
    n = max(2, configured)
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def toolchain_schedule(per_side: int) -> list[str]:
    """Which side each process measures: A B B A A B ..., `per_side` of each, so a drift over
    the run (clocks, temperature, a neighbour) falls on both sides alike."""
    order: list[str] = []
    for i in range(per_side):
        order += ["base", "head"] if i % 2 == 0 else ["head", "base"]
    return order


def run_process(cmd: list[str], log_path: str, label: str, reporter: Reporter | None,
                pythonpath: str = ROOT) -> dict:
    """Run one measuring process to its end; its `done` event (GateCrash if it never came).
    `pythonpath`: this checkout, behind a toolchain's Triton in a toolchain A/B."""
    # the public entry as production calls it: no per-call metadata value checks (the worker
    # validates each batch once itself); a test session's switch must not leak in
    env = child_env(*pythonpath.split(os.pathsep), PYTHONUNBUFFERED="1", PAGED_ATTENTION_CHECK_VALUES="0")
    done = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                                bufsize=1)
        try:
            for line in proc.stdout:
                if not line.startswith(worker.PROTOCOL):
                    log.write(line)
                    continue
                ev = json.loads(line[len(worker.PROTOCOL):])
                if ev["event"] == "done":
                    done = ev
                elif reporter is not None and ev["event"] in ("scenario", "step", "ready"):
                    what = ev.get("what") or "loaded the kernels, preparing"
                    extra = f" ({ev['done']}/{ev['of']} scenarios)" if ev["event"] == "scenario" else ""
                    reporter.update(f"{label}: {what}{extra}")
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0 or done is None:
        tail = ""
        with contextlib.suppress(OSError):
            with open(log_path, encoding="utf-8", errors="replace") as f:
                lines = [x.strip() for x in f if x.strip()]
            tail = lines[-1] if lines else ""
        raise GateCrash(f"{label} exited with code {proc.returncode} ({tail or 'no output'}); "
                        f"log: {log_path}")
    return done


# Compile-ahead processes at most: one compile occupies one CPU, and the H100 runner this was
# sized on has 16 (the GPU correctness grid, compile-bound there, kept 16 CPUs 98 % busy with
# 16 workers; NVIDIA H100 80GB HBM3, 2026-11-26).
COMPILE_AHEAD_MAX = 16
# Share of the GPU's free memory the compile-ahead processes may fill together, each counted at
# three times its largest batch (inputs, both sides' outputs, the fp32 reference): a default
# chosen by reasoning, leaving room for CUDA contexts and graph pools.
COMPILE_AHEAD_MEMORY = 0.7


def compile_ahead(settings: Settings, roots: dict[str, str], out_dir: str, cases: list[tuple[str, str]],
                  keys: set | None, footprints: dict[str, int], reporter: Reporter | None) -> str:
    """Prepare every case to time in parallel processes (`worker --compile-only`), scenarios dealt
    round-robin, before the first timed process, which then finds each kernel in Triton's disk
    cache: its compiles are spread over the runner's CPUs instead of paid one after another.
    Nothing they do is a measurement. A process that fails only loses its head start (the timed
    processes compile what it left, and report any real error). Returns a line for the report."""
    import torch

    if keys is None:
        keys = {(v, s, m) for v, s in cases for m in settings.metrics.split(",")}
    names = list(dict.fromkeys(k[1] for k in sorted(keys, key=lambda k: -footprints.get(k[1], 0))))
    free, _ = torch.cuda.mem_get_info()
    per = 3 * max((footprints.get(n, 0) for n in names), default=0) + 2**30
    n = min(len(names), os.cpu_count() or 1, COMPILE_AHEAD_MAX, int(free * COMPILE_AHEAD_MEMORY // per))
    if n < 2:
        return f"no compile-ahead ({len(names)} scenarios, room for {n} process at once)"
    t0 = time.monotonic()
    jobs = []
    for i in range(n):
        mine = set(names[i::n])
        keys_file = files.write_json(os.path.join(out_dir, f"compile-ahead-{i}.json"),
                                     [list(k) for k in sorted(keys) if k[1] in mine])
        cmd = settings.job(roots, out_dir, keys=keys_file, compile_only=True).argv()
        jobs.append((cmd, os.path.join(out_dir, f"compile-ahead-{i}.log"), f"compile-ahead {i + 1}/{n}"))
    if reporter is not None:
        reporter.update(f"compiling ahead: {len(names)} scenarios in {n} processes at once")
    failed = []
    with ThreadPoolExecutor(n) as pool:
        futures = {pool.submit(run_process, cmd, log, label, None): label for cmd, log, label in jobs}
        for future in as_completed(futures):
            try:
                future.result()
            except GateCrash as e:
                failed.append(str(e))
    seconds = time.monotonic() - t0
    line = f"compiled ahead: {len(names)} scenarios in {n} parallel processes, {seconds:.0f} s"
    if failed:
        line += f"; {len(failed)} failed (their cases compile in the timed processes): {failed[0]}"
    if reporter is not None:
        reporter.update(line)
    return line


def measure(settings: Settings, roots: dict[str, str], out_dir: str, ledger: Ledger, attempt: int,
            keys: list | None, reporter: Reporter | None,
            toolchains: dict[str, toolchain.Toolchain] | None = None) -> None:
    """Run the processes of one attempt (0: every case; then re-measures of `keys`) not yet done;
    with `toolchains` (side -> Triton) each process measures one side under its Triton."""
    keys_file = None
    if keys is not None:
        name = PLAN_KEYS if attempt == 0 else f"retry{attempt}-keys.json"
        keys_file = files.write_json(os.path.join(out_dir, name), [list(k) for k in sorted(keys)])
    schedule = toolchain_schedule(settings.processes) if toolchains else [None] * settings.processes
    per_attempt = len(schedule) * settings.repeats
    job = settings.job(roots, out_dir, keys=keys_file, header={"gate": ledger.identity},
                       seed=settings.seed + attempt)
    for index, side in enumerate(schedule):
        if ledger.done(attempt, index):
            continue
        label = (f"process {index + 1}/{len(schedule)}" if attempt == 0
                 else f"re-measure {attempt}, process {index + 1}/{len(schedule)}")
        if side is not None:
            label += f" ({side}: {toolchains[side].describe()})"
        first = attempt * per_attempt + index * settings.repeats
        # a re-measure's processes also profile each case per kernel for the why section (perf/why.py)
        cmd = replace(job, first_repeat=first, side=side, kernel_times=attempt >= 1 and side is None).argv()
        log = os.path.join(out_dir, f"worker-{attempt}-{index}.log")
        done = run_process(cmd, log, label, reporter,
                           toolchains[side].pythonpath() if side is not None else ROOT)
        ledger.add({"attempt": attempt, "index": index, "process": done["process"], "first_repeat": first,
                    "pairs": done["pairs"], **({"side": side} if side is not None else {})})
        if reporter is not None:
            reporter.update(f"{label}: done", advance=1)


# --- the gate ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """A request checked, everything it names found: thresholds, vendor, scenarios, variants,
    metrics, the two commits (or the two Tritons of a toolchain A/B)."""

    request: GateRequest  # its thresholds path absolute (the workers run in other folders)
    th: Thresholds
    vendor: str
    scenarios: list  # perf.scenarios.Scenario
    variants: list[str]
    metrics: str
    repo: str
    toolchains: dict[str, toolchain.Toolchain] | None
    base_sha: str
    base_desc: str
    head_sha: str
    interpreter: bool

    @property
    def cases(self) -> list[tuple[str, str]]:
        return [(v, s.name) for s in self.scenarios for v in self.variants]

    @property
    def head_desc(self) -> str:
        return self.request.head_ref or "HEAD"


def _toolchains(request: GateRequest) -> dict[str, toolchain.Toolchain] | None:
    """A toolchain A/B's two Tritons (the installed one is base), None for a commit A/B."""
    if request.toolchain is None:
        return None
    toolchain.parse(request.toolchain)
    if request.base_ref:  # one commit: this checkout, or the one --head-ref names
        raise ConfigError("--toolchain measures one commit under two Tritons; drop --base-ref (or drop "
                          "--toolchain to compare commits)")
    try:
        return {"base": toolchain.installed(), "head": toolchain.ensure(request.toolchain)}
    except toolchain.ToolchainBroken as e:
        raise GateCrash(str(e)) from None


def check(request: GateRequest) -> Gate:
    """Everything the request names, checked first, with or without a GPU: a gate that skips
    must never hide a typo that would make it measure nothing."""
    th = load_thresholds(request.thresholds)
    vendor = vendor_mod.resolve(request.vendor)
    chosen = validate.scenarios(request.suite, request.scenarios)
    variants = validate.variants(request.variants, checkout.variant_names())
    metrics = ",".join(validate.metrics(request.metrics))
    files.check_output(request.out, "--out", directory=True)
    repo = repo_root(os.getcwd())
    toolchains = _toolchains(request)
    if request.head_ref and request.allow_dirty:
        raise ConfigError("--head-ref names a commit; --allow-dirty measures this working tree: "
                          "pass one of them")
    check_plan_options(request)
    if request.plan:  # read whole now: a gate that skips (no GPU) must not hide a bad plan
        changes.read_plan(request.plan)
    head_sha = resolve_commit(repo, request.head_ref, "--head-ref") if request.head_ref else \
        git(repo, "rev-parse", "HEAD", check=True)
    base_sha, base_desc = (head_sha, "HEAD") if toolchains else resolve_base(repo, request.base_ref)
    request = replace(request, thresholds=os.path.abspath(request.thresholds))
    return Gate(request, th, vendor, chosen, variants, metrics, repo, toolchains, base_sha, base_desc,
                head_sha, not vendor_mod.on_gpu())


def check_arguments(a) -> None:
    """perf.validate.gate_args, then the --plan file read whole: a bad plan is refused as that before
    --out is claimed, also where the gate would skip (perf.cli's registry runs this first)."""
    validate.gate_args(a)
    if a.plan:
        changes.read_plan(a.plan)


def gate_command(args) -> int:
    """`python -m perf gate`: `run_gate`'s exit code; 1 too when a measuring process crashed."""
    try:
        return run_gate(GateRequest.from_args(args))[0]
    except GateCrash as e:
        print(f"latency gate: FAIL — {e}", file=sys.stderr)
        return EXIT_FAIL


def run_gate(request: GateRequest, publish_report: bool = True) -> tuple[int, list[Finding] | None]:
    """The gate `request` asks for: its exit code and findings, None when it reached no verdict
    (skipped without a GPU, interrupted). Raises GateCrash when a measuring process crashed, so
    that `perf bisect` (perf/latency/bisect.py, one call per step) tells a commit it cannot
    measure from a slower one."""
    gate = check(request)
    request = gate.request
    if request.plan_only:
        return plan_only(request, gate.th, gate.vendor, gate.repo, gate.base_sha, gate.head_sha,
                         gate.cases), None
    if gate.interpreter and request.no_gpu_ok:
        import torch

        tc = gate.toolchains
        what = (f"Triton {tc['base'].version} vs {tc['head'].version} of {gate.head_sha[:10]}" if tc
                else f"base {gate.base_sha[:10]} ({gate.base_desc})")
        print(f"latency gate: skipped — latency needs a GPU (none found; torch.cuda.is_available() is "
              f"{torch.cuda.is_available()}); checked: suite {request.suite} ({len(gate.scenarios)} "
              f"scenarios), {len(gate.variants)} variants, {what}; run `nox -s perf` on an H100 or MI300 "
              f"machine")
        return 0, None
    if gate.interpreter and request.suite != "smoke":
        raise ConfigError("no GPU: the latency gate measures on a CUDA or ROCm GPU (found none); run it "
                          "on a GPU machine, or `--suite smoke` to self-test the harness in the interpreter")
    validate.measurable(gate.metrics.split(","))
    s = settings(request, gate.th.vendor(gate.vendor).statistics, gate.interpreter, gate.metrics)
    if s.repeats < 2 or s.samples < 1:
        raise ConfigError("--repeats must be >= 2 (paired rounds per process) and --samples >= 1")
    if not request.allow_dirty and not request.head_ref:
        check_clean(gate.repo)
    if gate.base_sha == gate.head_sha and not request.allow_dirty and not gate.toolchains:
        print(f"nothing to compare: {gate.head_desc} is its own base ({gate.head_sha[:10]}); measuring an "
              f"A/A run, which shows the gate's noise", file=sys.stderr)
    return _measure(gate, s, publish_report)


@dataclass
class Measured:
    """What a gate's processes measured and what it concluded, for its report."""

    findings: list[Finding]
    head: results_mod.Results
    ledger: Ledger
    selection: Selection
    retried: list
    ahead: str | None  # the compile-ahead's line for the report
    why_md: str  # the red cases explained (perf/why.py)
    seconds: float = 0.0


def _measure(gate: Gate, s: Settings, publish_report: bool) -> tuple[int, list[Finding] | None]:
    """Both checkouts (worktrees), the cases to time, the ledger, the GPU lock; then the
    measurement (`_rounds`) and the report (`_report` or `_toolchain_report`)."""
    import torch
    from rich.console import Console

    request, interpreter = gate.request, gate.interpreter
    out_dir = os.path.abspath(request.out)  # the workers run in the harness's root, not in cwd
    os.makedirs(out_dir, exist_ok=True)
    gpu_name = torch.cuda.get_device_name() if not interpreter else None
    cal, cal_note = calibration_for(gate.th, gate.vendor, gpu_name) if not interpreter else \
        (None, "Triton interpreter: no calibration applies")
    machine = {"vendor": gate.vendor, "gpu": gpu_name or "Triton interpreter", "interpreter": interpreter}
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        head_root = stack.enter_context(worktree(gate.repo, gate.head_sha, "head")) if request.head_ref \
            else gate.repo
        base_root = head_root if gate.toolchains else stack.enter_context(worktree(gate.repo, gate.base_sha))
        roots = {"base": base_root, "head": head_root}
        selection = select_cases(request, gate.th, gate.vendor, gate.base_sha, gate.head_sha, roots,
                                 gate.cases, gate.toolchains)
        ledger = Ledger(out_dir, _identity(gate.repo, s, gate.base_sha, gate.head_sha, machine, selection),
                        request.force)
        if selection.doc is not None:
            changes.write_plan(out_dir, selection.doc)
        else:  # an earlier gate's plan there is not this one's
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out_dir, changes.PLAN_FILE))
        if not selection.measure and selection.doc is not None:
            return _nothing_to_time(gate, out_dir, selection, gpu_name, publish_report)
        stack.enter_context(gpu_lock("interpreter" if interpreter else gpu_key(), request.lock_timeout))
        s = replace(s, batch_cache=stack.enter_context(batch_cache(not interpreter)))
        try:
            measured = _rounds(gate, s, roots, out_dir, ledger, selection, cal, Console(stderr=True))
        except KeyboardInterrupt:
            print(f"interrupted: {len(ledger.processes)} finished measuring processes are kept in "
                  f"{out_dir} (gate.json, base.jsonl, head.jsonl); run the same command again to resume",
                  file=sys.stderr)
            return EXIT_INTERRUPTED, None
    measured.seconds = time.monotonic() - t0
    if gate.toolchains:
        return _toolchain_report(gate, s, out_dir, measured, publish_report), measured.findings
    return _report(gate, s, out_dir, measured, cal, cal_note, publish_report), measured.findings


def _rounds(gate: Gate, s: Settings, roots: dict[str, str], out_dir: str, ledger: Ledger,
            selection: Selection, cal, console) -> Measured:
    """The gate's processes (compiled ahead on a GPU), their findings, the failing cases measured
    again, and the red cases explained while both checkouts are here."""
    tc, interpreter = gate.toolchains, gate.interpreter
    keys = selection.keys(s.metrics) if selection.partial else None
    what = (f"Triton {tc['base'].version} (base) vs {tc['head'].version} (head) of {gate.head_sha[:10]}; "
            f"{s.processes} processes per side, one side each (A B B A ...) x {s.repeats} rounds" if tc else
            f"base {gate.base_sha[:10]} ({gate.base_desc}) vs head {gate.head_sha[:10]}; {s.processes} "
            f"processes x {s.repeats} paired rounds")
    console.print(f"A/B {s.suite}: {what}{' + uncommitted changes' if s.allow_dirty else ''} x "
                  f"{s.samples} samples per side; results in {out_dir}"
                  + (f" ({ledger.reused()})" if ledger.resumed else ""))
    ahead = None
    with Reporter(console, s.processes * (2 if tc else 1)) as reporter:
        if not interpreter and not tc and ledger.done(0, 0) is None:
            footprints = {sc.name: sc.footprint_bytes() for sc in gate.scenarios}
            ahead = compile_ahead(s, roots, out_dir, gate.cases, keys, footprints, reporter)
        measure(s, roots, out_dir, ledger, 0, keys, reporter, tc)
        ledger.finish()
        base, head = (results_mod.load(os.path.join(out_dir, name)) for name in SIDE_FILES)
        if tc:
            _check_toolchains(base, head, tc)
        compare = compare_toolchain_results if tc else compare_results
        findings = compare(base, head, gate.th, gate.vendor, cal, ledger.ids(0), keys)
        retried = _remeasure(s, roots, out_dir, ledger, gate.th, gate.vendor, cal, findings, reporter, tc)
    # a toolchain A/B's sides share their kernels; the interpreter's self-test has nothing to explain
    why_md = "" if tc or interpreter else why.explain_red(findings, roots, gate.th, gate.vendor, out_dir)
    return Measured(findings, head, ledger, selection, retried, ahead, why_md)


def _report(gate: Gate, s: Settings, out_dir: str, m: Measured, cal, cal_note: str,
            publish_report: bool) -> int:
    """The commit A/B's report: findings (the untimed cases `unchanged`), notes and settings."""
    findings, gpu, interpreter = m.findings, m.head.environment.get("gpu"), gate.interpreter
    findings += m.selection.unchanged_findings(gate.vendor, gpu, s.metrics)
    title = f"Latency A/B on {gpu} ({gate.vendor}): {s.suite} suite"
    notes = [f"base {gate.base_sha[:10]} ({gate.base_desc}) vs head {gate.head_sha[:10]}"
             f"{' + uncommitted changes' if s.allow_dirty else ''}; {s.processes} fresh processes x "
             f"{s.repeats} paired rounds x {s.samples} samples per side, both sides in each process on "
             f"the same tensors; {m.seconds / 60:.1f} minutes on this {'CPU' if interpreter else 'GPU'} "
             f"(preparation and re-measurements included"
             + (f"; {m.ledger.reused()}" if m.ledger.resumed else "")
             + ")",
             f"thresholds: {cal_note}",
             detectable_summary(findings),
             f"re-measured in fresh processes before failing: {len(m.retried)}" if m.retried
             else "no failing case needed a re-measure",
             "ratio: exp(mean over processes of the mean paired log ratio); CI: hierarchical bootstrap "
             "(processes, then rounds); p: one-sided t-test of the process means (perf/stats.py)"]
    notes.insert(1, m.selection.note)
    if m.ahead:
        notes.insert(2, m.ahead)
    if interpreter:
        notes.insert(0, "Triton interpreter (no GPU): wall-clock self-test of the harness, not a measurement")
    lines = threshold_lines(gate.th, gate.vendor, findings, cal, s.processes, s.repeats)
    meta = {"vendor": gate.vendor, "gpu": gpu, "suite": s.suite, "processes": s.processes,
            "repeats": s.repeats, "samples": s.samples, "seed": s.seed, "seconds": m.seconds,
            "order": [list(o) for o in worker.side_order(s.repeats, s.seed)],
            "calibration": cal.path if cal else None,
            "base": {"commit": gate.base_sha, "ref": gate.base_desc, "results": "base.jsonl"},
            "head": {"commit": gate.head_sha, "ref": gate.head_desc, "dirty": bool(s.allow_dirty),
                     "results": "head.jsonl"},
            "retried": [list(k) for k in m.retried], "plan": m.selection.meta(),
            "thresholds": {" ".join(k): list(v) for k, v in lines.items()},
            "roofline": roofline.section(m.head)}
    return _finish(out_dir, findings, title, notes, meta, lines, publish_report, m.why_md)


def _check_toolchains(base: results_mod.Results, head: results_mod.Results,
                      toolchains: dict[str, toolchain.Toolchain]) -> None:
    """Each side's processes ran under the Triton asked for (their results headers say which)."""
    for side, res in (("base", base), ("head", head)):
        seen = res.environment.get("triton")
        if seen != toolchains[side].version:
            raise GateCrash(f"the {side} processes imported Triton {seen}, not {toolchains[side].version} "
                            f"(see {res.path}); PYTHONPATH or a .pth file shadows the toolchain")


def _toolchain_report(gate: Gate, s: Settings, out_dir: str, m: Measured, publish_report: bool) -> int:
    """The toolchain A/B's report: the gate's outputs, titled by the two Tritons."""
    toolchains, vendor, sha, findings, retried = (gate.toolchains, gate.vendor, gate.head_sha, m.findings,
                                                  m.retried)
    gpu, interpreter = m.head.environment.get("gpu"), gate.interpreter
    alpha = gate.th.vendor(vendor).statistics.alpha
    n = s.processes
    versions = f"Triton {toolchains['base'].version} → {toolchains['head'].version}"
    title = f"Latency toolchain A/B on {gpu} ({vendor}): {versions}, {s.suite} suite"
    order = " ".join("A" if side == "base" else "B" for side in toolchain_schedule(n))
    notes = [f"one checkout ({sha[:10]}{' + uncommitted changes' if s.allow_dirty else ''}) under two "
             f"Tritons, base: {toolchains['base'].describe()}, head: {toolchains['head'].describe()}; "
             f"{n} fresh processes per side, each measuring one side, in the order {order} (A = base), "
             f"x {s.repeats} rounds x {s.samples} samples; {m.seconds / 60:.1f} minutes on "
             f"this {'CPU' if interpreter else 'GPU'}"
             + (f"; {m.ledger.reused()}" if m.ledger.resumed else ""),
             "pairing across processes: two Tritons cannot share a process, so no round pairs base with head "
             "on the same tensors as the commit gate does; what a process contributes (buffer placement, "
             "clocks of its minute) lands in the comparison, and the noise is that of separate processes, "
             "larger than the commit gate's",
             f"thresholds: the vendor's uncalibrated warn/fail and overrides (thresholds.yaml); "
             f"calibration/{vendor}.yaml measures in-process pairs and would understate this noise. "
             f"Significance: one-sided Mann-Whitney U (exact) over the {n} vs {n} process means, smallest "
             f"possible p {1 / math.comb(2 * n, n):.4f}, alpha {alpha:g}"
             + ("" if 1 / math.comb(2 * n, n) < alpha else ": no case can be significant, so nothing "
                "fails (a self-test of the mechanics)"),
             f"re-measured in fresh processes before failing: {len(retried)}" if retried
             else "no failing case needed a re-measure",
             "ratio: median of the head's process means / the base's (a process mean: the geometric mean of "
             "its round medians); CI: bootstrap over process means (perf/stats.py `compare`)"]
    if interpreter:
        notes.insert(0, "Triton interpreter (no GPU): wall-clock self-test of the harness, not a measurement")
    lines = threshold_lines(gate.th, vendor, findings)
    meta = {"vendor": vendor, "gpu": gpu, "suite": s.suite, "processes": n, "repeats": s.repeats,
            "samples": s.samples, "seed": s.seed, "seconds": m.seconds,
            "toolchain": {"base": toolchains["base"].version, "head": toolchains["head"].version,
                          "spec": toolchains["head"].spec, "schedule": toolchain_schedule(n)},
            "base": {"commit": sha, "triton": toolchains["base"].version, "results": "base.jsonl"},
            "head": {"commit": sha, "triton": toolchains["head"].version, "dirty": bool(s.allow_dirty),
                     "results": "head.jsonl"},
            "retried": [list(k) for k in retried],
            "thresholds": {" ".join(k): list(v) for k, v in lines.items()},
            "roofline": roofline.section(m.head)}
    return _finish(out_dir, findings, title, notes, meta, lines, publish_report)


def _nothing_to_time(gate: Gate, out_dir: str, selection: Selection, gpu: str | None,
                     publish_report: bool) -> tuple[int, list[Finding]]:
    """A gate whose every case has identical launches: a verdict with evidence (the plan), exit 0,
    no GPU time; not NothingMeasured, which is a gate that compared nothing."""
    dirty = gate.request.allow_dirty
    findings = selection.unchanged_findings(gate.vendor, gpu, gate.metrics)
    line = f"nothing to time: every case has {changes.IDENTICAL}"
    print(line, file=sys.stderr, flush=True)
    aa = gate.base_sha == gate.head_sha and not dirty
    notes = [line + (" (pass --all-cases to measure an A/A run, the gate's noise)" if aa else ""),
             f"base {gate.base_sha[:10]} ({gate.base_desc}) vs head {gate.head_sha[:10]}"
             f"{' + uncommitted changes' if dirty else ''}; nothing was measured on the GPU",
             selection.note]
    title = f"Latency A/B on {gpu or 'Triton interpreter'} ({gate.vendor}): {gate.request.suite} suite"
    meta = {"vendor": gate.vendor, "gpu": gpu, "suite": gate.request.suite, "seconds": 0.0,
            "plan": selection.meta(), "base": {"commit": gate.base_sha, "ref": gate.base_desc},
            "head": {"commit": gate.head_sha, "ref": gate.head_desc, "dirty": bool(dirty)}}
    return _finish(out_dir, findings, title, notes, meta, {}, publish_report), findings


def _finish(out_dir: str, findings: list[Finding], title: str, notes: list[str], meta: dict, lines: dict,
            publish_report: bool, appendix: str = "") -> int:
    """A finished gate's outputs in `out_dir` (and the step summary): its exit code
    (NothingMeasured when no case was compared: the report says per case why)."""
    md = write_outputs(out_dir, findings, title, notes, meta, lines, appendix)
    if publish_report:
        publish(md)
    code = exit_code(findings, f"the report says per case why: {os.path.join(out_dir, 'report.md')}")
    print(f"artifacts in {out_dir}: {written(out_dir, (*OUTPUTS, *SIDE_FILES, LEDGER))}", file=sys.stderr)
    return code


def _identity(repo: str, settings: Settings, base_sha: str, head_sha: str, machine: dict,
              selection: Selection | None = None) -> dict:
    """What a resumed gate must share with the interrupted one: the commits (and the head's
    uncommitted kernels), the settings, the cases it times and the machine (perf.files.IDENTITY)."""
    diff = (git(repo, "diff", "HEAD") or "") if settings.allow_dirty else ""
    identity = {"base": base_sha, "head": head_sha,
                "head_diff": hashlib.sha256(diff.encode()).hexdigest()[:16],
                "head_kernels": results_mod.kernels_tree(repo) if settings.allow_dirty else None,
                "machine": machine, "suite": settings.suite,
                "variants": settings.variants, "scenarios": settings.scenarios,
                "metrics": settings.metrics, "processes": settings.processes, "repeats": settings.repeats,
                "samples": settings.samples, "seed": settings.seed}
    if settings.toolchain:
        identity["toolchain"] = settings.toolchain
    if selection is not None and selection.partial:  # the cases to time, when not all of them
        timed = json.dumps(sorted(selection.measure)).encode()
        identity["cases"] = hashlib.sha256(timed).hexdigest()[:16]
    return identity


def _remeasure(settings: Settings, roots, out_dir, ledger, th, vendor, cal, findings, reporter,
               toolchains=None) -> list[tuple]:
    """Measure failing cases again in fresh processes; their verdicts come from that data alone."""
    compare = compare_toolchain_results if toolchains else compare_results
    retried = []
    for attempt in range(1, th.vendor(vendor).statistics.retries + 1):
        failing = [(f.variant, f.scenario, f.metric) for f in findings
                   if f.verdict is Verdict.FAIL and f.ratio is not None]
        if not failing:
            break
        measure(settings, roots, out_dir, ledger, attempt, failing, reporter, toolchains)
        base, head = results_mod.load(os.path.join(out_dir, "base.jsonl")), \
            results_mod.load(os.path.join(out_dir, "head.jsonl"))
        _merge_remeasured(findings, compare(base, head, th, vendor, cal, ledger.ids(attempt), set(failing)))
        retried.extend(failing)
    return retried


def _merge_remeasured(findings: list[Finding], again: list[Finding]) -> None:
    """Replace each re-measured case's finding by its re-measure's (which alone decides)."""
    by_key = {(f.variant, f.scenario, f.metric): f for f in again}
    for i, f in enumerate(findings):
        new = by_key.get((f.variant, f.scenario, f.metric))
        if new is not None:
            new.note = f"{new.note}; re-measured in fresh processes (first ratio {f.ratio:.4f})"
            findings[i] = new


def recompute(out_dir: str, th: Thresholds, vendor: str, calibration) -> list[Finding]:
    """A finished gate's findings computed again from its --out with this code's statistics
    and thresholds (the self-test uses it): the first measurement, then each re-measure for
    the cases it holds. A case that fails now but was not re-measured then keeps its FAIL,
    with a note saying so."""
    processes = load_ledger(os.path.join(out_dir, LEDGER))["processes"]
    base = results_mod.load(os.path.join(out_dir, "base.jsonl"))
    head = results_mod.load(os.path.join(out_dir, "head.jsonl"))
    ids = lambda a: {p["process"] for p in processes if p["attempt"] == a}  # noqa: E731
    findings = compare_results(base, head, th, vendor, calibration, ids(0))
    for attempt in sorted({p["attempt"] for p in processes} - {0}):
        measured = worker.load_keys(os.path.join(out_dir, f"retry{attempt}-keys.json"))
        failing = {(f.variant, f.scenario, f.metric) for f in findings
                   if f.verdict is Verdict.FAIL and f.ratio is not None}
        _merge_remeasured(findings, compare_results(base, head, th, vendor, calibration, ids(attempt),
                                                    failing & measured))
        for f in findings:
            if (f.variant, f.scenario, f.metric) in failing - measured:
                f.note += "; not re-measured (the gate that measured this did not fail it)"
    plan_path = os.path.join(out_dir, changes.PLAN_FILE)
    if os.path.exists(plan_path):  # the cases that gate did not time: unchanged, as it reported them
        doc = changes.read_plan(plan_path)
        cases = [(r["variant"], r["scenario"]) for r in (*doc["measure"], *doc["unchanged"])]
        metrics = ",".join(head.header.get("metrics") or ["eager"])
        findings += Selection(cases, doc, "").unchanged_findings(vendor, head.environment.get("gpu"), metrics)
    return findings
