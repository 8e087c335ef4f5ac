"""Change-point alert: is the newest commit a step slower than the commits before it?

For every variant's (scenario, metric) series of a machine, the newest commit's repeat
medians are compared with those of the WINDOW commits measured before it, pooled, by the
latency gate's own rule (perf.stats + perf.verdicts.latency_verdict, thresholds from
thresholds.yaml with its overrides): FAIL when the ratio of medians exceeds the vendor's
`latency.fail` and the one-sided Mann-Whitney U test gives p < `statistics.alpha`. A FAIL
is an alert: `alert.json` and `alert.md` are written and the command exits 1.

Why this and not asv's step detector: asv's (asv.step_detect, shown on the site under
"Regressions") needs a step to persist for two commits and has one number per commit;
here every commit has repeat medians, so the step at the newest commit is tested the
night it appears, against the same thresholds as a pull request. Caveat: pooling the
window treats its nights as one population, so drift between nights that is larger than
the noise within one overstates significance. Two guards: the ratio threshold, and the
vendor libraries as a control group. They do not change with this repository and are
measured in the same interleaved rounds as the variants, scenario by scenario, so when the
libraries on a scenario got slower at the newest commit (median of their ratios > 1), each
variant's ratio and interval on that scenario are divided by that factor before the
thresholds apply (the note gives the raw ratio); the test's p-value stays the raw one, so
the control can only remove an alert, never make one. Measured on an H200 (2026-11-21,
three runs back to back, perf/asv demo): on the 16-sequence decode scenario every
unchanged variant's graph latency rose 4-6 % and the two SDPA libraries' 5.6 and 5.8 %
(eager alike), which without the control were six false alerts; in an earlier run of 9
scenarios the libraries' eager latency moved by a median x0.90 across all of them with no
such move in the kernels, which is why the control is per scenario and one-sided. Vendor
libraries ("peer:*") are never alerted themselves: they change with the image, not with
this repository.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

from perf.errors import ConfigError
from perf.nightly.history import History
from perf.nightly.selection import PEER_PREFIX
from perf.results import COMPILE_TIME
from perf.verdicts import Finding, Verdict, latency_verdict

# Earlier commits the newest is compared with: a week of nightlies (unmeasured default,
# 2026-11-21). Fewer than MIN_HISTORY earlier commits give no verdict: with 5 repeats per
# commit, 5 against 10 values is the least that can reach p < 0.01 (selection.py).
WINDOW = 7
MIN_HISTORY = 2


@dataclass(frozen=True)
class Settings:
    window: int = WINDOW
    min_history: int = MIN_HISTORY


def detect(history: History, thresholds, settings: Settings = Settings(), vendor: str | None = None,
           ) -> tuple[list[Finding], list[str]]:
    """Findings for the newest commit of `history` (one per variant, scenario, metric) and notes."""
    findings, notes = judge(history.series, [c.sha for c in history.commits], thresholds,
                            vendor or history.vendor, history.gpu, settings, name=history.machine,
                            label=history.latest.short)
    changed = changed_in_window(history, settings)
    if changed:
        notes.append("the environment changed within the window (" + ", ".join(
            f"{k} {o} -> {n}" for k, (o, n) in changed.items()) + "): a step here may be its; the re-measure "
            "runs today's on both sides, so only attribution (perf/nightly/attribute.py) tells")
    return findings, notes


def changed_in_window(history: History, settings: Settings = Settings()) -> dict:
    """The toolchain and environment fields (perf.fingerprint) that differ between the oldest commit
    of the newest commit's window and the newest, from the history's environments."""
    commits = history.commits[-settings.window - 1:]
    return environment_diff(commits[0].environment, commits[-1].environment)


def environment_diff(old: dict | None, new: dict | None) -> dict:
    """Field -> (old, new) of the toolchain and environment fields (perf.fingerprint) that differ
    between two results environments (perf.results.environment). A field one side does not know
    (None: a file from before fingerprints, a library that did not answer) is no change."""
    from perf import fingerprint

    diff = fingerprint.diff(fingerprint.from_environment(old or {}), fingerprint.from_environment(new or {}))
    wanted = fingerprint.TOOLCHAIN_FIELDS + fingerprint.ENVIRONMENT_FIELDS
    return {k: (a, b) for k, (a, b) in diff.items() if k in wanted and a is not None and b is not None}


def judge(series: dict[tuple[str, str, str], dict[str, list[float]]], order: list[str], thresholds,
          vendor: str, gpu: str, settings: Settings = Settings(), name: str = "", label: str = "",
          control: bool = True, cal=False, moves_out: dict | None = None,
          ) -> tuple[list[Finding], list[str]]:
    """The rule of this module's docstring on `series` (key -> id -> repeat medians) whose ids are
    ordered by `order` (commits, or nights: perf/nightly/attribute.py), for the newest id.
    `control=False` keeps the raw ratios (the vendor libraries' move is then evidence of its own,
    not divided out). `name`, `label`: the machine and the newest id, for the notes; `cal`: the
    calibration when the caller has read it already (False: read it here); `moves_out` receives
    the vendor libraries' median ratio per (scenario, metric) (library_control)."""
    from perf import stats
    from perf.thresholds import calibration_for

    vt = thresholds.vendor(vendor)
    if cal is False:
        cal, _ = calibration_for(thresholds, vendor, gpu)
    newest, earlier = order[-1], order[:-1]
    label = label or newest[:8]
    findings: list[Finding] = []
    short_history = 0
    compared: dict[tuple[str, str, str], tuple] = {}
    for key, by_id in series.items():
        if newest not in by_id:
            continue
        window = [s for s in earlier if s in by_id][-settings.window:]
        if len(window) < settings.min_history:
            short_history += not key[0].startswith(PEER_PREFIX)
            continue
        if key[2].startswith(f"{COMPILE_TIME}/"):  # one cold compile a night: the compile rule
            findings.append(compile_finding(thresholds, vendor, key, by_id, window, newest, label))
            continue
        base = [x for s in window for x in by_id[s]]
        c = stats.compare(base, by_id[newest], resamples=vt.statistics.bootstrap,
                          confidence=vt.statistics.confidence)
        compared[key] = (c, len(window))
    moves = library_control({k: c.ratio for k, (c, _) in compared.items()})
    if moves_out is not None:
        moves_out.update(moves)
    for (variant, scenario, metric), (c, n_window) in compared.items():
        if variant.startswith(PEER_PREFIX):
            continue
        d = max(1.0, moves.get((scenario, metric), 1.0)) if control else 1.0  # slowdowns of the libraries
        ratio, lo, hi = c.ratio / d, c.ci_low / d, c.ci_high / d
        t = case_thresholds(thresholds, cal, vendor, (variant, scenario, metric),
                            len(series[(variant, scenario, metric)][newest]))
        verdict, why = latency_verdict(ratio, c.p_slower, c.p_faster, t.warn, t.fail, vt.statistics.alpha)
        note = f"{label} vs {n_window} earlier {'commits' if n_window != 1 else 'commit'}"
        if d > 1.0:
            note += f"; the vendor libraries here got x{d:.3f} slower too, divided out (raw {c.ratio:.3f})"
        findings.append(Finding(
            gate="nightly", vendor=vendor, target=gpu, variant=variant, scenario=scenario, metric=metric,
            base=c.base_median, head=c.head_median, ratio=ratio, ci_low=lo, ci_high=hi,
            p_value=c.p_value, threshold=t.describe(), verdict=verdict,
            note=f"{why}; {note}" if why else note))
    notes = []
    if short_history:
        notes.append(f"{short_history} series have fewer than {settings.min_history} earlier commits on "
                     f"{name}: no verdict yet")
    moved = sorted(k for k, d in moves.items() if d > vt.latency.warn)
    if moved and control:
        notes.append(f"the vendor libraries got slower beyond the warn ratio at {label} on "
                     f"{len(moved)} (scenario, metric) series, divided out of the variants there: the "
                     f"machine or the image moved")
    return findings, notes


def compile_finding(thresholds, vendor: str, key: tuple[str, str, str], by_id: dict[str, list[float]],
                    window: list[str], newest: str, label: str) -> Finding:
    """A compile-time series (perf/nightly/compiletime.py: one cold compile per night, so no
    rank test can reach significance in a window): the newest night against the median of the
    window's, by the static gate's rule (perf.verdicts.compile_time_rule) with its calibrated
    noise (calibration/compile-time.yaml: side-by-side compiles, a lower bound of night-to-night
    noise, so it can only raise a threshold above the floors), the target's vendor's rule."""
    from perf.thresholds import compile_calibration_for
    from perf.verdicts import compile_time_rule

    variant, scenario, metric = key
    target = metric.split("/", 1)[1]
    owner = next((name for name, vt in thresholds.vendors.items()
                  if any(t.name == target for t in vt.targets)), vendor)
    cal, _ = compile_calibration_for(thresholds)
    noise = cal.noise(variant, target) if cal is not None else None
    threshold, verdict_of = compile_time_rule(thresholds.vendor(owner).compile_time, noise,
                                              os.path.relpath(cal.path) if cal is not None else "")
    base = statistics.median([x for s in window for x in by_id[s]])
    head = statistics.median(by_id[newest])
    ratio = head / base if base > 0 else None  # nothing compiled before: no ratio, no verdict
    n = len(window)
    return Finding(gate="nightly", vendor=vendor, target=target, variant=variant, scenario=scenario,
                   metric=metric, base=base, head=head, ratio=ratio, ci_low=None, ci_high=None, p_value=None,
                   threshold=threshold, verdict=verdict_of(ratio) if ratio is not None else Verdict.OK,
                   note=f"cold compile CPU s, {label} vs the median of {n} earlier "
                        f"{'commits' if n != 1 else 'commit'}")


def case_thresholds(thresholds, cal, vendor: str, key: tuple[str, str, str], repeats: int):
    """The warn and fail ratios of a series whose nights have `repeats` repeat medians. The gate's
    calibrated same-process noise for the case (`cal`, where there is one) is a lower bound of
    night-to-night noise, so it can only raise a threshold above the vendor floor."""
    noise = cal.noise(*key, 1, repeats) if cal is not None else None
    return thresholds.latency(vendor, *key, noise=noise)


def library_control(ratios: dict[tuple[str, str, str], float]) -> dict[tuple[str, str], float]:
    """Per (scenario, metric): the median ratio (newest / window) of the vendor libraries
    measured on it, the control of alert.py's docstring."""
    by_key: dict[tuple[str, str], list[float]] = {}
    for (name, scenario, metric), r in ratios.items():
        if name.startswith(PEER_PREFIX) and math.isfinite(r):
            by_key.setdefault((scenario, metric), []).append(r)
    out = {}
    for key, rs in by_key.items():
        rs.sort()
        n = len(rs)
        out[key] = rs[n // 2] if n % 2 else 0.5 * (rs[n // 2 - 1] + rs[n // 2])
    return out


def write(out_dir: str, machine_results: list[dict]) -> tuple[str, str]:
    """alert.json (machine-readable, every machine) and alert.md (what a person reads)."""
    from perf import files
    from perf.report import render_markdown

    doc = {"alert": any(m["alerts"] for m in machine_results), "machines": machine_results}
    json_path = files.write_json(os.path.join(out_dir, "alert.json"), doc)
    parts = []
    for m in machine_results:
        findings = [Finding.from_dict(d) for d in m["findings"]]
        title = f"Nightly change points: {m['gpu']} ({m['machine']}), commit {m['commit'][:8]}"
        parts.append(render_markdown(findings, title, notes=m["notes"]))
    if not parts:
        parts.append("## Nightly change points\n\nNo nightly history found.\n")
    md_path = files.write_text(os.path.join(out_dir, "alert.md"), "\n".join(parts))
    return json_path, md_path


def rules(thresholds, vendor: str) -> dict:
    """What an alert was judged with besides its history: the vendor whose thresholds applied, and
    a digest of thresholds.yaml and the calibration beside it (a changed file judges again)."""
    import glob
    import hashlib
    import json

    from perf.thresholds import CALIBRATION_DIR

    digest = hashlib.sha256(json.dumps(thresholds.raw, sort_keys=True, default=str).encode())
    folder = os.path.join(os.path.dirname(os.path.abspath(thresholds.path)), CALIBRATION_DIR)
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path, "rb") as f:
            digest.update(os.path.basename(path).encode() + b"\0" + f.read())
    return {"vendor": vendor, "thresholds": digest.hexdigest()[:16]}


def machine_alert(history: History, thresholds, settings: Settings = Settings(), vendor: str | None = None,
                  ) -> dict:
    """The alert about `history`'s newest commit as alert.json holds it (machine_result, with its
    `rules`): the one function that computes a night's alert (module docstring)."""
    vendor = vendor or history.vendor
    if vendor not in thresholds.vendors:
        findings, notes = [], [f"{thresholds.path} has no thresholds for vendor {vendor!r} of "
                               f"{history.machine}: no verdicts (pass --vendor nvidia|amd to apply one)"]
    else:
        findings, notes = detect(history, thresholds, settings, vendor=vendor)
    notes += [f"left out of this history: {line}" for line in history.skipped]
    return {**machine_result(history, findings, notes, settings), "rules": rules(thresholds, vendor)}


def stored(history: History, sha: str, settings: Settings, judged: dict) -> dict | None:
    """The alert stored with the night of commit `sha` (History.stored) when it was judged on this
    history as it stood at `sha`, with these settings and `judged` (rules); else None."""
    night = history.stored.get(sha)
    if night is None:
        return None
    try:
        doc = night.alert() or {}
    except ConfigError:  # unreadable: judged again, and written anew by `tonight`
        return None
    shas = [c.sha for c in history.commits]
    shas = shas[:shas.index(sha) + 1]
    for m in doc.get("machines", []):
        if isinstance(m, dict) and m.get("machine") == history.machine and m.get("commit") == sha and \
                m.get("commits") == shas and m.get("window") == settings.window and \
                m.get("min_history") == settings.min_history and m.get("rules") == judged and \
                all(isinstance(m.get(k), list) for k in ("alerts", "findings", "notes")):
            return m
    return None


def tonight(history: History, thresholds, settings: Settings = Settings(), vendor: str | None = None) -> dict:
    """The alert about `history`'s newest commit: the one stored with its night when it was judged
    as this one would be (`stored`), else judged now (`machine_alert`) and stored with the night
    (replacing the machine's part of its alert.json; the attribution state there stays)."""
    from perf.nightly import store

    judged = rules(thresholds, vendor or history.vendor)
    found = stored(history, history.latest.sha, settings, judged)
    if found is not None:
        return found
    result = machine_alert(history, thresholds, settings, vendor)
    night = history.stored.get(history.latest.sha)
    if night is not None:
        try:
            doc = night.alert() or {}
        except ConfigError:
            doc = {}
        machines = [m for m in doc.get("machines", []) if isinstance(m, dict)]
        old = next((m for m in machines if m.get("machine") == history.machine), {})
        if old.get("attribution") and old.get("commit") == result["commit"]:
            result["attribution"] = old["attribution"]
        machines = [*(m for m in machines if m is not old), result]
        store.write_alert(night, {**doc, "alert": any(m.get("alerts") for m in machines),
                                  "machines": machines})
    return result


def machine_result(history: History, findings: list[Finding], notes: list[str], settings: Settings) -> dict:
    alerts = [f for f in findings if f.verdict is Verdict.FAIL]
    return {
        "machine": history.machine, "vendor": history.vendor, "gpu": history.gpu,
        "commit": history.latest.sha, "commits": [c.sha for c in history.commits],
        "window": settings.window, "min_history": settings.min_history,
        "alerts": [f.to_dict() for f in alerts],
        "findings": [f.to_dict() for f in findings], "notes": notes,
    }


def last_good(history: History, thresholds, key: tuple[str, str, str], settings: Settings = Settings(),
              vendor: str | None = None) -> str | None:
    """The last good commit of an alerted series `key` (variant, scenario, metric): the newest
    commit before the history's newest that measured the series and that the alert, run on the
    history as it stood that night, did not FAIL for it (no verdict, with too short a history,
    counts as not failed); None when every earlier commit that measured it failed too.

    Each earlier night's verdict is the alert stored with it (`stored`) where it was judged with
    the same settings and rules; else the alert is replayed, with the same settings and thresholds,
    keeping the vendor libraries of the scenario, so the control applies as it did then. Earlier
    commits that did not measure the series are passed over (no verdict about it was possible there).
    """
    name, scenario, metric = key
    vendor = vendor or history.vendor
    judged = rules(thresholds, vendor)
    measured = history.series.get(key, {})
    for commit in reversed(history.commits[:-1]):
        if commit.sha not in measured:
            continue
        then = stored(history, commit.sha, settings, judged)
        if then is not None:
            failed = any((a.get("variant"), a.get("scenario"), a.get("metric")) == key
                         for a in then["alerts"])
        else:
            findings, _ = detect(history.upto(commit.sha, scenario, metric), thresholds, settings, vendor)
            failed = any(f.verdict is Verdict.FAIL and (f.variant, f.scenario, f.metric) == key
                         for f in findings)
        if not failed:
            return commit.sha
    return None
