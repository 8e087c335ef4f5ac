"""The nightly over every GPU of a host and over several runners: shares, workers, merge.

Two levels, one rule. `--shard I/M` gives runner I of M (the nightly workflow's matrix) its
share of the selection's scenarios; a runner splits its share over its GPUs (`--gpus`), one
worker process per GPU with its visible-devices variable set (perf/devices.py), each
measuring its scenarios with perf/nightly/collect.py into a results file of its own. The
files are then merged into one: on a single runner, the per-commit file the history reads;
with M runners, the runner's part, which the merge job (`--merge-shards DIR`) merges with
the other parts before `asv run`, publish and report.

Scenarios are dealt whole: a scenario's batch is built once and every variant and library on
it is timed in the same shuffled rounds, which the alert's vendor-library control relies on.
The deal is deterministic (largest estimated cost first, to the least-loaded part, ties by
name), so a scenario lands in the same part every night. A merge refuses files whose headers
differ in anything but the device (DEVICE_FIELDS) or that do not cover the selection exactly
once, so one commit's history never mixes images, drivers, GPU kinds or settings.

    python -m perf.nightly.shard --out PATH [--resume]   # internal: one worker (see `measure`)
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from perf import devices, files, fingerprint
from perf.errors import EXIT_FAIL, ConfigError
from perf.nightly.selection import ROOT, Selection
from perf.process import child_env

HEADER_ENV = "PERF_NIGHTLY_HEADER"  # the worker's extra header fields (JSON), from the driver
GPU_KEY = "gpu_shard"  # header of one GPU's file: {index, count, of, device}
RUNNER_KEY = "runner_shard"  # header of one runner's part: {index, count, of}
# Environment fields that may differ between the shards of one commit: where and when each ran
# (the device's fingerprint: perf/fingerprint.py).
DEVICE_FIELDS = ("time", "host", "runner", "gpu_uuid", "vbios", "clocks", "fingerprint_why", "limits")
PARTS_DIR = "shards"  # a runner's part goes to <--out>/shards/ (the matrix job's artifact)
PROGRESS_EVERY_S = 15  # a plain progress line at least this often when not on a terminal

# Estimated seconds a scenario takes: per case (variant or library), a fixed part (batch, plan,
# compile, graph capture) plus its timed calls, repeats x metrics x (warm-up + samples) x (call
# + per-sample overhead), the call's duration guessed from the batch's attention FLOPs and the
# bytes it reads. Fit to an NVIDIA H200 (2-GPU machine), 2026-11-22, 15 llama3-8b nightly
# scenarios x 5 variants + 2 SDPA libraries: the reference variant `naive` ran prefills at 1.5
# TFLOP/s (699 ms for a 16 x 4k prefill batch) and decodes at 0.2 TB/s, the other variants and
# the libraries at 60-510 TFLOP/s and 0.4-2 TB/s (the default below stands for all of them);
# the run's time beyond its timed calls was 0.45 s per case. Only the ratios between scenarios
# matter; another GPU shifts them little. A variant of another name gets the default.
RATES = {"naive": (1.5, 0.2)}  # variant -> (TFLOP/s, TB/s)
DEFAULT_RATE = (100.0, 1.0)
FIXED_S = 0.45  # per case
LAUNCH_MS = 0.02  # a launch-bound call
WARMUP_CALLS = 3  # perf.measure.rounds.Side's warm-up calls per repeat
SAMPLE_OVERHEAD_MS = 0.05  # L2 flush and event record around each sample (unmeasured default)


@dataclass(frozen=True)
class Part:
    """Runner `index` of `count` (1-based, as the workflow's matrix counts)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_part(text: str | None) -> Part | None:
    """`--shard I/M`; None for no sharding (absent, or 1/1)."""
    if text is None:
        return None
    left, _, right = text.partition("/")
    if not (left.isdigit() and right.isdigit() and 1 <= int(left) <= int(right)):
        raise ConfigError(f"--shard {text}: expected I/M with 1 <= I <= M (runner I of M), e.g. --shard 2/4")
    part = Part(int(left), int(right))
    return part if part.count > 1 else None


def cost(name: str, sel: Selection) -> float:
    """Estimated seconds of scenario `name` for `sel`'s variants, libraries and sampling."""
    from perf.nightly.collect import METRICS, samples_for
    from perf.scenarios import MODELS, Scenario

    s = Scenario.parse(name)
    model = MODELS[s.model]
    pairs = 0  # (query, key) pairs attended: causal within the new tokens, cut by the window
    for q, kv in zip(*s.lengths()):
        full = q * (kv - q) + q * (q + 1) // 2
        pairs += min(full, q * s.window) if s.window else full
    flops, nbytes = 4 * pairs * model.num_q_heads * model.head_size, s.footprint_bytes()
    total = 0.0
    for case in (*sel.variants, *sel.peers):
        tflops, tbps = RATES.get(case, DEFAULT_RATE)
        call_ms = LAUNCH_MS + max(flops / (tflops * 1e9), nbytes / (tbps * 1e9))
        if call_ms > sel.max_call_ms:  # probed once, then recorded as a skip (collect.too_slow)
            total += FIXED_S + call_ms / 1e3
            continue
        calls = WARMUP_CALLS + samples_for(call_ms, sel.budget_ms, sel.samples)
        total += FIXED_S + len(METRICS) * sel.repeats * calls * (call_ms + SAMPLE_OVERHEAD_MS) / 1e3
    return total


def assign(names, parts: int, sel: Selection) -> list[tuple[str, ...]]:
    """`names` dealt into `parts` shares of about equal estimated cost, each in `names` order.

    Longest first to the least-loaded share (ties: the lower index), names ordered by cost
    then name: the same names give the same shares anywhere.
    """
    names = list(names)
    if len(set(names)) != len(names):
        raise ValueError("scenario names must be unique")
    costs = {n: cost(n, sel) for n in names}
    loads = [0.0] * parts
    owner: dict[str, int] = {}
    for n in sorted(names, key=lambda n: (-costs[n], n)):
        k = min(range(parts), key=lambda i: (loads[i], i))
        loads[k] += costs[n]
        owner[n] = k
    return [tuple(n for n in names if owner[n] == k) for k in range(parts)]


# --- measuring ------------------------------------------------------------------------------


def resolve_pool(gpus: str) -> devices.Pool | None:
    """`--gpus`: all (every GPU this job may use), or a count; None = one process, here."""
    pool = devices.host_pool()
    if gpus == "all":
        return pool
    if not gpus.isdigit() or int(gpus) < 1:
        raise ConfigError(f"--gpus {gpus}: expected `all` or a positive number of GPUs")
    n = int(gpus)
    if pool is None:  # no GPU (--allow-cpu): stand-in devices, to try the sharding
        return devices.interpreter_pool(n) if n > 1 else None
    if n > len(pool.devices):
        raise ConfigError(f"--gpus {n}: this job may use {len(pool.devices)} GPU(s) ({pool.encode()}); "
                          f"pass --gpus {len(pool.devices)} or --gpus all")
    return replace(pool, devices=pool.devices[:n])


def part_path(out_dir: str, machine: str, sha: str, part: Part) -> str:
    """Where runner `part` writes its share (the matrix job uploads this folder)."""
    return os.path.join(out_dir, PARTS_DIR, f"{machine}-{sha[:8]}-part-{part.index}-of-{part.count}.jsonl")


def machine_name(given: str | None, part: Part | None) -> str:
    """asv machine of this nightly: with M runners, one history for all of them
    (`<M>-runners_<gpu>`), since a scenario's runner changes from night to night."""
    from perf.nightly import selection

    if given:
        return given
    return selection.machine_name(runner=f"{part.count}-runners") if part else selection.machine_name()


def measure(sel: Selection, out: str, *, gpus: str = "all", part: Part | None = None, resume: bool = False,
            header_extra: dict | None = None) -> str:
    """Measure `sel` (runner `part`'s share of it) into `out`, one worker per GPU; returns `out`.

    One GPU (or `--gpus 1`): this process measures, as without sharding. Several: each GPU's
    file is kept in `<out>.gpus/` until the merge succeeds, so `resume` continues each worker.
    """
    from perf.nightly import collect

    extra = dict(header_extra or {})
    if part is not None:
        extra[RUNNER_KEY] = {"index": part.index, "count": part.count, "of": list(sel.scenarios)}
        sel = replace(sel, scenarios=assign(sel.scenarios, part.count, sel)[part.index - 1])
        print(f"nightly: runner {part}: {len(sel.scenarios)} scenarios of {len(extra[RUNNER_KEY]['of'])}",
              flush=True)
    pool = resolve_pool(gpus)
    workers = min(len(pool.devices), len(sel.scenarios)) if pool else 1
    folder = f"{out}.gpus"
    if workers <= 1 or (resume and os.path.exists(out) and not os.path.isdir(folder)):
        collect.measure(sel, out, header_extra=extra, resume=resume)
        return out
    os.makedirs(folder, exist_ok=True)
    shares = assign(sel.scenarios, workers, sel)
    paths = [os.path.join(folder, f"gpu-{k + 1}-of-{workers}.jsonl") for k in range(workers)]
    print(f"nightly: {len(sel.scenarios)} scenarios over {workers} GPUs ({pool.variable}="
          f"{','.join(pool.devices[:workers])}): {', '.join(str(len(s)) for s in shares)} each", flush=True)
    procs, logs = [], []
    previous = signal.signal(signal.SIGTERM, _terminated)  # a cancelled job stops the workers too
    try:
        for k, (share, path) in enumerate(zip(shares, paths)):
            info = {"index": k + 1, "count": workers, "of": list(sel.scenarios), "device": pool.device(k),
                    "variable": pool.variable}
            env = child_env(ROOT, **replace(sel, scenarios=share, results=path).to_env(), **pool.env(k),
                            **{HEADER_ENV: json.dumps({**extra, GPU_KEY: info})})
            logs.append(open(f"{path}.log", "w", encoding="utf-8"))  # noqa: SIM115 (closed below)
            cmd = [sys.executable, "-m", "perf.nightly.shard", "--out", path, *(["--resume"] * resume)]
            procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=logs[-1], stderr=subprocess.STDOUT))
        metrics = 1 if pool.interpreter else len(collect.METRICS)  # no graphs in the interpreter
        cases = len(sel.variants) + len(sel.peers)
        steps = [len(share) * cases * metrics * sel.repeats for share in shares]
        _wait(procs, paths, steps, [f"GPU {pool.device(k)}" for k in range(workers)])
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        for f in logs:
            f.close()
        signal.signal(signal.SIGTERM, previous)
    merge(paths, out, GPU_KEY)
    for path in paths:
        for p in (path, f"{path}.log", files.lock_path(path), fingerprint.sidecar(path)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
    os.rmdir(folder)
    return out


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


class WorkerFailed(ConfigError):
    """A worker ended with an error: its last line and its log, one line, exit 1 (2 for bad input)."""

    exit_code = EXIT_FAIL


def _wait(procs, paths, steps, labels) -> None:
    """Wait for the workers, showing each one's progress; the first failure stops them all."""
    counts = [_LineCounter(p) for p in paths]
    start = last = time.monotonic()
    bar = None
    if sys.stdout.isatty():
        from rich.progress import Progress

        bar = Progress(transient=False)
        bar.__enter__()
        tasks = [bar.add_task(label, total=total) for label, total in zip(labels, steps)]
    try:
        while True:
            codes = [p.poll() for p in procs]
            for k, code in enumerate(codes):
                if code not in (None, 0):
                    tail = _last_line(f"{paths[k]}.log")
                    err = WorkerFailed(f"nightly worker {k + 1}/{len(procs)} ({labels[k]}) ended with exit "
                                       f"{code}: {tail}; log: {paths[k]}.log (--resume keeps what finished)")
                    err.exit_code = code if code == 2 else EXIT_FAIL
                    raise err
            done = [c.lines() for c in counts]
            if bar is not None:
                for task, d in zip(tasks, done):
                    bar.update(task, completed=d)
            elif time.monotonic() - last >= PROGRESS_EVERY_S or all(c == 0 for c in codes):
                last = time.monotonic()
                state = ", ".join(f"{lab} {d}/{s}" for lab, d, s in zip(labels, done, steps))
                print(f"nightly: {time.monotonic() - start:.0f} s, records: {state}", flush=True)
            if all(c == 0 for c in codes):
                return
            time.sleep(1)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


class _LineCounter:
    """Lines written to a results file so far (records and skips), read incrementally."""

    def __init__(self, path: str):
        self.path, self.offset, self.count = path, 0, 0

    def lines(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        self.offset += len(chunk)
        self.count += chunk.count(b"\n")
        return max(0, self.count - 1)  # the header is not a record


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


# --- merging --------------------------------------------------------------------------------


def _header(path: str) -> dict:
    """A shard file's header, the file read whole by the one results reader (perf.results.load)."""
    from perf import results

    return results.load(path).header


def _device_entries(path: str, header: dict, key: str) -> list[dict]:
    """Where each scenario of a shard file was measured (a merged part keeps its GPUs' list)."""
    if header.get("devices"):
        entries = [dict(e) for e in header["devices"]]
    else:
        env = header.get("environment", {})
        info = header.get(GPU_KEY, {})
        entries = [{"device": info.get("device"), "variable": info.get("variable"),
                    **{f: env.get(f) for f in DEVICE_FIELDS}, "scenarios": list(header.get("scenarios", {}))}]
    if key == RUNNER_KEY:
        info = header[RUNNER_KEY]
        for e in entries:
            e["runner"] = f"{info['index']}/{info['count']}"
    return entries


def _check_agree(paths: list[str], headers: list[dict], key: str) -> None:
    """Every header field but the shard's own (scenarios, device) must be the first file's."""
    first, where = headers[0], paths[0]
    skip = {key, "scenarios", "devices", "environment"}
    for path, h in zip(paths[1:], headers[1:]):
        for field in sorted((set(first) | set(h)) - skip):
            if first.get(field) != h.get(field):
                raise ConfigError(f"{path}: {field} is {h.get(field)!r}, {where} has {first.get(field)!r}; "
                                  f"the shards of one nightly must agree on everything but the device")
        env0, env = first.get("environment", {}), h.get("environment", {})
        for field in sorted((set(env0) | set(env)) - set(DEVICE_FIELDS)):
            if env0.get(field) != env.get(field):
                raise ConfigError(f"{path}: environment.{field} is {env.get(field)!r}, {where} has "
                                  f"{env0.get(field)!r}; the shards of one nightly must agree on everything "
                                  f"but the device (same commit, image, driver and GPU kind)")


def merge(paths: list[str], out: str, key: str) -> dict:
    """Merge shard files (`key`: GPU_KEY or RUNNER_KEY) into `out`, atomically; its header.

    Refused (ConfigError naming the file and field): a file cut short, a missing or repeated
    shard, headers that differ in more than the device, scenarios not covering the selection
    exactly once, a record of a scenario its file was not given.
    """
    from perf import results

    headers = []
    for path in paths:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 1))
            if f.read(1) != b"\n":
                raise ConfigError(f"{path}: its last line is cut short (an interrupted worker); rerun that "
                                  f"shard (--resume) before merging")
        headers.append(_header(path))
    infos = []
    for path, h in zip(paths, headers):
        info = h.get(key)
        if not isinstance(info, dict) or not {"index", "count", "of"} <= set(info):
            raise ConfigError(f"{path}: header has no `{key}`; not a shard of a sharded nightly")
        infos.append(info)
    count, of = infos[0]["count"], infos[0]["of"]
    for path, info in zip(paths, infos):
        if info["count"] != count or info["of"] != of:
            raise ConfigError(f"{path}: shard of {info['count']} over {len(info['of'])} scenarios, "
                              f"{paths[0]} is one of {count} over {len(of)}; merge the shards of one run")
    have = sorted(info["index"] for info in infos)
    if have != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(have))
        extra = sorted({i for i in have if have.count(i) > 1})
        problem = (f", missing {missing}" if missing else "") + (f", repeated {extra}" if extra else "")
        raise ConfigError(f"{os.path.dirname(paths[0]) or '.'}: shards {have} of {count}{problem}; "
                          f"every shard exactly once is needed")
    _check_agree(paths, headers, key)
    digests: dict[str, str] = {}
    for path, h in zip(paths, headers):
        for name, digest in h.get("scenarios", {}).items():
            if name in digests:
                raise ConfigError(f"{path}: scenario {name} was measured by another shard too")
            digests[name] = digest
    if set(digests) != set(of):
        missing = ", ".join(sorted(set(of) - set(digests))[:5]) or "none"
        raise ConfigError(f"{paths[0]}: the shards cover {len(digests)} scenarios, the selection has "
                          f"{len(of)} (missing: {missing})")
    merged = results.merge(paths)
    seen: set[tuple] = set()
    for r in merged.records:  # one scenario per shard: a record twice means two shards measured it
        k = (r["kind"], r["variant"], r["scenario"], r.get("metric"), r.get("repeat"), r.get("reason"))
        if k in seen or r["scenario"] not in digests:
            raise ConfigError(f"{os.path.dirname(paths[0]) or '.'}: {r['variant']} {r['scenario']} is "
                              f"recorded twice or outside the selection; merge the shards of one nightly run")
        seen.add(k)
    gap = _first_missing(headers[0], of, merged.records)
    if gap:
        raise ConfigError(f"{os.path.dirname(paths[0]) or '.'}: no result for {gap} (a shard stopped before "
                          f"the end?); rerun that shard with --resume, then merge")
    order = sorted(range(len(paths)), key=lambda i: infos[i]["index"])
    header = {k: v for k, v in headers[order[0]].items() if k not in (key, "devices")}
    header["scenarios"] = {name: digests[name] for name in of}
    header["devices"] = [e for i in order for e in _device_entries(paths[i], headers[i], key)]
    lines = (json.dumps(obj, sort_keys=True) + "\n" for obj in (header, *merged.records))
    files.write_text(out, "".join(lines))
    ends = [fingerprint.read_end(paths[i]) for i in order]  # each process's clocks as it ended
    if all(ends):
        files.write_json(fingerprint.sidecar(out), fingerprint.combine(ends))
    return header


def _first_missing(header: dict, scenarios, records: list[dict]) -> str | None:
    """The first (case, scenario, metric, repeat) with neither a record nor a skip or error line
    that explains it; None when every case is accounted for."""
    from perf.nightly.selection import PEER_PREFIX

    metrics = [m for m in header["metrics"] if m == "eager" or not header["environment"].get("interpreter")]
    done, broken, skipped = set(), set(), set()
    for r in records:
        if r["kind"] == "record":
            done.add((r["variant"], r["scenario"], r["metric"], r["repeat"]))
        elif (metric := r["reason"].split(":", 1)[0]) in metrics:  # that metric broke: not retried
            broken.add((r["variant"], r["scenario"], metric))
        else:  # the case was skipped or failed as a whole
            skipped.add((r["variant"], r["scenario"]))
    for scenario in scenarios:
        for name in (*header["variants"], *(PEER_PREFIX + p for p in header["peers"])):
            if (name, scenario) in skipped:
                continue
            for metric in metrics:
                if (name, scenario, metric) in broken:
                    continue
                for repeat in range(header["repeats"]):
                    if (name, scenario, metric, repeat) not in done:
                        return f"{name} {scenario} {metric} repeat {repeat}"
    return None


def night_path(out_dir: str, machine: str, sha: str) -> str:
    """Where `perf nightly run` measures (or the merge job merges) a night: `<machine>-<sha8>.jsonl`
    in --out, the job's artifact and what `nightly save` commits (perf/nightly/store.py)."""
    return os.path.join(out_dir, f"{machine}-{sha[:8]}.jsonl")


def merge_parts(folder: str, conf: dict, machine: str | None = None, force: bool = False,
                out_dir: str = os.path.join("results", "nightly"), data: str | None = None,
                ) -> tuple[str, str, Selection, str]:
    """The merge job: the M runners' parts under `folder` -> this commit's night in `out_dir`.

    Returns (machine, commit, selection, path). The commit must be the one checked out here, and
    the machine the parts' (`--machine` may only repeat it); the parts' GPU, vendor and interpreter
    those of the machine's history in the store `data` (default: the local one, store.local;
    `force`: perf.files.guard_measured).
    """
    from perf import git
    from perf.nightly import selection

    paths = sorted(glob.glob(os.path.join(folder, "**", "*.jsonl"), recursive=True))
    if not paths:
        raise ConfigError(f"--merge-shards {folder}: no *.jsonl part files there; download the shard jobs' "
                          f"artifacts into it (they write {os.path.join('results', 'nightly', PARTS_DIR)}/)")
    first = _header(paths[0])
    nightly = first.get("nightly") or {}
    sha, name = nightly.get("commit"), nightly.get("machine")
    if not sha or not name:
        raise ConfigError(f"{paths[0]}: header has no nightly.commit/machine; not a part of `python -m perf "
                          f"nightly run --shard I/M`")
    head, _ = git.head_commit(conf["_root"])
    if head != sha:
        raise ConfigError(f"{paths[0]}: measured commit {sha[:8]}, this checkout is {head[:8]}; check out "
                          f"the commit the shard jobs measured")
    if machine and machine != name:
        raise ConfigError(f"--machine {machine}: the parts were measured as machine {name}; drop --machine")
    from perf.nightly import store

    store.check_name(name, "the parts' machine")
    newest = store.newest(data or store.local(conf["_results_dir"]), name)
    if newest is not None:
        files.guard_measured(newest.path, newest.results().environment, first.get("environment") or {}, force)
    out = night_path(out_dir, name, sha)
    header = merge(paths, out, RUNNER_KEY)
    sel = Selection(suite=header["suite"], scenarios=tuple(header["scenarios"]),
                    variants=tuple(header["variants"]), peers=tuple(header["peers"]),
                    repeats=header["repeats"], samples=header["samples"], budget_ms=header["budget_ms"],
                    max_call_ms=header.get("max_call_ms", selection.DEFAULT_MAX_CALL_MS),
                    results=out)
    print(f"nightly: merged {len(paths)} parts ({len(sel.scenarios)} scenarios) of commit {sha[:8]} "
          f"into {out}", flush=True)
    return name, sha, sel, out


# --- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", default="all",
                   help="worker processes, one per GPU: all (default: every GPU this job may use; a set "
                        "CUDA/HIP_VISIBLE_DEVICES is respected) or a number (1: one process, no sharding); "
                        "without a GPU (--allow-cpu), that many interpreter processes")
    p.add_argument("--shard", default=None, metavar="I/M",
                   help="measure only runner I's share of M (the workflow's matrix) into <--out>/shards/; "
                        "the merge job records it (--merge-shards)")
    p.add_argument("--merge-shards", default=None, metavar="DIR",
                   help="instead of measuring: merge the M runners' parts found under DIR into this commit's "
                        "night, put into the store (needs no GPU)")


def check_action(args: argparse.Namespace) -> Part | None:
    """The runner part asked for; refuses combinations that cannot work."""
    part = parse_part(args.shard)
    if part is not None and args.merge_shards:
        raise ConfigError("--shard and --merge-shards: a runner measures its part, the merge job merges "
                          "them; pass one of them")
    if part is not None and args.action != "run":
        raise ConfigError(f"--shard {part}: a runner only measures its part; use `python -m perf nightly run "
                          f"--shard {part}` (the merge job publishes: --merge-shards DIR)")
    return part


def worker_main(argv: list[str] | None = None) -> int:
    """One GPU's share: the selection from PERF_NIGHTLY_*, extra header from PERF_NIGHTLY_HEADER."""
    from perf.nightly import collect

    p = argparse.ArgumentParser(prog="python -m perf.nightly.shard",
                                description="internal: one worker of a sharded nightly")
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    try:
        sel = Selection.from_env()
        collect.measure(sel, args.out, header_extra=json.loads(os.environ.get(HEADER_ENV) or "{}"),
                        resume=args.resume, progress=False)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":  # one GPU's worker: its parent reports an interrupt
    from perf.process import entry

    entry(worker_main, internal=True)
