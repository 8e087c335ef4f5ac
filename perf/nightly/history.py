"""The nightly history of one machine: the store's nights (perf/nightly/store.py), in commit order.

The one store of the nightly is the data branch's layout, `nights/<runner>/<date>/` (a checkout
of the branch with `--data DIR`, else the local folder of the same layout, store.local). This
module only reads it: `load_data` gives every runner's history, where the newest night of a
commit measured on several nights stands for it (`History.stored` names that night, whose
alert.json holds the alert about it), and every night's fingerprint is kept (`History.nights`,
what the dashboard compares night to night). Commits are ordered by committer date (then
measurement time), which is the order of main's first-parent history for a nightly that follows
one branch.

A history is one machine's: every file read by perf.results.load (the one results reader)
and of the GPU, vendor and interpreter of its newest readable file (perf.files.IDENTITY).
A night that cannot be read (cut, corrupt, another schema) or was measured elsewhere is left
out of the series, never silently: it is listed in `History.skipped`, said on stderr and
shown in alert.md and on the dashboard, and the rest of the history stays usable (one bad
night does not stop the nightly's report and alerts).
"""

from __future__ import annotations

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
    stored: dict = field(default_factory=dict)  # sha -> the store.Night whose results stand for it

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
        whole = scenario is None and metric is None  # only then is its alert the night's (alert.stored)
        return History(self.machine, commits, series, {},
                       stored={s: n for s, n in self.stored.items() if s in keep} if whole else {})

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


def _commit(res) -> Commit:
    """The commit a results file (perf.results.Results) measured, with its environment."""
    from perf.nightly import store

    head, env = res.header, res.environment
    nightly = head.get("nightly") or {}
    sha = store.commit_of(res) or os.path.basename(res.path).split(".")[0]
    return Commit(sha=sha, date=nightly.get("commit_date") or env.get("time") or "",
                  measured=env.get("time") or "", environment=env,
                  absent_peers=dict(head.get("peers_absent") or {}), suite=str(head.get("suite") or ""))


def identity(env: dict) -> dict:
    """What makes a file another machine's (perf.files.IDENTITY; the interpreter as a bool)."""
    from perf import files

    return {k: bool(env.get(k)) if k == "interpreter" else env.get(k) for k in files.IDENTITY}


def _history(machine: str, loaded: list, skipped: list[str]) -> History | None:
    """The history of one machine's read results `loaded` ((Commit, Results) pairs); files of
    another GPU, vendor or interpreter than the newest's join `skipped` (module docstring)."""
    loaded = sorted(loaded, key=lambda cr: (cr[0].date, cr[0].measured))
    if not loaded:
        return None
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
    series: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for commit, res in kept:
        for key, medians in res.medians().items():
            series.setdefault(key, {})[commit.sha] = medians
    notes = {(r["variant"], r["scenario"]): r["reason"] for r in kept[-1][1].skips()}
    return History(machine, [c for c, _ in kept], series, notes, skipped)


def load_data(data: str, unreadable: list[str] | None = None) -> list[History]:
    """Every runner's history in the store `data` (perf/nightly/store.py), by runner, each
    night's results read once: a commit measured on several nights is its newest night's; every
    night's fingerprint is in `History.nights`. A night that cannot be read is in its runner's
    `skipped`, or in `unreadable` where no night of the runner can be read."""
    from perf.nightly import store

    store.check_data(data)
    out = []
    for runner in store.runners(data):
        newest: dict[str, tuple] = {}  # sha -> (Commit, Results, store.Night) of its newest night
        prints, skipped = [], []
        for night in store.nights(data, runner):
            try:
                res = night.results()
            except ConfigError as e:
                skipped.append(str(e))
                continue
            try:
                fp = night.fingerprint()
            except ConfigError as e:  # the measurements stand; the night's environment is unknown
                skipped.append(str(e))
                fp = None
            commit = _commit(res)
            newest[commit.sha] = (commit, res, night)
            prints.append(NightPrint(night.date, commit.sha, fp))
        h = _history(runner, [(c, r) for c, r, _ in newest.values()], skipped)
        if h is None:
            (unreadable if unreadable is not None else []).extend(skipped)
            continue
        h.nights = prints
        h.stored = {sha: night for sha, (_, _, night) in newest.items()}
        out.append(h)
    return out


def say_skipped(histories: list[History], unreadable: list[str]) -> None:
    """Every file left out of a history, one warning line each on stderr (never silently)."""
    for h in histories:
        for line in h.skipped:
            print(f"warning: {line}; left out of machine {h.machine}'s history", file=sys.stderr, flush=True)
    for line in unreadable:
        print(f"warning: {line}; left out of the nightly history", file=sys.stderr, flush=True)
