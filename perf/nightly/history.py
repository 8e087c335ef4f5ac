"""The nightly history of one machine: its per-commit results files, in commit order.

Each nightly writes one perf results file per commit measured (perf/nightly/collect.py)
into `<asv results_dir>/<machine>/perf-nightly/<sha>.jsonl`; re-measuring a commit
replaces its file, like asv replaces its result. Commits are ordered by committer date
(then measurement time), which is the order of main's first-parent history for a nightly
that follows one branch.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import dataclass, field

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


@dataclass
class History:
    """One machine's series: (name, scenario, metric) -> sha -> repeat medians (ms)."""

    machine: str
    commits: list[Commit]
    series: dict[tuple[str, str, str], dict[str, list[float]]]
    notes: dict[tuple[str, str], str]  # (name, scenario) -> skip/error reason at the newest commit

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

    res = results.load(path)
    head = res.header
    env = res.environment
    nightly = head.get("nightly") or {}
    sha = nightly.get("commit") or env.get("commit") or os.path.basename(path).split(".")[0]
    commit = Commit(sha=sha, date=nightly.get("commit_date") or env.get("time") or "",
                    measured=env.get("time") or "", environment=env,
                    absent_peers=dict(head.get("peers_absent") or {}), suite=str(head.get("suite") or ""))
    return commit, res


def load_machine(folder: str, machine: str) -> History | None:
    """The history in `folder` (one machine's perf-nightly folder); None if it holds no file."""
    loaded = [_load_commit(p) for p in sorted(glob.glob(os.path.join(folder, "*.jsonl")))]
    if not loaded:
        return None
    loaded.sort(key=lambda cr: (cr[0].date, cr[0].measured))
    series: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for commit, res in loaded:
        for key, medians in res.medians().items():
            series.setdefault(key, {})[commit.sha] = medians
    notes = {(r["variant"], r["scenario"]): r["reason"] for r in loaded[-1][1].skips()}
    return History(machine, [c for c, _ in loaded], series, notes)


def load_all(results_dir: str) -> list[History]:
    """Every machine's history under asv's results folder, by machine name."""
    out = []
    for folder in sorted(glob.glob(os.path.join(results_dir, "*", "perf-nightly"))):
        machine = os.path.basename(os.path.dirname(folder))
        h = load_machine(folder, machine)
        if h is not None:
            out.append(h)
    return out
