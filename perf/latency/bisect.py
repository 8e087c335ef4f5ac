"""`python -m perf bisect GOOD BAD --scenario S`: the first commit that made one case slower.

A *step* is one latency gate of one case, run in this process (perf/latency/ab.py `run_gate` of
`Plan.gate_request`), GOOD its base and the commit under test its head, exactly `python -m perf
gate --base-ref GOOD --head-ref C --scenarios S --variants V --metrics M`: both commits'
kernels side by side in the gate's fresh processes on the same tensors, the case's calibrated
threshold, a failing case measured again before it fails. A commit is *bad* when that gate
FAILs the case (slower than GOOD beyond its threshold, significant, confirmed by the
re-measure), *good* for any other verdict (ok, warn, improved), also `unchanged`: the gate
plans first (perf/change/) and a commit whose launches of the case are identical to
GOOD's cannot be slower, so it is good without GPU time (most commits of a range touch other
code); and *skipped*, as `git bisect skip`, when the gate cannot measure it: a measuring
process crashed (its kernels do not import) or the case has no ratio (a compile error, the
variant missing at that commit).

The range is the commits after GOOD up to BAD along BAD's first parents, as `git bisect
--first-parent` walks it (perf/git.py `first_parent_range`): a merge is tested as one
commit, the commits of the branch it merged are not. BAD is measured first; if the gate
does not FAIL it there is nothing to find (exit 1). Then a binary search: ceil(log2(n + 1))
steps for the n commits between GOOD and BAD, each probing the middle one of the commits
left untested (after a skip, so a neighbour of the skipped one). When only skipped commits
separate the last good commit from the first bad one, the answer is that range, as git
gives it.

Each step's gate writes to DIR/<sha>/ (findings, report, raw results, gate.json); the same
command run again reuses every finished step (the gate resumes from its gate.json: nothing
measured again, the verdict recomputed with today's thresholds) and DIR/bisect.json holds
the steps and the result. Exit codes: 0 the first bad commit was found; 1 no single one
(BAD not slower, BAD not measurable, only skipped commits left); 2 bad input; 130
interrupted.

`python -m perf.latency.bisect --make-demo-range DIR` builds a range to show it on: a
throwaway repository holding this checkout, then N commits touching a harmless file, one
of them planting a slowdown of known size (perf/latency/plant.py); `--run` also runs the
bisect and checks that it names the planted commit.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from perf import files, validate, why
from perf import vendor as vendor_mod
from perf.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, ConfigError, NothingMeasured
from perf.git import commit_all, first_parent_range, git, is_ancestor, repo_root, resolve_commit
from perf.latency.request import GateRequest
from perf.process import child_env
from perf.verdicts import Finding, Verdict

BISECT_VERSION = 1
DEFAULT_VARIANT = "static_grid"  # the production entry (kernels.paged_attention)
# graph replay: device time with no host work in it, the quietest metric (calibration/nvidia.yaml,
# H100, 2026-11-22: sigma_round 0.06-0.54 % against eager's 2.1-16.7 %)
DEFAULT_METRIC = "graph"
GOOD, BAD, SKIP = "good", "bad", "skip"


# --- the search (pure: the step is a function of the commit) ---------------------------------

@dataclass
class Step:
    """One step: the gate's verdict on the case at `commit` against GOOD, and its outcome."""

    commit: str
    outcome: str  # GOOD | BAD (the gate FAILs the case) | SKIP (the gate could not measure it)
    verdict: str | None = None  # the gate's verdict of the case: fail | warn | ok | improved
    ratio: float | None = None  # head / base (GOOD)
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    threshold: str = ""
    note: str = ""
    reused: bool = False  # its gate measured nothing new (finished by an earlier run)
    seconds: float = 0.0


@dataclass
class Range:
    """Where the first bad commit can still be: after index `lo` (-1 is GOOD) up to index
    `hi` (a bad commit); `skipped` commits are never probed again."""

    lo: int
    hi: int
    skipped: set[int] = field(default_factory=set)

    def untested(self) -> list[int]:
        return [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]

    def probe(self) -> int | None:
        """The middle one of the untested commits (None: nothing left to test). Over u
        untested commits that takes ceil(log2(u + 1)) steps without skips."""
        left = self.untested()
        return left[(len(left) - 1) // 2] if left else None

    def steps_left(self) -> int:
        return math.ceil(math.log2(len(self.untested()) + 1))

    def update(self, index: int, outcome: str) -> None:
        if outcome == BAD:
            self.hi = index
        elif outcome == GOOD:
            self.lo = index
        else:
            self.skipped.add(index)

    def candidates(self) -> list[int]:
        """The commits the first bad one may be: once nothing is left to test, the skipped
        commits after the last good one and the first bad one."""
        return list(range(self.lo + 1, self.hi + 1))


@dataclass
class Outcome:
    result: str  # found | ambiguous | not-slower | bad-unmeasurable
    candidates: list[str]  # the commits the first bad one may be (one when found)
    last_good: str | None  # the last commit measured good (None: GOOD itself)
    steps: list[Step]


def planned_steps(commits: int) -> int:
    """Steps without skips over `commits` commits after GOOD up to BAD: one to confirm BAD,
    ceil(log2(n + 1)) for the n = commits - 1 commits between GOOD and BAD."""
    return 1 + math.ceil(math.log2(commits))


def search(commits: list[str], step: Callable[[str], Step],
           report: Callable[[Step, int, Range | None], None] | None = None) -> Outcome:
    """Bisect `commits` (oldest first; the last is BAD; GOOD, before the first, is good) with
    `step`; `report(step, index, range)` after every step (range None: BAD did not confirm)."""
    steps: list[Step] = []

    def run(i: int) -> Step:
        s = step(commits[i])
        steps.append(s)
        return s

    last = len(commits) - 1
    first = run(last)
    if first.outcome != BAD:
        if report:
            report(first, last, None)
        return Outcome("not-slower" if first.outcome == GOOD else "bad-unmeasurable", [], None, steps)
    state = Range(-1, last)
    if report:
        report(first, last, state)
    while (i := state.probe()) is not None:
        s = run(i)
        state.update(i, s.outcome)
        if report:
            report(s, i, state)
    found = [commits[i] for i in state.candidates()]
    return Outcome("found" if len(found) == 1 else "ambiguous", found,
                   commits[state.lo] if state.lo >= 0 else None, steps)


def step_from_findings(commit: str, findings: list[Finding], key: tuple[str, str, str]) -> Step:
    """A step's outcome from its gate's findings: bad on FAIL, skipped without a ratio."""
    f = next((f for f in findings if (f.variant, f.scenario, f.metric) == key), None)
    if f is None:
        return Step(commit, SKIP, note="the gate reported no finding for the case")
    row = dict(verdict=f.verdict.value, ratio=f.ratio, ci_low=f.ci_low, ci_high=f.ci_high,
               p_value=f.p_value, threshold=f.threshold, note=f.note)
    if f.verdict is Verdict.UNCHANGED:  # identical launches to GOOD's: as fast, nothing timed
        return Step(commit, GOOD, **row)
    if f.ratio is None:  # broken on head (a compile error), variant missing, not measured
        return Step(commit, SKIP, **row)
    return Step(commit, BAD if f.verdict is Verdict.FAIL else GOOD, **row)


# --- the command -------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("good", metavar="GOOD", help="a commit where the case is as fast as it should be")
    p.add_argument("bad", metavar="BAD", help="a later commit (GOOD in its history) where it is slower")
    p.add_argument("--scenario", default=None, help="the scenario, named exactly (required)")
    p.add_argument("--variant", default=DEFAULT_VARIANT, help=f"the variant (default: {DEFAULT_VARIANT})")
    p.add_argument("--metric", default=DEFAULT_METRIC, help=f"eager | graph (default: {DEFAULT_METRIC})")
    p.add_argument("--suite", default=None,
                   help="the suite listing the scenario (default: the first of perf/suites.yaml that does)")
    p.add_argument("--out", default="results/bisect",
                   help="DIR: DIR/<sha>/ per step, DIR/bisect.json (default: results/bisect)")
    p.add_argument("--vendor", default=None, help="nvidia | amd (default: this machine's GPU)")
    p.add_argument("--repeats", type=int, default=None,
                   help="the gate's paired rounds per process (default: thresholds)")
    p.add_argument("--samples", type=int, default=None,
                   help="the gate's samples per side and round (default: thresholds)")
    p.add_argument("--seed", type=int, default=0, help="the gate's seed of the shuffled round order")
    p.add_argument("--lock-timeout", type=float, default=0.0,
                   help="seconds each step waits for another run's GPU lock (default: fail at once)")
    p.add_argument("--all-cases", action="store_true",
                   help="time the case at every step, also where its launches are identical to GOOD's (by "
                        "default such a commit is good without GPU time: it cannot be slower on the device; "
                        "a host-side slowdown is the launch-cost suite's, `perf host-cost`)")


@dataclass
class Plan:
    """Everything a bisect was asked for, checked (`make_plan`)."""

    repo: str
    good: str  # full shas
    bad: str
    good_ref: str
    bad_ref: str
    commits: list[tuple[str, str]]  # (sha, subject) after GOOD up to BAD, oldest first
    suite: str
    scenario: str
    variant: str
    metric: str
    out: str
    settings: dict  # processes, repeats, samples per step (for people; the gate decides)
    gate: GateRequest  # every step's gate but its head and --out (`gate_request`)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.variant, self.scenario, self.metric)

    def position(self, sha: str) -> int:
        return next(i for i, (c, _) in enumerate(self.commits) if c == sha)

    def command(self) -> str:
        argv = ["python", "-m", "perf", "bisect", self.good_ref, self.bad_ref, "--scenario", self.scenario,
                "--variant", self.variant, "--metric", self.metric, "--out", self.out]
        return shlex.join(argv + (["--all-cases"] if self.gate.all_cases else []))

    def gate_request(self, commit: str) -> GateRequest:
        """The gate of one step: `commit` against GOOD, into DIR/<commit>/."""
        return replace(self.gate, head_ref=commit, out=os.path.join(self.out, commit))


def prepare(args: argparse.Namespace) -> Plan:
    """`perf bisect`'s arguments, checked (`make_plan`)."""
    gate = GateRequest(thresholds=args.thresholds, vendor=args.vendor, repeats=args.repeats,
                       samples=args.samples, seed=args.seed, lock_timeout=args.lock_timeout,
                       all_cases=args.all_cases)
    return make_plan(args.good, args.bad, args.scenario, args.variant, args.metric, args.suite, args.out,
                     gate)


def make_plan(good_ref: str, bad_ref: str, scenario: str | None, variant: str = DEFAULT_VARIANT,
              metric: str = DEFAULT_METRIC, suite: str | None = None, out: str = "results/bisect",
              gate: GateRequest | None = None) -> Plan:
    """The bisect of one case (`suite` None: the first suite listing `scenario`) from GOOD to BAD,
    each step a gate of `gate`'s settings (thresholds, vendor, rounds, samples, seed, lock timeout,
    --all-cases): everything named checked (GPU or not), then a CPU refused like the gate does."""
    from perf import checkout
    from perf.latency import ab
    from perf.thresholds import load_thresholds

    gate = gate or GateRequest()
    repo = repo_root(os.getcwd())
    good, bad = resolve_commit(repo, good_ref, "GOOD"), resolve_commit(repo, bad_ref, "BAD")
    if good == bad:
        raise ConfigError(f"GOOD {good_ref} and BAD {bad_ref} are the same commit ({good[:10]}); name a "
                          f"later BAD")
    if not is_ancestor(repo, good, bad):
        raise ConfigError(f"GOOD {good_ref} ({good[:10]}) is not in the history of BAD {bad_ref} "
                          f"({bad[:10]}); bisect needs GOOD before BAD (swapped?)")
    th = load_thresholds(gate.thresholds)
    vendor = vendor_mod.resolve(gate.vendor)
    if not scenario:
        raise ConfigError("--scenario: required; name the scenario to bisect exactly as a suite of "
                          "perf/suites.yaml lists it")
    suite, named = validate.scenario_named(scenario, suite)
    if len(validate.scenarios(suite, named.name)) != 1:  # the gate selects by glob: it must be this one
        raise ConfigError(f"--scenario {scenario}: matches several scenarios of suite {suite} as a glob")
    variants = validate.variants(variant, checkout.variant_names(), "--variant")
    metrics = validate.metrics(metric, "--metric")
    if len(variants) != 1 or len(metrics) != 1:
        raise ConfigError(f"--variant {variant} --metric {metric}: one case per bisect; name one "
                          f"variant and one metric")
    if (gate.repeats is not None and gate.repeats < 2) or (gate.samples is not None and gate.samples < 1):
        raise ConfigError("--repeats must be >= 2 (paired rounds per process) and --samples >= 1")
    commits = first_parent_range(repo, good, bad)
    interpreter = not vendor_mod.on_gpu()  # a GPU-sized suite was refused already (perf.vendor.require_gpu)
    validate.measurable(metrics, "--metric")
    gate = replace(gate, base_ref=good, suite=suite, scenarios=named.name, variants=variants[0],
                   metrics=metrics[0], thresholds=os.path.abspath(gate.thresholds))
    stats = th.vendor(vendor).statistics
    s = ab.settings(gate, stats, interpreter, metrics[0])  # what each step's gate will take
    settings = {"processes": s.processes, "repeats": s.repeats, "samples": s.samples,
                "retries": stats.retries, "interpreter": interpreter}
    return Plan(repo, good, bad, good_ref, bad_ref, commits, suite, named.name, variants[0], metrics[0],
                os.path.abspath(out), settings, gate)


def _finished(out_dir: str) -> list:
    """The finished processes of a step's gate (its ledger), [] before it ran."""
    from perf.latency.ledger import LEDGER, load_ledger

    path = os.path.join(out_dir, LEDGER)
    return load_ledger(path)["processes"] if os.path.exists(path) else []


def gate_step(plan: Plan) -> Callable[[str], Step]:
    """The real step: the gate of the case at `commit` against GOOD, in DIR/<sha>/."""
    from perf.latency import ab

    def step(commit: str) -> Step:
        out_dir = os.path.join(plan.out, commit)
        before = _finished(out_dir)
        t0 = time.monotonic()
        try:
            _, findings = ab.run_gate(plan.gate_request(commit), publish_report=False)
        except ab.GateCrash as e:
            return Step(commit, SKIP, note=f"the gate could not measure it: {e}",
                        seconds=time.monotonic() - t0)
        except NothingMeasured as e:  # the case has no ratio at this commit (its report says why)
            return Step(commit, SKIP, note=str(e), seconds=time.monotonic() - t0)
        if findings is None:  # the gate was interrupted (it said so)
            raise KeyboardInterrupt
        s = step_from_findings(commit, findings, plan.key)
        s.reused = bool(before) and _finished(out_dir) == before
        s.seconds = time.monotonic() - t0
        return s

    return step


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _named(sha: str, ref: str) -> str:
    return sha[:10] if sha.startswith(ref) else f"{sha[:10]} ({ref})"


def _describe(step: Step) -> str:
    if step.outcome == SKIP:
        return f"skipped: {step.note or 'not measurable'}"
    if step.ratio is None:  # unchanged: identical launches to GOOD's
        return f"{step.verdict}: {step.note} -> {step.outcome}"
    interval = f" [{step.ci_low:.4f}, {step.ci_high:.4f}]" if step.ci_low is not None else ""
    return f"ratio {step.ratio:.4f}{interval}, {step.verdict} ({step.threshold}) -> {step.outcome}"


class Record:
    """DIR/bisect.json, written after every step; the printed lines."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.planned = planned_steps(len(plan.commits))
        self.steps: list[dict] = []
        self.path = os.path.join(plan.out, "bisect.json")
        self.t0 = time.monotonic()

    def label(self, sha: str) -> str:
        i = self.plan.position(sha)
        subject = self.plan.commits[i][1]
        subject = subject if len(subject) <= 50 else subject[:47] + "..."
        end = ", BAD" if i == len(self.plan.commits) - 1 else ""
        return f"{sha[:10]} ({i + 1}/{len(self.plan.commits)}{end}) {subject!r}"

    def header(self) -> None:
        p, s, n = self.plan, self.plan.settings, len(self.plan.commits)
        print(f"bisect: GOOD {_named(p.good, p.good_ref)} .. BAD {_named(p.bad, p.bad_ref)}: "
              f"{_count(n, 'commit')} along BAD's first parents (as git bisect --first-parent)", flush=True)
        print(f"case: {p.variant} {p.scenario} {p.metric} (suite {p.suite}); a commit is bad when the gate "
              f"FAILs it against GOOD", flush=True)
        again = ", a failing case measured again" if s["retries"] else ""
        print(f"steps: {self.planned} without skips (1 to confirm BAD, {self.planned - 1} to search the "
              f"{_count(n - 1, 'commit')} between), each a gate of this case: {s['processes']} processes x "
              f"{s['repeats']} rounds x {s['samples']} samples per side{again}; output in {p.out}",
              flush=True)

    def step(self, step: Step, index: int, state: Range | None) -> None:
        n = len(self.plan.commits)
        left = state.steps_left() if state is not None else 0
        where = ""
        if state is not None:
            lo, hi = state.lo + 2, state.hi + 1  # 1-based: after the last good one, up to the first bad one
            if lo == hi:
                where = f"; first bad: commit {hi}/{n}"
            elif not state.untested():
                where = f"; first bad among commits {lo}-{hi}/{n}, only skipped ones left to test"
            else:
                where = f"; first bad among commits {lo}-{hi}/{n}, about {_count(left, 'step')} left"
        number = len(self.steps) + 1
        total = max(self.planned, number + left)
        print(f"step {number}/{total}: {self.label(step.commit)}: {_describe(step)}"
              f"{' (reused)' if step.reused else ''}{where}", flush=True)
        self.steps.append({"step": number, "position": index + 1, **asdict(step)})
        self.save("running")

    def save(self, result: str, outcome: Outcome | None = None) -> None:
        p = self.plan
        files.write_json(self.path, {
            "schema_version": BISECT_VERSION, "kind": "bisect", "command": p.command(),
            "good": {"commit": p.good, "ref": p.good_ref}, "bad": {"commit": p.bad, "ref": p.bad_ref},
            "order": "first-parent",
            "case": {"suite": p.suite, "scenario": p.scenario, "variant": p.variant, "metric": p.metric},
            "settings": p.settings, "planned_steps": self.planned,
            "commits": [{"commit": c, "subject": s} for c, s in p.commits],
            "steps": self.steps, "result": result,
            "first_bad": outcome.candidates[0] if outcome and result == "found" else None,
            "candidates": outcome.candidates if outcome else [],
            "last_good": (outcome.last_good or p.good) if outcome and outcome.candidates else None,
            "seconds": time.monotonic() - self.t0})


def finish(plan: Plan, record: Record, outcome: Outcome) -> int:
    """Print and record the answer; the exit code."""
    record.save(outcome.result, outcome)
    minutes = (time.monotonic() - record.t0) / 60
    tail = f"({_count(len(outcome.steps), 'step')}, {minutes:.1f} minutes; {record.path})"
    if outcome.result == "found":
        sha = outcome.candidates[0]
        last = next(s for s in outcome.steps if s.commit == sha)
        print(f"first bad commit: {record.label(sha)}: {_describe(last)} {tail}")
        print(f"  last good: {(outcome.last_good or plan.good)[:10]}; its gate: "
              f"{os.path.join(plan.out, sha, 'report.md')}; again: "
              f"{plan.gate_request(sha).command_line()}")
        explained = why.case_section(os.path.join(plan.out, sha), plan.variant, plan.scenario)
        if explained:  # that step's gate explained the case (perf/why.py)
            print("\n" + explained)
        return EXIT_OK
    if outcome.result == "ambiguous":
        print(f"only skipped commits are left to test: the first bad commit is one of "
              f"{len(outcome.candidates)} {tail}:")
        for sha in outcome.candidates:
            s = next((s for s in outcome.steps if s.commit == sha), None)
            print(f"  {record.label(sha)}: {_describe(s) if s else 'not tested'}")
        return EXIT_FAIL
    step = outcome.steps[0]
    if outcome.result == "not-slower":
        print(f"BAD {plan.bad[:10]} is not slower than GOOD beyond the case's threshold ({_describe(step)}): "
              f"nothing to bisect; check the case, or name another GOOD or BAD {tail}")
    else:
        print(f"BAD {plan.bad[:10]} could not be measured against GOOD ({step.note}): bisect needs a GOOD "
              f"and a BAD that both build and run the case (the gate's log says which side failed) {tail}")
    return EXIT_FAIL


@contextlib.contextmanager
def _shared_batches():
    """One batch cache for every step's gate (the same scenario each time): $PERF_BATCH_CACHE
    if set, else a temporary directory removed afterwards."""
    from perf.latency.ab import BATCH_CACHE_ENV

    if os.environ.get(BATCH_CACHE_ENV):
        yield
        return
    path = tempfile.mkdtemp(prefix="perf-bisect-batches-")
    os.environ[BATCH_CACHE_ENV] = path
    try:
        yield
    finally:
        os.environ.pop(BATCH_CACHE_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def main(args: argparse.Namespace) -> int:
    plan = prepare(args)
    files.check_output(args.out, "--out", directory=True)
    record = Record(plan)
    record.header()
    record.save("running")
    try:
        with _shared_batches():
            outcome = search([c for c, _ in plan.commits], gate_step(plan), record.step)
    except KeyboardInterrupt:
        print(f"interrupted after {len(record.steps)} finished steps: {plan.out} keeps every step's gate; "
              f"run the same command again to resume", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return finish(plan, record, outcome)


# --- the demo range ----------------------------------------------------------------------------

DEMO_PATHS = ("kernels", "perf", "calibration", "thresholds.yaml")  # what the harness needs to run
DEMO_FILE = "BISECT_DEMO.md"  # the harmless file every demo commit touches
# graph replay 0.27 ms on the H100 (calibration/nvidia.yaml): a prefill, where the plant stretches
# every program of the kernel (a split decode also runs the untouched reduce kernel)
DEMO_SCENARIO = "llama3-8b/prefill/batch2-kv2048/block16"


def make_demo_range(path: str, commits: int, plant_at: int, edit: Callable[[str], None], asked: dict,
                    source: str | None = None) -> dict:
    """A git repository at `path`/repo: a copy of `source`'s harness and kernels (GOOD), then
    `commits` commits each adding a line to DEMO_FILE, commit `plant_at` also applying `edit`
    to the tree. Returns what `path`/demo.json records; a second call with the same `asked`
    returns it again (so the demo resumes), one with other settings is refused."""
    from perf.checkout import ROOT

    if not 1 <= plant_at <= commits:
        raise ConfigError(f"--plant-at {plant_at}: must be 1..--commits ({commits})")
    record_path = os.path.join(path, "demo.json")
    if os.path.exists(record_path):
        old = files.load_json(record_path, "the demo range's record", "remove DIR or name another one")
        if old.get("asked") == asked:
            return old
        raise ConfigError(f"{path}: holds a demo range of other settings ({old.get('asked')}); remove it or "
                          f"name another DIR")
    if os.path.exists(path) and os.listdir(path):
        raise ConfigError(f"{path}: exists and is not empty; name a new directory for the demo range")
    source = source or ROOT
    repo = os.path.join(path, "repo")
    os.makedirs(repo)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in DEMO_PATHS:
        src = os.path.join(source, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(repo, name), ignore=ignore)
        elif os.path.exists(src):
            shutil.copy2(src, os.path.join(repo, name))
    origin = git(source, "rev-parse", "--short", "HEAD") or "a copy without git"
    git(repo, "init", "-q", check=True)
    good = commit_all(repo, f"demo: this harness and its kernels (from {origin})", "perf-bisect-demo")
    made = []
    for i in range(1, commits + 1):
        with open(os.path.join(repo, DEMO_FILE), "a", encoding="utf-8") as f:
            f.write(f"demo commit {i} of {commits}\n")
        what = f"touch {DEMO_FILE}"
        if i == plant_at:
            edit(repo)
            what = f"{asked.get('plant', 'planted slowdown')} + {what}"
        made.append(commit_all(repo, f"demo {i}/{commits}: {what}", "perf-bisect-demo"))
    record = {"asked": asked, "repo": repo, "good": good, "bad": made[-1], "commits": made,
              "planted": made[plant_at - 1], "plant_at": plant_at}
    files.write_json(record_path, record)
    return record


def _demo_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m perf.latency.bisect",
                                description="build a commit range with a planted slowdown to show perf "
                                            "bisect on (other arguments: `python -m perf bisect`)")
    p.add_argument("--make-demo-range", metavar="DIR", required=True,
                   help="a new directory: DIR/repo (the range), DIR/out (the bisect's output)")
    p.add_argument("--commits", type=int, default=8, help="commits after GOOD (default 8)")
    p.add_argument("--plant-at", type=int, default=5, help="the commit that plants the slowdown (default 5)")
    p.add_argument("--percent", type=int, default=10, help="the planted slowdown in percent (default 10)")
    p.add_argument("--vendor", default=None,
                   help="the plant's cycle counter: nvidia | amd (default: this GPU's)")
    p.add_argument("--scenario", default=DEMO_SCENARIO, help=f"the case to bisect (default: {DEMO_SCENARIO})")
    p.add_argument("--variant", default=DEFAULT_VARIANT)
    p.add_argument("--metric", default=DEFAULT_METRIC)
    p.add_argument("--run", action="store_true",
                   help="then run the bisect in DIR/repo and check that it names the planted commit")
    return p


def demo_main(argv: list[str]) -> int:
    from perf.latency.plant import PlantError, plant

    args = _demo_parser().parse_args(argv)
    if args.commits < 1:
        raise ConfigError(f"--commits {args.commits}: must be >= 1")
    vendor = vendor_mod.resolve(args.vendor)
    path = os.path.abspath(args.make_demo_range)
    asked = {"commits": args.commits, "plant_at": args.plant_at, "percent": args.percent, "vendor": vendor,
             "plant": f"planted {args.percent} % slowdown (perf/latency/plant.py)"}

    def edit(repo: str) -> None:
        try:
            plant(repo, args.percent, vendor)
        except PlantError as e:
            raise ConfigError(f"--percent {args.percent}: {e}") from None

    demo = make_demo_range(path, args.commits, args.plant_at, edit, asked)
    out = os.path.join(path, "out")
    argv_bisect = ["bisect", demo["good"], demo["bad"], "--scenario", args.scenario, "--variant",
                   args.variant, "--metric", args.metric, "--out", out]
    command = f"cd {shlex.quote(demo['repo'])} && python -m perf {shlex.join(argv_bisect)}"
    print(f"demo range in {demo['repo']}: GOOD {demo['good']}, BAD {demo['bad']}; commit {args.plant_at} of "
          f"{args.commits} ({demo['planted'][:10]}) plants a {args.percent} % slowdown; bisect it with:")
    print(command, flush=True)
    if not args.run:
        return EXIT_OK
    if not vendor_mod.on_gpu():
        raise ConfigError("--run: the planted slowdown reads the GPU's cycle counter, which Triton's "
                          "interpreter cannot run; run the demo on a GPU (the range is built)")
    t0 = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "perf", *argv_bisect], cwd=demo["repo"],
                           env=child_env(demo["repo"]))
    try:
        found = files.load_json(os.path.join(out, "bisect.json"), "the bisect's record",
                                "run the bisect again")
    except ConfigError as e:
        print(f"demo: the bisect wrote no readable {out}/bisect.json (exit {code}): {e}", file=sys.stderr)
        return code or EXIT_FAIL
    minutes = (time.monotonic() - t0) / 60
    if found.get("first_bad") == demo["planted"]:
        print(f"demo: perf bisect named the planted commit {demo['planted'][:10]} "
              f"({args.plant_at}/{args.commits}) in {len(found['steps'])} steps, {minutes:.1f} minutes")
        return EXIT_OK
    answer = found.get("first_bad") or found.get("candidates")
    print(f"demo: perf bisect answered {found.get('result')} {answer}; the planted commit is "
          f"{demo['planted']} (exit {code}, {minutes:.1f} minutes)", file=sys.stderr)
    return code if code not in (EXIT_OK, None) else EXIT_FAIL


if __name__ == "__main__":
    from perf import cli, process

    def _bisect_or_demo(argv: list[str]) -> int:
        vendor_mod.interpreter_without_gpu()
        if any(a.startswith("--make-demo-range") for a in argv):
            from perf import files

            where = _demo_parser().parse_known_args(argv)[0].make_demo_range
            files.check_output(where, "--make-demo-range", directory=True)  # before any commit is made
            return demo_main(argv)
        return cli.main(["bisect", *argv])  # the bisect itself

    process.entry(_bisect_or_demo)
