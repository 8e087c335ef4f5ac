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
completed processes are listed in gate.json: an interrupted gate keeps them, and the same
command resumes (same base, head and settings; otherwise it starts over). `compare` applies
the statistics to two results files of separate processes (unpaired); `report` renders a
findings file again. Findings, results, the Markdown report and the plot land in --out.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed

from perf import checkout, files, toolchain, validate, why
from perf import results as results_mod
from perf import vendor as vendor_mod
from perf.change import latency as changes
from perf.checkout import ROOT
from perf.errors import EXIT_FAIL, EXIT_INTERRUPTED, ConfigError, NothingMeasured
from perf.git import check_clean, git, repo_root, resolve_base, resolve_commit, worktree
from perf.latency import analysis
from perf.latency.plot import plot_ratios
from perf.latency.worker import load_keys, side_order
from perf.process import child_env
from perf.report import publish, render_markdown
from perf.thresholds import Thresholds, calibration_for, load_thresholds
from perf.verdicts import FINDINGS_VERSION, Finding, Verdict, detectable_summary, exit_code, load_findings

HEARTBEAT_S = 15.0  # a plain progress line at least this often when not on a terminal
BATCH_CACHE_ENV = "PERF_BATCH_CACHE"  # a directory of saved batches kept across gates (else one per gate)
# In Triton's interpreter the gate is a self-test of the harness, not a measurement: the fewest
# rounds, samples and processes that exercise every step (pairs, processes, statistics).
INTERPRETER_SAMPLES, INTERPRETER_ROUNDS, INTERPRETER_PROCESSES = 3, 2, 2


# --- GPU lock ------------------------------------------------------------------------------
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

class GateCrash(RuntimeError):
    """A measuring process ended without finishing (it crashed, or the GPU failed it)."""


LEDGER = "gate.json"
SIDE_FILES = ("base.jsonl", "head.jsonl")
# what a finished gate leaves beside its results: removed when another gate starts over there,
# so that no earlier gate's findings are read as this one's
OUTPUTS = ("findings.json", "report.md", "ratios.png", changes.PLAN_FILE, why.WHY_FILE, "why.md")
PLAN_KEYS = "plan-keys.json"  # the cases the change plan times (the workers' --keys), when not all
_LEDGER_FIX = "remove the gate's --out folder (or that file) or pass another --out"


def load_ledger(path: str) -> dict:
    """gate.json, read whole: {"identity": {...}, "processes": [{attempt, index, process, ...}]};
    ConfigError naming the file and field when it is not one."""
    doc = files.load_json(path, "the gate's ledger", _LEDGER_FIX, expect=dict)
    if not isinstance(doc.get("identity"), dict):
        raise ConfigError(f"{path}: no `identity` object; not a gate's ledger; {_LEDGER_FIX}")
    processes = doc.get("processes")
    if not isinstance(processes, list):
        raise ConfigError(f"{path}: no `processes` list; not a gate's ledger; {_LEDGER_FIX}")
    for i, p in enumerate(processes):
        ok = (isinstance(p, dict) and isinstance(p.get("process"), str)
              and all(isinstance(p.get(k), int) and not isinstance(p.get(k), bool) and p[k] >= 0
                      for k in ("attempt", "index")))
        if not ok:
            raise ConfigError(f"{path}: processes[{i}] needs a `process` id and `attempt`, `index` >= 0; "
                              f"{_LEDGER_FIX}")
    return doc


class Ledger:
    """gate.json in --out: what this gate is (base, head, settings, machine) and which processes
    finished. The same gate resumes; another gate's measurements there are replaced, said on
    stderr (another machine's only with `force`); results without a ledger are refused."""

    def __init__(self, out_dir: str, identity: dict, force: bool = False):
        self.path = os.path.join(out_dir, LEDGER)
        self.identity = identity
        self.processes: list[dict] = []
        self.resumed = 0
        self.complete = False  # every process of the first measurement finished (`finish`)
        old = load_ledger(self.path) if os.path.exists(self.path) else None
        if old is not None and old["identity"] == identity:
            self.processes = old["processes"]
            self.resumed = len(self.processes)
            self.complete = old.get("complete") is True
            return
        held = [n for n in SIDE_FILES if os.path.exists(os.path.join(out_dir, n))]
        if held and old is None:
            raise ConfigError(f"{out_dir}: holds {' and '.join(held)} but no {LEDGER}: not a gate's output, "
                              f"and the gate would replace them; pass another --out (or move them away)")
        if held:
            files.guard_measured(out_dir, old["identity"].get("machine"), identity.get("machine") or {},
                                 force)
            was = old["identity"]
            print(f"{out_dir}: holds another gate's measurements (base {str(was.get('base'))[:10]}, head "
                  f"{str(was.get('head'))[:10]}, suite {was.get('suite')}); starting over there",
                  file=sys.stderr, flush=True)
        for name in (*SIDE_FILES, *OUTPUTS, LEDGER):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out_dir, name))
        self.save()

    def done(self, attempt: int, index: int) -> dict | None:
        for p in self.processes:
            if p["attempt"] == attempt and p["index"] == index:
                return p
        return None

    def ids(self, attempt: int) -> set[str]:
        return {p["process"] for p in self.processes if p["attempt"] == attempt}

    def add(self, entry: dict) -> None:
        self.processes.append(entry)
        self.save()

    def finish(self) -> None:
        """Every process of the first measurement is done: a re-run reuses a complete gate."""
        self.complete = True
        self.save()

    def reused(self) -> str:
        """What a resumed gate took over, for its report ("" for a fresh one)."""
        if not self.resumed:
            return ""
        return (f"{self.resumed} processes reused from an earlier, complete run in this --out (remove it to "
                f"measure again)" if self.complete else
                f"{self.resumed} processes of an earlier, interrupted run")

    def save(self) -> None:
        doc = {"identity": self.identity, "processes": self.processes}
        files.write_json(self.path, {**doc, "complete": True} if self.complete else doc)


class Reporter:
    """Progress: rich on a terminal, else a plain line per event and at least every HEARTBEAT_S."""

    def __init__(self, console, total: int):
        self.tty = sys.stderr.isatty()
        self.console = console
        self.total = total
        self.last = time.monotonic()
        self.t0 = self.last
        self.what = "starting"
        self._stop = threading.Event()
        self.progress = None
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     console=console)
            self.task = self.progress.add_task("processes", total=total)
        else:
            threading.Thread(target=self._heartbeat, daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self.last >= HEARTBEAT_S:
                self.line(f"still measuring: {self.what}")

    def line(self, text: str) -> None:
        self.last = time.monotonic()
        print(f"[{(self.last - self.t0) / 60:5.1f} min] {text}", file=sys.stderr, flush=True)

    def update(self, what: str, advance: int = 0) -> None:
        self.what = what
        if self.progress is not None:
            self.progress.update(self.task, description=what, advance=advance)
        else:
            self.line(what)

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.progress is not None:
            self.progress.stop()


def _worker_cmd(args: argparse.Namespace, roots: dict[str, str], out_dir: str, first_repeat: int,
                seed: int, keys_file: str | None, header: dict, side: str | None = None,
                kernel_times: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "perf.latency.worker", "--base-from", roots["base"], "--head-from",
           roots["head"], "--out-dir", out_dir, "--first-repeat", str(first_repeat), "--suite", args.suite,
           "--metrics", args.metrics, "--repeats", str(args.repeats), "--samples", str(args.samples),
           "--budget-ms", str(args.sample_budget_ms), "--seed", str(seed), "--header", json.dumps(header)]
    for opt in ("variants", "scenarios"):
        if getattr(args, opt):
            cmd += [f"--{opt}", getattr(args, opt)]
    if keys_file:
        cmd += ["--keys", keys_file]
    if getattr(args, "batch_cache", None):
        cmd += ["--batch-cache", args.batch_cache]
    if side is not None:
        cmd += ["--side", side]
    if kernel_times:
        cmd.append("--kernel-times")
    return cmd


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
    from perf.latency.worker import PROTOCOL

    # the public entry as production calls it: no per-call metadata value checks (the worker
    # validates each batch once itself); a test session's switch must not leak in
    env = child_env(*pythonpath.split(os.pathsep), PYTHONUNBUFFERED="1", PAGED_ATTENTION_CHECK_VALUES="0")
    done = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                                bufsize=1)
        try:
            for line in proc.stdout:
                if not line.startswith(PROTOCOL):
                    log.write(line)
                    continue
                ev = json.loads(line[len(PROTOCOL):])
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


def compile_ahead(args: argparse.Namespace, roots: dict[str, str], out_dir: str, cases: list[tuple[str, str]],
                  keys: set | None, footprints: dict[str, int], reporter: Reporter | None) -> str:
    """Prepare every case to time in parallel processes (`worker --compile-only`), scenarios dealt
    round-robin, before the first timed process, which then finds each kernel in Triton's disk
    cache: its compiles are spread over the runner's CPUs instead of paid one after another.
    Nothing they do is a measurement. A process that fails only loses its head start (the timed
    processes compile what it left, and report any real error). Returns a line for the report."""
    import torch

    if keys is None:
        keys = {(v, s, m) for v, s in cases for m in args.metrics.split(",")}
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
        cmd = _worker_cmd(args, roots, out_dir, 0, args.seed, keys_file, {}) + ["--compile-only"]
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


def measure(args: argparse.Namespace, roots: dict[str, str], out_dir: str, ledger: Ledger, attempt: int,
            keys: list | None, reporter: Reporter | None,
            toolchains: dict[str, toolchain.Toolchain] | None = None) -> None:
    """Run the processes of one attempt (0: every case; then re-measures of `keys`) not yet done;
    with `toolchains` (side -> Triton) each process measures one side under its Triton."""
    keys_file = None
    if keys is not None:
        name = PLAN_KEYS if attempt == 0 else f"retry{attempt}-keys.json"
        keys_file = files.write_json(os.path.join(out_dir, name), [list(k) for k in sorted(keys)])
    schedule = toolchain_schedule(args.processes) if toolchains else [None] * args.processes
    per_attempt = len(schedule) * args.repeats
    for index, side in enumerate(schedule):
        if ledger.done(attempt, index):
            continue
        label = (f"process {index + 1}/{len(schedule)}" if attempt == 0
                 else f"re-measure {attempt}, process {index + 1}/{len(schedule)}")
        if side is not None:
            label += f" ({side}: {toolchains[side].describe()})"
        first = attempt * per_attempt + index * args.repeats
        header = {"gate": ledger.identity}
        # a re-measure's processes also profile each case per kernel for the why section (perf/why.py)
        cmd = _worker_cmd(args, roots, out_dir, first, args.seed + attempt, keys_file, header, side,
                          kernel_times=attempt >= 1 and side is None)
        log = os.path.join(out_dir, f"worker-{attempt}-{index}.log")
        done = run_process(cmd, log, label, reporter,
                           toolchains[side].pythonpath() if side is not None else ROOT)
        ledger.add({"attempt": attempt, "index": index, "process": done["process"], "first_repeat": first,
                    "pairs": done["pairs"], **({"side": side} if side is not None else {})})
        if reporter is not None:
            reporter.update(f"{label}: done", advance=1)


# --- comparison ----------------------------------------------------------------------------

def compare_results(base: results_mod.Results, head: results_mod.Results, th: Thresholds, vendor: str,
                    calibration=None, processes: set[str] | None = None, keys=None) -> list[Finding]:
    """Findings of a gate's results (paired rounds of the given processes)."""
    return analysis.paired_findings(base, head, th, vendor, calibration, processes, keys)


def compare_toolchain_results(base: results_mod.Results, head: results_mod.Results, th: Thresholds,
                              vendor: str, calibration=None, processes: set[str] | None = None,
                              keys=None) -> list[Finding]:
    """Findings of a toolchain A/B (module docstring): unpaired, process means, no calibration."""
    return analysis.unpaired_findings(base, head, th, vendor, processes, keys, by_process=True)


def _dedupe_skips(findings: list[Finding]) -> tuple[list[Finding], list[str]]:
    """Fold 'skipped on both sides' rows into one note per (variant, reason)."""
    kept, folded = [], Counter()
    for f in findings:
        if f.verdict is Verdict.OK and f.note.startswith("skipped on both sides"):
            folded[(f.variant, f.note.removeprefix("skipped on both sides: "))] += 1
        else:
            kept.append(f)
    notes = [f"{v}: {n} scenario/metric pairs skipped on both sides ({why})"
             for (v, why), n in sorted(folded.items())]
    return kept, notes


def write_outputs(out_dir: str, findings: list[Finding], title: str, notes: list[str], meta: dict,
                  thresholds: dict | None = None, appendix: str = "") -> str:
    """findings.json, report.md and ratios.png (each case against its own thresholds; an
    earlier ratios.png is removed when nothing has a ratio to draw); `appendix`: Markdown after
    the findings (the red cases' why section, perf/why.py)."""
    shown, skip_notes = _dedupe_skips(findings)
    notes = notes + skip_notes
    plot = os.path.join(out_dir, "ratios.png")
    try:
        drawn = plot_ratios(shown, plot, title, thresholds or {})
    except ImportError:
        drawn = None
        notes.append("matplotlib missing: no plot")
    if drawn is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(plot)
    md = render_markdown(shown, title, notes) + (f"\n{appendix}" if appendix else "")
    files.write_json(os.path.join(out_dir, "findings.json"), {
        "schema_version": FINDINGS_VERSION, "kind": "findings", "title": title, "notes": notes,
        **meta, "findings": [f.to_dict() for f in findings]})
    files.write_text(os.path.join(out_dir, "report.md"), md)
    return md


def written(out_dir: str, names: tuple[str, ...]) -> str:
    """The names of `names` that exist in `out_dir`, for the line that points at them."""
    return ", ".join(n for n in names if os.path.exists(os.path.join(out_dir, n)))


# --- commands ------------------------------------------------------------------------------

def _vendor_for(res: results_mod.Results, given: str | None) -> str:
    vendor = given or res.environment.get("vendor")
    if given is not None:
        vendor_mod.check_name(given)
    elif vendor not in vendor_mod.VENDORS:
        raise ConfigError(f"{res.path}: measured on {vendor!r} (Triton's interpreter); pass --vendor "
                          f"nvidia|amd to choose which thresholds apply")
    return vendor


def compare_command(args: argparse.Namespace) -> int:
    if args.out:
        files.check_output(args.out, "--out", directory=True)
    th = load_thresholds(args.thresholds)
    base, head = results_mod.load(args.base), results_mod.load(args.head)
    results_mod.check_comparable(base, head)
    vendor = _vendor_for(head, args.vendor)
    findings = analysis.unpaired_findings(base, head, th, vendor)
    title = f"Latency: {args.head} vs {args.base} on {head.environment.get('gpu')} ({vendor})"
    notes = ["unpaired comparison of two processes: an offset between the processes is indistinguishable "
             "from a change; `python -m perf gate` measures both sides in the same processes"]
    meta = {"vendor": vendor, "gpu": head.environment.get("gpu"),
            "base": {"results": args.base, "commit": base.environment.get("commit")},
            "head": {"results": args.head, "commit": head.environment.get("commit")}}
    shown, skip_notes = _dedupe_skips(findings)
    md = write_outputs(args.out, findings, title, notes, meta, _threshold_lines(th, vendor, findings)) \
        if args.out else render_markdown(shown, title, notes + skip_notes)
    publish(md)
    code = exit_code(findings, f"{args.head} against {args.base}"
                     + (f" (report: {os.path.join(args.out, 'report.md')})" if args.out else ""))
    if args.out:
        print(f"wrote {written(args.out, OUTPUTS)} in {args.out}", file=sys.stderr)
    return code


def _threshold_lines(th: Thresholds, vendor: str, findings: list[Finding], calibration=None,
                     processes: int = 1, rounds: int = 1) -> dict:
    """(variant, scenario, metric) -> (warn, fail) of every finding with a ratio, overrides
    and calibration included: what the plot draws per case."""
    out = {}
    for f in findings:
        if f.ratio is not None:
            key = (f.variant, f.scenario, f.metric)
            t, _, _ = analysis.threshold_for(th, vendor, calibration, key, processes, rounds)
            out[key] = (t.warn, t.fail)
    return out


def report_command(args: argparse.Namespace) -> int:
    if args.plot:
        files.check_output(args.plot, "--plot")
    data, findings = load_findings(args.findings)
    lines = plot_thresholds(data, args.findings)
    shown, _ = _dedupe_skips(findings)
    publish(render_markdown(shown, str(data.get("title", "findings")), data.get("notes") or []))
    code = exit_code(findings, args.findings)
    if args.plot:
        if plot_ratios(shown, args.plot, str(data.get("title", "")), lines):
            print(f"plot: {args.plot}")
        else:
            print(f"no plot: no finding of {args.findings} has a ratio to draw", file=sys.stderr)
    return code


def plot_thresholds(doc: dict, path: str) -> dict:
    """A findings file's `thresholds` ("variant scenario metric" -> [warn, fail]) as the plot takes
    them; ConfigError naming the entry that is not one."""
    table = doc.get("thresholds") or {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `thresholds` is a JSON {type(table).__name__}, expected an object")
    out = {}
    for k, v in table.items():
        key = tuple(k.split(" ", 2))
        numbers = isinstance(v, list) and len(v) == 2 and all(
            x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0) for x in v)
        if len(key) != 3 or not numbers:
            raise ConfigError(f"{path}: thresholds[{k[:60]!r}] is {str(v)[:40]}, expected \"variant scenario "
                              f"metric\": [warn, fail]; pass the findings.json a gate wrote")
        out[key] = tuple(v)
    return out


def _identity(repo: str, args: argparse.Namespace, base_sha: str, head_sha: str, machine: dict,
              selection: Selection | None = None) -> dict:
    """What a resumed gate must share with the interrupted one: the commits (and the head's
    uncommitted kernels), the settings, the cases it times and the machine (perf.files.IDENTITY)."""
    diff = (git(repo, "diff", "HEAD") or "") if args.allow_dirty else ""
    identity = {"base": base_sha, "head": head_sha,
                "head_diff": hashlib.sha256(diff.encode()).hexdigest()[:16],
                "head_kernels": results_mod.kernels_tree(repo) if args.allow_dirty else None,
                "machine": machine, "suite": args.suite,
                "variants": args.variants, "scenarios": args.scenarios,
                "metrics": args.metrics, "processes": args.processes, "repeats": args.repeats,
                "samples": args.samples, "seed": args.seed}
    if getattr(args, "toolchain", None):
        identity["toolchain"] = args.toolchain
    if selection is not None and selection.partial:  # the cases to time, when not all of them
        timed = json.dumps(sorted(selection.measure)).encode()
        identity["cases"] = hashlib.sha256(timed).hexdigest()[:16]
    return identity


def _remeasure(args, roots, out_dir, ledger, th, vendor, cal, findings, reporter,
               toolchains=None) -> list[tuple]:
    """Measure failing cases again in fresh processes; their verdicts come from that data alone."""
    compare = compare_toolchain_results if toolchains else compare_results
    retried = []
    for attempt in range(1, th.vendor(vendor).statistics.retries + 1):
        failing = [(f.variant, f.scenario, f.metric) for f in findings
                   if f.verdict is Verdict.FAIL and f.ratio is not None]
        if not failing:
            break
        measure(args, roots, out_dir, ledger, attempt, failing, reporter, toolchains)
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
        measured = load_keys(os.path.join(out_dir, f"retry{attempt}-keys.json"))
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


# --- which cases to time: the change plan (perf/static/changes.py) -------------------------

class Selection:
    """The cases a gate times and those it reports unchanged (identical launches), with the
    plan they come from (None: every case is timed, as with --all-cases or a toolchain A/B)."""

    def __init__(self, cases: list[tuple[str, str]], doc: dict | None, note: str):
        self.doc, self.note = doc, note
        chosen = set(cases)
        if doc is None:
            self.measure, self.unchanged = list(cases), []
        else:
            self.measure = [c for c in ((r["variant"], r["scenario"]) for r in doc["measure"]) if c in chosen]
            self.unchanged = [c for c in ((r["variant"], r["scenario"]) for r in doc["unchanged"])
                              if c in chosen]
        self.why = {(r["variant"], r["scenario"]): r["why"] for r in (doc or {}).get("measure", [])}

    @property
    def partial(self) -> bool:
        """Whether some case is not timed (the workers then get the cases to time as --keys)."""
        return bool(self.unchanged)

    def keys(self, metrics: str) -> set[tuple[str, str, str]]:
        """(variant, scenario, metric) of every case to time."""
        return {(v, s, m) for v, s in self.measure for m in metrics.split(",")}

    def unchanged_findings(self, vendor: str, gpu: str | None, metrics: str) -> list[Finding]:
        """One `unchanged` finding per case and metric not timed (never an "ok" of a measurement)."""
        from perf.measure.cases import usable_metrics

        target = gpu or "Triton interpreter"
        where = f" on {self.doc['target']}" if self.doc else ""
        return [Finding("latency", vendor, target, v, s, m, None, None, None, None, None, None, "not timed",
                        Verdict.UNCHANGED, f"{changes.IDENTICAL}{where}: same compiled kernels, grids, "
                        f"options, arguments and tensors as the base; its device time cannot differ")
                for v, s in self.unchanged for m in usable_metrics(metrics.split(","))]

    def meta(self) -> dict | None:
        """What findings.json records of the plan."""
        if self.doc is None:
            return None
        return {"file": changes.PLAN_FILE, "target": self.doc["target"], "measure": len(self.measure),
                "unchanged": len(self.unchanged)}


def _check_plan_options(args: argparse.Namespace, toolchain_spec: str | None) -> None:
    """--plan-only, --plan and --all-cases: one at a time, and none with --toolchain (two Tritons
    compile different binaries of every kernel: every case differs)."""
    given = [flag for flag, on in (("--plan-only", getattr(args, "plan_only", False)),
                                   ("--plan", getattr(args, "plan", None)),
                                   ("--all-cases", getattr(args, "all_cases", False))) if on]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)}: pass one of them (--plan-only writes a plan, --plan times "
                          f"one, --all-cases times every case without one)")
    if given and toolchain_spec is not None:
        raise ConfigError(f"{given[0]} with --toolchain: a toolchain A/B times every case (another Triton "
                          f"compiles every kernel anew); drop {given[0]}")


def _plan(args: argparse.Namespace, th: Thresholds, vendor: str, base_sha: str, head_sha: str,
          roots: dict[str, str], cases: list[tuple[str, str]]) -> tuple[dict, str]:
    """The change plan of this gate and a note for its report: `--plan FILE` when it is this
    gate's and was made for this GPU's SM count, else planned now on this CPU."""
    runner = changes.runner_target(th, vendor, vendor_mod.on_gpu())
    target = runner.target
    if target is None:
        return changes.measure_all(vendor, runner.arch, base_sha, head_sha, cases, runner.note), runner.note
    given = getattr(args, "plan", None)
    if given and args.allow_dirty and git(repo_root(roots["head"]), "status", "--porcelain",
                                          "--untracked-files=no"):
        raise ConfigError(f"--plan {given}: made for commit {head_sha[:10]}, and the working tree has "
                          f"uncommitted changes it cannot know; drop --plan (the gate plans them) or commit")
    if given:
        doc = changes.check_plan(changes.read_plan(given), given, vendor=vendor, target=target.name,
                                 base=base_sha, head=head_sha, cases=cases)
        if runner.num_sms == target.facts.num_sms:
            return doc, f"change plan: {given} ({target.name})"
        print(f"--plan {given}: planned for {target.facts.num_sms} SMs/CUs of {target.facts.device_name}; "
              f"this GPU has {runner.num_sms}: planning again here", file=sys.stderr, flush=True)
    print(f"change plan: planning base and head on this CPU as if on {runner.note}", file=sys.stderr,
          flush=True)
    with tempfile.TemporaryDirectory(prefix="perf-plan-") as tmp:
        doc = changes.make_plan(vendor=vendor, target=target, num_sms=runner.num_sms, base=base_sha,
                                head=head_sha,
                                base_root=roots["base"], head_root=roots["head"], suite=args.suite,
                                variants=args.variants, scenarios=args.scenarios,
                                thresholds_path=args.thresholds, work_dir=tmp)
    return doc, f"change plan: planned on this CPU as if on {runner.note}"


def select_cases(args: argparse.Namespace, th: Thresholds, vendor: str, base_sha: str, head_sha: str,
                 roots: dict[str, str], cases: list[tuple[str, str]], toolchains) -> Selection:
    """Which cases this gate times: all with --all-cases or a toolchain A/B, else those whose
    launches differ between base and head (the change plan)."""
    if toolchains:
        return Selection(cases, None, "every case timed: a toolchain A/B compiles every kernel anew")
    if getattr(args, "all_cases", False):
        return Selection(cases, None, "every case timed (--all-cases), also those with identical launches")
    doc, note = _plan(args, th, vendor, base_sha, head_sha, roots, cases)
    selection = Selection(cases, doc, note)
    selection.note = (f"{note}: {len(selection.measure)} of {len(cases)} cases timed, "
                      f"{len(selection.unchanged)} unchanged ({changes.IDENTICAL}: compiled kernels, grids, "
                      f"options, scalar arguments, tensor shapes/strides/dtypes and launch order equal; "
                      f"{changes.PLAN_FILE})")
    print(selection.note, file=sys.stderr, flush=True)
    return selection


def plan_only(args: argparse.Namespace, th: Thresholds, vendor: str, repo: str, base_sha: str, head_sha: str,
              cases: list[tuple[str, str]]) -> int:
    """`perf gate --plan-only`: plan.json in --out and one line; no GPU, nothing measured."""
    if not args.allow_dirty and not getattr(args, "head_ref", None):
        check_clean(repo)
    args.thresholds = os.path.abspath(args.thresholds)
    with contextlib.ExitStack() as stack:
        base_root = stack.enter_context(worktree(repo, base_sha))
        head_root = stack.enter_context(worktree(repo, head_sha, "head")) if args.head_ref else repo
        doc, _ = _plan(args, th, vendor, base_sha, head_sha, {"base": base_root, "head": head_root}, cases)
    path = changes.write_plan(os.path.abspath(args.out), doc)
    print(changes.summary(doc), flush=True)
    print(f"plan: {path}", file=sys.stderr, flush=True)
    return 0


def _nothing_to_time(args: argparse.Namespace, out_dir: str, selection: Selection, vendor: str,
                     gpu: str | None, base_sha: str, base_desc: str, head_sha: str, head_ref: str | None,
                     publish_report: bool) -> tuple[int, list[Finding]]:
    """A gate whose every case has identical launches: a verdict with evidence (the plan), exit 0,
    no GPU time; not NothingMeasured, which is a gate that compared nothing."""
    findings = selection.unchanged_findings(vendor, gpu, args.metrics)
    line = f"nothing to time: every case has {changes.IDENTICAL}"
    print(line, file=sys.stderr, flush=True)
    aa = base_sha == head_sha and not args.allow_dirty
    notes = [line + (" (pass --all-cases to measure an A/A run, the gate's noise)" if aa else ""),
             f"base {base_sha[:10]} ({base_desc}) vs head {head_sha[:10]}"
             f"{' + uncommitted changes' if args.allow_dirty else ''}; nothing was measured on the GPU",
             selection.note]
    title = f"Latency A/B on {gpu or 'Triton interpreter'} ({vendor}): {args.suite} suite"
    meta = {"vendor": vendor, "gpu": gpu, "suite": args.suite, "seconds": 0.0, "plan": selection.meta(),
            "base": {"commit": base_sha, "ref": base_desc},
            "head": {"commit": head_sha, "ref": head_ref or "HEAD", "dirty": bool(args.allow_dirty)}}
    return _finish(out_dir, findings, title, notes, meta, {}, publish_report), findings


def gate_command(args: argparse.Namespace) -> int:
    """`python -m perf gate`: `run_gate`'s exit code; 1 too when a measuring process crashed."""
    try:
        return run_gate(args)[0]
    except GateCrash as e:
        print(f"latency gate: FAIL — {e}", file=sys.stderr)
        return EXIT_FAIL


def run_gate(args: argparse.Namespace, publish_report: bool = True) -> tuple[int, list[Finding] | None]:
    """The gate `args` (the `gate` command's options) asks for: its exit code and findings,
    None when it reached no verdict (skipped without a GPU, interrupted). Raises GateCrash
    when a measuring process crashed, so that `perf bisect` (perf/latency/bisect.py, one
    call per step) tells a commit it cannot measure from a slower one."""
    import torch
    from rich.console import Console

    th = load_thresholds(args.thresholds)
    # Everything the user named is checked first, with or without a GPU: a gate that skips
    # must never hide a typo that would make it measure nothing.
    vendor = vendor_mod.resolve(args.vendor)
    vt = th.vendor(vendor)
    chosen = validate.scenarios(args.suite, args.scenarios)
    variants = validate.variants(args.variants, checkout.import_kernels().VARIANTS)
    args.metrics = ",".join(validate.metrics(args.metrics))
    files.check_output(args.out, "--out", directory=True)
    repo = repo_root(os.getcwd())
    head_ref = getattr(args, "head_ref", None)
    spec = getattr(args, "toolchain", None)
    toolchains = None
    if spec is not None:
        toolchain.parse(spec)
        if args.base_ref:  # one commit: this checkout, or the one --head-ref names
            raise ConfigError("--toolchain measures one commit under two Tritons; drop --base-ref (or drop "
                              "--toolchain to compare commits)")
        try:
            toolchains = {"base": toolchain.installed(), "head": toolchain.ensure(spec)}
        except toolchain.ToolchainBroken as e:
            raise GateCrash(str(e)) from None
    if head_ref and args.allow_dirty:
        raise ConfigError("--head-ref names a commit; --allow-dirty measures this working tree: "
                          "pass one of them")
    _check_plan_options(args, spec)
    if getattr(args, "plan", None):  # read whole now: a gate that skips (no GPU) must not hide a bad plan
        changes.read_plan(args.plan)
    head_sha = resolve_commit(repo, head_ref, "--head-ref") if head_ref else git(repo, "rev-parse", "HEAD",
                                                                                 check=True)
    head_desc = head_ref or "HEAD"
    base_sha, base_desc = (head_sha, "HEAD") if toolchains else resolve_base(repo, args.base_ref)
    interpreter = not vendor_mod.on_gpu()
    cases = [(v, s.name) for s in chosen for v in variants]
    if getattr(args, "plan_only", False):
        return plan_only(args, th, vendor, repo, base_sha, head_sha, cases), None
    if interpreter and args.no_gpu_ok:
        what = (f"Triton {toolchains['base'].version} vs {toolchains['head'].version} of {head_sha[:10]}"
                if toolchains else f"base {base_sha[:10]} ({base_desc})")
        print(f"latency gate: skipped — latency needs a GPU (none found; torch.cuda.is_available() is "
              f"{torch.cuda.is_available()}); checked: suite {args.suite} ({len(chosen)} scenarios), "
              f"{len(variants)} variants, {what}; run `nox -s perf` on an H100 or MI300 machine")
        return 0, None
    if interpreter and args.suite != "smoke":
        raise ConfigError("no GPU: the latency gate measures on a CUDA or ROCm GPU (found none); run it "
                          "on a GPU machine, or `--suite smoke` to self-test the harness in the interpreter")
    if interpreter and "eager" not in args.metrics.split(","):
        raise NothingMeasured(f"--metrics {args.metrics}: graph replay needs a GPU (found none); pass "
                              f"--metrics eager to self-test the harness in the interpreter")
    args.repeats = args.repeats if args.repeats is not None else (
        INTERPRETER_ROUNDS if interpreter else vt.statistics.repeats)
    # the interpreter's wall clock measures nothing: a smoke run needs few samples (--samples overrides)
    args.samples = args.samples if args.samples is not None else (
        INTERPRETER_SAMPLES if interpreter else vt.statistics.samples)
    args.processes = INTERPRETER_PROCESSES if interpreter else vt.statistics.processes
    if toolchains and not interpreter:  # per side: enough for the process-level test (toolchain_processes)
        args.processes = toolchain_processes(args.processes, vt.statistics.alpha)
    args.sample_budget_ms = vt.statistics.sample_budget_ms
    if args.repeats < 2 or args.samples < 1:
        raise ConfigError("--repeats must be >= 2 (paired rounds per process) and --samples >= 1")
    if not args.allow_dirty and not head_ref:
        check_clean(repo)
    if base_sha == head_sha and not args.allow_dirty and not toolchains:
        print(f"nothing to compare: {head_desc} is its own base ({head_sha[:10]}); measuring an A/A run, "
              f"which shows the gate's noise", file=sys.stderr)
    out_dir = os.path.abspath(args.out)  # the workers run in the harness's root, not in cwd
    args.thresholds = os.path.abspath(args.thresholds)
    os.makedirs(out_dir, exist_ok=True)
    gpu_name = torch.cuda.get_device_name() if not interpreter else None
    cal, cal_note = calibration_for(th, vendor, gpu_name) if not interpreter else \
        (None, "Triton interpreter: no calibration applies")
    console = Console(stderr=True)
    machine = {"vendor": vendor, "gpu": gpu_name or "Triton interpreter", "interpreter": interpreter}
    t0 = time.monotonic()
    retried: list = []
    ahead = None
    with contextlib.ExitStack() as stack:
        head_root = stack.enter_context(worktree(repo, head_sha, "head")) if head_ref else repo
        base_root = head_root if toolchains else stack.enter_context(worktree(repo, base_sha))
        roots = {"base": base_root, "head": head_root}
        selection = select_cases(args, th, vendor, base_sha, head_sha, roots, cases, toolchains)
        ledger = Ledger(out_dir, _identity(repo, args, base_sha, head_sha, machine, selection),
                        getattr(args, "force", False))
        if selection.doc is not None:
            changes.write_plan(out_dir, selection.doc)
        else:  # an earlier gate's plan there is not this one's
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out_dir, changes.PLAN_FILE))
        if not selection.measure and selection.doc is not None:
            return _nothing_to_time(args, out_dir, selection, vendor, gpu_name, base_sha, base_desc, head_sha,
                                    head_ref, publish_report)
        stack.enter_context(gpu_lock("interpreter" if interpreter else gpu_key(), args.lock_timeout))
        args.batch_cache = stack.enter_context(batch_cache(not interpreter))
        compare = compare_toolchain_results if toolchains else compare_results
        keys = selection.keys(args.metrics) if selection.partial else None
        what = (f"Triton {toolchains['base'].version} (base) vs {toolchains['head'].version} (head) of "
                f"{head_sha[:10]}; {args.processes} processes per side, one side each (A B B A ...) x "
                f"{args.repeats} rounds" if toolchains else
                f"base {base_sha[:10]} ({base_desc}) vs head {head_sha[:10]}; {args.processes} processes x "
                f"{args.repeats} paired rounds")
        console.print(f"A/B {args.suite}: {what}{' + uncommitted changes' if args.allow_dirty else ''} x "
                      f"{args.samples} samples per side; results in {out_dir}"
                      + (f" ({ledger.reused()})" if ledger.resumed else ""))
        try:
            with Reporter(console, args.processes * (2 if toolchains else 1)) as reporter:
                if not interpreter and not toolchains and ledger.done(0, 0) is None:
                    footprints = {s.name: s.footprint_bytes() for s in chosen}
                    ahead = compile_ahead(args, roots, out_dir, cases, keys, footprints, reporter)
                measure(args, roots, out_dir, ledger, 0, keys, reporter, toolchains)
                ledger.finish()
                base = results_mod.load(os.path.join(out_dir, "base.jsonl"))
                head = results_mod.load(os.path.join(out_dir, "head.jsonl"))
                if toolchains:
                    _check_toolchains(base, head, toolchains)
                findings = compare(base, head, th, vendor, cal, ledger.ids(0), keys)
                retried = _remeasure(args, roots, out_dir, ledger, th, vendor, cal, findings, reporter,
                                     toolchains)
            # the red cases explained while both checkouts are here (a toolchain A/B's sides share
            # their kernels; the interpreter's self-test has nothing to explain)
            why_md = "" if toolchains or interpreter else why.explain_red(findings, roots, th, vendor,
                                                                          out_dir)
        except KeyboardInterrupt:
            done = sum(1 for p in ledger.processes)
            print(f"interrupted: {done} finished measuring processes are kept in {out_dir} (gate.json, "
                  f"base.jsonl, head.jsonl); run the same command again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED, None
    seconds = time.monotonic() - t0
    gpu = head.environment.get("gpu")
    if toolchains:
        return _toolchain_outputs(args, out_dir, findings, toolchains, vendor, gpu, head_sha, seconds,
                                  interpreter, th, ledger, retried, publish_report), findings
    findings += selection.unchanged_findings(vendor, gpu, args.metrics)
    title = f"Latency A/B on {gpu} ({vendor}): {args.suite} suite"
    notes = [f"base {base_sha[:10]} ({base_desc}) vs head {head_sha[:10]}"
             f"{' + uncommitted changes' if args.allow_dirty else ''}; {args.processes} fresh processes x "
             f"{args.repeats} paired rounds x {args.samples} samples per side, both sides in each process on "
             f"the same tensors; {seconds / 60:.1f} minutes on this {'CPU' if interpreter else 'GPU'} "
             f"(preparation and re-measurements included"
             + (f"; {ledger.reused()}" if ledger.resumed else "")
             + ")",
             f"thresholds: {cal_note}",
             detectable_summary(findings),
             f"re-measured in fresh processes before failing: {len(retried)}" if retried
             else "no failing case needed a re-measure",
             "ratio: exp(mean over processes of the mean paired log ratio); CI: hierarchical bootstrap "
             "(processes, then rounds); p: one-sided t-test of the process means (perf/stats.py)"]
    notes.insert(1, selection.note)
    if ahead:
        notes.insert(2, ahead)
    if interpreter:
        notes.insert(0, "Triton interpreter (no GPU): wall-clock self-test of the harness, not a measurement")
    lines = _threshold_lines(th, vendor, findings, cal, args.processes, args.repeats)
    meta = {"vendor": vendor, "gpu": gpu, "suite": args.suite, "processes": args.processes,
            "repeats": args.repeats, "samples": args.samples, "seed": args.seed, "seconds": seconds,
            "order": [list(o) for o in side_order(args.repeats, args.seed)],
            "calibration": cal.path if cal else None,
            "base": {"commit": base_sha, "ref": base_desc, "results": "base.jsonl"},
            "head": {"commit": head_sha, "ref": head_desc, "dirty": bool(args.allow_dirty),
                     "results": "head.jsonl"},
            "retried": [list(k) for k in retried], "plan": selection.meta(),
            "thresholds": {" ".join(k): list(v) for k, v in lines.items()}}
    return _finish(out_dir, findings, title, notes, meta, lines, publish_report, why_md), findings


def _check_toolchains(base: results_mod.Results, head: results_mod.Results,
                      toolchains: dict[str, toolchain.Toolchain]) -> None:
    """Each side's processes ran under the Triton asked for (their results headers say which)."""
    for side, res in (("base", base), ("head", head)):
        seen = res.environment.get("triton")
        if seen != toolchains[side].version:
            raise GateCrash(f"the {side} processes imported Triton {seen}, not {toolchains[side].version} "
                            f"(see {res.path}); PYTHONPATH or a .pth file shadows the toolchain")


def _toolchain_outputs(args, out_dir: str, findings: list[Finding], toolchains: dict, vendor: str, gpu,
                       sha: str, seconds: float, interpreter: bool, th: Thresholds, ledger: Ledger,
                       retried: list, publish_report: bool = True) -> int:
    """The toolchain A/B's report: the gate's outputs, titled by the two Tritons."""
    alpha = th.vendor(vendor).statistics.alpha
    n = args.processes
    versions = f"Triton {toolchains['base'].version} → {toolchains['head'].version}"
    title = f"Latency toolchain A/B on {gpu} ({vendor}): {versions}, {args.suite} suite"
    order = " ".join("A" if s == "base" else "B" for s in toolchain_schedule(n))
    notes = [f"one checkout ({sha[:10]}{' + uncommitted changes' if args.allow_dirty else ''}) under two "
             f"Tritons, base: {toolchains['base'].describe()}, head: {toolchains['head'].describe()}; "
             f"{n} fresh processes per side, each measuring one side, in the order {order} (A = base), "
             f"x {args.repeats} rounds x {args.samples} samples; {seconds / 60:.1f} minutes on "
             f"this {'CPU' if interpreter else 'GPU'}"
             + (f"; {ledger.reused()}" if ledger.resumed else ""),
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
    lines = _threshold_lines(th, vendor, findings)
    meta = {"vendor": vendor, "gpu": gpu, "suite": args.suite, "processes": n, "repeats": args.repeats,
            "samples": args.samples, "seed": args.seed, "seconds": seconds,
            "toolchain": {"base": toolchains["base"].version, "head": toolchains["head"].version,
                          "spec": toolchains["head"].spec, "schedule": toolchain_schedule(n)},
            "base": {"commit": sha, "triton": toolchains["base"].version, "results": "base.jsonl"},
            "head": {"commit": sha, "triton": toolchains["head"].version, "dirty": bool(args.allow_dirty),
                     "results": "head.jsonl"},
            "retried": [list(k) for k in retried],
            "thresholds": {" ".join(k): list(v) for k, v in lines.items()}}
    return _finish(out_dir, findings, title, notes, meta, lines, publish_report)


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
