"""The nightly history of one machine: its per-commit results files, in commit order.

Each nightly writes one perf results file per commit measured (perf/nightly/collect.py)
into `<asv results_dir>/<machine>/perf-nightly/<sha>.jsonl`; re-measuring a commit
replaces its file, like asv replaces its result. The same files are kept on the data branch
(perf/nightly/store.py), one per runner and night: `load_data` reads a checkout of it, where
the newest night of a commit measured on several nights stands for it, and every night's
fingerprint is kept (`History.nights`, what the dashboard compares night to night).
Commits are ordered by committer date (then measurement time), which is the order of main's
first-parent history for a nightly that follows one branch.

A history is one machine's: every file read by perf.results.load (the one results reader)
and of the GPU, vendor and interpreter of its newest readable file (perf.files.IDENTITY).
A file that cannot be read (cut, corrupt, another schema) or was measured elsewhere is left
out of the series, never silently: it is listed in `History.skipped`, said on stderr and
shown in alert.md and on the dashboard, and the rest of the history stays usable (one bad
night does not stop the nightly's report and alerts).
"""

from __future__ import annotations

import glob
import math
import os
import sys
from dataclasses import dataclass, field

from perf.errors import ConfigError
from perf.nightly.selection import PEER_PREFIX


@dataclass
class Commit:
    sha: str
    date: str  # committer date, ISO 8601
    measured: str  # when the nightly measured it
    environment: dict  # perf.results environment (GPU, driver, clocks, torch, triton)
    absent_peers: dict = field(default_factory=dict)  # vendor library -> why it was not measured
    suite: str = ""  # the suite the nightly selected its scenarios from (perf/suites.yaml)

    @property
    def short(self) -> str:
        return self.sha[:8]


@dataclass(frozen=True)
class NightPrint:
    """One night of the data branch as the dashboard compares it: its day, commit, fingerprint."""

    date: str  # YYYY-MM-DD
    sha: str
    fingerprint: dict | None


@dataclass
class History:
    """One machine's series: (name, scenario, metric) -> sha -> repeat medians (ms)."""

    machine: str
    commits: list[Commit]
    series: dict[tuple[str, str, str], dict[str, list[float]]]
    notes: dict[tuple[str, str], str]  # (name, scenario) -> skip/error reason at the newest commit
    skipped: list[str] = field(default_factory=list)  # "path: why" of each file left out (module doc)
    nights: list[NightPrint] = field(default_factory=list)  # the data branch's nights, oldest first

    @property
    def vendor(self) -> str:
        return self.commits[-1].environment.get("vendor") or "unknown"

    @property
    def gpu(self) -> str:
        return self.commits[-1].environment.get("gpu") or "unknown GPU"

    @property
    def latest(self) -> Commit:
        return self.commits[-1]

    def upto(self, sha: str, scenario: str | None = None, metric: str | None = None) -> History:
        """This history as it stood when `sha` was the newest commit, optionally only the series
        (variants and vendor libraries) of one scenario and metric: what the alert saw that night."""
        shas = [c.sha for c in self.commits]
        commits = self.commits[:shas.index(sha) + 1]
        keep = {c.sha for c in commits}
        series = {k: {s: v for s, v in by_sha.items() if s in keep} for k, by_sha in self.series.items()
                  if (scenario is None or k[1] == scenario) and (metric is None or k[2] == metric)}
        return History(self.machine, commits, series, {})

    def names(self, peers: bool | None = None) -> list[str]:
        """Variants (peers=False), vendor libraries (True) or both (None), in first-seen order."""
        seen: dict[str, None] = {}
        for name, _, _ in self.series:
            if peers is None or name.startswith(PEER_PREFIX) == peers:
                seen.setdefault(name, None)
        for name, _ in self.notes:
            if peers is None or name.startswith(PEER_PREFIX) == peers:
                seen.setdefault(name, None)
        return list(seen)

    def scenarios(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, scenario, _ in self.series:
            seen.setdefault(scenario, None)
        return list(seen)

    def metrics(self) -> list[str]:
        return sorted({m for _, _, m in self.series}, key=lambda m: (m != "graph", m))

    def value(self, name: str, scenario: str, metric: str, sha: str | None = None) -> float:
        """Median of the repeat medians at `sha` (default: the newest commit); NaN if none."""
        reps = self.series.get((name, scenario, metric), {}).get(sha or self.latest.sha)
        if not reps:
            return math.nan
        s = sorted(reps)
        n = len(s)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    def best_peer(self, scenario: str, metric: str, sha: str | None = None) -> tuple[str | None, float]:
        """The fastest vendor library on `scenario` at `sha`: (name, ms), (None, NaN) if none ran."""
        best: tuple[str | None, float] = (None, math.nan)
        for name in self.names(peers=True):
            v = self.value(name, scenario, metric, sha)
            if math.isfinite(v) and not (best[0] is not None and best[1] <= v):
                best = (name, v)
        return best


def _load_commit(path: str):
    from perf import results

    res = results.load(path, warn=False)
    head = res.header
    env = res.environment
    nightly = head.get("nightly") or {}
    sha = nightly.get("commit") or env.get("commit") or os.path.basename(path).split(".")[0]
    commit = Commit(sha=sha, date=nightly.get("commit_date") or env.get("time") or "",
                    measured=env.get("time") or "", environment=env,
                    absent_peers=dict(head.get("peers_absent") or {}), suite=str(head.get("suite") or ""))
    return commit, res


def identity(env: dict) -> dict:
    """What makes a file another machine's (perf.files.IDENTITY; the interpreter as a bool)."""
    from perf import files

    return {k: bool(env.get(k)) if k == "interpreter" else env.get(k) for k in files.IDENTITY}


def load_machine(folder: str, machine: str, unreadable: list[str] | None = None) -> History | None:
    """The history in `folder` (one machine's perf-nightly folder); None if it holds no readable
    file (those it holds are then added to `unreadable`). Files left out are listed in
    `skipped` (module docstring)."""
    return load_files(sorted(glob.glob(os.path.join(folder, "*.jsonl"))), machine, unreadable)


def load_files(paths: list[str], machine: str, unreadable: list[str] | None = None) -> History | None:
    """The history of one machine's results files `paths` (load_machine)."""
    loaded, skipped = [], []
    for path in paths:
        try:
            loaded.append(_load_commit(path))
        except ConfigError as e:
            message = str(e)
            skipped.append(message if message.startswith(path) else f"{path}: {message}")
    loaded.sort(key=lambda cr: (cr[0].date, cr[0].measured))
    if loaded:
        newest = identity(loaded[-1][0].environment)
        kept = []
        for commit, res in loaded:
            other = identity(commit.environment)
            if other != newest:
                skipped.append(f"{res.path}: measured on {other['gpu']} ({other['vendor']}"
                               f"{', interpreter' if other['interpreter'] else ''}), this history is "
                               f"{newest['gpu']}'s ({newest['vendor']}); move it to its machine's folder")
            else:
                kept.append((commit, res))
        loaded = kept
    if not loaded:
        if unreadable is not None:
            unreadable.extend(skipped)
        return None
    series: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for commit, res in loaded:
        for key, medians in res.medians().items():
            series.setdefault(key, {})[commit.sha] = medians
    notes = {(r["variant"], r["scenario"]): r["reason"] for r in loaded[-1][1].skips()}
    return History(machine, [c for c, _ in loaded], series, notes, skipped)


def newest_environment(folder: str) -> dict | None:
    """The environment of the newest readable file of a machine's history folder (what a new
    night must match unless forced); None when the folder holds none."""
    h = load_machine(folder, os.path.basename(os.path.dirname(folder)))
    return h.latest.environment if h is not None else None


def load_all(results_dir: str, unreadable: list[str] | None = None) -> list[History]:
    """Every machine's history under asv's results folder, by machine name; the files of machines
    left without a readable one go to `unreadable`."""
    out = []
    for folder in sorted(glob.glob(os.path.join(results_dir, "*", "perf-nightly"))):
        machine = os.path.basename(os.path.dirname(folder))
        h = load_machine(folder, machine, unreadable)
        if h is not None:
            out.append(h)
    return out


def load_data(data: str, unreadable: list[str] | None = None) -> list[History]:
    """Every runner's history on a checkout `data` of the data branch (perf/nightly/store.py),
    by runner: a commit measured on several nights is its newest night's; every night's
    fingerprint is in `History.nights`."""
    from perf.nightly import store

    store.check_data(data)
    out = []
    for runner in store.runners(data):
        nights = store.nights(data, runner)
        newest: dict[str, str] = {}  # sha -> results path of its newest night
        prints = []
        for night in nights:
            try:
                res = night.results()
            except ConfigError as e:
                (unreadable if unreadable is not None else []).append(str(e))
                continue
            try:
                fp = night.fingerprint()
            except ConfigError as e:  # the measurements stand; the night's environment is unknown
                (unreadable if unreadable is not None else []).append(str(e))
                fp = None
            sha = (res.header.get("nightly") or {}).get("commit") or res.environment.get("commit") or ""
            newest[sha] = night.results_path
            prints.append(NightPrint(night.date, sha, fp))
        h = load_files(list(newest.values()), runner, unreadable)
        if h is not None:
            h.nights = prints
            out.append(h)
    return out


def say_skipped(histories: list[History], unreadable: list[str]) -> None:
    """Every file left out of a history, one warning line each on stderr (never silently)."""
    for h in histories:
        for line in h.skipped:
            print(f"warning: {line}; left out of machine {h.machine}'s history", file=sys.stderr, flush=True)
    for line in unreadable:
        print(f"warning: {line}; left out of the nightly history", file=sys.stderr, flush=True)
