"""Ctrl-C and SIGTERM in the harness's processes: one handler, `on_signal`, installed from the
package's first import when it runs as `python -m perf...` (`catch_from_start`, called by
perf/__init__.py) and by `perf.cli.entry` otherwise; `perf.cli.boundary` turns what it raises
into exit 130 and one line (none from a side process).

An interrupt raised while a module imports can land in C++ that called back into Python
(torch's start-up through pybind11: "terminate called after throwing an instance of
'pybind11::error_already_set' ... KeyboardInterrupt", exit -6, measured at 1.9 s into
`perf compile`), or in C code that clears it (torch's numpy import); and one raised before
`entry` reaches its boundary prints a traceback (a side process of `perf compile`, stopped in
`import perf.git` on a cold start, 2-core CI machine, 2026-11-27). So while a module imports,
or before the boundary, the signal is sent again every DEFER_S seconds, DEFER_MAX times at most,
and raised once neither holds. Every `python -m perf...` module calls `entry`.
"""

from __future__ import annotations

import os
import signal
import threading

DEFER_S, DEFER_MAX = 0.2, 100  # up to 20 s of imports (torch's cold start took seconds); unmeasured bound
_interrupted = False  # a signal came: what is raised after it is the interrupt's
_entered = False  # `entry` reached its boundary
_deferred = 0


def interrupted() -> bool:
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


def on_signal(signum, frame) -> None:
    global _interrupted, _deferred
    _interrupted = True
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
