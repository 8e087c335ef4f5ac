"""Ctrl-C during `python -m perf compile`: exit 130, one line, and no process it started left.

The static gate runs a side process per checkout, each with spawn workers of a process pool
and multiprocessing's resource tracker, and probe processes; an interrupt used to leave the
workers and the tracker orphaned. SIGINT goes to the command's process alone (as `kill -INT`
does; a terminal's Ctrl-C reaches the whole group, which is the easier case) after a random
1-5 s: during start-up and imports, while the base worktree is checked out, or while the
side compiles. Every process seen below the command while it ran must be gone after it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads processes from /proc"),
              pytest.mark.slow]  # starts processes


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _below(root: int) -> dict[int, str]:
    """pid -> start time of every live process whose parent chain leads to `root`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None and s[0] != "Z":
            children.setdefault(int(s[1]), []).append(int(entry))
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            s = _stat(child)
            if s is not None:
                found[child] = s[19]
                todo.append(child)
    return found


def _still_running(seen: dict[int, str]) -> list[str]:
    """The processes of `seen` still alive (same pid and start time), with their command lines."""
    alive = []
    for pid, started in seen.items():
        s = _stat(pid)
        if s is not None and s[0] != "Z" and s[19] == started:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace")
                alive.append(f"{pid}: {line[:200]}")
            except OSError:
                pass
    return alive


@pytest.mark.parametrize("window", [(1.0, 2.5), (3.5, 5.0)], ids=["starting", "compiling"])
def test_sigint_to_compile_exits_130_and_leaves_no_process(window, tmp_path):
    delay = random.uniform(*window)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PERF_DEBUG")}
    env["PYTHONPATH"] = ROOT
    cmd = [sys.executable, "-m", "perf", "compile", "--suite", "smoke", "--variants", "naive,qblock",
           "--targets", "sm_90,gfx942", "--jobs", "2", "--no-cache", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, str] = {}
    start = time.monotonic()
    try:
        while time.monotonic() - start < delay:
            seen.update(_below(proc.pid))
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        while proc.poll() is None and time.monotonic() - stopped < 30:
            seen.update(_below(proc.pid))
            time.sleep(0.02)
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, f"after {delay:.2f} s: exit {proc.returncode}\n{err[-3000:]}"
    lines = [x for x in err.splitlines() if x.startswith(("interrupted", "error", "internal", "Traceback"))]
    assert lines == ["interrupted: stopped; what finished is kept"], err[-3000:]
    assert "Traceback" not in err
    deadline = time.monotonic() + 3  # SIGKILLed ones may take a moment to be reaped
    while (alive := _still_running(seen)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"after SIGINT at {delay:.2f} s ({len(seen)} processes seen): {alive}"
    # how promptly: no bound on the clock here (a loaded machine would race it); a stop that
    # waited for the queued compiles would outlast the 30 s above, and the pool's own test
    # checks that they are cancelled


# A command's module imports for seconds on a cold start before its `entry` runs; SIGINT comes
# 0.3 s into 1.5 s of an import or of the module's own code. `as_m`: perf imported as
# `python -m perf...` imports it.
_IMPORTING = """
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "as_m":
    sys.argv[0] = "-m"
import perf
from perf import cli, process
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
if sys.argv[4] == "import":
    import slow_module
else:
    time.sleep(1.5)
process.entry(lambda argv: time.sleep(10), [], internal=sys.argv[3] == "internal")
"""


@pytest.mark.parametrize("where", ["import", "module_code"])
@pytest.mark.parametrize("internal", [True, False], ids=["side", "command"])
def test_sigint_during_the_imports_before_entry_ends_in_the_boundary(internal, where, tmp_path):
    """No traceback from an interrupt that lands in what a `python -m perf...` module runs
    before `entry`, its imports or its own code (a side process of `perf compile` printed
    KeyboardInterrupt from `import perf.git`, 2-core CI, 2026-11-27): the package's import
    installs the boundary's handler, which waits for `entry`; then a side exits 130 without a
    word, a command with the boundary's one line. Imported otherwise (as a library) nothing
    changes: the control run shows the traceback the test would catch."""
    (tmp_path / "slow_module.py").write_text("import time\ntime.sleep(1.5)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PERF_DEBUG")}
    env["PYTHONPATH"] = ROOT
    side = "internal" if internal else "command"

    def run(mode):
        return subprocess.run([sys.executable, "-c", _IMPORTING, str(tmp_path), mode, side, where], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
    done = run("as_m")
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    expected = [] if internal else ["interrupted: stopped; what finished is kept"]
    assert [x for x in done.stderr.splitlines() if x.strip()] == expected, done.stderr[-2000:]
    control = run("library")
    assert control.returncode != 0 and "KeyboardInterrupt" in control.stderr, control.stderr[-2000:]


def test_an_interrupted_compile_pool_cancels_its_queue_and_ends_its_workers():
    """What a compile side does on Ctrl-C (perf.static.build): nothing keeps compiling behind
    it, instead of `with ProcessPoolExecutor` waiting for every queued job."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from perf.static import build

    pool = ProcessPoolExecutor(max_workers=2, initializer=build._ignore_sigint,
                               mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(time.sleep, 30) for _ in range(10)]
    while not all(p.is_alive() for p in (pool._processes or {}).values()) or len(pool._processes or {}) < 2:
        time.sleep(0.05)
    workers = [w.pid for w in pool._processes.values()]
    build.stop_pool(pool, futures)
    # by /proc: the pool's manager thread may reap a worker first, and is_alive() then says True
    deadline = time.monotonic() + 5
    while any((s := _stat(w)) is not None and s[0] != "Z" for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if (s := _stat(w)) is not None and s[0] != "Z"]
    # two running, one handed to the workers' queue (concurrent.futures' EXTRA_QUEUED_CALLS): the
    # rest never started
    assert sum(f.cancelled() for f in futures) >= len(futures) - 3


# A side process holding a spawn-context semaphore (registered with multiprocessing's resource
# tracker) is interrupted after its tracker has gone: the order in which an interrupt stops a
# command's processes. `stopped`: the tracker killed and reaped first.
_TRACKER_GONE = """
import multiprocessing, os, signal, sys
sys.path.insert(0, sys.argv[1])
from perf import process
from multiprocessing import resource_tracker

def main(argv):
    lock = multiprocessing.get_context("spawn").Lock()  # registered: unlinked by a finalizer at exit
    tracker = resource_tracker._resource_tracker._pid
    os.kill(tracker, signal.SIGKILL)
    os.waitpid(tracker, 0)
    raise KeyboardInterrupt

process.entry(main, [], internal=sys.argv[2] == "internal")
"""


@pytest.mark.parametrize("internal", [True, False], ids=["side", "command"])
def test_an_interrupted_process_whose_resource_tracker_went_first_exits_without_a_traceback(internal):
    """Its semaphores are unlinked at exit without telling the gone tracker: telling it printed a
    BrokenPipeError traceback from a compile side (2-core CI, 2026-11-29), or relaunched a tracker
    that printed a KeyError for every name it never saw."""
    proc = subprocess.run([sys.executable, "-c", _TRACKER_GONE, ROOT, "internal" if internal else "command"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr[-3000:]
    expected = "" if internal else "interrupted: stopped; what finished is kept\n"
    assert proc.stderr == expected, proc.stderr[-3000:]
