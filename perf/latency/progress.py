"""Progress of a run of measuring processes (the gate's, the calibration's), on stderr.

On a terminal a rich progress bar; in a CI log a plain line per event and at least every
HEARTBEAT_S seconds, so a long gate never looks hung.
"""

from __future__ import annotations

import sys
import threading
import time

HEARTBEAT_S = 15.0  # a plain progress line at least this often when not on a terminal


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
