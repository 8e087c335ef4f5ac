"""Compile the planned jobs: worker processes, a fresh Triton cache, a disk cache of metrics.

Every job is compiled with `triton.compile(plan.source(...), target=GPUTarget(...))` on this
CPU, in `--jobs` spawned processes, with Triton's own cache pointed at a throwaway
directory and TRITON_ALWAYS_COMPILE set, so every compile is cold and its time real: wall
seconds and CPU seconds (the compiling process's threads and the ptxas it runs), the
latter what the gate judges, since the load of other jobs on the machine moves it far less.
perf/static/metrics.py reads the result. Metrics are kept in .perf-cache/compile/ by the
job's cache key, so base and head share unchanged kernels and a rerun takes seconds.

The gate compiles its two sides at the same time, in the same order (perf/static/gate.py),
so that the load of the machine falls on both alike. A specialization both sides need is
compiled once: a side claims a key before compiling it (`Claims`, a file beside the cached
metrics), and the other side, finding it claimed, goes on and collects the result at the end.
Before any of that, `probe_targets` finds the targets this Triton cannot compile for at all
(perf/static/probe.py), so they are reported as such instead of failing every kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from perf.errors import ConfigError
from perf.static import metrics as sm
from perf.static.plan import Job

PLAIN_PROGRESS_EVERY_S = 15.0  # CI logs: a line at least this often (the harness's rule for long runs)


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


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and of the children it has waited for
    (ptxas): what a compile costs, whatever else the machine runs meanwhile."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def compile_job(job: Job) -> dict:
    """Compile one job and read its metrics (runs in a worker process)."""
    import triton

    from perf.static import plan

    kernel = getattr(importlib.import_module(job.module), job.qualname)
    start, cpu = time.perf_counter(), cpu_seconds()
    log = io.StringIO()  # triton prints its own `ptxas -v` log (TRITON_DUMP_PTXAS_LOG=1)
    try:
        src = plan.source(kernel, job.signature, job.constexprs, job.attrs)
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=job.target.gpu_target(), options=job.options)
    except Exception as e:  # the compiler's verdict on this kernel for this target
        message = _first_line(e)
        unsupported = "not supported" in message.lower()  # e.g. an fp8 type the arch lacks
        return {"status": "unsupported" if unsupported else "error", "error": message,
                "detail": str(e)[-4000:], "metrics": {}}
    # Outside the try: a metric this driver cannot read is a harness bug, never a kernel's.
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    metrics = sm.metrics_of(compiled, job.target.name, wall, log.getvalue(), compile_cpu_s=cpu)
    return {"status": "ok", "metrics": metrics, "error": ""}


@contextlib.contextmanager
def fresh_triton_cache():
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
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(value, f, sort_keys=True)
            os.replace(tmp, path)
        except OSError as e:
            raise ConfigError(f"--cache-dir {self.root}: cannot write {path} ({e.strerror or e}); choose "
                              f"another --cache-dir, or pass --no-cache") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class Claims:
    """Keys this process is compiling, as `<key>.claim` files (holding its pid) beside the
    cached metrics: two sides compiling at once compile a shared specialization once. A claim
    whose process is gone (killed) is taken over; every claim is released on exit."""

    def __init__(self, cache: DiskCache):
        self.cache, self.held = cache, set()

    def _path(self, key: str) -> str:
        return self.cache._path(key)[: -len(".json")] + ".claim"

    def _owner(self, key: str) -> int | None:
        try:
            with open(self._path(key), encoding="utf-8") as f:
                return int(f.read().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def take(self, key: str) -> bool:
        """True when this process may compile `key` (no cache, or the claim is now ours)."""
        if not self.cache.root:
            return True
        path = self._path(key)
        # the claim appears whole, its pid already in it (a hard link of a written file), so a
        # claim is never seen empty and taken for a dead process's
        mine = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(mine, "w", encoding="utf-8") as f:
                f.write(str(os.getpid()))
        except OSError:
            return True  # cannot claim (read-only cache): compile it here, as without a cache
        try:
            for _ in range(2):
                try:
                    os.link(mine, path)
                except FileExistsError:
                    owner = self._owner(key)
                    if owner is not None and _alive(owner):
                        return False
                    with contextlib.suppress(OSError):  # a dead process's claim
                        os.unlink(path)
                    continue
                except OSError:
                    return True  # no hard links here: compile it, as without a cache
                self.held.add(key)
                return True
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(mine)

    def release(self, key: str) -> None:
        if key in self.held:
            self.held.discard(key)
            with contextlib.suppress(OSError):
                os.unlink(self._path(key))

    def wait(self, key: str, poll: float = 0.1) -> dict | None:
        """The result another process claimed `key` for, once it is cached; None if that
        process let go of it without a result (it failed or was stopped)."""
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
            owner = self._owner(key)
            if owner is None or not _alive(owner):
                return self.cache.get(key)  # released after its put: read once more
            time.sleep(poll)

    def __enter__(self) -> Claims:
        return self

    def __exit__(self, *exc) -> None:
        for key in list(self.held):
            self.release(key)


class PlainProgress:
    """Progress for logs that are not a terminal: one line at least every `every` seconds,
    "compiling 37/255 (sm_90 _static_grid_kernel) 41 s", and one when done."""

    def __init__(self, total: int, label: str = "", every: float = PLAIN_PROGRESS_EVERY_S, stream=None):
        self.total, self.done, self.last = total, 0, ""
        self.prefix = f"{label}: " if label else ""
        self.every, self.stream = every, stream or sys.stderr
        self.start = time.perf_counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _line(self, text: str) -> None:
        print(f"{self.prefix}{text} {time.perf_counter() - self.start:.0f} s", file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                self._line(f"compiling {self.done}/{self.total}" + (f" ({self.last})" if self.last else ""))

    def advance(self, description: str) -> None:
        with self._lock:
            self.done += 1
            self.last = description

    def __enter__(self) -> PlainProgress:
        self._line(f"compiling {self.total} specializations")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._line(f"compiled {self.done}/{self.total}")


class _RichProgress:
    """The rich bar, for a terminal."""

    def __init__(self, total: int, label: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn(f"{label + ': ' if label else ''}compiling"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                                 console=Console(stderr=True))
        self.task = self.progress.add_task("", total=total)

    def advance(self, description: str) -> None:
        self.progress.update(self.task, advance=1, description=description)

    def __enter__(self) -> _RichProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)


class _NoProgress:
    def advance(self, description: str) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress(total: int, label: str = "", quiet: bool = False):
    """Nothing with `quiet`, the rich bar on a terminal, else plain lines every 15 s."""
    if quiet:
        return _NoProgress()
    if sys.stderr.isatty():
        return _RichProgress(total, label)
    return PlainProgress(total, label)


def probe_targets(targets: list, cache: DiskCache) -> dict[str, str]:
    """name -> why this Triton cannot compile for it, for each target whose probe kernel
    (perf/static/probe.py) fails. The probes run in processes of their own, side by side (a
    compiler may abort on a target it does not know); their results are cached by the probe's
    compile key like any job, so a new Triton or ptxas probes again."""
    from perf.process import stop_group
    from perf.static import probe

    out, running = {}, {}
    try:
        with fresh_triton_cache():
            for target in targets:
                try:
                    key = probe.cache_key(target)
                except Exception as e:  # a backend that cannot even take the target
                    out[target.name] = _first_line(e)
                    continue
                hit = cache.get(key)
                if hit is None:
                    running[target.name] = (key, probe.start(target))
                elif hit["status"] != "ok":
                    out[target.name] = hit["error"]
            for name, (key, process) in running.items():
                result = probe.result(process)
                cache.put(key, result)
                if result["status"] != "ok":
                    out[name] = result["error"]
    except BaseException:  # an interrupt: no probe outlives the gate
        for _, process in running.values():
            stop_group(process, grace=0)
        raise
    return out


def _ignore_sigint() -> None:
    """A compile worker leaves Ctrl-C to its parent, which stops the pool (`compile_all`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class TargetPools:
    """Spawned compile workers, one pool per target, so that no process compiles for two targets:
    Triton keeps compiler state per process that one target's compile can leave for the next
    (Triton 3.6.0, 2026-11-27: gfx950 compiled after gfx942 in one process lowered OCP fp8
    conversions in software, 168 VGPRs against 170 alone; tests/static/test_compile_gate.py). Each pool
    starts its workers as jobs come, and a pool whose jobs are all done is closed when another
    target's pool opens (jobs come grouped by target: few idle interpreters); the callers bound
    how many run at once."""

    def __init__(self, workers: int, initializer: Callable | None = None, initargs: tuple = ()):
        self.workers, self.initargs = max(1, workers), initargs
        self.initializer = initializer or _ignore_sigint
        self.pools: dict[str, ProcessPoolExecutor] = {}
        self.submitted: dict[str, list] = {}
        self.closed: list = []  # the worker processes of pools closed early, joined by shutdown()

    def submit(self, fn: Callable, job):
        import multiprocessing

        name = job.target.name
        if name not in self.pools:
            for other, futures in list(self.submitted.items()):
                if all(f.done() for f in futures):
                    pool = self.pools.pop(other)
                    del self.submitted[other]
                    self.closed += list((getattr(pool, "_processes", None) or {}).values())
                    pool.shutdown(wait=False)
            # spawn: a clean interpreter per worker (fork after torch has started threads can hang)
            self.pools[name] = ProcessPoolExecutor(
                max_workers=self.workers, initializer=self.initializer, initargs=self.initargs,
                mp_context=multiprocessing.get_context("spawn"))
            self.submitted[name] = []
        future = self.pools[name].submit(fn, job)
        self.submitted[name].append(future)
        return future

    def shutdown(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True)
        for process in self.closed:
            with contextlib.suppress(Exception):
                process.join(30)

    def stop(self, futures) -> None:
        for pool in self.pools.values():
            stop_pool(pool, futures)


def one_target(jobs) -> bool:
    """Whether `jobs` may compile in this process: all for one target (TargetPools says why)."""
    return len({job.target.name for job in jobs}) <= 1


def stop_pool(pool: ProcessPoolExecutor, futures) -> None:
    """Cancel what has not started and end the workers now (an interrupt or an error)."""
    for future in futures:
        future.cancel()  # here, not in the pool's manager thread: done before the workers go
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(5)


def compile_all(jobs: list[Job], cache: DiskCache, workers: int, quiet: bool = False,
                label: str = "") -> tuple[dict, int]:
    """key -> compile result for every job, in the jobs' order; returns (results, number
    compiled by this process). A job another process has claimed (the other side of the
    gate) is collected from the cache once that process has compiled it."""
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
    with fresh_triton_cache(), progress(len(todo), label, quiet) as bar, Claims(cache) as claims:
        run = _Compiles(todo, cache, claims, bar, results)
        if (workers <= 1 or len(todo) == 1) and one_target(todo):
            def here(job: Job) -> None:
                run.done(job, compile_job(job))

            run.collect(run.claimed(here), here)
        else:
            _in_pools(run, max(1, min(workers, len(todo))))
    return results, run.compiled


class _Compiles:
    """One `compile_all` run's jobs to compile (`todo`), shared with the other side of the gate
    through the metrics cache and its claims: who compiles what, and the results as they come."""

    def __init__(self, todo: list[Job], cache: DiskCache, claims: Claims, bar, results: dict):
        self.todo, self.cache, self.claims, self.bar, self.results = todo, cache, claims, bar, results
        self.compiled = 0  # by this process

    def done(self, job: Job, result: dict, elsewhere: bool = False) -> None:
        """`elsewhere`: compiled in this run by the other side (same compile, not a cached one)."""
        if not elsewhere:
            self.cache.put(job.key, result)
            self.claims.release(job.key)
            self.compiled += 1
        self.results[job.key] = {**result, "cached": False, "other_side": elsewhere}
        self.bar.advance(f"{job.target.name} {job.qualname}")

    def take(self, job: Job) -> bool:
        """Claim `job` to compile it here; False when it cannot be claimed, or when the other
        side cached it and let go between the look at the cache and the claim (then it is
        done, collected from the cache)."""
        if not self.claims.take(job.key):
            return False
        hit = self.cache.get(job.key)
        if hit is not None:
            self.claims.release(job.key)
            self.done(job, hit, elsewhere=True)
            return False
        return True

    def claimed(self, run: Callable[[Job], None]) -> list[Job]:
        """Run every job nobody else compiles; return those another process claimed."""
        elsewhere = []
        for job in self.todo:
            hit = self.cache.get(job.key)  # the other side may have compiled it meanwhile
            if hit is not None:
                self.done(job, hit, elsewhere=True)
            elif self.take(job):
                run(job)
            elif job.key not in self.results:
                elsewhere.append(job)
        return elsewhere

    def collect(self, elsewhere: list[Job], run: Callable[[Job], None]) -> None:
        """Wait for the jobs another process claimed; compile here those it gave up."""
        for job in elsewhere:
            hit = self.claims.wait(job.key)
            if hit is not None:
                self.done(job, hit, elsewhere=True)
            elif self.take(job) or job.key not in self.results:  # given up: compile it here
                run(job)


def _in_pools(run: _Compiles, running: int) -> None:
    """`run`'s jobs compiled in spawned workers (TargetPools), at most `running` at once."""
    pools = TargetPools(running)
    futures: dict = {}

    def drain(limit: int) -> None:
        """Wait until at most `limit` compiles are running, recording those that finished."""
        while len(futures) > limit:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                run.done(futures.pop(future), future.result())

    def in_pool(job: Job) -> None:  # claimed one at a time, as a worker frees up (in order)
        drain(running - 1)
        futures[pools.submit(compile_job, job)] = job

    try:
        elsewhere = run.claimed(in_pool)
        drain(0)
        run.collect(elsewhere, in_pool)
        drain(0)
    except BaseException:  # Ctrl-C, SIGTERM or an error: nothing keeps compiling behind it
        pools.stop(futures)
        raise
    pools.shutdown()


def compile_pairs(jobs: list[Job], workers: int, quiet: bool = False, label: str = "") -> tuple[dict, dict]:
    """Every job compiled twice, cold, the copies one right after the other, so that with two
    or more `workers` they compile side by side as the gate's two sides do: an A/A pair
    (`perf compile-calibrate`). Returns (key -> result of copy A, key -> result of copy B);
    nothing is read from or written to the metrics cache."""
    order = [job for job in jobs for _ in range(2)]
    out: tuple[dict, dict] = ({}, {})
    with fresh_triton_cache(), progress(len(order), label, quiet) as bar:
        def done(i: int, result: dict) -> None:
            out[i % 2][order[i].key] = {**result, "cached": False}
            bar.advance(f"{order[i].target.name} {order[i].qualname}")

        if workers <= 1 and one_target(jobs):
            for i, job in enumerate(order):
                done(i, compile_job(job))
            return out
        workers = max(1, workers)
        pools = TargetPools(workers)
        futures: dict = {}
        try:
            for i, job in enumerate(order):
                while len(futures) >= workers:  # in order: the two copies of a job start together
                    finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for future in finished:
                        done(futures.pop(future), future.result())
                futures[pools.submit(compile_job, job)] = i
            for future in list(futures):
                done(futures.pop(future), future.result())
        except BaseException:
            pools.stop(futures)
            raise
        pools.shutdown()
    return out


def _binaries_into(cache_dir: str) -> None:
    """A precompile worker's environment: Triton's cache is `cache_dir`, binaries and metadata
    only (what a launch loads), every compile real unless already there."""
    _ignore_sigint()
    os.environ.update(TRITON_CACHE_DIR=cache_dir, TRITON_STORE_BINARY_ONLY="1")
    os.environ.pop("TRITON_ALWAYS_COMPILE", None)


def precompile_job(job: Job) -> dict:
    """Compile one job into the worker's Triton cache (a precompile worker's)."""
    import triton

    from perf.static import plan

    kernel = getattr(importlib.import_module(job.module), job.qualname)
    start = time.perf_counter()
    try:
        triton.compile(plan.source(kernel, job.signature, job.constexprs, job.attrs),
                       target=job.target.gpu_target(), options=job.options)
    except Exception as e:  # the GPU run meets it again and reports it on its test
        return {"status": "error", "error": _first_line(e), "seconds": time.perf_counter() - start}
    return {"status": "ok", "error": "", "seconds": time.perf_counter() - start}


def precompile(jobs: list[Job], cache_dir: str, workers: int, quiet: bool = False,
               label: str = "") -> dict[str, dict]:
    """key -> result: every job compiled on this CPU into `cache_dir`, a Triton cache the GPU's
    JIT then reads (binaries only: TRITON_STORE_BINARY_ONLY). A launch on the GPU finds its
    kernel there exactly when its compile key is the job's: the same Triton build, source,
    specialization, options and target (`bind` derives them as the launcher does); anything
    else compiles on the GPU as before, so a miss costs time, never correctness."""
    os.makedirs(cache_dir, exist_ok=True)
    results: dict[str, dict] = {}
    if not jobs:
        return results
    with progress(len(jobs), label, quiet) as bar:
        # every job is submitted at once, so each target's pool gets its share of the workers
        share = -(-max(1, min(workers, len(jobs))) // len({job.target.name for job in jobs}))
        pools = TargetPools(share, _binaries_into, (os.path.abspath(cache_dir),))
        futures = {pools.submit(precompile_job, job): job for job in jobs}
        try:
            for future in futures:
                job = futures[future]
                results[job.key] = future.result()
                bar.advance(f"{job.target.name} {job.qualname}")
        except BaseException:
            pools.stop(futures)
            raise
        pools.shutdown()
    return results
