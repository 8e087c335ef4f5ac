"""The latency gate on one GPU in one command: its calibration, false-fail rate and power.

    python -m perf.lab.gate_power --out DIR [--work DIR] [--budget-s 520] [--fake SEED]

A lab tool for a lent GPU that gives one command of at most 9 minutes (the H200 of
docs/latency.md, "False-fail rate and power on the NVIDIA H200"). In a clone of this checkout's
HEAD under --work it runs, each step with its own time limit inside --budget-s:

1. clone: the clone (perf.lab.proof.clone: a committed copy where the tree has no git) and, on a
   branch of its own, one comment line added to kernels/paged_attention/common.py (COMMENT);
2. plan: `perf gate --plan-only` of that commit against HEAD over the whole pr suite, the GPU
   hidden: the compiled-code identity rule (perf/change/keys.py) must plan 0 cases to time;
3. calibrate: `perf calibrate --force` of SCENARIOS (static_grid, eager and graph) in the clone:
   the calibration file the gate reads on this GPU (calibration/nvidia.yaml, or nvidia-<model>.yaml
   beside another model's: perf.thresholds.calibration_path), copied to DIR;
4. gates: the self-test's gates (`python -m perf.latency.selftest`, one gate per step, resuming
   from its runs.json): A/A gates (HEAD against itself, every case timed) and planted slowdowns of
   PLANTS percent (perf/latency/plant.py, against a 0 % plant), in the order of `order`; a gate
   starts only if its expected time (the median of the earlier gates of its kind and size, else
   PRIOR_S) fits in what is left, and is stopped at GATE_LIMIT times that; one that leaves no run
   ends the gates of its kind and size;
5. the counts, after every step: false fails per case verdict and per gate, warnings, detections
   per planted size per case-run and per gate, each with a Clopper-Pearson interval
   (perf.stats.rate_interval), and the self-test's own promises (perf.latency.selftest.summarize).

DIR (small, at most 8 files: what a device call brings back) gets gate_power.json (every step's
command, exit code and wall time, and the counts), gate_power.md (the tables docs/latency.md
takes), nvidia*.yaml (the calibration), runs.json (the gates' findings, which `perf selftest
--summarize` reads) and plan.json (the comment-only plan). Logs, the clone, the gates' folders and
the batches stay under --work; the same --work resumes a run that was cut short.

`--fake SEED` runs it all on a CPU in seconds with a seeded noise model in place of every
measuring process (FakeRunner: the plan, the calibration and each gate's rounds are made up, then
judged by the gate's own statistics, thresholds and verdicts) and a model clock: the unit tests'
mode, never a measurement. Exit 0 when the comment-only commit planned 0 cases, the calibration was
written and the self-test's promises held on the gates that ran; 1 otherwise; 2 for bad input.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from perf import files, git, stats
from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError
from perf.lab.proof import Proof, Runner, clone, run_python

# Fast pr scenarios: two that take >= 0.1 ms on an H100 (the size the 2 % promise is about; the
# H200's 1.4x bandwidth may bring the decode below it) and two short ones, falcon-7b's the noisiest
# case of the H100's 20 A/A gates (4 of its 6 warnings, docs/latency.md "Proof"). H100 graph
# replays (calibration/nvidia.yaml, 2026-11-22): 0.277, 0.257, 0.103 and 0.015 ms.
SCENARIOS = (
    "llama3-8b/prefill/batch2-kv2048/block16",
    "llama3-8b/decode/batch64-kv4096-var/block16",
    "llama2-7b/decode/batch16-kv1024/block16",
    "falcon-7b/decode/batch16-kv1024/block16",
)
VARIANT = "static_grid"  # the production entry, the one calibrated
VENDOR = "nvidia"
PLANTS = (10, 2, 5)  # percent, in the order their first gates run: the two promised sizes first
LARGEST = 10  # gated on both metrics; the smaller plants on graph replay (selftest.gate_request)
AA_PER_CYCLE = 3  # A/A gates before each round of planted ones: false fails need the most gates
MAX_AA, MAX_PLANT_RUNS = 60, 20  # upper limits of the order; the budget ends it long before
BUDGET_S = 520  # the whole run, under the 9 minutes of one device command (the rest: start, copy)
# Expected wall time of a gate of the 4 scenarios before one of its kind ran here (seconds). From
# the H200's planted gate of 2026-11-28 (docs/data/planted-gate-h200-2026-11-28/after.txt: one
# scenario, both metrics, 3 processes and their 3 re-measure processes in 1.0 minute, about 8 s a
# process) and the H100's self-test (docs/latency.md: 25 scenarios, A/A 93-170 s, so about 1-1.7 s
# a scenario a process): A/A 3 x (8 + 4 x 1.5) + 5; a plant fails and re-measures every case it
# slowed, so twice the processes, the smaller ones on one metric.
PRIOR_S = {"aa": 50.0, "plant": 75.0, "largest": 90.0}
GATE_LIMIT = 2.5  # a gate is stopped at this many times its expected time (a hung process)
# Each gate's step beyond the gate itself: the self-test's process (Python, torch, the GPU check) and,
# for a plant, its two planted worktrees committed (unmeasured estimate; a step's wall time says).
STEP_OVERHEAD_S = 10.0
MIN_GATE_S = 90.0  # ... but never before this (a first gate compiles the kernels)
# The other steps' limits (seconds): planning the pr suite's 135 cases on a comment-only commit
# compiles 204 kernels for sm_90, 172 CPU-seconds (docs/latency.md, 2-core CPU, 2026-11-28): about
# 20-30 s on 16 cores; the calibration of 4 scenarios in 6 processes of about 14 s each (above).
TIMEOUT_S = {"plan": 150.0, "calibrate": 200.0}
RESERVE_S = 10.0  # kept for the last tables and the copy into --out
COMMENT = "# A comment-only change (perf/lab/gate_power.py): every kernel compiles to the same code.\n"
TARGET = os.path.join("kernels", "paged_attention", "common.py")


def written_calibration(repo: str) -> str | None:
    """The calibration file `perf calibrate` last wrote in `repo`: one file per GPU model
    (perf.thresholds.calibration_path: calibration/nvidia.yaml, or nvidia-<model>.yaml beside
    another model's), the newest of them."""
    import glob

    found = glob.glob(os.path.join(repo, "calibration", f"{VENDOR}*.yaml"))
    return max(found, key=os.path.getmtime) if found else None


def comment_commit(repo: str) -> str:
    """A commit on a branch of its own adding COMMENT as the first line of TARGET (above its module
    docstring, so that it is a comment and every line of the kernels moves); its sha. The clone's
    HEAD stays where it was."""
    head = git.git(repo, "rev-parse", "HEAD", check=True)
    git.git(repo, "checkout", "-q", "-B", "gate-power-comment", head, check=True)
    path = os.path.join(repo, TARGET)
    text = files.read_text(path, "the kernel module", "restore it from the repository")
    files.write_text(path, COMMENT + text)
    sha = git.commit_all(repo, "gate power: a comment-only change", "perf-gate-power")
    git.git(repo, "checkout", "-q", head, check=True)
    return sha


def order(plants: tuple[int, ...] = PLANTS, max_aa: int = MAX_AA, max_plant_runs: int = MAX_PLANT_RUNS,
          per_cycle: int = AA_PER_CYCLE) -> list[tuple[str, int | None, int]]:
    """(kind, percent, run) of every gate in the order they run: `per_cycle` A/A gates, then one
    of each plant, again; so a run cut short by its budget holds the most A/A gates (false fails
    are rare: they need the most) and some of each plant."""
    seq: list[tuple[str, int | None, int]] = []
    aa = 0
    for i in range(max(max_plant_runs, math.ceil(max_aa / per_cycle))):
        for _ in range(per_cycle):
            if aa < max_aa:
                seq.append(("aa", None, aa))
                aa += 1
        if i < max_plant_runs:
            seq += [("plant", p, i) for p in plants]
    return seq


def run_name(kind: str, percent: int | None, i: int) -> str:
    """The self-test's name of a gate run (perf/latency/selftest.py `_gate_runs`)."""
    return f"aa-{i}" if kind == "aa" else f"plant{percent}-vs0-{i}"


def selftest_argv(kind: str, percent: int | None, i: int, out: str) -> list[str]:
    """The self-test's command line that runs this one gate: every earlier one of its kind and size
    is in its runs.json already, so it runs the one missing (the self-test resumes by name)."""
    counts = (["--aa-runs", str(i + 1), "--plants", "", "--plant-runs", "0"] if kind == "aa" else
              ["--aa-runs", "0", "--plants", str(percent), "--plant-runs", str(i + 1)])
    return ["-m", "perf.latency.selftest", "--suite", "pr", "--variants", VARIANT, "--scenarios",
            ",".join(SCENARIOS), *counts, "--out", out]


def expected_s(runs: list[dict], kind: str, percent: int | None) -> float:
    """A gate's expected wall time: the median of the earlier ones of its kind and size, else PRIOR_S."""
    same = [r["seconds"] for r in runs if r["kind"] == kind and r.get("percent") == percent]
    if same:
        return float(np.median(same))
    return PRIOR_S["aa" if kind == "aa" else "largest" if percent == LARGEST else "plant"]


# --- the counts ---------------------------------------------------------------------------------


def _rate(k: int, n: int) -> dict:
    low, high = stats.rate_interval(k, n)
    return {"count": k, "of": n, "rate": k / n if n else None, "ci95": [low, high]}


def _judged(run: dict) -> list[dict]:
    """A gate run's case verdicts that compared two measurements (a ratio)."""
    return [f for f in run["findings"] if f.get("ratio") is not None]


def counts(runs: list[dict]) -> dict:
    """False fails and warnings of the A/A gates, detections of each plant, per case verdict and
    per gate, each with its 95 % Clopper-Pearson interval; and how many case verdicts had
    thresholds calibrated on this GPU (a finding's threshold names its source)."""
    aa = [r for r in runs if r["kind"] == "aa"]
    verdicts = [f for r in aa for f in _judged(r)]
    out = {"aa": {"gates": len(aa), "fail_per_case": _rate(sum(f["verdict"] == "fail" for f in verdicts),
                                                           len(verdicts)),
                  "fail_per_gate": _rate(sum(any(f["verdict"] == "fail" for f in _judged(r)) for r in aa),
                                         len(aa)),
                  "warn_per_case": _rate(sum(f["verdict"] == "warn" for f in verdicts), len(verdicts)),
                  "exit_codes": [r["rc"] for r in aa]},
           "plants": {}}
    for pct in sorted({r["percent"] for r in runs if r["kind"] == "plant"}):
        pr = [r for r in runs if r["kind"] == "plant" and r["percent"] == pct]
        case_runs = [f for r in pr for f in _judged(r)]
        per_case: dict[str, dict] = {}
        for f in case_runs:
            c = per_case.setdefault(f"{f['scenario']} {f['metric']}", {"runs": 0, "fail": 0, "ratios": []})
            c["runs"] += 1
            c["fail"] += f["verdict"] == "fail"
            c["ratios"].append(f["ratio"])
        out["plants"][str(pct)] = {
            "gates": len(pr), "detected_per_case_run": _rate(sum(f["verdict"] == "fail" for f in case_runs),
                                                             len(case_runs)),
            "gates_failing_every_case": _rate(sum(bool(_judged(r)) and all(f["verdict"] == "fail"
                                                                           for f in _judged(r)) for r in pr),
                                              len(pr)),
            "cases": {k: {"runs": c["runs"], "fail": c["fail"],
                          "effect": float(np.exp(np.mean(np.log(c["ratios"]))))}
                      for k, c in per_case.items()}}
    every = [f for r in runs for f in _judged(r)]
    out["calibrated_verdicts"] = {"count": sum("calibrated (" in f["threshold"] for f in every),
                                  "of": len(every)}
    return out


def _cell(r: dict) -> str:
    if not r["of"]:
        return "none ran"
    low, high = r["ci95"]
    return f"{r['count']} of {r['of']} ({100 * r['rate']:.1f} %; 95 % CI {100 * low:.1f}-{100 * high:.1f} %)"


def markdown(doc: dict) -> str:
    """The tables docs/latency.md takes: what ran where, the counts, each step's wall time."""
    c, env = doc.get("counts") or {}, doc.get("environment") or {}
    plan, cal = doc.get("plan") or {}, doc.get("calibration") or {}
    where = (f"{env.get('gpu')} (driver {env.get('driver')}, torch {env.get('torch')}, triton "
             f"{env.get('triton')})" if env.get("gpu") else "no gate ran")
    fake = " (FAKE: a seeded noise model on a CPU, not a measurement)" if doc.get("fake") is not None else ""
    planned = (f"**{plan['measure']} of {plan['total']} cases to time** (expected 0)" if plan
               else "not planned")
    lines = [f"Gate power run{fake} on {where}, {doc.get('date')}, commit {str(doc.get('commit'))[:10]}; "
             f"static_grid, scenarios: {', '.join(SCENARIOS)}.", "",
             f"- comment-only commit in {TARGET}: {planned}",
             f"- calibration: {cal.get('note', 'not run')}"]
    if c:
        cv = c["calibrated_verdicts"]
        lines.append(f"- thresholds calibrated on this GPU for {cv['count']} of {cv['of']} case verdicts")
        a = c["aa"]
        lines += ["", "| check | gates | result |", "|---|---|---|",
                  f"| A/A false fails per case verdict | {a['gates']} | {_cell(a['fail_per_case'])} |",
                  f"| A/A gates with a false fail | {a['gates']} | {_cell(a['fail_per_gate'])} |",
                  f"| A/A warnings per case verdict | {a['gates']} | {_cell(a['warn_per_case'])} |"]
        for pct, p in c["plants"].items():
            metrics = "eager and graph" if int(pct) == LARGEST else "graph"
            lines += [f"| planted +{pct} % ({metrics}): detected (FAIL) per case-run | {p['gates']} | "
                      f"{_cell(p['detected_per_case_run'])} |",
                      f"| planted +{pct} %: gates failing every case | {p['gates']} | "
                      f"{_cell(p['gates_failing_every_case'])} |"]
        lines += ["", "| plant | case | FAIL / runs | effect (geometric mean ratio) |", "|---|---|---|---|"]
        lines += [f"| +{pct} % | {k} | {x['fail']}/{x['runs']} | {x['effect']:.4f} |"
                  for pct, p in c["plants"].items() for k, x in sorted(p["cases"].items())]
    lines += ["", "| step | wall s | result |", "|---|---|---|"]
    lines += [f"| {p['phase']} | {p.get('wall_s', '-')} | "
              f"{p.get('note') or ('exit ' + str(p.get('rc')))} |" for p in doc.get("phases", [])]
    lines.append(f"\nTotal {doc.get('wall_s', 0):.0f} s of a budget of {doc.get('budget_s'):.0f} s.")
    if doc.get("selftest_md"):
        lines += ["", "The self-test's promises on the same runs (perf/latency/selftest.py):", "",
                  doc["selftest_md"]]
    return "\n".join(lines) + "\n"


# --- the run ------------------------------------------------------------------------------------


class PowerRun:
    """One run's state: its steps (through perf.lab.proof.Proof), the gates, the files in --out."""

    def __init__(self, out: str, work: str, budget_s: float, runner: Runner, clock: Callable[[], float],
                 fake: int | None):
        self.out, self.work, self.runner = out, work, runner
        self.repo = os.path.join(work, "repo")
        self.selftest = os.path.join(work, "selftest")
        self.state = Proof(out, budget_s, file="gate_power.json", name="gate_power", logs=work, clock=clock,
                           doc={"phases": [], "budget_s": budget_s, "fake": fake, "work": work,
                                "scenarios": list(SCENARIOS), "variant": VARIANT, "plants": list(PLANTS),
                                "date": _dt.date.today().isoformat(), "passed": False})
        self.env: dict = {}
        os.makedirs(os.path.join(work, "logs"), exist_ok=True)

    @property
    def doc(self) -> dict:
        return self.state.doc

    def setup(self) -> str:
        """The clone and its comment-only commit (reused where --work holds them); HEAD's sha."""
        from perf.process import child_env

        def make():
            if not os.path.isdir(self.repo):
                self.doc["clone"] = clone(self.doc.get("source") or os.getcwd(), self.repo)
            head = git.git(self.repo, "rev-parse", "HEAD", check=True)
            comment = (git.git(self.repo, "rev-parse", "-q", "--verify", "gate-power-comment")
                       or comment_commit(self.repo))
            return head, comment

        head, comment = self.state.setup("clone", make)
        self.doc.update(commit=head, comment_commit=comment)
        self.env = child_env(self.repo, PERF_BATCH_CACHE=os.path.join(self.work, "batches"))
        return head

    def plan(self, head: str) -> None:
        """The comment-only commit's change plan over the pr suite, on the CPU."""
        from perf.change import plan as changes

        out = os.path.join(self.work, "plan")
        path = os.path.join(out, changes.KINDS[changes.LATENCY].file)
        if not os.path.exists(path):
            argv = ["-m", "perf", "gate", "--plan-only", "--suite", "pr", "--vendor", VENDOR,
                    "--base-ref", head, "--head-ref", self.doc["comment_commit"], "--out", out]
            self.state.step("plan", argv, {**self.env, "CUDA_VISIBLE_DEVICES": ""}, self.repo,
                            TIMEOUT_S["plan"], self.runner)
        if os.path.exists(path):
            doc = changes.read_plan(path, changes.LATENCY)
            n, same = doc["counts"]["measure"], doc["counts"]["unchanged"]
            self.doc["plan"] = {"measure": n, "unchanged": same, "total": n + same,
                                "why": [f"{r['variant']} {r['scenario']}: {r['why']}"
                                        for r in doc["measure"]][:5]}
            shutil.copyfile(path, os.path.join(self.out, "plan.json"))
        self.state.save()

    def calibrate(self) -> None:
        """This GPU's calibration of SCENARIOS in the clone (kept where --work holds one)."""
        done = os.path.join(self.work, "calibrate.done")
        if not os.path.exists(done):
            argv = ["-m", "perf", "calibrate", "--variants", VARIANT, "--scenarios", ",".join(SCENARIOS),
                    "--force", "--out", os.path.join(self.work, "calibrate")]
            rc = self.state.step("calibrate", argv, self.env, self.repo, TIMEOUT_S["calibrate"], self.runner)
            if rc == 0:
                files.write_text(done, "calibrated\n")
        cal = written_calibration(self.repo)
        if os.path.exists(done) and cal:
            shutil.copyfile(cal, os.path.join(self.out, os.path.basename(cal)))
            self.doc["calibration"] = {"note": f"{os.path.relpath(cal, self.repo)} written for this GPU "
                                               f"({len(SCENARIOS)} scenarios, both metrics; copied to --out)"}
        else:
            self.doc["calibration"] = {"note": "FAILED: the gates below use whatever calibration/ held (for "
                                               "another GPU: the uncalibrated defaults)"}
        self.state.save()

    def gates(self) -> None:
        """The A/A and planted gates in `order`, each one a step, while the budget lasts. A gate
        that leaves no run (timed out, crashed) ends the gates of its kind and size: the self-test
        would run it again first in the next one's step, under that one's limit."""
        from perf.latency.selftest import load_runs

        runs_path = os.path.join(self.selftest, "runs.json")
        broken: set[tuple[str, int | None]] = set()
        while True:
            runs = load_runs(runs_path)
            done = {r["name"] for r in runs}
            left = self.state.left() - RESERVE_S
            todo = [g for g in order() if run_name(*g) not in done and g[:2] not in broken]
            fits = [g for g in todo if expected_s(runs, g[0], g[1]) + STEP_OVERHEAD_S <= left]
            if not fits:
                print(f"gate_power: {len(runs)} gates ran; none more fits in {max(0.0, left):.0f} s",
                      flush=True)
                return
            kind, pct, i = fits[0]
            name = run_name(kind, pct, i)
            limit = max(MIN_GATE_S, GATE_LIMIT * expected_s(runs, kind, pct) + STEP_OVERHEAD_S)
            self.state.step(name, selftest_argv(kind, pct, i, self.selftest), self.env, self.repo, limit,
                            self.runner)
            if not any(r["name"] == name for r in load_runs(runs_path)):
                broken.add((kind, pct))
                print(f"gate_power: {name} left no run; no more gates of its kind (its log: "
                      f"{self.work}/logs/{name}.log)", flush=True)
            self.tables()

    def tables(self) -> None:
        """The counts and the self-test's promises from runs.json; gate_power.json and .md in --out."""
        from perf.latency import selftest

        runs = selftest.load_runs(os.path.join(self.selftest, "runs.json"))
        if runs:
            self.doc["counts"] = counts(runs)
            ran = [r for r in runs if r["kind"] == "plant"]  # "asked for": what the budget let run
            args = argparse.Namespace(aa_runs=len(runs) - len(ran), plants=",".join(map(str, PLANTS)),
                                      plant_runs=max([r["seed"] + 1 for r in ran], default=0))
            summary, kept = selftest.summarize(runs, self.selftest, args)
            self.doc.update(promises_kept=kept, environment=self._environment(runs),
                            selftest_md=selftest.markdown(summary, {**self._environment(runs),
                                                                   "suite": "pr", "variants": VARIANT}))
            shutil.copyfile(os.path.join(self.selftest, "runs.json"), os.path.join(self.out, "runs.json"))
        self.state.save()
        files.write_text(os.path.join(self.out, "gate_power.md"), markdown(self.doc))

    def _environment(self, runs: list[dict]) -> dict:
        """The GPU, driver and versions of the first gate that left its results."""
        from perf import results

        for r in runs:
            path = os.path.join(self.selftest, r["name"], "head.jsonl")
            try:
                env = results.load(path, warn=False).environment if os.path.exists(path) else None
            except ConfigError:  # a results file the tables cannot read ends no run
                env = None
            if env is not None:
                return {k: env.get(k) for k in ("gpu", "driver", "torch", "triton", "commit")} | {
                    "date": self.doc["date"]}
        return {}


def power(out: str, work: str, budget_s: float = BUDGET_S, runner: Runner | None = None,
          clock: Callable[[], float] = time.monotonic, fake: int | None = None,
          source: str | None = None) -> dict:
    """Run every step into `out` (module docstring); gate_power.json's document."""
    run = PowerRun(out, work, budget_s, runner or run_python, clock, fake)
    run.doc["source"] = source
    print(f"gate_power: the clone, logs and gates in {work}; the tables in {out}", flush=True)
    head = run.setup()
    run.plan(head)
    run.calibrate()
    run.gates()
    run.tables()
    plan = run.doc.get("plan") or {}
    run.doc["passed"] = bool(plan.get("measure") == 0 and os.path.exists(os.path.join(work, "calibrate.done"))
                             and run.doc.get("promises_kept") and "counts" in run.doc)
    run.tables()
    return run.doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.gate_power", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True,
                   help="a folder without an earlier run's gate_power.json: gate_power.json and .md, "
                        "nvidia*.yaml, runs.json, plan.json")
    p.add_argument("--work", default=None, metavar="DIR",
                   help="the clone, logs, gates and batches (default: a new folder in the system's temporary "
                        "folder); the same DIR again resumes a run cut short")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help=f"the whole run's time limit in seconds (default: {BUDGET_S})")
    p.add_argument("--fake", type=int, default=None, metavar="SEED",
                   help="no GPU: a seeded noise model stands in for every measuring process (the tests' "
                        "mode)")
    args = p.parse_args(argv)
    if args.budget_s <= 0:
        raise ConfigError(f"--budget-s {args.budget_s:g}: must be positive")
    files.check_output(args.out, "--out", directory=True)
    if os.path.exists(os.path.join(args.out, "gate_power.json")):  # a log of this run may be there
        raise ConfigError(f"--out {args.out}: holds an earlier run's gate_power.json; name a new folder")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="perf-gate-power-")
    runner, clock = None, time.monotonic
    if args.fake is not None:
        fake = FakeRunner(args.fake)
        runner, clock = fake, fake.clock
    else:
        from perf import vendor as vendor_mod

        if not vendor_mod.on_gpu():
            raise ConfigError("no GPU: the gate's power is measured on the GPU it is for; run it there "
                              "(or --fake SEED for the CPU model)")
    doc = power(out, work, args.budget_s, runner, clock, args.fake)
    sys.stdout.write(markdown(doc))
    print(f"gate_power: {'passed' if doc['passed'] else 'NOT PASSED'}; {out}/gate_power.md", flush=True)
    return EXIT_OK if doc["passed"] else EXIT_FAIL


# --- the CPU model (--fake): the tests' stand-in for every measuring process --------------------

FAKE_GPU = "fake GPU (perf.lab.gate_power --fake)"
# Per scenario: graph-replay median (ms), sigma_round and tau of its paired log ratio: the H100's
# calibration of 2026-11-22 (calibration/nvidia.yaml), graph metric; eager gets EAGER_NOISE times
# that. A model for the tests, never a measurement of any GPU.
MODEL = {
    SCENARIOS[0]: (0.277, 0.0031, 0.0011),
    SCENARIOS[1]: (0.257, 0.0023, 0.0006),
    SCENARIOS[2]: (0.103, 0.0017, 0.0),
    SCENARIOS[3]: (0.015, 0.0016, 0.0007),
}
EAGER_NOISE = 1.5
DELIVERED = {"graph": 0.95, "eager": 0.9}  # the share of a plant the model's cases slow by
FAKE_S = {"plan": 30.0, "calibrate": 90.0}  # model seconds of the other steps (PRIOR_S for the gates)


class FakeRunner:
    """Stands in for each step's `python -m ...` (perf.lab.proof.Runner): the plan writes a plan.json
    with `plan_measure` cases to time, the calibration writes the fake GPU's calibration file from MODEL, and
    each gate writes its rounds (MODEL's noise times `noise_scale`, plus the plant) into base.jsonl
    and head.jsonl, judged by the gate's own analysis (perf.latency.analysis.paired_findings: the
    calibration, thresholds and verdicts), a failing case by a second draw (the gate's re-measure),
    then appends the run to the self-test's runs.json. `offset`: head slower by this log ratio in
    every gate, A/A too (what a real A/A should never show: it makes false fails). Every step
    advances `clock` by its model seconds; `hang` names a step that times out instead."""

    def __init__(self, seed: int, noise_scale: float = 1.0, plan_measure: int = 0, hang: str | None = None,
                 offset: float = 0.0):
        self.rng = np.random.default_rng(seed)
        self.noise_scale, self.plan_measure, self.hang, self.offset = noise_scale, plan_measure, hang, offset
        self.now = 0.0
        self.calls: list[str] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, argv: list[str], env: dict, cwd: str, timeout: float, log: str) -> int:
        import subprocess

        name = os.path.basename(log)[:-len(".log")]
        self.calls.append(name)
        files.write_text(log, f"fake: {' '.join(argv)}\n")
        if self.hang and name == self.hang:
            self.now += timeout
            raise subprocess.TimeoutExpired(argv, timeout)
        if "--plan-only" in argv:
            self.now += FAKE_S["plan"]
            return self._plan(argv)
        if argv[1:3] == ["perf", "calibrate"]:
            self.now += FAKE_S["calibrate"]
            return self._calibrate(cwd)
        return self._gate(argv, cwd)

    def _plan(self, argv: list[str]) -> int:
        from perf.change import plan as changes

        why = "fake: compiled kernel differs"
        rows = [{"variant": VARIANT, "scenario": s, "why": why if i < self.plan_measure else None}
                for i, s in enumerate(MODEL)]
        changes.write_plan(_value(argv, "--out"), changes.document(
            changes.LATENCY, rows, vendor=VENDOR, target="sm_90", base=_value(argv, "--base-ref"),
            head=_value(argv, "--head-ref")))
        return 0

    def _calibrate(self, repo: str) -> int:
        from perf.latency import noise
        from perf.thresholds import CaseNoise

        rows = [{"variant": VARIANT, "scenario": s, "metric": m,
                 "case": CaseNoise(sig * (EAGER_NOISE if m == "eager" else 1), tau, 6, 60, ms)}
                for s, (ms, sig, tau) in MODEL.items() for m in ("eager", "graph")]
        doc = noise.calibration_doc(rows, VENDOR, self._environment(repo), {"processes": 6, "repeats": 10})
        from perf.thresholds import calibration_path

        path = calibration_path(os.path.join(repo, "thresholds.yaml"), VENDOR, FAKE_GPU)
        noise.write_calibration(path, doc, force=True)
        return 0

    @staticmethod
    def _environment(repo: str) -> dict:
        return {"gpu": FAKE_GPU, "vendor": VENDOR, "driver": "fake", "torch": "fake", "triton": "fake",
                "commit": git.git(repo, "rev-parse", "HEAD", check=True), "time": "2026-11-29T00:00:00+00:00"}

    def _gate(self, argv: list[str], repo: str) -> int:
        from perf.latency import selftest

        args = selftest._parser().parse_args(argv[2:])
        kind, pct = ("aa", None) if args.aa_runs else ("plant", int(args.plants))
        i = (args.aa_runs if kind == "aa" else args.plant_runs) - 1
        name, path = run_name(kind, pct, i), os.path.join(args.out, "runs.json")
        runs = selftest.load_runs(path)
        seconds = expected_s([], kind, pct) * float(np.exp(self.rng.normal(0, 0.1)))
        self.now += seconds
        if any(r["name"] == name for r in runs):
            return 0
        findings = self._findings(os.path.join(args.out, name), repo, kind, pct)
        runs.append({"name": name, "kind": kind, "percent": pct, "seed": i,
                     "commit": self._environment(repo)["commit"],
                     **({"baseline": selftest.ZERO_PLANT} if kind == "plant" else {}), "rc": 0,
                     "seconds": seconds, "findings": [f.to_dict() for f in findings]})
        files.write_json(path, runs)
        return 0

    def _findings(self, run_dir: str, repo: str, kind: str, pct: int | None) -> list:
        """The gate's findings on the model's rounds: 3 processes x 10 rounds, a failing case measured
        again in 3 more (its second finding is the one that counts, as in the gate)."""
        from perf import results
        from perf.latency import analysis
        from perf.thresholds import calibration_for, load_thresholds
        from perf.verdicts import Verdict

        th = load_thresholds(os.path.join(repo, "thresholds.yaml"))
        cal, _ = calibration_for(th, VENDOR, FAKE_GPU)
        metrics = ("eager", "graph") if kind == "aa" or pct == LARGEST else ("graph",)
        keys = {(VARIANT, s, m) for s in MODEL for m in metrics}
        os.makedirs(run_dir, exist_ok=True)
        header = {"environment": self._environment(repo), "suite": "pr"}
        paths = [os.path.join(run_dir, f"{side}.jsonl") for side in ("base", "head")]
        with results.ResultsWriter(paths[0], header, resume=False) as wb, \
                results.ResultsWriter(paths[1], header, resume=False) as wh:
            self._rounds(wb, wh, keys, pct or 0, "p")
            first = analysis.paired_findings(results.load(paths[0]), results.load(paths[1]), th, VENDOR, cal,
                                             {"p0", "p1", "p2"})
            failing = {(f.variant, f.scenario, f.metric) for f in first if f.verdict is Verdict.FAIL}
            self._rounds(wb, wh, failing, pct or 0, "r")
        if not failing:
            return first
        again = analysis.paired_findings(results.load(paths[0]), results.load(paths[1]), th, VENDOR, cal,
                                         {"r0", "r1", "r2"}, failing)
        by_key = {(f.variant, f.scenario, f.metric): f for f in again}
        return [by_key.get((f.variant, f.scenario, f.metric), f) for f in first]

    def _rounds(self, wb, wh, keys: set, pct: int, prefix: str) -> None:
        from perf.measure.timing import Samples

        for p in range(3):
            for _, scenario, metric in sorted(keys):
                ms, sig, tau = MODEL[scenario]
                sig *= (EAGER_NOISE if metric == "eager" else 1) * self.noise_scale
                shift = (math.log1p(DELIVERED[metric] * pct / 100) + self.offset
                         + self.rng.normal(0, tau * self.noise_scale))
                for r in range(10):
                    d = shift + self.rng.normal(0, sig)
                    for w, x in ((wb, ms * math.exp(-d / 2)), (wh, ms * math.exp(d / 2))):
                        w.record(variant=VARIANT, scenario=scenario, metric=metric, repeat=r, config=[],
                                 samples=Samples((x * 0.999, x, x * 1.001)), digest="fake",
                                 process=f"{prefix}{p}")


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
