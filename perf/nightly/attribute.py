"""Every step of the nightly attributed to one cause, with its evidence, and one issue per cause.

    python -m perf nightly attribute --data DIR [--machine RUNNER] [--date YYYY-MM-DD]
                                     [--repo OWNER/NAME | --dry-run DIR] [--out results/nightly]

Reads one runner's nights from a checkout of the data branch (perf/nightly/store.py: results,
fingerprint, and the attribution state the night before left in its alert.json), and writes
tonight's state into tonight's alert.json. Night by night:

1. The steps found the night before are judged with tonight (`verdicts.step_held`: tonight
   against the nights before the step, beyond the warn ratio, significant): a step the next
   night keeps gets one cause (`verdicts.step_cause`) from the evidence, in this order: the
   fingerprint diff between the last night before the step and the step's night
   (perf.fingerprint: TOOLCHAIN_FIELDS, ENVIRONMENT_FIELDS); the toolchain A/B (one commit
   under the old and the new Triton, when it changed); the same-process A/B of the step's commit
   and the last good one (when they differ); the vendor libraries (did they move with us?).
   The libraries' own step is kept by the libraries; a step no changed fingerprint explains must
   hold on a second night before it is the environment's (a two-night move is noise).
   A code step is bisected at once within a budget of gate runs (perf/latency/bisect.py's
   search; the range left when the budget is spent).
2. The baseline re-anchors at every step that got a cause and at every confirmed gain (the
   improvement lock): the series' window starts at the step, the nights before it leave it, so
   the cause is reported once and a later loss of the gain is judged against the gain's own
   nights (two of them by then: the alert's least window) the night it happens. A night on
   which a scenario's libraries moved with us and came back is left out of every window of
   that scenario (an outlier of the machine, not a level).
3. Tonight is compared with the week before it (perf.nightly.alert.judge, with its library
   control): our series' steps net of the vendor libraries' move, and the libraries' own move
   beyond the warn ratio as a step of its own (with our series on those scenarios); both wait
   for tomorrow.
4. The creep pass (perf/nightly/creep.py) looks at each series since its last anchor.

The experiments are behind one small interface, `Lab`: production runs the latency gate
(`GateLab`: `perf gate`, `perf gate --toolchain`, `perf bisect`'s step); the replay
(perf/nightly/simulate.py) answers them from its model of the machine. Every cause but noise is
posted through the issue tracker (perf.ci.github.tracker) under a key of its cause, so a cause
seen again, on another runner or another night, updates its issue and never opens a second.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from perf import fingerprint, verdicts
from perf.errors import ConfigError
from perf.nightly import alert
from perf.nightly.selection import PEER_PREFIX

STATE_VERSION = 1
BISECT_BUDGET = 6  # gate runs per bisect: 64 commits between two nights (the nightly's specified default)
PENDING_NIGHTS = 2  # a kept step waits this many nights for its A/Bs before it is left undecided

Key = tuple[str, str, str]  # (variant or peer:library, scenario, metric)


def key_text(key: Key) -> str:
    return "|".join(key)


def key_of(text: str) -> Key:
    v, s, m = text.split("|")
    return (v, s, m)


# --- what the pipeline reads ----------------------------------------------------------------------


@dataclass
class Night:
    """One runner's night: its date, commit, fingerprint and repeat medians per series."""

    date: str
    sha: str
    fingerprint: dict
    series: dict[Key, list[float]]
    state: dict | None = None  # an attribution state given directly (tests); else read from `stored`
    vendor: str = "nvidia"
    gpu: str = ""
    stored: object = None  # its perf.nightly.store.Night


_CACHE: dict[tuple, Night] = {}


def load_nights(data: str, runner: str, upto: str | None = None) -> list[Night]:
    """The runner's nights of the data-branch checkout `data`, oldest first, up to `upto`. Each
    night's results are read once per process (keyed by the file's size and time)."""
    from perf.nightly import store

    out = []
    for n in store.nights(data, runner):
        if upto is not None and n.date > upto:
            break
        st = os.stat(n.results_path)
        cache_key = (n.results_path, st.st_mtime_ns, st.st_size)
        night = _CACHE.get(cache_key)
        if night is None:
            res = n.results()
            env = res.environment
            fp = n.fingerprint() or fingerprint.from_environment(env)
            sha = (res.header.get("nightly") or {}).get("commit") or env.get("commit") or ""
            night = Night(n.date, sha, fp, res.medians(), None, env.get("vendor") or "nvidia",
                          env.get("gpu") or fp.get("gpu_model") or "")
            _CACHE[cache_key] = night
        out.append(Night(night.date, night.sha, night.fingerprint, night.series, None, night.vendor,
                         night.gpu, n))
    return out


def previous_state(nights: list[Night], runner: str) -> dict | None:
    """The attribution state of the newest night before the last that has one (its alert.json)."""
    for night in reversed(nights[:-1]):
        doc = night.stored.alert() if night.stored is not None else None
        mine = [m for m in (doc or {}).get("machines", []) if m.get("machine") == runner]
        if mine and mine[0].get("attribution"):
            return mine[0]["attribution"]
    return None


# --- the experiments ----------------------------------------------------------------------------


class Lab(Protocol):
    """The experiments attribution asks for. Each answers per case a remeasure record
    ({"status": verdicts.CONFIRMED | NOISE | PENDING | INCONCLUSIVE, "ratio", ...})."""

    def remeasure(self, runner: str, good: str, bad: str, cases: list[Key]) -> dict[Key, dict]:
        """The same-process A/B of commit `bad` against `good` in today's environment."""

    def toolchain_ab(self, runner: str, sha: str, old: dict, new: dict, cases: list[Key]) -> dict[Key, dict]:
        """Commit `sha` under the old fingerprint's toolchain against the new one's; status
        CONFIRMED when the new one is slower (the step reproduces)."""

    def commits(self, good: str, bad: str) -> list[str]:
        """The first-parent commits after `good` up to `bad`, oldest first."""

    def bisect_step(self, runner: str, good: str, case: Key) -> Callable:
        """perf.latency.bisect's step for `case` against `good`: commit -> bisect.Step."""


def bisect(lab: Lab, runner: str, good: str, bad: str, case: Key, budget: int = BISECT_BUDGET) -> dict:
    """perf bisect's search over good..bad within `budget` gate runs: once spent, every further
    probe is skipped unmeasured, so the search ends with the range left (git bisect's answer
    when only skipped commits separate the last good one from the first bad one)."""
    from perf.latency import bisect as bisect_mod

    step = lab.bisect_step(runner, good, case)
    runs = [0]

    def budgeted(commit: str):
        if runs[0] >= budget:
            return bisect_mod.Step(commit, bisect_mod.SKIP, note=f"not measured: the budget of {budget} "
                                                                  f"gate runs is spent")
        runs[0] += 1
        return step(commit)

    commits = lab.commits(good, bad)
    if not commits:
        return {"result": "not-slower", "candidates": [], "runs": 0, "first_bad": None}
    out = bisect_mod.search(commits, budgeted)
    first = out.candidates[0] if out.result == "found" else None
    author = getattr(lab, "author", None)  # who wrote a commit, where the lab can say (GateLab)
    return {"result": out.result, "candidates": out.candidates, "runs": runs[0], "first_bad": first,
            "good": good, "bad": bad, **({"author": author(first)} if first and author is not None else {})}


# --- one night -----------------------------------------------------------------------------------


@dataclass
class Settings:
    window: int = alert.WINDOW
    min_history: int = alert.MIN_HISTORY
    bisect_budget: int = BISECT_BUDGET


@dataclass
class Context:
    """What judging a runner's night needs besides its nights."""

    runner: str
    thresholds: object
    lab: Lab
    tracker: object  # perf.ci.github.tracker
    settings: Settings = field(default_factory=Settings)
    calibrations: dict = field(default_factory=dict)  # (vendor, gpu) -> calibration, read once


def empty_state() -> dict:
    return {"version": STATE_VERSION, "anchors": {}, "pending": [], "decided": [], "open": [], "outliers": []}


def adjusted(nights: list[Night], anchors: dict[str, list], outliers: list | None = None,
             ) -> dict[Key, dict[str, list[float]]]:
    """key -> date -> repeat medians since the key's newest anchor (module docstring, 2.): the nights
    before it were at another level, so they leave the key's window instead of being scaled to
    this one (a scale measured with any error would move every later comparison by it). Nights in
    `outliers` ([date, scenario, metric]: a night the whole scenario moved, libraries included, and
    came back from) leave every window of that scenario and metric."""
    out: dict[Key, dict[str, list[float]]] = {}
    since = {k: max(d for d, _ in v) for k, v in anchors.items() if v}
    skip = {tuple(o) for o in outliers or []}
    for n in nights:
        for key, reps in n.series.items():
            if n.date >= since.get(key_text(key), "") and (n.date, key[1], key[2]) not in skip:
                out.setdefault(key, {})[n.date] = list(reps)
    return out


def _compare(series, key: Key, before: list[str], after: list[str], vt) -> object | None:
    """perf.stats.compare of the key's repeats on the nights `after` against those `before`."""
    from perf import stats

    by = series.get(key, {})
    base = [x for d in before if d in by for x in by[d]]
    head = [x for d in after if d in by for x in by[d]]
    if len(base) < 2 or not head:
        return None
    return stats.compare(base, head, resamples=vt.statistics.bootstrap, confidence=vt.statistics.confidence)


def _status(records: dict[Key, dict]) -> str:
    """One status for a step from its cases' records: confirmed if any case is, else the worst
    of pending/inconclusive, else noise."""
    statuses = [r.get("status") for r in records.values()]
    for s in (verdicts.CONFIRMED, verdicts.PENDING, verdicts.INCONCLUSIVE):
        if s in statuses:
            return s
    return verdicts.NOISE if statuses else verdicts.INCONCLUSIVE


@dataclass
class _Judging:
    """Judging tonight (the last of `nights`): the night before's state (`prev`) and tonight's."""

    nights: list[Night]
    ctx: Context
    cal: object  # the calibration of tonight's vendor and GPU (perf.thresholds), or None
    prev: dict
    state: dict

    def __post_init__(self):
        self.tonight, self.dates = self.nights[-1], [n.date for n in self.nights]
        self.by_date = {n.date: n for n in self.nights}
        self.vt = self.ctx.thresholds.vendor(self.tonight.vendor)

    def thresholds_of(self, key: Key):
        reps = len(self.tonight.series.get(key) or [0] * 5)
        return alert.case_thresholds(self.ctx.thresholds, self.cal, self.tonight.vendor, key, reps)


def judge_night(nights: list[Night], ctx: Context) -> dict:
    """Tonight's (the last night's) attribution state; posts tonight's causes as issues."""
    from perf.thresholds import calibration_for

    th, tonight = ctx.thresholds, nights[-1]
    vendor = tonight.vendor
    if (vendor, tonight.gpu) not in ctx.calibrations:
        ctx.calibrations[(vendor, tonight.gpu)] = calibration_for(th, vendor, tonight.gpu)[0]
    prev = next((n.state for n in reversed(nights[:-1]) if n.state is not None), None) or \
        previous_state(nights, ctx.runner) or empty_state()
    state = {**empty_state(), "anchors": {k: list(v) for k, v in prev["anchors"].items()},
             "open": list(prev.get("open", [])), "outliers": list(prev.get("outliers", []))}
    j = _Judging(nights, ctx, ctx.calibrations[(vendor, tonight.gpu)], prev, state)
    _unjudged_outliers(nights, state, ctx.settings.min_history, j.vt.latency.warn)
    for step in prev.get("pending", []):  # 1. yesterday's steps, judged with tonight
        _judge_step(j, step)
    # 3. tonight against the week before it (2., the re-anchoring, happened in step 1)
    _unjudged_outliers(nights, state, ctx.settings.min_history, j.vt.latency.warn)  # step 1 re-anchored
    series = adjusted(nights, state["anchors"], state["outliers"])
    _tonight_steps(j, series)
    _creep(j, series)  # 4.
    _post_causes(j)
    return state


def _judge_step(j: _Judging, step: dict) -> None:
    """One step found the night before, judged with tonight (module docstring, 1.), into j.state."""
    s, state, dates, by_date = j.ctx.settings, j.state, j.dates, j.by_date
    keys = [key_of(k) for k in step["keys"]]
    series = adjusted(j.nights, state["anchors"], state["outliers"])
    i = dates.index(step["night"]) if step["night"] in by_date else None
    if i is None or i == 0:
        return
    before = [d for d in dates[:i] if any(d in series.get(k, {}) for k in keys)][-s.window:]
    after = dates[i:]
    slower = step["direction"] == "slower"
    kept, ratios, keys = _held(j, step, keys, series, before, after)
    if kept:
        step = {**step, "keys": [key_text(k) for k in keys]}
    good, bad, diff = _step_nights(j, step, kept, before, i)
    if not kept and not diff and any(k[0].startswith(PEER_PREFIX) for k in keys):
        # the libraries and we moved together for a night (or two: the step's night and the one that
        # kept it) and came back: those nights of the scenario are outliers of the machine, left
        # out of every later window
        state["outliers"] += [[d, s_, m_] for d in dates[i:-1] for s_, m_ in
                              dict.fromkeys((k[1], k[2]) for k in keys if k[0].startswith(PEER_PREFIX))]
    if not slower:  # a gain: the baseline re-anchors there once it is confirmed (improvement lock)
        if kept:
            _gain(state, j.ctx, series, keys, before, after, step, good, bad, diff)
        return
    _slower(j, step, keys, series, before, after, kept, ratios, good, bad, diff)


def _held(j: _Judging, step: dict, keys: list[Key], series, before: list[str], after: list[str],
          ) -> tuple[bool, dict, list[Key]]:
    """Whether tonight kept the step (most of its judged series still moved: `verdicts.step_held`),
    tonight's ratio of each series, and its series (a kept one gains every series it moved)."""
    vt, tonight = j.vt, j.tonight
    slower = step["direction"] == "slower"
    # the libraries' own move is kept by the libraries: our series beside them that stay moved
    # are a step or a creep of their own, which the alert and the creep pass find by themselves
    judged = [k for k in keys if k[0].startswith(PEER_PREFIX)] if step.get("libraries") else keys
    held, ratios = 0, {}
    for key in keys:
        c = _compare(series, key, before, [tonight.date], vt)
        if c is None:
            continue
        t = j.thresholds_of(key)
        ratios[key_text(key)] = c.ratio
        held += key in judged and verdicts.step_held(c.ratio, c.p_slower, c.p_faster, t.warn,
                                                     vt.statistics.alpha, slower)
    kept = held * 2 >= len(judged) > 0 and tonight.date != step["night"]
    if kept:  # every series the step moved belongs to it, also one the alert saw only warn or ok
        waiting = {k for p in j.prev.get("pending", []) if p is not step for k in p["keys"]}
        for key in series:
            if key in keys or key[0].startswith(PEER_PREFIX) or key_text(key) in waiting:
                continue
            c = _compare(series, key, before, after, vt)
            t = j.thresholds_of(key)
            if c is not None and verdicts.step_held(c.ratio, c.p_slower, c.p_faster, t.warn,
                                                    vt.statistics.alpha, slower):
                keys.append(key)
                ratios[key_text(key)] = c.ratio
    return kept, ratios, keys


def _step_nights(j: _Judging, step: dict, kept: bool, before: list[str], i: int) -> tuple[Night, Night, dict]:
    """The last night before the step, the step's night and what changed between their fingerprints."""
    nights, by_date = j.nights, j.by_date
    good, bad = by_date[before[-1]] if before else nights[i - 1], by_date[step["night"]]
    diff = fingerprint.diff(good.fingerprint, bad.fingerprint)
    if kept and not diff:  # found a night early: the step's own night moved for everyone (one
        # scenario's night-long move) just before a driver or Triton change that the nights which
        # kept it carry: the level they kept is that change's (seeds 5009, 5025), judged on its night
        changed = fingerprint.ENVIRONMENT_FIELDS + fingerprint.TOOLCHAIN_FIELDS
        bad = next((n for n in nights[i + 1:]
                    if any(f in changed for f in fingerprint.diff(bad.fingerprint, n.fingerprint))), bad)
        diff = fingerprint.diff(good.fingerprint, bad.fingerprint)
    return good, bad, diff


def _slower(j: _Judging, step: dict, keys: list[Key], series, before: list[str], after: list[str], kept: bool,
            ratios: dict, good: Night, bad: Night, diff: dict) -> None:
    """A slower step judged with tonight: the experiments, its cause (verdicts.step_cause), its anchor
    and a code step's bisect; or, undecided, pending another night."""
    ctx, state = j.ctx, j.state
    toolchain_changed = any(f in diff for f in fingerprint.TOOLCHAIN_FIELDS)
    old_fp, late = good.fingerprint, False
    if kept and before:  # a kept step found a night late (one scenario's move hid it on the night of
        # a driver or Triton change) still has that change in its window: it came with the step
        first = j.by_date[before[0]].fingerprint
        since = fingerprint.diff(first, bad.fingerprint)
        # a toolchain change only where nothing changed on the step's own night (a driver step
        # after a Triton bump already attributed on other series is the driver's: seed 2013)
        late = not diff and any(f in since for f in fingerprint.TOOLCHAIN_FIELDS)
        wanted = fingerprint.ENVIRONMENT_FIELDS + (fingerprint.TOOLCHAIN_FIELDS if late else ())
        diff = {**{f: v for f, v in since.items() if f in wanted}, **diff}
        old_fp = first if late else old_fp
    environment_changed = any(f in diff for f in fingerprint.ENVIRONMENT_FIELDS)
    code_changed = good.sha != bad.sha
    nights_held = step.get("held", 0) + kept
    evidence = {"fingerprint": {k: list(v) for k, v in diff.items()}, "good_night": good.date,
                "good": good.sha, "bad": bad.sha, "tonight": ratios}
    code_ab = toolchain_ab = None
    if late and code_changed:  # the commits of the step's own night come before a Triton change
        code_ab = _remeasure(ctx, good, bad, keys, evidence)  # earlier in its window (seed 11: an
        # attributed bump was named for a later code step)
    if (toolchain_changed or late) and kept and code_ab != verdicts.CONFIRMED:
        rec = ctx.lab.toolchain_ab(ctx.runner, bad.sha, old_fp, bad.fingerprint, keys)
        toolchain_ab = _status(rec)
        evidence["toolchain_ab"] = {key_text(k): v for k, v in rec.items()}
    toolchain_changed = toolchain_changed or late
    if code_changed and code_ab is None and (kept or not (toolchain_changed or environment_changed)) and \
            toolchain_ab != verdicts.CONFIRMED:
        code_ab = _remeasure(ctx, good, bad, keys, evidence)
    libs = _libraries(series, keys, before, after, j.vt.latency.warn)
    evidence["libraries"] = libs
    cause, why = verdicts.step_cause(
        kept=kept, code_changed=code_changed, code_ab=code_ab, toolchain_changed=toolchain_changed,
        toolchain_ab=toolchain_ab, environment_changed=environment_changed,
        libraries_moved=libs["moved"], nights_held=nights_held)
    record = {**step, "cause": cause, "why": why, "kept": kept, "evidence": evidence,
              "decided": j.tonight.date}
    # undecided: judged again tomorrow, for PENDING_NIGHTS nights (a step the A/B confirms but
    # tonight's night did not keep, e.g. one scenario's night-long move hid it, gets a second look)
    second_look = kept or code_ab == verdicts.CONFIRMED or toolchain_changed or environment_changed
    if cause is None and second_look and step.get("tries", 0) + 1 < PENDING_NIGHTS:
        state["pending"].append({**step, "tries": step.get("tries", 0) + 1, "held": nights_held})
        return
    if cause is not None and kept:  # the experiment that named the cause measured its size best
        by_cause = {verdicts.CODE: "remeasure", verdicts.TOOLCHAIN: "toolchain_ab"}
        measured = evidence.get(by_cause.get(cause, ""))
        _anchor(state, series, keys, before, after, step["night"], measured)
    if cause == verdicts.CODE:
        worst = max(keys, key=lambda k: ratios.get(key_text(k), 0.0))
        record["bisect"] = bisect(ctx.lab, ctx.runner, good.sha, bad.sha, worst, ctx.settings.bisect_budget)
    state["decided"].append(record)


def _tonight_steps(j: _Judging, series) -> None:
    """Tonight against the week before it by the alert's rule, on each series since its anchor (not
    the night's stored alert, which compares commits over the whole window): our steps net of the
    libraries' move, and the libraries' own move as a step of its own, both pending tomorrow."""
    ctx, state, tonight, vt, s = j.ctx, j.state, j.tonight, j.vt, j.ctx.settings
    pending_keys = {k for p in state["pending"] for k in p["keys"]}
    moves: dict = {}
    findings, _ = alert.judge(series, j.dates, ctx.thresholds, tonight.vendor, tonight.gpu,
                              alert.Settings(s.window, s.min_history), name=ctx.runner, label=tonight.date,
                              cal=j.cal, moves_out=moves)
    fails = [f for f in findings if f.verdict is verdicts.Verdict.FAIL]
    slower = [f for f in findings if f.ratio is not None and f.ratio > 1 and f.verdict in
              (verdicts.Verdict.FAIL, verdicts.Verdict.WARN)] if fails else []
    faster = [f for f in findings if f.verdict is verdicts.Verdict.IMPROVED]
    moved = {sm: d for sm, d in moves.items() if d > vt.latency.warn or d < 1 / vt.latency.warn}
    for direction, found in (("slower", slower), ("faster", faster)):
        ours = [key_text((f.variant, f.scenario, f.metric)) for f in found]
        # the libraries' move is a step of its own, judged apart from ours (a code step on a night
        # one scenario moved for everyone stays a code step)
        theirs = [key_text(k) for k in series if (k[1], k[2]) in moved and (moved[(k[1], k[2])] > 1) ==
                  (direction == "slower") and tonight.date in series[k] and key_text(k) not in ours]
        for keys, libraries in ((ours, False), (theirs, True)):
            keys = [k for k in keys if k not in pending_keys]
            if keys:
                state["pending"].append({"night": tonight.date, "sha": tonight.sha, "direction": direction,
                                         "keys": keys, "ratios": {key_text((f.variant, f.scenario, f.metric)):
                                                                  f.ratio for f in found},
                                         **({"libraries": True} if libraries else {})})


def _creep(j: _Judging, series) -> None:
    """The creep pass (perf/nightly/creep.py) over each series since its last anchor."""
    from perf.nightly import creep as creep_mod

    ctx, state, tonight, dates = j.ctx, j.state, j.tonight, j.dates
    pending_keys = {k for p in state["pending"] for k in p["keys"]}
    crept = []
    for key, by in series.items():
        if key[0].startswith(PEER_PREFIX) or key_text(key) in pending_keys:
            continue
        since = max((d for d, _ in state["anchors"].get(key_text(key), [])), default="")
        span = [d for d in dates if d in by and d >= since]
        t = j.thresholds_of(key)
        found = creep_mod.find([statistics.median(by[d]) for d in span], j.vt.latency.warn, t.fail)
        if found is not None:
            crept.append((key, span, found))
    if not crept:
        return
    start = min(span[c.start] for _, span, c in crept)
    span_nights = [d for d in dates if d >= start]
    first = j.by_date[dates[dates.index(start) - 1]] if dates.index(start) > 0 else j.by_date[start]
    record = {"night": tonight.date, "direction": "slower", "keys": [key_text(k) for k, _, _ in crept],
              "cause": verdicts.CREEP, "kept": True, "decided": tonight.date,
              "why": "a persistent level change made of steps each below the alert's floor",
              "ratios": {key_text(k): c.ratio for k, _, c in crept},
              "evidence": {"start": start, "nights": span_nights, "good": first.sha, "bad": tonight.sha,
                           "commits": ctx.lab.commits(first.sha, tonight.sha) if first.sha != tonight.sha
                           else [], "steps": {key_text(k): [[span[i], r] for i, r in c.steps]
                                              for k, span, c in crept}}}
    for key, _, c in crept:
        state["anchors"].setdefault(key_text(key), []).append([tonight.date, c.ratio])
    state["decided"].append(record)


def _post_causes(j: _Judging) -> None:
    """One issue per cause decided tonight (perf/nightly/issues.py), its key and number recorded."""
    from perf.nightly import issues

    ctx, state, tonight = j.ctx, j.state, j.tonight
    for record in state["decided"]:
        if record.get("cause") not in verdicts.ISSUE_CAUSES:
            continue
        record["issue"] = issues.cause_key(record, ctx.runner, tonight.vendor)
        title, body = issues.render_cause(record, ctx.runner, tonight.gpu)
        number = ctx.tracker.upsert(record["issue"], title, body, labels=issues.LABELS + (record["cause"],))
        record["issue_number"] = number
        state["open"].append({"issue": record["issue"], "cause": record["cause"], "keys": record["keys"],
                              "night": record["night"], "ratios": record.get("ratios", {})})


def _remeasure(ctx: Context, good: Night, bad: Night, keys: list[Key], evidence: dict) -> str:
    """The same-process A/B of the step's commit against the last good one: its status, its records
    into `evidence`."""
    rec = ctx.lab.remeasure(ctx.runner, good.sha, bad.sha, keys)
    evidence["remeasure"] = {key_text(k): v for k, v in rec.items()}
    return _status(rec)


def _anchor(state: dict, series, keys: list[Key], before: list[str], after: list[str], night: str,
            measured: dict | None = None) -> None:
    """Re-anchor `keys` at `night` (their window starts there: `adjusted`), recording the step's
    size: the ratio its A/B measured (`measured`: key text -> record) where there is one, else the
    level of the nights since it over the level of the week before it."""
    for key in keys:
        r = (measured or {}).get(key_text(key), {}).get("ratio")
        if r is None:
            by = series.get(key, {})
            b = [x for d in before if d in by for x in by[d]]
            a = [x for d in after if d in by for x in by[d]]
            r = statistics.median(a) / statistics.median(b) if b and a else None
        if r is not None:
            state["anchors"].setdefault(key_text(key), []).append([night, r])


def _gain(state: dict, ctx: Context, series, keys: list[Key], before: list[str], after: list[str], step: dict,
          good: Night, bad: Night, diff: dict) -> None:
    """A gain the next night kept is confirmed by what could cause it: the same-process A/B of the
    two commits finding them faster (the improvement is the code's), or a changed fingerprint;
    the baseline then re-anchors there. Without either it is one of the nights' moves: no anchor."""
    record = {**step, "cause": "gain", "kept": True, "evidence": {"fingerprint": {k: list(v) for k, v in
                                                                                   diff.items()}}}
    measured = None
    if good.sha != bad.sha:
        measured = {key_text(k): v for k, v in ctx.lab.remeasure(ctx.runner, good.sha, bad.sha, keys).items()}
        record["evidence"]["remeasure"] = measured
        confirmed = [k for k, v in measured.items() if v.get("verdict") == verdicts.Verdict.IMPROVED.value]
    else:
        confirmed = []
    if not confirmed and not diff:
        state["decided"].append({**record, "cause": None, "why": "a gain neither the A/B nor the fingerprint "
                                 "explains: one of the nights' moves, no anchor"})
        return
    _anchor(state, series, keys, before, after, step["night"], measured if confirmed else None)
    state["decided"].append({**record, "why": "a confirmed gain: the baseline re-anchors there (improvement "
                             "lock)"})
    _close_restored(state, ctx, keys, step)


def _unjudged_outliers(nights: list[Night], state: dict, min_history: int, warn: float) -> None:
    """Add to state["outliers"] each night-long move of a scenario that the alert could not judge.

    The pending-step rule (step 1) finds a scenario's one-night move of kernels and libraries
    together only once the alert has flagged that night, which needs `min_history` nights before
    it since the series' anchor. A move on one of a window's first nights (a runner's second
    night, the night after an anchor) is never flagged, stays in the window, and a window of two
    nights is then half that move: the next normal night reads as a step of about half the move,
    the libraries with it (replay seed 199: -5.6 % on a runner's second night, then an
    `environment` issue on its third). The same definition applies here: the scenario's
    libraries (their median) beyond the warn ratio from both the night before and the night after,
    the same way, those two within the warn ratio of each other, and the fingerprint the same on
    the three nights."""
    series = adjusted(nights, state["anchors"], state["outliers"])
    by_date = {n.date: n for n in nights}
    known = {tuple(o) for o in state["outliers"]}
    lib: dict[tuple[str, str], dict[str, list[float]]] = {}  # (scenario, metric) -> night -> medians
    early: dict[tuple[str, str], set[str]] = {}  # nights some window of the scenario cannot judge yet
    for key, by in series.items():
        sm = (key[1], key[2])
        early.setdefault(sm, set()).update(sorted(by)[1:min_history])
        if key[0].startswith(PEER_PREFIX):
            for d, reps in by.items():
                lib.setdefault(sm, {}).setdefault(d, []).append(statistics.median(reps))
    bound = math.log(warn)
    for sm, by in lib.items():
        days = sorted(by)
        level = {d: math.log(statistics.median(by[d])) for d in days}
        for a, d, b in zip(days, days[1:], days[2:]):
            up, down = level[d] - level[a], level[d] - level[b]
            if (d in early[sm] and (d, *sm) not in known and abs(up) > bound and abs(down) > bound
                    and (up > 0) == (down > 0) and abs(level[b] - level[a]) < bound
                    and not fingerprint.diff(by_date[a].fingerprint, by_date[d].fingerprint)
                    and not fingerprint.diff(by_date[d].fingerprint, by_date[b].fingerprint)):
                state["outliers"].append([d, *sm])
                known.add((d, *sm))


def _libraries(series, keys: list[Key], before: list[str], after: list[str], warn: float) -> dict:
    """The vendor libraries on the step's scenarios and metrics, over the same nights: their
    median ratio beside ours, and whether they moved with us (beyond the warn ratio, same way)."""
    ours, theirs = [], []
    for key in keys:
        by = series.get(key, {})
        b = [x for d in before if d in by for x in by[d]]
        a = [x for d in after if d in by for x in by[d]]
        if b and a:
            ours.append(statistics.median(a) / statistics.median(b))
    wanted = {(k[1], k[2]) for k in keys}
    for key, by in series.items():
        if key[0].startswith(PEER_PREFIX) and (key[1], key[2]) in wanted:
            b = [x for d in before if d in by for x in by[d]]
            a = [x for d in after if d in by for x in by[d]]
            if b and a:
                theirs.append(statistics.median(a) / statistics.median(b))
    ours_r = statistics.median(ours) if ours else math.nan
    theirs_r = statistics.median(theirs) if theirs else math.nan
    moved = bool(theirs) and math.isfinite(ours_r) and (
        (ours_r > 1 and theirs_r > warn) or (ours_r < 1 and theirs_r < 1 / warn))
    return {"ours": ours_r, "libraries": theirs_r, "moved": moved}


def _close_restored(state: dict, ctx: Context, keys: list[Key], step: dict) -> None:
    """A kept gain that brings an open cause's cases back to their level closes its issue."""
    gained = {key_text(k) for k in keys}
    for cause in list(state["open"]):
        if cause["cause"] != verdicts.CODE or not set(cause["keys"]) <= gained:
            continue
        back = [step["ratios"].get(k, 1.0) * cause["ratios"].get(k, 1.0) for k in cause["keys"]]
        if back and all(abs(math.log(r)) < math.log(1.03) for r in back):
            ctx.tracker.close(cause["issue"], f"Back at its level since {step['night']} (commit "
                                              f"{step.get('sha', '')[:10]}): closed by the nightly.")
            state["open"].remove(cause)


def with_state(doc: dict | None, runner: str, sha: str, state: dict) -> dict:
    """An alert.json document (perf/nightly/alert.py's, or a night's) with `state` as the runner's
    `attribution`, everything else in it kept."""
    doc = dict(doc or {})
    machines = [m for m in doc.get("machines", []) if isinstance(m, dict)]
    mine = next((m for m in machines if m.get("machine") == runner), None)
    rest = [m for m in machines if m is not mine]
    mine = {**(mine or {"machine": runner, "commit": sha, "alerts": []}), "attribution": state}
    return {**doc, "alert": bool(doc.get("alert")), "machines": [*rest, mine]}


def attribute(data: str, ctx: Context, date: str | None = None, alert_json: str | None = None) -> dict:
    """Judge night `date` (default: the runner's newest) and write its state into its alert.json
    on the data checkout, and into `alert_json` (the alert's alert.json, which `perf nightly save`
    commits as the night's) when given and it is about tonight's commit."""
    from perf.nightly import store

    nights = load_nights(data, ctx.runner, date)
    if not nights or (date is not None and nights[-1].date != date):
        raise ConfigError(f"--data {data}: no night {date or ''} of runner {ctx.runner}; pass --machine and "
                          f"--date of a night saved by `python -m perf nightly save`")
    state = judge_night(nights, ctx)
    tonight = nights[-1]
    stored = tonight.stored.alert() if tonight.stored is not None else None
    store.write_night(data, ctx.runner, tonight.date, None, None,
                      with_state(stored, ctx.runner, tonight.sha, state))
    if alert_json and os.path.exists(alert_json):
        from perf import files

        doc = files.load_json(alert_json, "alert.json", "run `python -m perf alert` again")
        if any(m.get("machine") == ctx.runner and m.get("commit") == tonight.sha
               for m in doc.get("machines", []) if isinstance(m, dict)):
            files.write_json(alert_json, with_state(doc, ctx.runner, tonight.sha, state))
    return state


# --- production: the latency gate behind the Lab interface --------------------------------------------


class GateLab:
    """The experiments run by the latency gate in this checkout (`repo`), outputs under `out`."""

    def __init__(self, repo: str, out: str, thresholds_path: str, suite: str = "nightly", github_repo=None):
        self.repo, self.thresholds_path, self.suite = repo, thresholds_path, suite
        self.github_repo = github_repo  # OWNER/NAME, where commits' authors are asked for their account
        self.out = os.path.abspath(out)

    def _gate(self, cases: list[Key], folder: str, **options):
        """The latency gate of `cases` (perf/latency/request.py), its output in `folder`."""
        from perf.latency.request import GateRequest

        return GateRequest.of_cases(cases, suite=self.suite, thresholds=self.thresholds_path, out=folder,
                                    **options)

    def remeasure(self, runner, good, bad, cases):
        from perf.nightly import confirm

        folder = os.path.join(self.out, "remeasure", runner, f"{bad[:8]}-vs-{good[:8]}")
        gate = self._gate(cases, folder, base_ref=good, head_ref=bad,
                          all_cases=True)  # a re-measure needs a ratio as evidence (confirm.py)
        run = confirm.Run(runner, "", bad, good, list(cases), folder, gate)
        return confirm.execute([run], self.repo, confirm.run_in_process)

    def toolchain_ab(self, runner, sha, old, new, cases):
        from perf.nightly import confirm

        if not old.get("triton") or old.get("triton") == new.get("triton"):
            why = "only Triton can be installed beside this one (perf/toolchain.py): torch is not A/B-tested"
            return {k: {"status": verdicts.INCONCLUSIVE, "note": why} for k in cases}
        folder = os.path.join(self.out, "toolchain-ab", runner, f"{sha[:8]}-triton-{old['triton']}")
        # the step's commit, not this checkout's: commits may have landed since the step's night
        gate = self._gate(cases, folder, toolchain=f"triton=={old['triton']}", head_ref=sha)
        rc = confirm.run_in_process(gate, self.repo)
        found = _findings(folder)
        return {k: {"status": verdicts.toolchain_status(found.get(k)), "exit": rc,
                    "ratio": 1 / found[k].ratio if found.get(k) and found[k].ratio else None,
                    "command": gate.command_line()} for k in cases}

    def author(self, sha: str) -> dict | None:  # the mention in a code cause's issue (GitHub: --repo)
        from perf.nightly.issues import commit_author
        return commit_author(sha, self.repo, self.github_repo)

    def commits(self, good, bad):
        from perf.git import first_parent_range

        return [sha for sha, _ in first_parent_range(self.repo, good, bad)]  # Lab.commits: shas

    def bisect_step(self, runner, good, case):
        from perf.latency import bisect as bisect_mod
        from perf.latency.request import GateRequest

        variant, scenario, metric = case
        cwd = os.getcwd()

        def step(commit: str):  # perf bisect GOOD COMMIT's own plan, so its steps land where it puts them
            os.chdir(self.repo)
            try:
                plan = bisect_mod.make_plan(good, commit, scenario, variant, metric,
                                            out=os.path.join(self.out, "bisect", runner),
                                            gate=GateRequest(thresholds=self.thresholds_path))
                return bisect_mod.gate_step(plan)(commit)
            finally:
                os.chdir(cwd)

        return step


def _findings(folder: str) -> dict:
    path = os.path.join(folder, "findings.json")
    if not os.path.exists(path):
        return {}
    _, found = verdicts.load_findings(path)
    return {(f.variant, f.scenario, f.metric): f for f in found}


# --- command line ------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`perf nightly attribute`'s own options; --data, --machine, --out, --suite, --thresholds,
    --repo and --dry-run are the nightly's (perf/nightly/__init__.py, heartbeat.py)."""
    g = p.add_argument_group("attribute (perf/nightly/attribute.py)")
    g.add_argument("--date", default=None,
                   help="attribute: the night, YYYY-MM-DD (default: the runner's newest)")
    g.add_argument("--bisect-budget", type=int, default=BISECT_BUDGET,
                   help=f"attribute: gate runs a code step's bisect may take (default: {BISECT_BUDGET})")


def runners_of(args: argparse.Namespace, root: str) -> list[str]:
    """The runners attributed: --machine, else the machine of each results file `perf nightly run`
    copied into --out for this commit (the night `perf nightly save` will commit)."""
    from perf import git
    from perf.nightly import store

    if args.machine:
        return [args.machine]
    sha, _ = git.head_commit(root)
    found = [store.tonight(path).runner for path in store.find_tonight(args.out, sha)]
    if not found:
        raise ConfigError(f"--out {args.out}: no results of commit {sha[:8]} (*-{sha[:8]}.jsonl) to name the "
                          f"runner by; pass --machine RUNNER, or run `python -m perf nightly run` first")
    return list(dict.fromkeys(found))


def action_main(args: argparse.Namespace, conf: dict) -> int:
    """`perf nightly attribute`: attribute each runner's newest night (or --date) of the --data
    checkout; its state into the night's alert.json there and into --out's alert.json (which
    `perf nightly save` commits), its issues to GitHub or, with --dry-run DIR, into DIR."""
    from perf.ci import github
    from perf.nightly import store
    from perf.thresholds import load_thresholds

    if not args.data:
        raise ConfigError("nightly attribute: pass --data DIR, a checkout of the data branch "
                          "(`python -m perf nightly checkout --data DIR`)")
    store.check_data(args.data)
    root = conf["_root"]
    runners = runners_of(args, root)
    tracker = github.tracker(args.repo, args.dry_run, journal=True)  # a folder: earlier nights' closes too
    lab = GateLab(root, os.path.join(args.out, "attribution"), os.path.abspath(args.thresholds),
                  args.suite or "nightly", args.repo or os.environ.get("GITHUB_REPOSITORY"))
    th = load_thresholds(args.thresholds)
    for runner in runners:
        ctx = Context(runner, th, lab, tracker, Settings(args.window, args.min_history, args.bisect_budget))
        state = attribute(args.data, ctx, args.date, os.path.join(args.out, "alert.json"))
        for r in state["decided"]:
            print(f"{runner} {r['night']}: {r['cause'] or 'undecided'} ({len(r['keys'])} series): {r['why']}"
                  + (f" -> issue {r['issue']}" if r.get("issue") else ""), flush=True)
        for r in state["pending"]:
            print(f"{runner} {r['night']}: a step {r['direction']} on {len(r['keys'])} series, judged "
                  f"tomorrow", flush=True)
    return 0


if __name__ == "__main__":  # `python -m perf.nightly.attribute ARGS`: `python -m perf nightly attribute ARGS`
    from perf.cli import main
    from perf.process import entry

    entry(lambda argv: main(["nightly", "attribute", *argv]))
