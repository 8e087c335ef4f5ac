"""A gate's ledger, gate.json in its --out: what the gate is and which measuring processes finished.

The same command run again resumes from it (perf/latency/ab.py); another gate's measurements
in that folder are replaced (another machine's only with --force, perf.files.guard_measured);
results without a ledger are refused. Its identity (perf/latency/ab.py `_identity`) holds the
commits, the head's uncommitted kernels, the settings, the cases timed and the machine.
"""

from __future__ import annotations

import contextlib
import os
import sys

from perf import files, why
from perf.change import latency as changes
from perf.errors import ConfigError

LEDGER = "gate.json"
SIDE_FILES = ("base.jsonl", "head.jsonl")
# what a finished gate leaves beside its results: removed when another gate starts over there,
# so that no earlier gate's findings are read as this one's
OUTPUTS = ("findings.json", "report.md", "ratios.png", changes.PLAN_FILE, why.WHY_FILE, "why.md")
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
