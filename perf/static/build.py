"""Compile the planned jobs: worker processes, a fresh Triton cache, a disk cache of metrics.

Every job is compiled with `triton.compile(ASTSource(...), target=GPUTarget(...))` on this
CPU, in `--jobs` spawned processes, with Triton's own cache pointed at a throwaway
directory so compile times are real; perf/static/metrics.py reads the result. Metrics are
kept in .perf-cache/compile/ by the job's cache key, so base and head share unchanged
kernels and a rerun takes seconds. Before any of that, `probe_targets` finds the targets
this Triton cannot compile for at all (perf/static/probe.py), so they are reported as such
instead of failing every kernel.
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
from concurrent.futures import ProcessPoolExecutor, as_completed

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
    from perf.cli import stop_group
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


def _stop_pool(pool: ProcessPoolExecutor, futures) -> None:
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
    with fresh_triton_cache(), progress(len(todo), label, quiet) as bar:

        def done(job: Job, result: dict) -> None:
            cache.put(job.key, result)
            results[job.key] = {**result, "cached": False}
            bar.advance(f"{job.target.name} {job.qualname}")

        if workers <= 1 or len(todo) == 1:
            for job in todo:
                done(job, compile_job(job))
        else:
            import multiprocessing

            # spawn: a clean interpreter per worker (fork after torch has started threads can hang)
            pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), initializer=_ignore_sigint,
                                       mp_context=multiprocessing.get_context("spawn"))
            futures: dict = {}
            try:
                for job in todo:
                    futures[pool.submit(compile_job, job)] = job
                for future in as_completed(futures):
                    done(futures[future], future.result())
            except BaseException:  # Ctrl-C, SIGTERM or an error: nothing keeps compiling behind it
                _stop_pool(pool, futures)
                raise
            pool.shutdown(wait=True)
    return results, len(todo)
