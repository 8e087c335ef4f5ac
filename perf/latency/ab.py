"""The A/B latency gate: head against base on one GPU, rounds interleaved in shuffled order.

`python -m perf gate` checks out the base commit (default: the merge base of HEAD with
origin/main, else main; `--base-ref` overrides) in a temporary git worktree and starts one
worker process per side (`python -m perf worker`, perf/latency/measure.py). Each worker imports the
kernels of its own checkout and this checkout's harness, builds every batch and compiles
every kernel before the first round. Then, round by round, the two sides take turns in a
random order (seeded, recorded): a round measures every (variant, scenario, metric) once,
and its median is one of the `repeats` independent repeat medians per side the statistics
compare (perf/stats.py). Cases that fail are measured again (`statistics.retries`) by the
same workers before they fail the gate. A file lock keeps two runs off one GPU.

`compare` applies the statistics and thresholds to two results files; `report` renders a
findings file again. Findings, results, the Markdown report and the plot land in --out.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

from perf import results as results_mod
from perf import stats
from perf import vendor as vendor_mod
from perf.checkout import ROOT
from perf.errors import EXIT_FAIL, ConfigError
from perf.git import check_clean, git, repo_root, resolve_base, worktree
from perf.report import plot_ratios, publish, render_markdown
from perf.thresholds import Thresholds, load_thresholds
from perf.verdicts import Finding, Verdict, exit_code, latency_verdict

FINDINGS_VERSION = 1


# --- GPU lock ------------------------------------------------------------------------------

@contextlib.contextmanager
def gpu_lock(key: str, timeout: float = 0.0):
    """An exclusive lock per GPU, so two A/B runs never share one (they would disturb each other)."""
    path = os.path.join(tempfile.gettempdir(), f"perf-gpu-{key}.lock")
    f = open(path, "a+")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                f.seek(0)
                holder = f.read().strip() or "another process"
                f.close()
                raise ConfigError(f"{path}: GPU {key} is locked by {holder}; wait for that run to end "
                                  f"or pass --lock-timeout SECONDS") from None
            time.sleep(1.0)
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}")
    f.flush()
    try:
        yield path
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


def gpu_key() -> str:
    import torch

    try:
        return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return (os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES") or "0")


# --- workers -------------------------------------------------------------------------------

class SideFailed(RuntimeError):
    def __init__(self, side: str, log: str):
        tail = ""
        with contextlib.suppress(OSError):
            with open(log, encoding="utf-8", errors="replace") as f:
                lines = [x.strip() for x in f if x.strip()]
            tail = lines[-1] if lines else ""
        super().__init__(f"the {side} side's worker exited early ({tail or 'no output'}); log: {log}")
        self.side = side


class Worker:
    """One side's measuring process, fed round commands over stdin."""

    def __init__(self, side: str, kernels_root: str, out_dir: str, args: argparse.Namespace,
                 repeats: int, samples: int, events: queue.Queue):
        self.side = side
        self.results = os.path.join(out_dir, f"{side}.jsonl")
        self.log = os.path.join(out_dir, f"{side}.log")
        cmd = [sys.executable, "-m", "perf", "worker", "--side", side, "--kernels-from", kernels_root,
               "--out", self.results, "--suite", args.suite, "--metrics", args.metrics,
               "--repeats", str(repeats), "--samples", str(samples), "--thresholds", args.thresholds,
               "--sample-budget-ms", str(args.sample_budget_ms)]
        for opt in ("variants", "scenarios"):
            if getattr(args, opt):
                cmd += [f"--{opt}", getattr(args, opt)]
        env = dict(os.environ, PYTHONPATH=ROOT, PYTHONUNBUFFERED="1")
        self._log = open(self.log, "w", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, bufsize=1)
        self.events = events
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        from perf.latency.measure import PROTOCOL

        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                self.events.put((self.side, json.loads(line[len(PROTOCOL):])))
            else:
                self._log.write(line)
        self.events.put((self.side, {"event": "exit"}))

    def send(self, cmd: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise SideFailed(self.side, self.log) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def _wait(workers: dict, want: str, sides: set[str], on_event=None) -> dict[str, dict]:
    """Consume worker events until every side in `sides` sent `want`."""
    got: dict[str, dict] = {}
    while set(got) != sides:
        side, ev = workers["events"].get()
        if ev["event"] == "exit":
            raise SideFailed(side, workers[side].log)
        if ev["event"] == want:
            got[side] = ev
        elif on_event:
            on_event(side, ev)
    return got


def run_ab(args: argparse.Namespace, roots: dict[str, str], out_dir: str, repeats: int, samples: int,
           retry_keys=None, rounds_seed: int = 0, progress=None, workers=None) -> dict[str, Worker]:
    """Start (or reuse) the workers and run `repeats` interleaved rounds; returns the workers."""
    events: queue.Queue = workers["events"] if workers else queue.Queue()
    if workers is None:
        workers = {"events": events}
        for side in ("base", "head"):
            workers[side] = Worker(side, roots[side], out_dir, args, repeats, samples, events)
        task = progress.add_task("prepare (build batches, compile)", total=None) if progress else None

        def on_prepare(side, ev):
            if progress and ev["event"] == "prepared":
                progress.update(task, description=f"prepare {side}: {ev['what']}")

        workers["ready"] = _wait(workers, "ready", {"base", "head"}, on_prepare)
        if progress:
            progress.update(task, description="prepared", total=1, completed=1)
    rng = random.Random(rounds_seed)
    keys = retry_keys
    per_round = {s: len(workers["ready"][s]["keys"]) if keys is None else len(keys) for s in ("base", "head")}
    label = "retry" if keys is not None else "rounds"
    task = progress.add_task(f"{label}: {repeats} x (base, head)", total=repeats * sum(per_round.values())) \
        if progress else None
    order_log = []
    start = len(workers.get("order", []))
    for r in range(repeats):
        order = ["base", "head"]
        rng.shuffle(order)
        order_log.append(order)
        for side in order:
            workers[side].send({"cmd": "round", "repeat": start + r, "seed": rng.randrange(2**31),
                                "keys": None if keys is None else [list(k) for k in keys]})

            def on_step(s, ev, n=start + r + 1):
                if progress and ev["event"] == "step":
                    progress.update(task, advance=1, description=f"{label} {n}: {s} {ev['what']}")

            _wait(workers, "done", {side}, on_step)
    workers.setdefault("order", []).extend(order_log)
    return workers


# --- comparison ----------------------------------------------------------------------------

def _reasons(res: results_mod.Results) -> dict[tuple[str, str], dict]:
    return {(r["variant"], r["scenario"]): r for r in res.skips()}


def _digests(res: results_mod.Results) -> dict[tuple[str, str], str]:
    return {(r["variant"], r["scenario"]): r.get("batch_digest") for r in res.measurements()}


def compare_results(base: results_mod.Results, head: results_mod.Results, th: Thresholds, vendor: str,
                    first_repeat: int = 0) -> list[Finding]:
    """Findings per (variant, scenario, metric) seen on either side; repeats from `first_repeat` on."""
    vt = th.vendor(vendor)
    target = head.environment.get("gpu") or "?"

    def medians(res):
        out: dict = {}
        for r in res.measurements():
            if r["repeat"] >= first_repeat:
                out.setdefault((r["variant"], r["scenario"], r["metric"]), []).append(r["median"])
        return out

    mb, mh = medians(base), medians(head)
    rb, rh = _reasons(base), _reasons(head)
    db, dh = _digests(base), _digests(head)
    metrics = sorted({k[2] for k in (*mb, *mh)}) or ["eager"]
    keys = set(mb) | set(mh)
    for pair in set(rb) | set(rh):  # cases with no measurement on either side still get a row
        for m in metrics:
            keys.add((*pair, m))
    findings = []
    for variant, scenario, metric in sorted(keys):
        t = th.latency(vendor, variant, scenario, metric)
        text = t.describe() + (f" ({t.source})" if t.source.startswith("overrides") else "")
        row = dict(gate="latency", vendor=vendor, target=target, variant=variant, scenario=scenario,
                   metric=metric, threshold=text)
        b, h = mb.get((variant, scenario, metric)), mh.get((variant, scenario, metric))
        if b and h:
            c = stats.compare(b, h, vt.statistics.bootstrap, vt.statistics.confidence)
            verdict, note = latency_verdict(c.ratio, c.p_slower, c.p_faster, t.warn, t.fail,
                                            vt.statistics.alpha)
            if db.get((variant, scenario)) != dh.get((variant, scenario)):
                verdict, note = Verdict.WARN, "the batch differs between sides (kernels/batch.py changed?)"
            findings.append(Finding(**row, base=c.base_median, head=c.head_median, ratio=c.ratio,
                                    ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value,
                                    verdict=verdict, note=note))
            continue
        why_b = rb.get((variant, scenario), {})
        why_h = rh.get((variant, scenario), {})
        if b and not h:
            if why_h.get("kind") == "error":
                verdict, note = Verdict.FAIL, f"broken on head: {why_h['reason']}"
            else:
                verdict, note = Verdict.WARN, f"not measured on head: {why_h.get('reason', 'no record')}"
        elif h and not b:
            verdict, note = Verdict.OK, f"new on head (base: {why_b.get('reason', 'no record')})"
        else:
            reason = why_h.get("reason") or why_b.get("reason") or "no record"
            kind = why_h.get("kind") or why_b.get("kind")
            if kind == "error":
                verdict, note = Verdict.WARN, f"broken on both sides: {reason}"
            else:
                verdict, note = Verdict.OK, f"skipped on both sides: {reason}"
        findings.append(Finding(**row, base=b and float(sorted(b)[len(b) // 2]),
                                head=h and float(sorted(h)[len(h) // 2]), ratio=None, ci_low=None,
                                ci_high=None, p_value=None, verdict=verdict, note=note))
    return findings


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
                  lines: tuple[float | None, float | None] = (None, None)) -> str:
    os.makedirs(out_dir, exist_ok=True)
    shown, skip_notes = _dedupe_skips(findings)
    md = render_markdown(shown, title, notes + skip_notes)
    results_mod.write_json(os.path.join(out_dir, "findings.json"), {
        "schema_version": FINDINGS_VERSION, "kind": "findings", "title": title, "notes": notes + skip_notes,
        **meta, "findings": [f.to_dict() for f in findings]})
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(md)
    try:
        plot_ratios(shown, os.path.join(out_dir, "ratios.png"), title, *lines)
    except ImportError:
        notes.append("matplotlib missing: no plot")
    return md


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
    th = load_thresholds(args.thresholds)
    base, head = results_mod.load(args.base), results_mod.load(args.head)
    results_mod.check_comparable(base, head)
    vendor = _vendor_for(head, args.vendor)
    findings = compare_results(base, head, th, vendor)
    title = f"Latency: {args.head} vs {args.base} on {head.environment.get('gpu')} ({vendor})"
    meta = {"vendor": vendor, "gpu": head.environment.get("gpu"),
            "base": {"results": args.base, "commit": base.environment.get("commit")},
            "head": {"results": args.head, "commit": head.environment.get("commit")}}
    md = write_outputs(args.out, findings, title, [], meta) if args.out else render_markdown(
        _dedupe_skips(findings)[0], title, _dedupe_skips(findings)[1])
    publish(md)
    return exit_code(findings)


def report_command(args: argparse.Namespace) -> int:
    try:
        with open(args.findings, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{args.findings}: not found; run `python -m perf gate` or "
                          f"`python -m perf compare --out DIR` first") from None
    except json.JSONDecodeError:
        raise ConfigError(f"{args.findings}: not JSON; pass the findings.json of a gate run") from None
    if data.get("kind") != "findings" or data.get("schema_version") != FINDINGS_VERSION:
        raise ConfigError(f"{args.findings}: schema_version {data.get('schema_version')!r} of kind "
                          f"{data.get('kind')!r}; this harness reads findings version {FINDINGS_VERSION}")
    findings = [Finding.from_dict(d) for d in data["findings"]]
    shown, _ = _dedupe_skips(findings)
    publish(render_markdown(shown, data.get("title", "findings"), data.get("notes", [])))
    if args.plot:
        plot_ratios(shown, args.plot, data.get("title", ""))
        print(f"plot: {args.plot}")
    return exit_code(findings)


def gate_command(args: argparse.Namespace) -> int:
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


    th = load_thresholds(args.thresholds)
    interpreter = not vendor_mod.on_gpu()
    if interpreter and args.no_gpu_ok:
        print("latency gate: skipped — latency needs a GPU (none found; torch.cuda.is_available() is "
              f"{torch.cuda.is_available()}); run `nox -s perf` on an H100 or MI300 machine")
        return 0
    if interpreter and args.suite != "smoke":
        raise ConfigError("no GPU: the latency gate measures on a CUDA or ROCm GPU (found none); run it "
                          "on a GPU machine, or `--suite smoke` to self-test the harness in the interpreter")
    vendor = vendor_mod.resolve(args.vendor)
    vt = th.vendor(vendor)
    repeats = args.repeats if args.repeats is not None else vt.statistics.repeats
    samples = args.samples if args.samples is not None else vt.statistics.samples
    args.sample_budget_ms = vt.statistics.sample_budget_ms
    repo = repo_root(os.getcwd())
    if not args.allow_dirty:
        check_clean(repo)
    base_sha, base_desc = resolve_base(repo, args.base_ref)
    head_sha = git(repo, "rev-parse", "HEAD", check=True)
    out_dir = os.path.abspath(args.out)  # the workers run in the harness's root, not in cwd
    args.thresholds = os.path.abspath(args.thresholds)
    os.makedirs(out_dir, exist_ok=True)
    console = Console(stderr=True)
    t0 = time.monotonic()
    with gpu_lock("interpreter" if interpreter else gpu_key(), args.lock_timeout), \
            worktree(repo, base_sha) as base_root:
        roots = {"base": base_root, "head": repo}
        console.print(f"A/B {args.suite}: base {base_sha[:10]} ({base_desc}) vs head {head_sha[:10]}"
                      f"{' + uncommitted changes' if args.allow_dirty else ''}; {repeats} rounds x "
                      f"{samples} samples per side; results in {out_dir}")
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn())
        workers = None
        try:
            with Progress(*columns, console=console) as progress:
                workers = run_ab(args, roots, out_dir, repeats, samples, rounds_seed=args.seed,
                                 progress=progress)
                base = results_mod.load(workers["base"].results)
                head = results_mod.load(workers["head"].results)
                findings = compare_results(base, head, th, vendor)
                first = {f"{f.variant} {f.scenario} {f.metric}": f.ratio for f in findings}
                retried = []
                for attempt in range(vt.statistics.retries):
                    failing = [(f.variant, f.scenario, f.metric) for f in findings
                               if f.verdict is Verdict.FAIL and f.ratio is not None]
                    if not failing:
                        break
                    start = len(workers["order"])
                    run_ab(args, roots, out_dir, repeats, samples, retry_keys=failing,
                           rounds_seed=args.seed + 1 + attempt, progress=progress, workers=workers)
                    base = results_mod.load(workers["base"].results)
                    head = results_mod.load(workers["head"].results)
                    again = {(f.variant, f.scenario, f.metric): f
                             for f in compare_results(base, head, th, vendor, first_repeat=start)}
                    for i, f in enumerate(findings):
                        key = (f.variant, f.scenario, f.metric)
                        if key in failing and key in again:
                            new = again[key]
                            new.note = (f"{new.note}; " if new.note else "") + \
                                f"re-measured (first ratio {first[' '.join(key)]:.3f})"
                            findings[i] = new
                    retried.extend(failing)
        except SideFailed as e:
            if e.side == "head":
                print(f"latency gate: FAIL — {e}", file=sys.stderr)
                return EXIT_FAIL
            raise ConfigError(f"--base-ref {args.base_ref or base_desc}: {e}; pick a base that "
                              f"runs") from None
        finally:
            if workers:
                for side in ("base", "head"):
                    workers[side].close()
    seconds = time.monotonic() - t0
    gpu = head.environment.get("gpu")
    title = f"Latency A/B on {gpu} ({vendor}): {args.suite} suite"
    notes = [f"base {base_sha[:10]} ({base_desc}) vs head {head_sha[:10]}"
             f"{' + uncommitted changes' if args.allow_dirty else ''}; {repeats} interleaved rounds x "
             f"{samples} samples per side, order seed {args.seed}; {seconds / 60:.1f} minutes on this "
             f"{'CPU' if interpreter else 'GPU'} (preparation and re-measurements included)",
             f"re-measured before failing: {len(retried)}" if retried
             else "no failing case needed a re-measure"]
    if interpreter:
        notes.insert(0, "Triton interpreter (no GPU): wall-clock self-test of the harness, not a measurement")
    meta = {"vendor": vendor, "gpu": gpu, "suite": args.suite, "repeats": repeats, "samples": samples,
            "seed": args.seed, "seconds": seconds, "order": workers["order"] if workers else [],
            "base": {"commit": base_sha, "ref": base_desc, "results": "base.jsonl"},
            "head": {"commit": head_sha, "dirty": bool(args.allow_dirty), "results": "head.jsonl"},
            "retried": [list(k) for k in retried]}
    md = write_outputs(out_dir, findings, title, notes, meta, (vt.latency.warn, vt.latency.fail))
    publish(md)
    print(f"artifacts in {out_dir}: findings.json, report.md, ratios.png, base.jsonl, head.jsonl",
          file=sys.stderr)
    return exit_code(findings)
