"""Process mechanics of every harness process: the error boundary, `entry`, interrupts, and the
child processes a command starts (started, stopped, and given their environment in one place).

The boundary (`boundary`): a ConfigError is its one line on stderr, exit 2 (ContextLost: exit 1);
a missing third-party package is one line naming it and the interpreter to use, exit 2; Ctrl-C or
SIGTERM is one line, exit 130, and the processes the command started are stopped (children run in
process groups of their own: `run_child`); what the machine refused (a full disk, a read-only file
system, a permission: ENVIRONMENT_ERRNOS) is one line naming the path, exit 2; stdout's reader gone
(`| head`) ends quietly, exit 141; any other exception is a bug in the harness:
`internal error: <Type>: <message>`, exit 3. `--debug` or PERF_DEBUG=1 shows the traceback.

Interrupts: one handler, `on_signal`, installed from the package's first import when it runs as
`python -m perf...` (`catch_from_start`, called by perf/__init__.py) and by `entry` otherwise.
An interrupt raised while a module imports can land in C++ that called back into Python
(torch's start-up through pybind11: "terminate called after throwing an instance of
'pybind11::error_already_set' ... KeyboardInterrupt", exit -6, measured at 1.9 s into
`perf compile`), or in C code that clears it (torch's numpy import); and one raised before
`entry` reaches its boundary prints a traceback (a side process of `perf compile`, stopped in
`import perf.git` on a cold start, 2-core CI machine, 2026-11-27). So while a module imports,
or before the boundary, the signal is sent again every DEFER_S seconds, DEFER_MAX times at most,
and raised once neither holds. Every `python -m perf...` module calls `entry`. What an interrupt
cuts half-way (a finalizer of an object it left half-made, a thread) says nothing after it.

Standard library only (with perf.errors): perf/__init__.py imports it before anything else.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import NoReturn

from perf.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout
DEBUG_ENV = "PERF_DEBUG"

# --- interrupts ---------------------------------------------------------------------------------

DEFER_S, DEFER_MAX = 0.2, 100  # up to 20 s of imports (torch's cold start took seconds); unmeasured bound
_interrupted = False  # a signal came: what is raised after it is the interrupt's
_entered = False  # `entry` reached its boundary
_deferred = 0


def interrupted() -> bool:
    """Whether a Ctrl-C or SIGTERM came: what is raised after it is the interrupt's."""
    return _interrupted


def enter() -> None:
    """`entry`'s boundary starts: from here an interrupt outside an import is raised at once."""
    global _entered
    _entered = True


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _debugging() -> bool:
    """--debug or PERF_DEBUG=1: tracebacks and what an interrupt cut half-way are shown."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _quiet_aftermath() -> None:
    """From an interrupt on, what it cut half-way is not reported beside the boundary's one line.
    A KeyboardInterrupt lands at any bytecode, so it can leave an object half-made whose finalizer
    then fails (multiprocessing's `Finalize`, cut between its weak reference and its key: "Exception
    ignored in: <Finalize object, dead> ... no attribute '_key'", from a `perf compile` side stopped
    on the 2-core CI machine, 2026-12-04), or a thread whose shared state it tore down fails in its
    own. Both reach stderr through sys.unraisablehook and threading.excepthook, which say nothing
    after the interrupt; with --debug (PERF_DEBUG) they still speak."""
    if not _debugging():
        sys.unraisablehook = lambda unraisable: None
        threading.excepthook = lambda args: None


def on_signal(signum, frame) -> None:
    global _interrupted, _deferred
    if not _interrupted:
        _quiet_aftermath()
    _interrupted = True
    _forget_resource_tracker()
    if (_importing(frame) or not _entered) and _deferred < DEFER_MAX:
        _deferred += 1
        timer = threading.Timer(DEFER_S, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def catch_from_start() -> None:
    """SIGINT to `on_signal` now, where the process has Python's default handler (not where
    SIGINT is ignored: pool workers ignore it, their side stops them)."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, on_signal)


def take_debug(argv: list[str]) -> tuple[list[str], bool]:
    """`argv` without the global --debug flag (anywhere before a `--`), and whether it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    return kept, len(kept) != len(argv)


# --- the boundary ---------------------------------------------------------------------------

_quiet_interrupt = False  # a worker or side process (entry's `internal`): its parent reports it
# The import name of a third-party package -> what to install (the rest are the same).
PIP_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn"}
OWN_PACKAGES = ("perf", "kernels", "tests")


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _missing_package(e: BaseException) -> str | None:
    """The one line for a third-party package this interpreter lacks, else None."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    top = e.name.split(".")[0]
    if top in OWN_PACKAGES:
        return None
    return (f"error: this Python ({sys.executable}) lacks the package {PIP_NAMES.get(top, top)} (`import "
            f"{e.name}` failed); run perf with the project's interpreter: `nox -s cli -- COMMAND ...` "
            f"(README, Quick start), or install the project into this one: {sys.executable} -m pip install "
            f"-e '.[test]'")


def _caused_by_interrupt(e: BaseException) -> bool:
    """Whether `e` was raised while handling (or because of) a KeyboardInterrupt, e.g. an
    import that Ctrl-C cut short and that failed in another way."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False


def _exit_code(code) -> int:
    """What `sys.exit(code)` means, as an exit code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _say(str(code))
    return 1


# What the machine refused, not the harness's bug: a full disk or quota, a read-only file
# system, a permission. Wherever it is raised (an output, a cache, a log), it is one line naming
# the path, exit 2: the user frees space or chooses another path.
ENVIRONMENT_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                      errno.EROFS: "a read-only file system", errno.EACCES: "permission denied",
                      errno.EPERM: "operation not permitted"}


def _environment_error(e: BaseException) -> str | None:
    """The one line of an OSError the machine caused (ENVIRONMENT_ERRNOS), else None."""
    if not isinstance(e, OSError) or e.errno not in ENVIRONMENT_ERRNOS:
        return None
    where = " -> ".join(os.fsdecode(p) if isinstance(p, (str, bytes)) else str(p)
                        for p in (e.filename, e.filename2) if p is not None)
    return (f"error: {where or 'a file the OS did not name'}: {ENVIRONMENT_ERRNOS[e.errno]}; free space "
            f"or choose another path")


def _stdout_gone() -> bool:
    """Whether this process's stdout is a pipe whose reader went away (`| head`)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return True  # no stdout to ask: the pipe that broke was it


def reader_gone() -> int:
    """The reader of stdout went away (`perf ... | head`): say nothing more on stdout (what is
    still buffered would fail again at exit), exit as a process killed by SIGPIPE would
    (Python's documented handling of SIGPIPE, with the shells' code of coreutils and git)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def boundary(fn: Callable[[], int | None], *, debug: bool = False, quiet_interrupt: bool = False) -> int:
    """Run `fn` and turn whatever it raises into an exit code and at most one line on stderr
    (the module docstring says which); never raises."""
    debug = debug or _debugging()
    quiet_interrupt = quiet_interrupt or _quiet_interrupt
    try:
        code = _exit_code(fn())
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        _forget_resource_tracker()  # before the objects the interrupt unwound die (their finalizers)
        if debug:
            traceback.print_exc()
        if not quiet_interrupt:
            _say("interrupted: stopped; what finished is kept")
        return EXIT_INTERRUPTED
    except Exception as e:
        if debug:
            traceback.print_exc()
        if interrupted() or _caused_by_interrupt(e):
            if not quiet_interrupt:
                _say(f"interrupted: stopped (while {type(e).__name__} was raised); what finished is kept")
            return EXIT_INTERRUPTED
        if isinstance(e, ConfigError):
            _say(f"error: {_one_line(e)}")
            return e.exit_code
        if isinstance(e, BrokenPipeError) and _stdout_gone():
            return reader_gone()
        environment = _environment_error(e)
        if environment:
            _say(environment)
            return EXIT_BAD_INPUT
        missing = _missing_package(e)
        if missing:
            _say(missing)
            return EXIT_BAD_INPUT
        _say(f"internal error: {type(e).__name__}: {_one_line(e)[:500]} (rerun with --debug for the "
             f"traceback)")
        return EXIT_INTERNAL
    if interrupted() and code != EXIT_INTERRUPTED:  # code that caught the interrupt and went on
        if not quiet_interrupt:
            _say("interrupted: stopped; what finished is kept")
        return EXIT_INTERRUPTED
    return code


def entry(main_fn: Callable[[list[str]], int | None], argv: list[str] | None = None, *,
          internal: bool = False) -> NoReturn:
    """What every `if __name__ == "__main__":` of the harness calls: `main_fn(argv)` inside
    the boundary, as the process's owner. SIGTERM is an interrupt like Ctrl-C; on an
    interrupt or a bug, every process this one started is stopped before it exits (stray
    grandchildren are adopted: Linux's child subreaper). `internal`: a worker or side process
    of another command, which says nothing on an interrupt (its parent does)."""
    global _quiet_interrupt
    _quiet_interrupt = internal
    argv, debug = take_debug(list(sys.argv[1:] if argv is None else argv))
    if debug:
        os.environ[DEBUG_ENV] = "1"  # the processes it starts show theirs too
    _adopt_orphans()
    catch_from_start()  # (done already where perf was imported for `python -m`)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_signal)
    enter()
    code = boundary(lambda: main_fn(argv), debug=debug)
    if code in (EXIT_INTERRUPTED, EXIT_INTERNAL):
        for s in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        stop_children()
        # CPython marks a KeyboardInterrupt raised inside exec() of a string (dataclasses does it
        # at import) as unhandled and then dies by SIGINT at exit, whatever we return (measured:
        # exit -2 after this boundary had said "interrupted"); every such exec clears the mark.
        exec("pass", {})  # noqa: S102
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = reader_gone() if code == 0 else code
    except (OSError, ValueError):
        pass
    sys.exit(code)


# --- the processes a command starts -----------------------------------------------------------

def _adopt_orphans() -> None:
    """Linux: this process adopts its descendants whose parent died (PR_SET_CHILD_SUBREAPER),
    so that `stop_children` still finds them."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def is_ancestor(pid: int) -> bool:
    """Whether process `pid` started this one (directly or through others)."""
    here = os.getppid()
    for _ in range(4096):  # a chain longer than any real one: a loop in /proc's answers
        if here == pid:
            return True
        if here <= 1:
            return False
        stat = _proc_stat(here)
        if stat is None:
            return False
        here = stat[0]
    return False


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back while the body runs (the clean-up of something an
    interrupt must not leave half-done: a git worktree), delivered when it ends. The child
    processes the body starts inherit the mask, so a second Ctrl-C does not stop them either."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def descendants(pid: int | None = None) -> list[int]:
    """The live processes whose parent chain leads to `pid` (this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry_ in os.listdir("/proc"):
            if entry_.isdigit():
                stat = _proc_stat(int(entry_))
                if stat is not None and stat[1] != "Z":
                    children.setdefault(stat[0], []).append(int(entry_))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _reap() -> None:
    """Collect the exit status of finished children (adopted ones included)."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _forget_resource_tracker() -> None:
    """From an interrupt on (or its tracker killed), this process's semaphores are still unlinked
    by multiprocessing's finalizers, but without a word to the tracker, which an interrupt may
    have stopped first: a dead one would be relaunched, and the new one print a KeyError
    traceback for each name it never saw (a compile side stopped while its pool's queues were
    alive, 2-core CI, 2026-11-29), or the word meet a closed pipe, a BrokenPipeError traceback
    (the same, later that day, after two fixes of the order in which processes are stopped)."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        tracker.register = tracker.unregister = lambda name, rtype: None


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"resource_tracker" in f.read()
    except OSError:
        return False


def stop_children(grace: float = 3.0) -> None:
    """Stop every descendant of this process: SIGTERM, then SIGKILL after `grace` seconds.
    multiprocessing's resource trackers ignore SIGTERM: they are killed last, once the processes
    they serve have exited, so that those processes' finalizers still reach them (a tracker
    killed first made its owner, a compile side, print a BrokenPipeError traceback at its exit:
    2-core CI, 2026-11-29); this process's own tracker is forgotten before it is killed."""
    pids = descendants()
    trackers = [p for p in pids if _is_resource_tracker(p)]
    pids = [p for p in pids if p not in trackers]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        _reap()
        pids = [p for p in pids if (_proc_stat(p) or (0, "Z"))[1] != "Z"]
        time.sleep(0.05)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    _reap()
    if trackers:
        _forget_resource_tracker()
    for pid in trackers:
        _signal(pid, signal.SIGKILL)
    _reap()


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a child started in a process group of its own (`start_new_session`) and all it
    started: SIGTERM to the child alone, up to `grace` seconds for it to stop what it started
    (`entry` does), then SIGKILL to whatever of the group is left. Not SIGINT, not to the
    group: a Python process still starting up dies of SIGINT with "Fatal Python error:
    init_import_site" and a traceback (a spawn worker of a compile side, 2-core CI,
    2026-11-27), of SIGTERM without a word."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                proc.send_signal(signal.SIGTERM)
            proc.wait(grace)
    except BaseException:  # noqa: S110 (a timeout or a second Ctrl-C: kill below)
        pass
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(5)


def run_child(cmd: list[str], *, timeout: float | None = None, grace: float = 10.0,
              capture_output: bool = False, **popen) -> subprocess.CompletedProcess:
    """`subprocess.run` for a child that may start processes of its own (a compile side with
    its worker pool, pip): it runs in a process group of its own, which an interrupt or a
    timeout here stops as a whole (`stop_group`), so nothing it started outlives it."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=0)
        raise
    except BaseException:
        stop_group(proc, grace)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# --- a child's environment ----------------------------------------------------------------------

# Set in the environment of the processes a command holding outputs starts (child_env): those
# are parts of the command (a compile side, a gate's worker) and write into what it claimed
# (perf.files.check_output), claiming nothing themselves, so two sides of one command never
# refuse each other. A process started otherwise (a test's, another command's) claims its own.
COMMAND_ENV = "PERF_COMMAND_PID"
_holding = False  # this process holds outputs it claimed (perf.files)


def holding_outputs(on: bool) -> None:
    """perf.files says whether this process holds claimed outputs now."""
    global _holding
    _holding = on


def inside_command() -> bool:
    """Whether a process that started this one, through child_env, holds the command's outputs."""
    pid = os.environ.get(COMMAND_ENV, "")
    return pid.isdigit() and int(pid) != os.getpid() and is_ancestor(int(pid))



def child_env(*first: str | None, base: dict | None = None, drop: tuple[str, ...] = (),
              **overrides: str) -> dict:
    """The environment of a child process: `base` (default: this process's) without the
    variables `drop` (TRITON_INTERPRET for a child that compiles), the folders `first` (default:
    this checkout) ahead of its PYTHONPATH, COMMAND_ENV where this process holds its command's
    outputs, and `overrides` on top. The one place a child's PYTHONPATH is made, so every child
    imports the checkout it was meant to."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    paths = [p for p in (first or (ROOT,)) if p]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, env.get("PYTHONPATH")]))
    if _holding:
        env[COMMAND_ENV] = str(os.getpid())
    env.update(overrides)
    return env
