"""Verdicts: one `Finding` per (gate, vendor, target, variant, scenario, metric).

Every gate reports findings and every verdict rule is here: `latency_verdict` for the
latency gate, `wrong_output` for a timed case whose output was wrong, `static_findings`,
`compile_time_finding` and `target_finding` for the static gate (perf/static/).
The report renders them and `exit_code` turns them into the process's status (0 pass,
warnings allowed; 1 regression or wrong result; 2 bad input, raised as ConfigError, and
findings that compared nothing: `NothingMeasured`, never a pass). `load_findings` is the one
reader of findings files (the gates' findings.json).

Latency rule, the same in both directions: a change *fails* (or counts as *improved*) only
when its ratio (head/base) lies beyond the fail threshold (1/fail for improved) *and* the
one-sided test in that direction is significant (p < alpha). It *warns* when it is slower
beyond the warn threshold and significant, or slower beyond the fail threshold but not
significant (inconclusive: the measurement was noisier than its calibration). A faster
change with less evidence than that is ok, with a note. The thresholds of a case come from
perf/thresholds.py (calibrated noise or the vendor's defaults); the test from perf/stats.py.

Wrong-output rule: a case whose output was wrong on either side (against the fp32 reference,
before or after timing), or head's against base's beyond the correctness grid's tolerances
(perf/measure/check.py), is `wrong` whatever its speed, and fails the gate (exit 1). A result
that is faster but wrong is not faster.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from enum import Enum

from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError, NothingMeasured


class Verdict(str, Enum):
    OK = "ok"
    IMPROVED = "improved"
    WARN = "warn"
    FAIL = "fail"
    # Not timed: the case's launches are identical on base and head (perf/change/keys.py),
    # so its device time cannot differ. Evidence, not a measurement: see `exit_code`.
    UNCHANGED = "unchanged"
    WRONG = "wrong"  # an output was wrong (the wrong-output rule): fails, whatever the ratio

    @property
    def severity(self) -> int:
        """Sort key, worst first: wrong, fail, warn, ok, improved, unchanged."""
        return {"wrong": -1, "fail": 0, "warn": 1, "ok": 2, "improved": 3, "unchanged": 4}[self.value]

    @property
    def fails(self) -> bool:
        """Whether this verdict fails the gate (exit 1)."""
        return self in (Verdict.FAIL, Verdict.WRONG)


@dataclass
class Finding:
    gate: str  # "latency" | "static"
    vendor: str  # "nvidia" | "amd"
    target: str  # a GPU name ("NVIDIA H100 80GB HBM3") or a compile target ("sm_90")
    variant: str
    scenario: str
    metric: str  # "eager" | "graph" (latency, ms) or a static metric ("registers", ...)
    base: float | None  # base value (median ms for latency); None when the base lacks it
    head: float | None
    ratio: float | None  # head / base
    ci_low: float | None  # confidence interval of the ratio
    ci_high: float | None
    p_value: float | None  # one-sided test in the direction of the change
    threshold: str  # human text, e.g. "warn > 1.03, fail > 1.05"
    verdict: Verdict
    note: str = ""
    # Latency: the smallest slowdown (ratio) this case fails with 95 % power at the gate's
    # settings and thresholds (perf.stats.min_detectable); None where unknown.
    min_detectable: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Finding:
        return cls(**{**d, "verdict": Verdict(d["verdict"])})

    def sort_key(self) -> tuple:
        ratio = self.ratio if self.ratio is not None and math.isfinite(self.ratio) else 0.0
        return (self.verdict.severity, -ratio, self.variant, self.scenario, self.metric)


def latency_verdict(ratio: float, p_slower: float, p_faster: float, warn: float, fail: float,
                    alpha: float) -> tuple[Verdict, str]:
    """The latency verdict and a short note on why (the rule of this module's docstring)."""
    if ratio > fail:
        if p_slower < alpha:
            return Verdict.FAIL, "slower beyond the fail threshold, significant"
        return Verdict.WARN, f"slower beyond the fail threshold but not significant (p >= {alpha:g})"
    if ratio > warn and p_slower < alpha:
        return Verdict.WARN, "slower beyond the warn threshold, significant"
    if ratio < 1.0 / fail and p_faster < alpha:
        return Verdict.IMPROVED, "faster beyond the fail threshold, significant"
    if ratio < 1.0 / warn and p_faster < alpha:
        return Verdict.OK, "faster beyond the warn threshold, significant"
    if ratio > 1.0 and p_slower < alpha:
        return Verdict.OK, "slower, significant, within the warn threshold"
    return Verdict.OK, ""


def wrong_output(finding: Finding, reasons: dict[str, list[str]]) -> Finding:
    """The wrong-output rule (module docstring): `reasons` maps a side ("base", "head") to what
    was recorded of its wrong outputs for this case (perf/measure/check.py's reasons, which name
    the max error); none: the finding as it was."""
    said = [f"{side} {reason}" for side, found in reasons.items() for reason in found]
    if not said:
        return finding
    timing = f"; timing alone: {finding.verdict.value}" + (f", {finding.note}" if finding.note else "")
    note = "; ".join(said) + (timing if finding.ratio is not None else "")
    return Finding(**{**finding.__dict__, "verdict": Verdict.WRONG, "note": note})


def detectable_summary(findings: list[Finding], effects: tuple[float, ...] = (0.02, 0.05, 0.10)) -> str:
    """One line: how many measured latency cases can see a slowdown of 2 %, 5 %, 10 %."""
    known = [f.min_detectable for f in findings if f.gate == "latency" and f.min_detectable is not None]
    if not known:
        return "smallest detectable slowdown: unknown (no measured case)"
    parts = [f"{sum(m <= 1.0 + e + 1e-9 for m in known)} see {100 * e:g} %" for e in effects]
    return (f"of {len(known)} measured cases, with 95 % power: " + ", ".join(parts)
            + " (per case: `min_detectable` in findings.json)")


_COMPILES = "compiles on every target"  # the rule of a kernel that must compile
_SEVERITY = {"fail": Verdict.FAIL, "warn": Verdict.WARN, "ignore": Verdict.OK}  # a policy's word


def static_findings(head: dict, base: dict | None, policy: dict, limits: dict,
                    base_comparable: bool = True) -> list[Finding]:
    """The findings of one launched kernel on one compile target, head against base.

    `head`/`base`: entries of the static gate's side documents (variant, scenario, target,
    vendor, kernel, status, metrics, error); `base` is None when the base did not launch
    this kernel. `policy`: the vendor's `compile.static` rules, every key of
    perf.thresholds.STATIC_DEFAULTS. `limits`: the target's `max_registers_per_thread` and
    `max_shared_memory_bytes`. A kernel that compiled on the base and no longer compiles
    fails with the compiler's message; one that failed on the base already warns; a type
    the target lacks on both sides is ok. With `base_comparable=False` (a base without
    planned variants) nothing can regress: every verdict is ok, its note saying what it
    would have been.
    """
    rows = _StaticRows(head, base_comparable)
    base_ok = base is not None and base["status"] == "ok"
    if head["status"] != "ok":
        _not_compiled(rows, head, base, base_ok)
        return rows.rows
    bm = base["metrics"] if base_ok else {}
    note_new = "" if base_ok else ("new kernel" if base is None else f"base: {base['status']}")
    if base is not None and not base_ok:
        rows.add("compiles", None, None, Verdict.IMPROVED, _COMPILES,
                 f"compiles again (base: {base.get('error', '')[:120]})")
    _spill_findings(rows, head["metrics"], bm, policy, note_new)
    _register_finding(rows, head, base, bm, policy, limits, note_new)
    _shared_memory_finding(rows, head, bm, policy, limits, note_new)
    _occupancy_finding(rows, head, bm, policy, note_new)
    return rows.rows


class _StaticRows:
    """The findings of one kernel on one target, as `static_findings` adds them."""

    def __init__(self, head: dict, base_comparable: bool):
        self.head, self.base_comparable, self.rows = head, base_comparable, []

    def add(self, metric, bval, hval, verdict, threshold, note="") -> None:
        numbers = isinstance(bval, (int, float)) and isinstance(hval, (int, float))
        ratio = hval / bval if numbers and bval else None
        if not self.base_comparable and verdict is not Verdict.OK:
            note = f"base not comparable; would be {verdict.value}: {note}".rstrip(": ")
            verdict = Verdict.OK
        h = self.head
        self.rows.append(Finding("static", h["vendor"], h["target"], h["variant"], h["scenario"],
                                 f"{h['kernel']}/{metric}", bval, hval, ratio, None, None, None, threshold,
                                 verdict, note))


def _not_compiled(rows: _StaticRows, head: dict, base: dict | None, base_ok: bool) -> None:
    """A kernel the head does not compile: fails where the base compiled it (or lacked it)."""
    msg = f"{head['target']}: {head['status']}: {head.get('error', '')}"
    if head["status"] == "unsupported" and (base is None or base["status"] == "unsupported"):
        rows.add("compiles", None, None, Verdict.OK, _COMPILES, f"not supported ({msg})")
    elif base_ok or base is None:
        rows.add("compiles", None, None, Verdict.FAIL, _COMPILES,
                 ("no longer compiles; " if base_ok else "") + msg)
    else:
        rows.add("compiles", None, None, Verdict.WARN, _COMPILES, f"fails on the base too; {msg}")


def _spill_findings(rows: _StaticRows, hm: dict, bm: dict, policy: dict, note_new: str) -> None:
    """Spills, and wgmma serialized by ptxas (NVIDIA Hopper: each matrix instruction waits for the
    last): any increase, or any in a kernel the base did not have."""
    from perf.vendor import SPILL_METRICS

    for metric in (*SPILL_METRICS, "wgmma_serialized"):
        if metric not in hm:
            continue
        if metric == "wgmma_serialized":
            key, worse, better = ("new_wgmma_serialization", "ptxas serializes its wgmma (info C7515)",
                                  "wgmma no longer serialized")
        else:
            key = "new_sgpr_spills" if metric == "sgpr_spills" and policy["new_sgpr_spills"] else "new_spills"
            worse, better = "new spills", "fewer spills"
        rule = f"{key}: {policy[key]}"
        hv, bv = hm[metric], bm.get(metric)
        if hv > (bv or 0):
            rows.add(metric, bv, hv, _SEVERITY[policy[key]], rule, note_new or worse)
        elif bv is not None and hv < bv:
            rows.add(metric, bv, hv, Verdict.IMPROVED, rule, better)
        else:
            rows.add(metric, bv, hv, Verdict.OK, rule, note_new)


def _register_finding(rows: _StaticRows, head: dict, base: dict | None, bm: dict, policy: dict,
                      limits: dict, note_new: str) -> None:
    """Registers per thread; per program where the launch's warp count changed (the same work on
    half the threads holds about twice the registers per thread and the same register file)."""
    warn_r, fail_r = policy["registers_warn_ratio"], policy["registers_fail_ratio"]
    rule = ", ".join(([f"warn > {warn_r:g}"] if warn_r else []) + ([f"fail > {fail_r:g}"] if fail_r else []))
    hv, bv = head["metrics"]["registers"], bm.get("registers")
    ratio = hv / bv if bv else None
    hw, bw = (side.get("config", {}).get("num_warps") if side else None for side in (head, base))
    note = note_new
    if ratio is not None and hw and bw and hw != bw:
        ratio = hv * hw / (bv * bw)
        note = f"compared per program: {bv} x {bw} warps -> {hv} x {hw} warps ({ratio:.3f})"
    if hv > limits["max_registers_per_thread"]:
        rows.add("registers", bv, hv, Verdict.FAIL, rule, "above the target's register limit")
    elif ratio is not None and fail_r and ratio > fail_r:
        rows.add("registers", bv, hv, Verdict.FAIL, rule, note)
    elif ratio is not None and warn_r and ratio > warn_r:
        rows.add("registers", bv, hv, Verdict.WARN, rule, note)
    elif ratio is not None and warn_r and ratio < 1 / warn_r:
        rows.add("registers", bv, hv, Verdict.IMPROVED, rule, note)
    else:
        rows.add("registers", bv, hv, Verdict.OK, rule, note)


def _shared_memory_finding(rows: _StaticRows, head: dict, bm: dict, policy: dict, limits: dict,
                           note_new: str) -> None:
    """Shared memory / LDS: over the target's limit, or grown beyond the warn ratio."""
    limit, sev, warn_s = (limits["max_shared_memory_bytes"], policy["shared_memory_over_limit"],
                          policy["shared_memory_warn_ratio"])
    rule = f"limit {limit} B: {sev}" + (f"; warn > {warn_s:g}" if warn_s else "")
    hv, bv = head["metrics"]["shared_memory"], bm.get("shared_memory")
    ratio = hv / bv if bv else None
    if hv > limit and bv is not None and bv > limit:
        rows.add("shared_memory", bv, hv, Verdict.WARN, rule, "over the target's limit on the base too")
    elif hv > limit:
        rows.add("shared_memory", bv, hv, _SEVERITY[sev], rule,
                 f"{hv} B > {limit} B: cannot launch on {head['target']}")
    elif ratio is not None and warn_s and ratio > warn_s:
        rows.add("shared_memory", bv, hv, Verdict.WARN, rule)
    else:
        rows.add("shared_memory", bv, hv, Verdict.OK, rule, note_new)


def _occupancy_finding(rows: _StaticRows, head: dict, bm: dict, policy: dict, note_new: str) -> None:
    """Occupancy: a drop is the policy's verdict, a rise improved."""
    from perf.vendor import VENDORS

    sev, unit = policy["occupancy_drop"], VENDORS[head["vendor"]].occupancy_unit
    rule = f"occupancy_drop: {sev}"
    hv, bv = head["metrics"]["occupancy"], bm.get("occupancy")
    if bv is not None and hv < bv:
        rows.add("occupancy", bv, hv, _SEVERITY[sev], rule, f"{unit}: {bv} -> {hv}")
    elif bv is not None and hv > bv:
        rows.add("occupancy", bv, hv, Verdict.IMPROVED, rule, f"{unit}: {bv} -> {hv}")
    else:
        rows.add("occupancy", bv, hv, Verdict.OK, rule, unit + (f"; {note_new}" if note_new else ""))


def compile_time_rule(rule, noise: float | None, source: str = ""):
    """(threshold text, ratio -> Verdict) of a cold compile time ratio: slower beyond
    max(fail, exp(k.fail x noise)) fails, beyond the warn one warns, faster beyond the fail one
    is improved (compile_time_finding; the nightly's compile-time series, perf/nightly/alert.py)."""
    warn, fail = rule.apply(noise) if noise is not None else (rule.floor_warn, rule.floor_fail)
    threshold = (f"warn > {warn:.3g}, fail > {fail:.3g} (" + (f"{source}, noise {100 * noise:.1f} %"
                 if noise is not None else "uncalibrated: compile.compile_time") + ")")

    def verdict(ratio: float) -> Verdict:
        if ratio > fail:
            return Verdict.FAIL
        if ratio > warn:
            return Verdict.WARN
        return Verdict.IMPROVED if ratio < 1.0 / fail else Verdict.OK

    return threshold, verdict


def compile_time_finding(variant: str, target: str, vendor: str, base: dict | None, head: dict, rule,
                         noise: float | None, source: str = "") -> Finding:
    """The finding of a variant's cold compile time on one target, head against base.

    `head`/`base`: {"cpu_s": CPU seconds summed over the variant's distinct specializations
    on the target, "count": how many, "cached": how many came from the metrics cache};
    `base` None when the base compiled none. `rule`: the vendor's compile.compile_time
    (perf.thresholds.NoiseRule: warn/fail floors, k); `noise`: the calibrated standard
    deviation of log(head / base) for this variant and target (None: the floors alone).
    One measurement per side, compiled side by side, so the threshold is the significance:
    slower beyond max(fail, exp(k.fail x noise)) fails, beyond the warn one warns, faster
    beyond the fail one is improved. Compile time is a measurement, never a reason to call
    the code wrong: a head slower only because it compiles more specializations says so."""
    threshold, verdict_of = compile_time_rule(rule, noise, source)
    hv = head["cpu_s"]
    bv = base["cpu_s"] if base else None
    ratio = hv / bv if bv else None
    same = not base or base["count"] == head["count"]
    count = head["count"] if same else f"{base['count']} -> {head['count']}"
    parts = [f"cold compile CPU s of {count} specialization{'' if count == 1 else 's'}"]
    cached = head.get("cached", 0) + (base.get("cached", 0) if base else 0)
    if cached:
        parts.append(f"{cached} from the metrics cache (timed in an earlier run)")
    if ratio is None:
        verdict = Verdict.OK
        parts.append("new on this target")
    else:
        verdict = verdict_of(ratio)
    return Finding("static", vendor, target, variant, "*", "compile_time", bv, hv, ratio, None, None, None,
                   threshold, verdict, "; ".join(parts))


def target_finding(target: str, vendor: str, note: str, policy: dict) -> Finding:
    """The finding of a compile target the installed Triton cannot compile for at all (its
    probe kernel failed: perf/static/probe.py): nothing was checked on that target. Its
    verdict is the vendor's `target_not_compilable` rule, warn by default: the base and the
    head are compiled by the same Triton, so the change under test did not cause it, yet a
    gate that silently checked fewer targets than thresholds.yaml lists would be trusted
    for more than it did (docs/static-gate.md)."""
    severity = {"fail": Verdict.FAIL, "warn": Verdict.WARN, "ignore": Verdict.OK}
    rule = policy["target_not_compilable"]
    return Finding("static", vendor, target, "*", "*", "compiles", None, None, None, None, None, None,
                   f"target_not_compilable: {rule}", severity[rule], note)


def worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.sort_key)


def counts(findings: list[Finding]) -> dict[str, int]:
    out = {v.value: 0 for v in Verdict}
    for f in findings:
        out[f.verdict.value] += 1
    return out


def compared(f: Finding) -> bool:
    """Whether a finding compared something measured: a ratio of base and head, or a static
    metric of the head (a new kernel). Skipped, missing and broken cases compare nothing."""
    return f.ratio is not None or (f.gate == "static" and f.head is not None)


def unchanged(f: Finding) -> bool:
    """Whether a finding is a case not timed because its launches are identical on both sides."""
    return f.verdict is Verdict.UNCHANGED


def nothing_compared(findings: list[Finding]) -> str | None:
    """Why `findings` compare nothing (None when one of them does, or is unchanged: identical
    launches are evidence that the case's device time did not change): what a verdict from
    them would rest on, in a few words."""
    if any(compared(f) or unchanged(f) for f in findings):
        return None
    if not findings:
        return "no case at all (0 findings)"
    why: dict[str, int] = {}
    for f in findings:
        text = re.split(r"[:;(]", f.note or f.verdict.value, maxsplit=1)[0].strip()
        why[text] = why.get(text, 0) + 1
    parts = ", ".join(f"{n} {text}" for text, n in sorted(why.items(), key=lambda kv: -kv[1])[:3])
    return f"none of {len(findings)} findings compares a measured base with a measured head ({parts})"


def exit_code(findings: list[Finding], where: str = "") -> int:
    """1 if any finding fails or is wrong (a case broken on the head fails without a ratio),
    else 0 (warnings pass); NothingMeasured (exit 2) when no finding compared anything, since a
    pass needs something checked. Unchanged findings are checked: their launches were
    compared and found identical, so a gate of only unchanged cases passes ("nothing to
    time"), while one of only skipped or missing cases proves nothing and is NothingMeasured.
    `where`: where the findings are, for the message."""
    if any(f.verdict.fails for f in findings):
        return EXIT_FAIL
    why = nothing_compared(findings)
    if why is not None:
        raise NothingMeasured(why + (f"; {where}" if where else ""))
    return EXIT_OK


# --- findings files: the one reader --------------------------------------------------------

FINDINGS_VERSION = 2  # 2: findings carry min_detectable
READS_FINDINGS = (1, 2)
_FINDINGS_FIX = "pass the findings.json of `python -m perf gate`, `compare --out` or `compile`"
_TEXT = ("gate", "vendor", "target", "variant", "scenario", "metric", "threshold")
_OPTIONAL = {"note": "", "min_detectable": None}


def _numbers(gate: str) -> dict:
    """The numeric fields of a finding of `gate`, bounded (perf/schema.py): a latency finding's
    base and head are latencies and its ratios are theirs; a static one's are metrics >= 0."""
    from perf import schema

    value = ((schema.latency, "a latency in ms") if gate == "latency" else
             (schema.nonnegative, "a number >= 0"))
    quotient = (schema.ratio, f"a ratio within {schema.span(schema.RATIO)}")
    spec = {"base": value, "head": value, "ratio": quotient, "ci_low": quotient, "ci_high": quotient,
            "p_value": (schema.probability, "a probability in 0..1"), "min_detectable": quotient}
    return {k: (schema.or_none(check), what + " or null") for k, (check, what) in spec.items()}


def finding_from(d, path: str, where: str) -> Finding:
    """One finding of a findings file, every field checked (ConfigError naming it): text fields,
    numbers within their bounds (perf/schema.py), names by the one rule (perf/names.py)."""
    from perf import schema

    if not isinstance(d, dict):
        raise ConfigError(f"{path}: {where} is a JSON {type(d).__name__}, not a finding object; "
                          f"{_FINDINGS_FIX}")
    fields = {f for f in Finding.__dataclass_fields__}
    unknown = sorted(set(d) - fields)
    if unknown:
        raise ConfigError(f"{path}: {where}: unknown field {unknown[0]!r} (a newer harness's findings?); "
                          f"{_FINDINGS_FIX}")
    missing = sorted(fields - set(d) - set(_OPTIONAL))
    if missing:
        raise ConfigError(f"{path}: {where} has no {missing[0]!r}; {_FINDINGS_FIX}")
    schema.check_fields(path, where, d, {k: (schema.text, "text") for k in (*_TEXT, "note")}, False,
                        _FINDINGS_FIX)
    schema.check_fields(path, where, d, _numbers(d["gate"]), False, _FINDINGS_FIX)
    if d.get("ci_low") is not None and d.get("ci_high") is not None and d["ci_low"] > d["ci_high"]:
        raise ConfigError(f"{path}: {where}: ci_low {d['ci_low']:g} is above ci_high {d['ci_high']:g}; "
                          f"{_FINDINGS_FIX}")
    schema.check_names(path, where, d)
    try:
        verdict = Verdict(d["verdict"])
    except (ValueError, TypeError):
        raise ConfigError(f"{path}: {where}.verdict is {str(d['verdict'])[:20]!r}, not one of "
                          f"{', '.join(v.value for v in Verdict)}; {_FINDINGS_FIX}") from None
    return Finding(**{**_OPTIONAL, **d, "verdict": verdict})


def load_findings(path: str) -> tuple[dict, list[Finding]]:
    """A findings file, read whole: (the document, its findings). ConfigError naming the file
    when it is not a JSON object, has no `findings` list, is of another kind or schema
    version, or holds a malformed finding (naming its index and field) or one case twice (a
    finding counted twice would weigh twice in the verdict and the counts)."""
    from perf import files, schema

    doc = files.load_json(path, "findings file", _FINDINGS_FIX, expect=dict)
    kind = doc.get("kind", "findings")
    if kind != "findings":
        raise ConfigError(f"{path}: kind {str(kind)[:20]!r}, not a findings file; {_FINDINGS_FIX}")
    version = doc.get("schema_version", READS_FINDINGS[0])
    if isinstance(version, bool) or version not in READS_FINDINGS:
        raise ConfigError(f"{path}: schema_version {str(doc['schema_version'])[:20]}; this harness reads "
                          f"findings versions {', '.join(map(str, READS_FINDINGS))}: re-run the gate "
                          f"with this version")
    items = doc.get("findings")
    if not isinstance(items, list):
        what = "no `findings` list" if items is None else f"`findings` is a JSON {type(items).__name__}"
        raise ConfigError(f"{path}: {what}; {_FINDINGS_FIX}")
    found, seen = [], {}
    for i, d in enumerate(items):
        f = finding_from(d, path, f"findings[{i}]")
        key = (f.gate, f.vendor, f.target, f.variant, f.scenario, f.metric)
        schema.once(path, key, seen, f"findings[{i}]", "the case", _FINDINGS_FIX)
        found.append(f)
    return doc, found


# --- nightly alerts, re-measured (perf/nightly/confirm.py) --------------------------------------
# What became of a nightly alert (a FAIL of perf/nightly/alert.py) once the latency gate measured
# the flagged commit against the last good one in the same processes:
CONFIRMED = "confirmed"  # the gate fails it too: a regression (an issue is opened or commented)
NOISE = "noise"  # the gate finds it ok (or faster): the nightly's step did not reproduce
PENDING = "pending"  # not re-measured yet (dry run, no GPU, another machine's, beyond the cap)
INCONCLUSIVE = "inconclusive"  # the gate warns, or has no verdict (no last good commit, crashed, skipped)
REMEASURE_STATUSES = (CONFIRMED, NOISE, PENDING, INCONCLUSIVE)


def remeasure_status(gate: Finding | None, changed: dict | None = None) -> str:
    """A re-measured alert's status from the gate's finding for the same case.

    The gate's own rule decides (latency_verdict, with the gate's thresholds and its re-measure
    of a failing case): FAIL is a confirmed regression; OK or IMPROVED is noise (the slowdown did
    not reproduce with both commits in the same processes). WARN neither confirms nor clears it
    (beyond the fail threshold but not significant, or a significant slowdown smaller than the
    gate fails on), and no finding or no ratio (skipped, crashed) says nothing: inconclusive.
    No step under today's toolchain while `changed` (the fingerprint fields that differ between the
    two commits' nights) is not empty is inconclusive too: the A/B cannot see that change.
    """
    if gate is not None and gate.verdict is Verdict.WRONG:  # a wrong output is never noise
        return CONFIRMED
    if gate is None or gate.ratio is None or gate.verdict is Verdict.WARN:
        return INCONCLUSIVE
    if gate.verdict is Verdict.FAIL:
        return CONFIRMED
    # Both sides ran under today's Triton, torch and driver: a step that came with a change of
    # them (`changed`: perf.fingerprint.diff of the two nights) cannot reproduce here, so the
    # A/B clears only the code, not the step (perf/nightly/attribute.py names its cause).
    return INCONCLUSIVE if changed else NOISE


def alert_exit_code(statuses: list[str]) -> int:
    """`perf alert --confirm`: 1 while any alert is confirmed or not cleared by a re-measure
    (pending, inconclusive); 0 when there is none or every one was noise."""
    return EXIT_FAIL if any(s != NOISE for s in statuses) else EXIT_OK


# --- nightly attribution (perf/nightly/attribute.py): one cause per step ---------------------------
# A step the nightly finds (a night beyond its threshold against the nights before it) gets one
# cause once the next night shows whether it stayed, from the evidence gathered in this order:
CODE = "code"  # the same-process A/B of the flagged and the last good commit reproduces it
TOOLCHAIN = "toolchain"  # Triton/torch changed and one commit under the old and the new one reproduces it
ENVIRONMENT = "environment"  # driver, VBIOS, image or machine changed, or the vendor libraries moved too
CREEP = "creep"  # many nights' small steps adding up (perf/nightly/creep.py)
NOISE_CAUSE = "noise"  # not kept, nothing changed, the re-measure finds no step
MISSING_DATA = "missing-data"  # a runner stopped reporting (the heartbeat)
CAUSES = (CODE, TOOLCHAIN, ENVIRONMENT, CREEP, NOISE_CAUSE, MISSING_DATA)
ISSUE_CAUSES = (CODE, TOOLCHAIN, ENVIRONMENT, CREEP, MISSING_DATA)  # noise opens no issue
# Nights after its own a step must hold before it is the environment's when the fingerprint did not
# change: a night-long move of the machine comes two in a row now and then (in the replay's model,
# a scenario moves 4-6 % on 2 % of nights, so about once a year per runner and scenario back to
# back: seed 1018's +4.5 % for two nights, named `environment`), and a kernel team wants a move
# that stays, not a two-night blip. By reasoning: the smallest count that a two-night blip fails.
UNEXPLAINED_HELD_NIGHTS = 2


def step_held(ratio: float, p_slower: float, p_faster: float, warn: float, alpha: float,
              slower: bool) -> bool:
    """Whether a later night keeps a step against the nights before it: beyond the case's warn
    ratio in the step's direction, and significant (the warn half of latency_verdict's rule)."""
    if slower:
        return ratio > warn and p_slower < alpha
    return ratio < 1.0 / warn and p_faster < alpha


def step_cause(*, kept: bool, code_changed: bool, code_ab: str | None, toolchain_changed: bool,
               toolchain_ab: str | None, environment_changed: bool, libraries_moved: bool,
               nights_held: int) -> tuple[str | None, str]:
    """(cause, why) of a slowdown step; cause None: not decided (waiting for an A/B, or a step the
    next night did not keep while something changed: recorded, no cause, no issue).

    `code_ab`, `toolchain_ab`: remeasure statuses (CONFIRMED, NOISE, PENDING, INCONCLUSIVE) of
    the A/B of the two commits in today's environment and of one commit under the old and the
    new toolchain; None where not run. An experiment that reproduces the step names the cause
    first (toolchain, then code: a Triton bump on a night with commits is the toolchain when one
    commit under both reproduces it). Without one, a changed environment or vendor libraries that
    moved with us name the environment; a step that stays while both commits measure the same in
    one process is outside the code too: the machine moved without its fingerprint saying so.
    Without a changed fingerprint either needs the step held on UNEXPLAINED_HELD_NIGHTS nights
    after its own (`nights_held`; a kept step has held on one): a two-night move is the machine's
    noise, not an environment issue.
    Noise is a conclusion: not kept, no fingerprint change, and no step in the re-measure (or no
    commit between the nights)."""
    changed = toolchain_changed or environment_changed
    if not kept:
        if changed:
            return None, "not kept by the next night, but the fingerprint changed: recorded, no cause"
        if code_changed and code_ab != NOISE:
            return None, f"not kept by the next night; the re-measure is {code_ab or 'not run'}"
        return NOISE_CAUSE, ("back at its level the next night, the fingerprint unchanged, and "
                             + ("the re-measure finds no step" if code_changed else "no commit between"))
    if toolchain_changed and toolchain_ab == CONFIRMED:
        return TOOLCHAIN, "one commit under the old and the new toolchain reproduces the step"
    if code_changed and code_ab == CONFIRMED:
        return CODE, "the same-process A/B of the flagged and the last good commit reproduces the step"
    waiting = [what for what, run, status in (("toolchain A/B", toolchain_changed, toolchain_ab),
                                              ("re-measure", code_changed, code_ab))
               if run and status in (None, PENDING, INCONCLUSIVE)]
    if waiting:
        return None, f"kept; waiting for the {' and the '.join(waiting)}"
    if environment_changed:
        return ENVIRONMENT, ("the driver, VBIOS, image or machine changed and no commit or toolchain "
                             "reproduces it")
    if nights_held < UNEXPLAINED_HELD_NIGHTS:
        return None, (f"kept {nights_held} night(s) with the fingerprint unchanged: an environment step "
                      f"must hold {UNEXPLAINED_HELD_NIGHTS} nights after its own")
    if libraries_moved:
        return ENVIRONMENT, "the vendor libraries moved with us and no commit or toolchain reproduces it"
    return ENVIRONMENT, ("kept, yet no commit or toolchain reproduces it in one process: the machine moved "
                         "without its fingerprint saying so")


def toolchain_status(gate: Finding | None) -> str:
    """The remeasure status of a toolchain A/B (`perf gate --toolchain triton==OLD`: the installed,
    new Triton is the base, OLD the head) read as the step's direction: the step reproduces
    (CONFIRMED) when OLD is faster beyond the fail threshold, significant (IMPROVED); any other
    verdict clears it (NOISE); no finding or no ratio: INCONCLUSIVE."""
    if gate is None or gate.ratio is None:
        return INCONCLUSIVE
    return CONFIRMED if gate.verdict is Verdict.IMPROVED else NOISE
