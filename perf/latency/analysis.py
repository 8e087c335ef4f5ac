"""From results files to findings: pair the rounds, apply the statistics and the thresholds.

`pairs` reads the gate's base.jsonl and head.jsonl (perf/latency/worker.py) back into
paired rounds per case and process; `paired_findings` turns them into one `Finding` per
(variant, scenario, metric): ratio, interval and test from perf/stats.py at the process
level, thresholds from perf/thresholds.py (calibrated noise when calibration/<vendor>.yaml
covers the case on this GPU, the vendor's defaults otherwise, overrides on top), verdict
from perf/verdicts.py, and the smallest slowdown the case would catch (`min_detectable`).
`unpaired_findings` does what is possible for two results files of separate processes
(`perf compare`): ratio of medians and Mann-Whitney U, uncalibrated thresholds only. With
`by_process=True` (the toolchain A/B: each side in its own processes, several per side) the
same statistics apply at the unit of independence: each process contributes one value per
case (the geometric mean of its round medians), so a per-process offset is noise, not data.
Both then apply the wrong-output rule (`perf.verdicts.wrong_output`) to every case whose
output a side recorded as wrong (perf/measure/check.py), timed or not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from perf import results as results_mod
from perf import stats
from perf.measure import check
from perf.thresholds import Calibration, Thresholds
from perf.verdicts import Finding, Verdict, latency_verdict, wrong_output

POWER = 0.95  # the power `min_detectable` is stated at


@dataclass
class CasePairs:
    """Paired rounds of one (variant, scenario, metric): process id -> [(repeat, base, head)]."""

    rounds: dict[str, list[tuple[int, float, float]]] = field(default_factory=lambda: defaultdict(list))

    def groups(self) -> list[np.ndarray]:
        """Each process's paired log ratios, in round order."""
        return [stats.log_ratios([b for _, b, _ in sorted(v)], [h for _, _, h in sorted(v)])
                for _, v in sorted(self.rounds.items()) if v]

    def side(self, i: int) -> list[float]:
        return [r[i] for v in self.rounds.values() for r in v]

    @property
    def processes(self) -> int:
        return sum(1 for v in self.rounds.values() if v)

    @property
    def mean_rounds(self) -> float:
        sizes = [len(v) for v in self.rounds.values() if v]
        return float(np.mean(sizes)) if sizes else 0.0


Key = tuple[str, str, str]


def pairs(base: results_mod.Results, head: results_mod.Results, processes: set[str] | None = None,
          keys: set[Key] | None = None) -> dict[Key, CasePairs]:
    """Paired rounds: a base and a head record of the same case, round and process."""
    def index(res):
        out = {}
        for r in res.measurements():
            proc = r.get("process")
            if proc is None or (processes is not None and proc not in processes):
                continue
            out[(r["variant"], r["scenario"], r["metric"], proc, r["repeat"])] = r["median"]
        return out

    b, h = index(base), index(head)
    found: dict[Key, CasePairs] = {}
    for k, bv in b.items():
        if k in h and (keys is None or k[:3] in keys):
            found.setdefault(k[:3], CasePairs()).rounds[k[3]].append((k[4], bv, h[k]))
    return found


def _reasons(res: results_mod.Results) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in res.skips():
        out.setdefault((r["variant"], r["scenario"]), []).append(r)
    return out


def _reason(reasons: dict, key: Key) -> dict:
    """The recorded reason a case was not measured on one side ({} if none): a reason naming
    a metric ("graph: ...") applies to that metric only, errors before skips."""
    mine = [r for r in reasons.get(key[:2], [])
            if r["reason"].startswith(f"{key[2]}:") or r["reason"].split(":", 1)[0] not in ("eager", "graph")]
    return next((r for r in mine if r["kind"] == "error"), mine[0] if mine else {})


def judge_outputs(findings: list[Finding], base: results_mod.Results,
                  head: results_mod.Results) -> list[Finding]:
    """Each finding under the wrong-output rule: the wrong outputs either side recorded for it."""
    rb, rh = _reasons(base), _reasons(head)

    def wrong(reasons: dict, f: Finding) -> list[str]:
        mine = reasons.get((f.variant, f.scenario), [])
        return [r["reason"] for r in mine if check.is_wrong(r["reason"], f.metric)]
    return [wrong_output(f, {"base": wrong(rb, f), "head": wrong(rh, f)}) for f in findings]


def _missing(row: dict, b, h, why_b: dict, why_h: dict) -> Finding:
    """The finding of a case without paired measurements: which side could not run it."""
    kb, kh = why_b.get("kind"), why_h.get("kind")  # None: that side prepared it fine
    if kh == "error":
        verdict, note = ((Verdict.WARN, f"broken on both sides: {why_h['reason']}") if kb == "error"
                         else (Verdict.FAIL, f"broken on head: {why_h['reason']}"))
    elif kh is not None:
        verdict, note = ((Verdict.WARN, f"not measured on head: {why_h['reason']}") if kb is None
                         else (Verdict.OK, f"skipped on both sides: {why_h['reason']}"))
    elif kb is not None:
        verdict, note = Verdict.OK, f"new on head (base: {why_b['reason']})"
    elif b and not h:
        verdict, note = Verdict.WARN, "not measured on head: no record"
    elif h and not b:
        verdict, note = Verdict.OK, "new on head (base: no record)"
    else:
        verdict, note = Verdict.WARN, "no paired measurement on either side and no reason recorded"
    return Finding(**row, base=float(np.median(b)) if b else None, head=float(np.median(h)) if h else None,
                   ratio=None, ci_low=None, ci_high=None, p_value=None, verdict=verdict, note=note)


def _all_keys(base: results_mod.Results, head: results_mod.Results, measured: set[Key],
              metrics: list[str]) -> list[Key]:
    keys = set(measured)
    for res in (base, head):
        for r in res.measurements():
            keys.add((r["variant"], r["scenario"], r["metric"]))
    for pair in set(_reasons(base)) | set(_reasons(head)):  # unmeasured cases still get a row
        for m in metrics:
            keys.add((*pair, m))
    return sorted(keys)


def side_values(res: results_mod.Results, processes: set[str] | None = None) -> dict[Key, list[float]]:
    out: dict[Key, list[float]] = {}
    for r in res.measurements():
        if processes is None or r.get("process") in processes:
            out.setdefault((r["variant"], r["scenario"], r["metric"]), []).append(r["median"])
    return out


def process_values(res: results_mod.Results, processes: set[str] | None = None) -> dict[Key, list[float]]:
    """One value per case and process: the geometric mean of that process's round medians."""
    logs: dict[Key, dict[str, list[float]]] = {}
    for r in res.measurements():
        proc = r.get("process")
        if proc is not None and (processes is None or proc in processes):
            key = (r["variant"], r["scenario"], r["metric"])
            logs.setdefault(key, {}).setdefault(proc, []).append(math.log(r["median"]))
    return {k: [math.exp(float(np.mean(v))) for _, v in sorted(by.items())] for k, by in logs.items()}


def threshold_for(th: Thresholds, vendor: str, cal: Calibration | None, key: Key, processes: int,
                  rounds: float):
    """(threshold, calibrated variance of one process mean or None, its df)."""
    case = cal.case(*key) if cal is not None else None
    if case is None:
        return th.latency(vendor, *key), None, None
    r = max(1, int(round(rounds)))
    noise = math.sqrt(case.variance(r) / max(1, processes))
    return (th.latency(vendor, *key, noise=noise, bias=case.side_bias()), case.variance(r),
            float(case.processes - 1))


def paired_findings(base: results_mod.Results, head: results_mod.Results, th: Thresholds, vendor: str,
                    cal: Calibration | None, processes: set[str] | None = None,
                    keys: set[Key] | None = None) -> list[Finding]:
    """One finding per case seen on either side (module docstring)."""
    vt = th.vendor(vendor)
    s = vt.statistics
    target = head.environment.get("gpu") or "?"
    found = pairs(base, head, processes, keys)
    vb, vh = side_values(base, processes), side_values(head, processes)
    rb, rh = _reasons(base), _reasons(head)
    metrics = sorted({k[2] for k in (*vb, *vh)}) or ["eager"]
    findings = []
    for key in _all_keys(base, head, set(found), metrics):
        if keys is not None and key not in keys:
            continue
        variant, scenario, metric = key
        row = dict(gate="latency", vendor=vendor, target=target, variant=variant, scenario=scenario,
                   metric=metric)
        case = found.get(key)
        if case is None or case.processes == 0:
            t = th.latency(vendor, *key)
            findings.append(_missing({**row, "threshold": t.describe()}, vb.get(key), vh.get(key),
                                     _reason(rb, key), _reason(rh, key)))
            continue
        t, cal_var, cal_df = threshold_for(th, vendor, cal, key, case.processes, case.mean_rounds)
        c = stats.paired(case.groups(), calibrated_var=cal_var, calibrated_df=cal_df,
                         resamples=s.bootstrap, confidence=s.confidence)
        verdict, note = latency_verdict(c.ratio, c.p_slower, c.p_faster, t.warn, t.fail, s.alpha)
        extra = (f"{c.n_processes} processes x {c.n_pairs / c.n_processes:.3g} rounds; noise: {c.noise}"
                 + ("" if t.calibrated else "; uncalibrated default threshold"))
        mde = stats.min_detectable(c.se, t.fail, s.alpha, c.df, POWER, attempts=1 + s.retries)
        findings.append(Finding(**row, base=float(np.median(case.side(1))),
                                head=float(np.median(case.side(2))), ratio=c.ratio, ci_low=c.ci_low,
                                ci_high=c.ci_high, p_value=c.p_value,
                                threshold=f"{t.describe()} ({t.source})", verdict=verdict,
                                note=f"{note}; {extra}" if note else extra,
                                min_detectable=stored_detectable(mde)))
    return judge_outputs(findings, base, head)


def stored_detectable(mde: float) -> float | None:
    """A case's smallest detectable slowdown as a findings file holds it: None where the noise
    is not finite (nothing is known), capped at the largest ratio a findings file holds
    (perf.schema.RATIO), beyond which no physical slowdown is seen either. An interpreter A/A of
    two processes on a loaded machine once came to a finite value past that bound, which the
    gate's own reader then refused (2-core CI machine, 2026-11-29)."""
    from perf import schema

    return min(mde, schema.RATIO[1]) if math.isfinite(mde) else None


def unpaired_findings(base: results_mod.Results, head: results_mod.Results, th: Thresholds,
                      vendor: str, processes: set[str] | None = None, keys: set[Key] | None = None,
                      by_process: bool = False) -> list[Finding]:
    """Two sides measured in separate processes: ratio of medians, bootstrap interval and
    Mann-Whitney U over repeat medians, or with `by_process` over process means (module
    docstring); `processes` and `keys` narrow it as in `paired_findings`."""
    vt = th.vendor(vendor)
    target = head.environment.get("gpu") or "?"
    values = process_values if by_process else side_values
    mb, mh = values(base, processes), values(head, processes)
    rb, rh = _reasons(base), _reasons(head)
    metrics = sorted({k[2] for k in (*mb, *mh)}) or ["eager"]
    caveat = ("processes of one side against the other's (one Triton per process): a per-process offset "
              "is noise here" if by_process else
              "unpaired: one process per side, a per-process offset counts as a change")
    findings = []
    for key in _all_keys(base, head, set(mb) & set(mh), metrics):
        if keys is not None and key not in keys:
            continue
        variant, scenario, metric = key
        t = th.latency(vendor, *key)
        row = dict(gate="latency", vendor=vendor, target=target, variant=variant, scenario=scenario,
                   metric=metric, threshold=f"{t.describe()} ({t.source})")
        b, h = mb.get(key), mh.get(key)
        if not (b and h):
            findings.append(_missing(row, b, h, _reason(rb, key), _reason(rh, key)))
            continue
        c = stats.compare(b, h, vt.statistics.bootstrap, vt.statistics.confidence)
        verdict, note = latency_verdict(c.ratio, c.p_slower, c.p_faster, t.warn, t.fail, vt.statistics.alpha)
        if by_process:
            note = f"{note}; " if note else ""
            note += f"{c.n_base} vs {c.n_head} processes"
        findings.append(Finding(**row, base=c.base_median, head=c.head_median, ratio=c.ratio, ci_low=c.ci_low,
                                ci_high=c.ci_high, p_value=c.p_value, verdict=verdict,
                                note=f"{note}; {caveat}" if note else caveat))
    return judge_outputs(findings, base, head)
