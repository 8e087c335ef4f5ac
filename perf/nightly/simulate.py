"""The nightly's replay: a year's worth of nights in seconds, with known causes, through the real pipeline.

    python -m perf nightly simulate --seed S --nights N --out DIR

Writes a realistic history of two runners into DIR/data (a data-branch checkout's layout, through
perf/nightly/store.py), night by night, with events injected at known nights, and runs the
production code on it after every night: attribution (perf/nightly/attribute.py: the alert's
rule, the kept-step check, the causes, the creep pass, the issues) and the heartbeat. Issues go
to DIR/issues (perf.ci.github.tracker's folder form). The simulator only writes measurements and
fingerprints, and answers the experiments attribution asks for (the same-process A/B, the
toolchain A/B, bisect's steps) from its model of the machine: every cause is the pipeline's.

The machine: per case a level, and per repeat median the noise of the committed calibration
(calibration/nvidia.yaml: sigma_round / sqrt(2) within a night, tau between processes, drawn per
case from the measured cases of its metric); per night a common drift of the runner (DRIFT) and,
now and then, one scenario's kernels and libraries together moving 4-6 % for a night
(EXCURSION, as measured on an H200: perf/nightly/alert.py's docstring). Between nights 1-3
commits land (some nights none). Events (at least one of each, spread over the nights):

| kind | what | expected cause |
|---|---|---|
| driver | one runner's driver upgraded: every kernel and library +8 % | environment |
| toolchain | Triton bumped on both runners: our kernels on decode scenarios +6 % | toolchain |
| code | a commit makes static_grid +4 %, a commit 5 nights later fixes it | code (and the first bad commit) |
| creep | each night's commit makes qblock +0.4 %, 12 nights | creep |
| outage | one runner silent 4 nights | missing-data (the heartbeat) |
| cache_loss | the Actions cache emptied | none, and no night lost |

DIR/simulation.json: `{"events": [{"kind", "night", "expected_cause", "reported_cause",
"detected_after_nights"}], "false_issues": n, "lost_nights": n}`. An event's reported cause is
the cause of the first issue opened in the nights [night, night + 2]; an issue opened outside
every event's window is false. A creep's night is the night its total first reaches the creep
floor (3 %): a creep is not a level change before then. Exit 0 only when every event got its
expected cause within two nights, no issue was false and no night was lost; 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from perf import files, verdicts
from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError

RUNNERS = ("gpu-a_nvidia-h100-80gb-hbm3", "gpu-b_nvidia-h100-80gb-hbm3")
GPU = "NVIDIA H100 80GB HBM3"
# Scenarios of calibration/nvidia.yaml (static_grid is calibrated there, qblock is not: it gets the
# vendor's uncalibrated thresholds, as a variant without calibration does in production).
DECODE = "llama3-8b/decode/batch32-kv1024/block16"
MIXED = "gemma2-9b/mixed50/batch16-kv2048/block16/softcap50"
SCENARIOS = (DECODE, MIXED)
VARIANTS = ("static_grid", "qblock")
PEERS = ("peer:sdpa_cudnn", "peer:sdpa_flash")
METRICS = ("graph",)
REPEATS = 5  # the nightly's repeats per case (perf/nightly/selection.py DEFAULT_REPEATS)
DRIFT = 0.003  # a runner's night-to-night common drift, log sd: calibration's largest tau, rounded up
EXCURSION = (0.02, 0.04, 0.06)  # per night and scenario: probability, then the size range of a move
GATE_SIGMA = 0.002  # the re-measure's log noise of a ratio (calibration: sigma_round / sqrt(60 rounds))
START = _dt.date(2026, 1, 5)
DRIVERS = ("580.159.04", "590.48.01")
TRITONS = ("3.6.0", "3.7.0")
MIN_NIGHTS = 60  # room for every event and its window (the schedule below)


@dataclass
class Event:
    kind: str
    night: int  # when it happens (creep: when its total reaches the floor)
    expected: str  # cause, or "none"
    runner: str | None = None  # one runner's event, else both
    begin: int = 0  # first night of its effect
    bad_commit: str = ""


@dataclass
class Machine:
    """The model: levels, noise, commits and the environment of each runner and night."""

    rng: object  # numpy.random.Generator
    nights: int
    levels: dict = field(default_factory=dict)  # key -> ms
    sigma: dict = field(default_factory=dict)  # key -> (within, tau)
    commits: list[str] = field(default_factory=list)  # first-parent order
    effect: dict = field(default_factory=dict)  # commit -> {key: factor}
    night_sha: dict = field(default_factory=dict)  # night -> newest commit
    driver: dict = field(default_factory=dict)  # (runner, night) -> version
    triton: dict = field(default_factory=dict)  # night -> version

    def code_factor(self, sha: str, key) -> float:
        f = 1.0
        for c in self.commits[:self.commits.index(sha) + 1]:
            f *= self.effect.get(c, {}).get(key, 1.0)
        return f

    def toolchain_factor(self, triton: str, key) -> float:
        return 1.06 if triton == TRITONS[1] and key[1] == DECODE and not key[0].startswith("peer:") else 1.0

    def driver_factor(self, driver: str, key) -> float:
        return 1.08 if driver == DRIVERS[1] else 1.0


def keys():
    return [(v, s, m) for v in VARIANTS + PEERS for s in SCENARIOS for m in METRICS]


def _calibrated_noise(rng) -> dict:
    """Per case (within-night sd of a repeat median, tau) drawn from calibration/nvidia.yaml's
    measured cases of its metric."""
    from perf.checkout import ROOT
    from perf.thresholds import load_thresholds

    cal = load_thresholds(os.path.join(str(ROOT), "thresholds.yaml"))
    from perf.thresholds import calibration_for

    c, _ = calibration_for(cal, "nvidia", GPU)
    rows = [(k[2], case.sigma_round, case.tau) for k, case in c.cases.items()] if c else []
    out = {}
    for key in keys():
        pool = [(s, t) for m, s, t in rows if m == key[2]] or [(0.002, 0.0005)]
        s, t = pool[int(rng.integers(len(pool)))]
        out[key] = (s / math.sqrt(2), t)
    return out


def check_arguments(seed: int, nights: int) -> None:
    """A replay's seed (numpy's generators take none below 0) and length, before any work."""
    if seed < 0:
        raise ConfigError(f"--seed {seed}: at least 0 (a seed of numpy's random generator)")
    if nights < MIN_NIGHTS:
        raise ConfigError(f"--nights {nights}: at least {MIN_NIGHTS} (every event with a week before it)")


def build(seed: int, nights: int) -> tuple[Machine, list[Event]]:
    """The machine and its events for `seed` (module docstring)."""
    check_arguments(seed, nights)
    import numpy as np

    rng = np.random.default_rng(seed)
    m = Machine(rng, nights)
    m.sigma = _calibrated_noise(rng)
    for k in keys():
        m.levels[k] = float(rng.uniform(0.02, 2.0))
    # the schedule: a warm-up week, then the events in a shuffled order, each in its own stretch
    kinds = ["driver", "toolchain", "code", "creep", "outage", "cache_loss"]
    rng.shuffle(kinds)
    length = {"driver": 6, "toolchain": 6, "code": 10, "creep": 16, "outage": 8, "cache_loss": 4}
    spare = nights - 9 - sum(length.values())
    gaps = rng.multinomial(spare, [1 / len(kinds)] * len(kinds))
    at, events = 9, []
    plan = {}
    for kind, gap in zip(kinds, gaps):
        at += int(gap)
        plan[kind] = at
        at += length[kind]
    # special commits of the events: night -> how many (code: the bad one and the fix; creep: one a night)
    special: dict[int, list[str]] = {}

    def land(n: int) -> str:
        c = f"{int(rng.integers(2 ** 63)):016x}{n:08x}{len(special.get(n, [])):016x}"
        special.setdefault(n, []).append(c)
        return c

    effects = []
    if "code" in plan:
        n = plan["code"]
        bad, fix = land(n), land(n + 5)
        effects += [(bad, 1.04, "static_grid"), (fix, 1 / 1.04, "static_grid")]
    creep_commits = [land(k) for k in range(plan["creep"], plan["creep"] + 12)] if "creep" in plan else []
    effects += [(c, 1.004, "qblock") for c in creep_commits]
    for c, factor, variant in effects:
        m.effect[c] = {k: factor for k in keys() if k[0] == variant}
    # commits: 0-3 a night (none on some nights, like a weekend), the events' among them
    for n in range(nights):
        count = int(rng.choice([0, 1, 1, 2, 3]))
        night = [f"{int(rng.integers(2 ** 63)):016x}{n:08x}{i:016x}" for i in range(count)]
        for c in special.get(n, []):
            night.insert(int(rng.integers(len(night) + 1)), c)
        m.commits += night
        m.night_sha[n] = m.commits[-1] if m.commits else f"{0:040x}"
    if not m.commits or m.commits[0] != f"{0:040x}":
        m.commits.insert(0, f"{0:040x}")
    for r in RUNNERS:
        for n in range(nights):
            m.driver[(r, n)] = DRIVERS[0]
    for n in range(nights):
        m.triton[n] = TRITONS[0]
    for kind, n in plan.items():
        if kind == "driver":
            who = RUNNERS[int(rng.integers(len(RUNNERS)))]
            for k in range(n, nights):
                m.driver[(who, k)] = DRIVERS[1]
            events.append(Event(kind, n, verdicts.ENVIRONMENT, who, n))
        elif kind == "toolchain":
            for k in range(n, nights):
                m.triton[k] = TRITONS[1]
            events.append(Event(kind, n, verdicts.TOOLCHAIN, None, n))
        elif kind == "code":
            events.append(Event(kind, n, verdicts.CODE, None, n, effects[0][0]))
        elif kind == "creep":
            crossed = n + next(i for i in range(12) if 1.004 ** (i + 1) >= 1.03)
            events.append(Event(kind, crossed, verdicts.CREEP, None, n))
        elif kind == "outage":
            events.append(Event(kind, n, verdicts.MISSING_DATA, RUNNERS[int(rng.integers(len(RUNNERS)))], n))
        else:
            events.append(Event(kind, n, "none", None, n))
    events.sort(key=lambda e: e.night)
    return m, events


def measure(m: Machine, runner: str, n: int, rng) -> dict:
    """Night n's repeat medians of every case on `runner` (the model of the module docstring)."""
    common = rng.normal(0.0, DRIFT)
    moves = {s: (rng.choice([-1, 1]) * rng.uniform(*EXCURSION[1:]) if rng.random() < EXCURSION[0] else 0.0)
             for s in SCENARIOS}
    sha, driver, triton = m.night_sha[n], m.driver[(runner, n)], m.triton[n]
    out = {}
    for key in keys():
        level = m.levels[key] * m.driver_factor(driver, key) * m.toolchain_factor(triton, key)
        if not key[0].startswith("peer:"):
            level *= m.code_factor(sha, key)
        within, tau = m.sigma[key]
        shift = common + moves[key[1]] + rng.normal(0.0, tau)
        out[key] = [float(level * math.exp(shift + rng.normal(0.0, within))) for _ in range(REPEATS)]
    return out


def fingerprint_of(m: Machine, runner: str, n: int) -> dict:
    return {"gpu_model": GPU, "gpu_uuid": f"GPU-{abs(hash(runner)) % 10 ** 8:08d}", "vbios": "96.00.99.00.01",
            "driver": m.driver[(runner, n)], "runtime": "13.0", "torch": "2.11.0+cu130",
            "triton": m.triton[n], "triton_commit": None, "image_digest": "sha256:" + "ab" * 32,
            "runner": runner.split("_")[0], "vendor": "nvidia", "clocks": None}


def write_results(path: str, m: Machine, runner: str, n: int, date: str, series: dict) -> str:
    from perf import results
    from perf.measure.timing import Samples

    header = {"environment": {"time": f"{date}T03:00:00+00:00", "vendor": "nvidia", "gpu": GPU,
                              "arch": "sm_90",
                              "driver": m.driver[(runner, n)], "triton": m.triton[n], "torch": "2.11.0+cu130",
                              "commit": m.night_sha[n]},
              "nightly": {"commit": m.night_sha[n], "commit_date": f"{date}T01:00:00+00:00",
                          "machine": runner},
              "suite": "nightly"}
    with results.ResultsWriter(path, header, resume=False) as w:
        for (name, scenario, metric), medians in series.items():
            for r, x in enumerate(medians):
                w.record(variant=name, scenario=scenario, metric=metric, repeat=r,
                         samples=Samples((x * 0.999, x, x * 1.001)), config=[], digest="sim")
    return path


# --- the experiments, answered from the model ------------------------------------------------------


class ModelLab:
    """attribute.Lab from the model: the gate's ratio is the true ratio with the gate's noise,
    judged by the gate's rule (verdicts.latency_verdict with the case's thresholds)."""

    def __init__(self, m: Machine, thresholds, rng):
        from perf.thresholds import calibration_for

        self.m, self.th, self.rng = m, thresholds, rng
        self.cal, _ = calibration_for(thresholds, "nvidia", GPU)

    def _finding(self, key, true_ratio: float) -> dict:
        from statistics import NormalDist

        from perf.nightly import alert

        r = true_ratio * math.exp(self.rng.normal(0.0, GATE_SIGMA))
        z = math.log(r) / GATE_SIGMA
        p_slower, p_faster = 1 - NormalDist().cdf(z), NormalDist().cdf(z)
        t = alert.case_thresholds(self.th, self.cal, "nvidia", key, 30)
        verdict, why = verdicts.latency_verdict(r, p_slower, p_faster, t.warn, t.fail, 0.01)
        return {"verdict": verdict.value, "ratio": r, "p_value": min(p_slower, p_faster), "note": why}

    def remeasure(self, runner, good, bad, cases):
        out = {}
        for key in cases:
            f = self._finding(key, self.m.code_factor(bad, key) / self.m.code_factor(good, key))
            gate = verdicts.Finding("latency", "nvidia", GPU, *key, None, None, f["ratio"], None, None,
                                    f["p_value"], "", verdicts.Verdict(f["verdict"]), f["note"])
            out[key] = {**f, "status": verdicts.remeasure_status(gate)}
        return out

    def toolchain_ab(self, runner, sha, old, new, cases):
        out = {}
        for key in cases:
            true = self.m.toolchain_factor(new["triton"], key) / self.m.toolchain_factor(old["triton"], key)
            f = self._finding(key, 1 / true)  # the gate's head is the old Triton: old / new
            gate = verdicts.Finding("latency", "nvidia", GPU, *key, None, None, f["ratio"], None, None,
                                    f["p_value"], "", verdicts.Verdict(f["verdict"]), f["note"])
            out[key] = {**f, "ratio": 1 / f["ratio"], "status": verdicts.toolchain_status(gate)}
        return out

    def commits(self, good, bad):
        c = self.m.commits
        return c[c.index(good) + 1:c.index(bad) + 1]

    def bisect_step(self, runner, good, case):
        from perf.latency import bisect

        def step(commit):
            f = self._finding(case, self.m.code_factor(commit, case) / self.m.code_factor(good, case))
            return bisect.Step(commit, bisect.BAD if f["verdict"] == "fail" else bisect.GOOD, f["verdict"],
                               f["ratio"])

        return step


# --- the heartbeat ----------------------------------------------------------------------------------


def heartbeat(data: str, now: _dt.datetime, tracker, max_age_hours: float = 36.0) -> None:
    """The heartbeat after a night: perf/nightly/heartbeat.py's check, with the replay's clock."""
    from perf.nightly import heartbeat as beat

    beat.heartbeat(data, tracker, now, max_age_hours, say=lambda *_: None, expected=RUNNERS)


# --- the replay --------------------------------------------------------------------------------------


def replay(seed: int, nights: int, out: str) -> dict:
    """Run the replay into `out`; the simulation.json document."""
    import numpy as np

    from perf.checkout import ROOT
    from perf.ci import github
    from perf.nightly import attribute, store
    from perf.thresholds import load_thresholds

    m, events = build(seed, nights)
    for sub in ("data", "issues", "cache"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    # the night's results are written record by record, each fsynced (perf.files.Appender): in memory
    # where the machine has it, then copied into the data branch whole
    scratch = tempfile.mkdtemp(prefix="perf-simulate-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    data, cache = os.path.join(out, "data"), os.path.join(out, "cache")
    os.makedirs(os.path.join(data, store.NIGHTS))
    th = load_thresholds(os.path.join(str(ROOT), "thresholds.yaml"))
    tracker = github.tracker(dry_run_dir=os.path.join(out, "issues"))
    lab = ModelLab(m, th, np.random.default_rng([seed, 1]))
    noise_rng = np.random.default_rng([seed, 2])
    silent = {(e.runner, k) for e in events if e.kind == "outage" for k in range(e.night, e.night + 4)}
    wipes = {e.night for e in events if e.kind == "cache_loss"}
    opened: dict[str, int] = {}
    written = 0
    calibrations: dict = {}  # read once for both runners
    contexts = {r: attribute.Context(r, th, lab, tracker, calibrations=calibrations) for r in RUNNERS}
    try:
        for n in range(nights):
            date = (START + _dt.timedelta(days=n)).isoformat()
            if n in wipes:
                shutil.rmtree(cache, ignore_errors=True)  # the Actions cache emptied: nothing depends on it
            for runner in RUNNERS:
                if (runner, n) in silent:
                    continue
                series = measure(m, runner, n, noise_rng)
                tmp = write_results(os.path.join(scratch, f"{runner}.jsonl"), m, runner, n, date, series)
                store.write_night(data, runner, date, tmp, fingerprint_of(m, runner, n), None)
                files.write_text(os.path.join(cache, f"{runner}-{date}.jsonl"),
                                 files.read_text(tmp, "the night's results", "run the replay again"))
                written += 1
                attribute.attribute(data, contexts[runner], date)
            heartbeat(data, _dt.datetime.combine(START + _dt.timedelta(days=n + 1), _dt.time(12, 0),
                                                 tzinfo=_dt.timezone.utc), tracker)
            for issue in tracker.issues():
                opened.setdefault(issue["key"], n)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    kept = sum(len(store.nights(data, r)) for r in RUNNERS)
    return evaluate(events, opened, written - kept)


def cause_of(key: str) -> str:
    """The cause an issue key names (perf.nightly.issues.cause_key; the heartbeat's is missing data)."""
    from perf.nightly import heartbeat

    return verdicts.MISSING_DATA if key.startswith(heartbeat.KEY_PREFIX) else key.split("/")[0]


def evaluate(events: list[Event], opened: dict[str, int], lost: int) -> dict:
    """simulation.json from the events and the night each issue key was first seen.

    An issue is explained only by an event whose nights hold it *and* whose expected cause it
    names, at most one issue an event: an issue of another cause inside an event's nights is
    false, a second issue of the event's cause a duplicate; both fail the replay."""
    def nights(e: Event) -> list[tuple[int, str]]:  # a creep is reported once its total nears the floor
        begin = e.begin if e.kind == "creep" else e.night
        return sorted((n, k) for k, n in opened.items() if begin <= n <= e.night + 2)

    windows = [nights(e) for e in events]
    claimed: dict[str, Event] = {}  # issue key -> the event that explains it
    duplicate = []
    for e, window in zip(events, windows):
        own = [k for _, k in window if cause_of(k) == e.expected and k not in claimed]
        claimed.update((k, e) for k in own)
        duplicate += own[1:]
    rows = []
    for e, window in zip(events, windows):
        window = [(n, k) for n, k in window if claimed.get(k, e) is e]  # its own, or unexplained
        first = next(((n, k) for n, k in window if k in claimed), window[0] if window else None)
        rows.append({"kind": e.kind, "night": e.night, "expected_cause": e.expected,
                     "reported_cause": cause_of(first[1]) if first else "none",
                     "detected_after_nights": (first[0] - e.night) if first else None,
                     **({"runner": e.runner} if e.runner else {}),
                     **({"first_bad_commit": e.bad_commit, "issue": first[1] if first else None}
                        if e.kind == "code" else {})})
    false = sorted(k for k in opened if k not in claimed)
    return {"events": rows, "false_issues": len(false), "false_issue_keys": false,
            "duplicate_issues": len(duplicate), "duplicate_issue_keys": sorted(duplicate),
            "lost_nights": lost}


def passed(doc: dict) -> bool:
    ok = all(r["reported_cause"] == r["expected_cause"] and (r["detected_after_nights"] or 0) <= 2
             for r in doc["events"])
    code_ok = all(r.get("issue", "").endswith(r["first_bad_commit"][:12]) for r in doc["events"]
                  if r["kind"] == "code" and r["reported_cause"] == "code")
    return (ok and code_ok and doc["false_issues"] == 0 and doc["duplicate_issues"] == 0
            and doc["lost_nights"] == 0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="the replay's seed (default: 0)")
    p.add_argument("--nights", type=int, default=MIN_NIGHTS, help=f"nights to replay (default: {MIN_NIGHTS})")


def main(args: argparse.Namespace, conf: dict | None = None) -> int:
    """`perf nightly simulate` (conf: the asv configuration, unused: the replay writes its own history)."""
    files.check_output(args.out, "--out", directory=True)
    doc = replay(args.seed, args.nights, args.out)
    doc["passed"] = passed(doc)
    path = files.write_json(os.path.join(args.out, "simulation.json"), doc)
    for r in doc["events"]:
        print(f"night {r['night']:3d} {r['kind']:10s} expected {r['expected_cause']:12s} reported "
              f"{r['reported_cause']:12s} after {r['detected_after_nights']}", flush=True)
    print(f"false issues: {doc['false_issues']}, duplicate issues: {doc['duplicate_issues']}, "
          f"lost nights: {doc['lost_nights']} -> {path}",
          file=sys.stderr)
    return EXIT_OK if doc["passed"] else EXIT_FAIL
