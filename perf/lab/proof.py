"""The nightly's proof on one GPU: real nights, the production attribution, three known events.

    python -m perf.lab.proof --out DIR --previous-triton-wheels WHEELS [--previous-triton 3.9.0]
                                 [--work DIR] [--budget-s 520]
    python -m perf.lab.proof --judge DIR [--work DIR]

A lab tool, not a step of the nightly. In a temporary clone of this checkout's HEAD and a data
folder of its own (under --work, default a new folder in the system's temporary folder), it
measures a fixed nightly subset (SCENARIOS: six pr scenarios x static_grid and PyTorch SDPA's
flash backend, 12 cases, eager and graph) night by night with `perf nightly run --no-asv --data`,
gives each night a date of its own, and after each night runs the production attribution, `perf
nightly attribute` (its experiments are the latency gate's: attribute.GateLab), with the issues
kept in DIR/issues:

| nights | commit | Triton | expected |
|---|---|---|---|
| 1-2 | HEAD | the previous one (the wheel) | the alert's least history (2 earlier nights) |
| 3 | an empty commit | the previous one | no issue: `none` (a step held, then judged noise) |
| 4-5 | the same | the image's | `toolchain`, with the toolchain A/B's ratios |
| 6-7 | a planted 10 % slowdown (perf/latency/plant.py) | the image's | `code`, bisect naming the plant |

The previous Triton comes first because Triton 3.9 makes the decodes 6-11 % faster than the
image's 3.6 on an H100 (docs/latency.md, "Toolchain A/B", 2026-11-22): going from 3.9 to 3.6 is
the slowdown a Triton change brings, and attribution names causes of slowdowns (a gain only
re-anchors). The wheel is installed by perf.toolchain.ensure (PIP_NO_INDEX=1,
PIP_FIND_LINKS=WHEELS, into WORK/toolchains, PERF_TOOLCHAIN_CACHE): its folder first on
PYTHONPATH for nights 1-3, and the same folder for the toolchain A/B (`perf gate --toolchain
triton==PREVIOUS`, run by attribution under the image's Triton). Where that wheel has no
`ptxas-blackwell` (which Triton 3.9 runs for sm_90 too) and TRITON_PTXAS_BLACKWELL_PATH is unset,
every step gets it set to the newest ptxas found (`ptxas_for`; proof.json's `ptxas` says which).

Lean on purpose, to fit one command of at most 9 minutes: 5 repeats a case (the least with which
the alert can be significant against 2 nights), 10 samples a repeat, no compile times, no asv, the
gate without its re-measure of a failing case (`statistics.retries: 0` in a copy of
thresholds.yaml, beside a copy of the calibration), one commit between the last good night and the
planted one, so that bisect's search (which first re-checks the bad end) answers after one gate
run of the worst case. Every step has a timeout within `--budget-s`; DIR/proof.json is rewritten
after each step (phases with their command, exit code, wall time; events with expected and
reported cause and evidence), so a killed run keeps what it did; each step's output is in
DIR/logs/, and a step that fails prints its log's last lines. A night that measured none of
static_grid's series ends the proof there (a Triton that compiles nothing). Exit 0 only when all
three events came out right, 1 otherwise, 2 for bad input. `--judge DIR` judges a finished proof's
events again from the nights it stored, measuring nothing (after a fix of the judging).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import files, git
from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError

# Fast pr scenarios (uniform lengths, so that dense SDPA runs them too): four decodes, which Triton
# 3.9 moves 6-11 % (docs/latency.md), a mixed batch and a prefill, which it moves about 1 %.
SCENARIOS = (
    "llama3-8b/decode/batch32-kv1024/block16",
    "llama2-7b/decode/batch16-kv1024/block16",
    "falcon-7b/decode/batch16-kv1024/block16",
    "phi-2/decode/batch16-kv1024/block16",
    "qwen2.5-14b/mixed50/batch16-kv1024/block16",
    "llama3-8b/prefill/batch2-kv2048/block16",
)
SUITE = "pr"
VARIANT = "static_grid"
PEER = "sdpa_flash"
MACHINE = "proof_gpu"  # the proof's own history (a data-branch runner name)
REPEATS = 5  # the nightly's default: 5 values against 10 reach p = 3.3e-4 (docs/nightly.md)
SAMPLES = 10  # per repeat; the medians of 10 device-event samples (a default chosen for time)
PLANT_PERCENT = 10  # perf bisect's demo plant (perf/latency/bisect.py --percent default)
BISECT_BUDGET = 2  # gate runs: a range of one commit takes one (bisect re-checks the bad end); one spare
BUDGET_S = 520  # the whole proof, under the 9 minutes it is given (the rest: start-up, copying out)
START = _dt.date(2000, 1, 1)  # night k's date is START + k days: before any real night, one a day
# Each step's own limit in seconds (unmeasured defaults from the H100's timings in docs/latency.md:
# a gate of 3 + 3 processes on a few scenarios takes 1-2 minutes, a night about half a minute).
TIMEOUT_S = {"clone": 120, "install": 240, "night": 150, "attribute": 90, "experiments": 300}
PREVIOUS, IMAGE = "previous", "image"


@dataclass(frozen=True)
class NightPlan:
    label: str
    commit: str  # key of Commits
    triton: str  # PREVIOUS or IMAGE


PLAN = (
    NightPlan("baseline-1", "head", PREVIOUS),
    NightPlan("baseline-2", "head", PREVIOUS),
    NightPlan("empty", "empty", PREVIOUS),
    NightPlan("toolchain-1", "empty", IMAGE),
    NightPlan("toolchain-2", "empty", IMAGE),
    NightPlan("code-1", "planted", IMAGE),
    NightPlan("code-2", "planted", IMAGE),
)
FINGERPRINT = ("gpu_model", "driver", "torch", "triton")  # of each night, in proof.json and the table
EXPERIMENTS = ("toolchain-2", "code-1", "code-2")  # nights whose attribution may run gates (longer timeout)
# event -> (expected cause, the night the step is on, the nights whose state may decide it)
EVENTS = {"empty": ("none", "empty", ("empty", "toolchain-1")),
          "toolchain": ("toolchain", "toolchain-1", ("toolchain-2", "code-1")),
          "code": ("code", "code-1", ("code-2",))}

# `python ARGV` in `cwd` with `env`, within `timeout` seconds, its output into `log`: the exit code
# (subprocess.TimeoutExpired past the timeout). Tests pass a fake.
Runner = Callable[[list[str], dict, str, float, str], int]


def run_python(argv: list[str], env: dict, cwd: str, timeout: float, log: str) -> int:
    from perf.process import run_child

    with open(log, "ab") as f:
        return run_child([sys.executable, *argv], timeout=timeout, cwd=cwd, env=env, stdout=f,
                         stderr=subprocess.STDOUT).returncode


@dataclass
class Proof:
    """The proof's state, written to DIR/proof.json after every step. Other lab drivers of one
    device command (perf/lab/gate_power.py) run their steps through it too: under their own
    `file` and `name`, with the logs under `logs` (default: `out`), on their `clock` (a test's
    model of time)."""

    out: str
    budget_s: float
    started: float | None = None  # default: the clock's now
    doc: dict = field(default_factory=lambda: {"phases": [], "events": {}, "passed": False})
    file: str = "proof.json"
    name: str = "proof"
    logs: str | None = None
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def save(self) -> None:
        self.doc["wall_s"] = round(self.clock() - self.started, 1)
        files.write_json(os.path.join(self.out, self.file), self.doc)

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def step(self, name: str, argv: list[str], env: dict, cwd: str, limit: float, runner: Runner,
             ) -> int | None:
        """Run one step within min(limit, what is left of the budget); its record in proof.json.
        None: not run (the budget is spent) or timed out."""
        timeout = min(limit, self.left())
        record = {"phase": name, "command": shlex.join(["python", *argv]), "cwd": cwd,
                  "log": os.path.join("logs", f"{name}.log"), "timeout_s": round(timeout, 1)}
        self.doc["phases"].append(record)
        if timeout < 5:
            record.update(rc=None, note="not run: the budget (--budget-s) is spent")
            self.save()
            return None
        start = self.clock()
        log = os.path.join(self.logs or self.out, record["log"])
        try:
            rc = runner(argv, env, cwd, timeout, log)
        except subprocess.TimeoutExpired:
            rc = None
            record["note"] = f"timed out after {timeout:.0f} s"
        except BaseException:  # an interrupt: the record says where it stopped
            record.update(rc=None, note="interrupted", wall_s=round(self.clock() - start, 1))
            self.save()
            raise
        record.update(rc=rc, wall_s=round(self.clock() - start, 1))
        self.save()
        print(f"{self.name}: {name}: {'exit ' + str(rc) if rc is not None else record['note']} "
              f"({record['wall_s']} s)", flush=True)
        if rc != 0:  # what went wrong, where the caller sees only this process's output
            print(tail(log), flush=True)
        return rc

    def setup(self, name: str, fn: Callable[[], object]):
        """A step run in this process (clone, commits): its record in proof.json, its error too."""
        start = self.clock()
        record = {"phase": name}
        self.doc["phases"].append(record)
        try:
            out = fn()
        except BaseException as e:
            record.update(rc=None, note=f"{type(e).__name__}: {e}", wall_s=round(self.clock() - start, 1))
            self.save()
            raise
        record.update(rc=0, wall_s=round(self.clock() - start, 1))
        self.save()
        return out


def log_lines(path: str) -> list[str]:
    """A step's log, line by line; one line saying why where it cannot be read."""
    try:
        return files.read_text(path, "a step's log", "see the step's command in proof.json").splitlines()
    except ConfigError as e:
        return [f"({e})"]


def tail(path: str, lines: int = 25) -> str:
    """The last lines of a step's log, indented (printed when the step failed)."""
    return "\n".join(f"    | {line}" for line in log_lines(path)[-lines:])


def lean_thresholds(src: str, folder: str) -> str:
    """`folder`/thresholds.yaml: a copy of `src` whose gate does not re-measure a failing case
    (retries 0), beside a copy of the calibration/ folder beside `src` (perf.thresholds reads the
    calibration beside the thresholds file: without it every case would get the uncalibrated
    defaults)."""
    import yaml

    from perf.thresholds import CALIBRATION_DIR

    fix = "restore it from the repository"
    doc = files.load_yaml(src, "thresholds", fix)
    for section in doc.values():
        if isinstance(section, dict) and isinstance(section.get("statistics"), dict):
            section["statistics"]["retries"] = 0
    calibration = os.path.join(os.path.dirname(os.path.abspath(src)), CALIBRATION_DIR)
    if os.path.isdir(calibration):
        shutil.copytree(calibration, os.path.join(folder, CALIBRATION_DIR), dirs_exist_ok=True)
    return files.write_text(os.path.join(folder, "thresholds.yaml"), yaml.safe_dump(doc, sort_keys=False))


# Triton >= 3.9 runs its `ptxas-blackwell` for sm_90 too (triton/backends/nvidia/compiler.py
# get_ptxas: arch >= 90), and a wheel stripped of it (the one in hand, 2026-11-26) then fails every
# compile on an H100 ("Cannot find ptxas-blackwell"); Triton reads another path from this variable.
PTXAS_ENV = "TRITON_PTXAS_BLACKWELL_PATH"
_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def _ptxas_version(path: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _RELEASE.search(done.stdout)
    return (int(m.group(1)), int(m.group(2))) if done.returncode == 0 and m else None


def ptxas_candidates(folder: str, environ: dict) -> list[str]:
    """Every ptxas here: on PATH, under CUDA_HOME and /usr/local/cuda*, in pip's nvidia packages,
    the installed Triton's, and the one in the previous Triton's own folder."""
    import importlib.util
    import site
    import sysconfig

    found = [shutil.which("ptxas", path=environ.get("PATH")) or ""]
    for home in (environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found.append(os.path.join(home, "bin", "ptxas"))
    found += sorted(glob.glob("/usr/local/cuda-*/bin/ptxas"))
    for lib in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]):
        found += sorted(glob.glob(os.path.join(lib, "nvidia", "*", "bin", "ptxas")))
    spec = importlib.util.find_spec("triton")  # the installed Triton, not imported
    for where in (spec.submodule_search_locations or []) if spec else []:
        bin_ = os.path.join(where, "backends", "nvidia", "bin")
        found += [os.path.join(bin_, "ptxas-blackwell"), os.path.join(bin_, "ptxas")]
    found.append(os.path.join(folder, "triton", "backends", "nvidia", "bin", "ptxas"))
    return [p for p in dict.fromkeys(found) if p and os.path.isfile(p) and os.access(p, os.X_OK)]


def ptxas_for(folder: str, environ: dict) -> tuple[str | None, str]:
    """(the ptxas to set PTXAS_ENV to, or None; why). None where the caller set it or the previous
    Triton's folder has its own ptxas-blackwell; else the newest CUDA release among
    ptxas_candidates (Triton emits the PTX version of the ptxas it runs; on 2026-11-22 the image's
    CUDA 13.0 ptxas served Triton 3.9 on the H100, docs/latency.md), or None when there is none."""
    if environ.get(PTXAS_ENV):
        return None, f"{PTXAS_ENV}={environ[PTXAS_ENV]} (set by the caller)"
    own = os.path.join(folder, "triton", "backends", "nvidia", "bin", "ptxas-blackwell")
    if os.path.isfile(own):
        return None, f"the previous Triton's own {own}"
    versions = [(v, -i, p) for i, p in enumerate(ptxas_candidates(folder, environ))
                if (v := _ptxas_version(p))]
    if not versions:
        return None, (f"no ptxas-blackwell in {folder} and no ptxas found to stand in for it: its compiles "
                      f"will fail on sm_90 and newer; set {PTXAS_ENV}")
    v, _, path = max(versions)
    return path, (f"{PTXAS_ENV}={path} (CUDA {v[0]}.{v[1]}, the newest of {len(versions)} found): the "
                  f"previous Triton's wheel has no ptxas-blackwell")


# What a copy of a working tree without git leaves out: outputs, caches, environments.
COPY_IGNORE = (".git", ".nox", ".venv", "venv", ".asv", "results", ".perf-cache", "__pycache__", "*.pyc",
               ".pytest_cache", ".hypothesis", ".ruff_cache")


def clone(source: str, repo: str) -> str:
    """`repo`: a clone of `source`'s HEAD, or where `source` is no git checkout (a copied tree), a
    new repository committing a copy of its files (COPY_IGNORE left out); how it was made."""
    if git.head(source) is not None:
        if git.git(source, "clone", "-q", source, repo) is None:
            raise ConfigError(f"{source}: `git clone` into {repo} failed; pass a new --out")
        return "git clone of HEAD"
    shutil.copytree(source, repo, ignore=shutil.ignore_patterns(*COPY_IGNORE), symlinks=True)
    git.git(repo, "init", "-q", check=True)
    git.commit_all(repo, "proof: this working tree", "perf-proof")
    return "a copy of the working tree (no git there), committed"


def make_commits(repo: str, vendor: str = "nvidia") -> dict[str, str]:
    """On the clone: an empty commit, then the planted slowdown; their shas."""
    from perf.latency import plant

    shas = {"head": git.git(repo, "rev-parse", "HEAD", check=True)}
    shas["empty"] = git.commit_empty(repo, "proof: an empty commit (expect no alert)", "perf-proof")
    plant.plant(repo, PLANT_PERCENT, vendor)
    shas["planted"] = git.commit_all(repo, f"proof: planted {PLANT_PERCENT} % slowdown "
                                           f"(perf/latency/plant.py)", "perf-proof")
    return shas


def night_folder(data: str, runner: str, known: set[str]) -> str | None:
    """The night `perf nightly run --data` just wrote: the runner's folder not among `known`."""
    from perf.nightly import store

    fresh = [n for n in store.nights(data, runner) if n.date not in known]
    return fresh[-1].path if fresh else None


def state_of(data: str, runner: str, date: str) -> dict | None:
    """The attribution state night `date` left in its alert.json."""
    from perf.nightly import store

    night = next((n for n in store.nights(data, runner) if n.date == date), None)
    doc = night.alert() if night is not None else None
    mine = [m for m in (doc or {}).get("machines", []) if m.get("machine") == runner]
    return mine[0].get("attribution") if mine else None


def judge_event(name: str, dates: dict[str, str], states: dict[str, dict], shas: dict[str, str]) -> dict:
    """An event's expected and reported cause, with its evidence, from the nights' states."""
    from perf import verdicts

    expected, on, deciding = EVENTS[name]
    night = dates.get(on)
    row = {"expected": expected, "night": night, "reported": None, "evidence": {}}
    if night is None:
        return {**row, "reported": "not measured"}
    seen = [states[label] for label in deciding if label in states]
    if not seen:
        return {**row, "reported": "not attributed"}
    if name == "empty":
        # an alert is a slower step of that night given an issue's cause, or one the latest
        # deciding night still holds undecided; a step held for a night and then judged noise,
        # decided without a cause, or dropped (a gain not kept leaves no record) opened no issue
        steps = [r for s in seen for r in s.get("pending", []) + s.get("decided", []) if r["night"] == night]
        causes = [r.get("cause") for s in seen for r in s.get("decided", [])
                  if r["night"] == night and r.get("direction") == "slower"
                  and r.get("cause") in verdicts.ISSUE_CAUSES]
        held = [r for r in seen[-1].get("pending", [])
                if r["night"] == night and r.get("direction") == "slower"]
        reported = causes[0] if causes else ("a step, no cause yet" if held else "none")
        return {**row, "reported": reported, "evidence": {"steps": [
            {"keys": r["keys"], "ratios": r.get("ratios"), "cause": r.get("cause"),
             "direction": r.get("direction")} for r in steps]}}
    decided = [r for s in seen for r in s.get("decided", [])
               if r["night"] == night and r["direction"] == "slower"]
    pending = [r for s in seen for r in s.get("pending", []) if r["night"] == night]
    if not decided:
        return {**row, "reported": "pending" if pending else "none"}
    r = next((r for r in decided if r.get("cause") == expected), decided[0])
    ev = r.get("evidence", {})
    evidence = {"keys": r["keys"], "why": r.get("why"), "fingerprint": ev.get("fingerprint"),
                "libraries": ev.get("libraries"), "issue": r.get("issue")}
    if name == "toolchain":
        evidence["toolchain_ab"] = {k: {"status": v.get("status"), "ratio": v.get("ratio")}
                                    for k, v in (ev.get("toolchain_ab") or {}).items()}
    if name == "code":
        b = r.get("bisect") or {}
        evidence["remeasure"] = {k: {"status": v.get("status"), "ratio": v.get("ratio")}
                                 for k, v in (ev.get("remeasure") or {}).items()}
        evidence["bisect"] = {"result": b.get("result"), "first_bad": b.get("first_bad"),
                              "runs": b.get("runs"), "candidates": b.get("candidates"),
                              "planted": shas.get("planted")}
    reported = r.get("cause") or "undecided"
    if name == "code" and reported == "code" and (b.get("first_bad") != shas.get("planted")):
        reported = "code, but bisect did not name the planted commit"
    return {**row, "reported": reported, "evidence": evidence}


@dataclass
class _Nights:
    """What the proof's nights share: the clone, the data folder, the steps' environments, and what
    the nights left (their dates and attribution states)."""

    proof: Proof
    runner: Runner
    work: str
    repo: str
    data: str
    thresholds: str
    env: dict  # the image's Triton
    previous_env: dict  # the previous Triton first on PYTHONPATH
    shas: dict
    dates: dict = field(default_factory=dict)  # night label -> its date
    states: dict = field(default_factory=dict)  # night label -> the attribution state it left

    def measure(self, k: int, night: NightPlan) -> str | None:
        """Night k's `perf nightly run`, its folder given the night's own date; the date, or None
        when the proof ends here (the run failed, stored nothing, or measured none of VARIANT)."""
        from perf.nightly import store

        date = (START + _dt.timedelta(days=k)).isoformat()
        git.git(self.repo, "checkout", "-q", self.shas[night.commit], check=True)
        name, proof = f"night-{k + 1}-{night.label}", self.proof
        rc = proof.step(name, [
            "-m", "perf", "nightly", "run", "--no-asv", "--no-compile-time", "--suite", SUITE,
            "--scenarios", ",".join(SCENARIOS), "--variants", VARIANT, "--peers", PEER,
            "--repeats", str(REPEATS), "--samples", str(SAMPLES), "--gpus", "1", "--machine", MACHINE,
            "--data", self.data, "--out", os.path.join(self.work, "results", night.label),
            "--thresholds", self.thresholds,
        ], self.previous_env if night.triton == PREVIOUS else self.env, self.repo, TIMEOUT_S["night"],
            self.runner)
        fresh = night_folder(self.data, MACHINE, set(self.dates.values()))
        if rc == 0 and fresh is None:
            proof.doc["phases"][-1]["note"] = f"it put no night into {self.data}"
        if rc != 0 or fresh is None:
            return None
        path = os.path.join(os.path.dirname(fresh), date)
        os.rename(fresh, path)
        self.dates[night.label] = date
        stored = store.Night(MACHINE, date, path)
        fp = stored.fingerprint() or {}
        proof.doc.setdefault("fingerprints", {})[night.label] = {f: fp.get(f) for f in FINGERPRINT}
        expected = expected_series()
        missing = missing_series(stored, expected)
        proof.doc["phases"][-1]["missing"] = missing
        if missing:  # a broken compile under one Triton leaves its nights without our series
            more = " ..." if len(missing) > 4 else ""
            print(f"proof: {name}: {len(missing)} of {len(expected)} series not measured: "
                  f"{', '.join(missing[:4])}{more} (its log says why)", flush=True)
        if all(k in missing for k in expected if k.startswith(VARIANT + "|")):
            proof.doc["phases"][-1]["note"] = f"no {VARIANT} series measured: nothing to attribute"
            proof.save()
            return None
        return date

    def attribute(self, k: int, night: NightPlan, date: str) -> int | None:
        """Night k's `perf nightly attribute`, what it decided said, its state and the events
        judged so far into proof.json; the step's exit code."""
        proof = self.proof
        rc = proof.step(f"attribute-{k + 1}-{night.label}", [
            "-m", "perf", "nightly", "attribute", "--data", self.data, "--machine", MACHINE, "--date", date,
            "--suite", SUITE, "--dry-run", os.path.join(proof.out, "issues"),
            "--out", os.path.join(self.work, "attribution"),
            "--bisect-budget", str(BISECT_BUDGET), "--thresholds", self.thresholds,
        ], self.env, self.repo, TIMEOUT_S["experiments" if night.label in EXPERIMENTS else "attribute"],
            self.runner)
        if rc == 0:  # what the attribution decided tonight, as it said it
            text = log_lines(os.path.join(proof.out, "logs", f"attribute-{k + 1}-{night.label}.log"))
            said = [x for x in text if x.startswith(f"{MACHINE} ")]
            print("\n".join(f"    {x}" for x in said) or f"    {MACHINE} {date}: no step", flush=True)
        state = state_of(self.data, MACHINE, date)
        if state is not None:
            self.states[night.label] = state
        proof.doc["nights"] = self.dates
        proof.doc["events"] = {name: judge_event(name, self.dates, self.states, self.shas) for name in EVENTS}
        proof.save()
        return rc


def _step_env(source: str, wheels: str, cache: str) -> tuple[dict, list[str]]:
    """The steps' environment (the previous Triton's wheel folder, its install cache) and the
    caller's PYTHONPATH without this checkout: the steps must import the clone's perf and kernels
    (the rest may hold the dependencies)."""
    from perf import toolchain

    env = {**os.environ, toolchain.CACHE_ENV: cache, "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": os.path.abspath(wheels)}
    rest = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != os.path.realpath(source)]
    if rest:
        env["PYTHONPATH"] = os.pathsep.join(rest)
    return env, rest


def prove(out: str, wheels: str, previous: str, budget_s: float = BUDGET_S, runner: Runner | None = None,
          source: str | None = None, work: str | None = None) -> dict:
    """Run the proof into `out` (module docstring); proof.json's document. `runner`: run_python."""
    import tempfile

    from perf import toolchain
    from perf.checkout import ROOT

    source, runner = source or str(ROOT), runner or run_python
    work = work or tempfile.mkdtemp(prefix="perf-proof-")
    repo, data = os.path.join(work, "repo"), os.path.join(work, "data")
    cache = os.path.join(work, "toolchains")
    for d in (os.path.join(out, "logs"), os.path.join(data, "nights")):
        os.makedirs(d, exist_ok=True)
    proof = Proof(out, budget_s)
    proof.doc.update(previous_triton=previous, wheels=os.path.abspath(wheels), scenarios=list(SCENARIOS),
                     variant=VARIANT, peer=PEER, repeats=REPEATS, samples=SAMPLES, machine=MACHINE, work=work,
                     started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"proof: the clone, the nights and the installed Triton {previous} in {work}", flush=True)
    env, rest = _step_env(source, wheels, cache)

    def setup():
        proof.doc["clone"] = clone(source, repo)
        proof.doc["commits"] = make_commits(repo)
        return lean_thresholds(os.path.join(repo, "thresholds.yaml"), os.path.join(work, "thresholds"))

    thresholds = proof.setup("clone", setup)
    shas = proof.doc["commits"]
    install = ("from perf import toolchain; "
               f"print(toolchain.ensure('triton=={previous}', root={cache!r}).path)")
    if proof.step("install", ["-c", install], env, repo, TIMEOUT_S["install"], runner) != 0:
        return finish(proof, {}, {}, shas)
    installed = os.path.join(cache, toolchain.folder_name(previous))
    ptxas, proof.doc["ptxas"] = ptxas_for(installed, env)
    print(f"proof: ptxas-blackwell for Triton {previous}: {proof.doc['ptxas']}", flush=True)
    if ptxas:  # every step's env: the toolchain A/B runs the previous Triton too (Triton 3.6 on sm_90
        env[PTXAS_ENV] = ptxas  # does not read it: it runs its ptxas-blackwell from sm_100 on)
    nights = _Nights(proof, runner, work, repo, data, thresholds, env,
                     {**env, "PYTHONPATH": os.pathsep.join([installed, *rest])}, shas)
    for k, night in enumerate(PLAN):
        date = nights.measure(k, night)
        if date is None or nights.attribute(k, night, date) != 0:
            break
    return finish(proof, nights.dates, nights.states, shas)


def expected_series() -> list[str]:
    """The series a night of the proof measures (variant or peer, scenario, metric), as key text."""
    from perf.nightly.collect import METRICS
    from perf.peers import PREFIX

    return [f"{v}|{s}|{m}" for v in (VARIANT, PREFIX + PEER) for s in SCENARIOS for m in METRICS]


def missing_series(night, expected: list[str]) -> list[str]:
    """The `expected` series (expected_series) that `night` (a perf.nightly.store.Night) has no
    repeat of."""
    have = {"|".join(k) for k, v in night.results().medians().items() if v}
    return [k for k in expected if k not in have]


def finish(proof: Proof, dates: dict, states: dict, shas: dict) -> dict:
    from perf.ci import github

    proof.doc["events"] = {name: judge_event(name, dates, states, shas) for name in EVENTS}
    proof.doc["issues"] = [{"key": i["key"], "state": i["state"], "title": i["title"]}
                           for i in github.tracker(dry_run_dir=os.path.join(proof.out, "issues")).issues()]
    proof.doc["passed"] = all(e["reported"] == e["expected"] for e in proof.doc["events"].values())
    proof.save()
    return proof.doc


# What a reader of proof.json relies on (`table`, `rejudge`): field -> type; OPTIONAL ones may be
# absent (a proof stopped before its first night); every event holds EVENT_FIELDS.
PROOF_FIELDS = {"phases": list, "events": dict, "passed": bool}
OPTIONAL_FIELDS = {"nights": dict, "commits": dict, "fingerprints": dict, "work": str, "wall_s": (int, float)}
EVENT_FIELDS = {"expected": str, "reported": str, "evidence": dict}
JSON_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
              type(None): "null"}


def read_proof(path: str, fix: str) -> dict:
    """proof.json, its shape checked (PROOF_FIELDS): a file of another shape is one line naming
    the file and the field, exit 2, never a KeyError deep in the table."""
    doc = files.load_json(path, "proof.json", fix)

    def need(obj: dict, where: str, fields: dict, optional: bool = False) -> None:
        for key, kind in fields.items():
            if key not in obj:
                if optional:
                    continue
                raise ConfigError(f"{path}: {where}{key} is missing; not a proof's proof.json: {fix}")
            if not isinstance(obj[key], kind) or isinstance(obj[key], bool) is not (kind is bool):
                got = JSON_NAMES.get(type(obj[key]), "value")
                raise ConfigError(f"{path}: {where}{key} is a JSON {got}, not what a proof writes; {fix}")

    need(doc, "", PROOF_FIELDS)
    need(doc, "", OPTIONAL_FIELDS, optional=True)
    for i, phase in enumerate(doc["phases"]):
        if not isinstance(phase, dict) or not isinstance(phase.get("phase"), str):
            raise ConfigError(f"{path}: phases[{i}] has no phase name; not a proof's proof.json: {fix}")
    for name, event in doc["events"].items():
        if not isinstance(event, dict):
            raise ConfigError(f"{path}: events.{name} is not an object; not a proof's proof.json: {fix}")
        need(event, f"events.{name}.", EVENT_FIELDS)
    return doc


def rejudge(out: str, work: str | None = None) -> dict:
    """A finished proof's events judged again by this checkout's judge_event from the states its
    nights left in WORK/data; the measurements and phases stay as they were run."""
    doc = read_proof(os.path.join(out, "proof.json"), "--judge names a finished proof's folder")
    work = work or doc.get("work")
    if not work:
        raise ConfigError(f"{out}/proof.json names no --work folder; name the proof's --work")
    data = os.path.join(work, "data")
    if not os.path.isdir(data):
        raise ConfigError(f"--work {work}: no data folder (the proof's nights); name the proof's --work")
    dates = doc.get("nights") or {}
    states = {label: state for label, date in dates.items()
              if (state := state_of(data, MACHINE, date)) is not None}
    proof = Proof(out, 0.0, doc=doc)
    wall = doc.get("wall_s")
    doc["judged"] = {"at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     "from": data, "before": {n: e.get("reported") for n, e in doc.get("events", {}).items()}}
    finish(proof, dates, states, doc.get("commits") or {})
    doc["wall_s"] = wall  # the run's, not the judging's
    files.write_json(os.path.join(out, "proof.json"), doc)
    return doc


def _ab(records: dict | None) -> str:
    """An A/B's records, short: `llama3-8b/decode graph 1.071 confirmed, ...`."""
    out = []
    for key, r in (records or {}).items():
        _, scenario, metric = key.split("|")
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "no ratio"
        out.append(f"{'/'.join(scenario.split('/')[:2])} {metric} {ratio} {r.get('status')}")
    return ", ".join(out)


def machine_line(doc: dict) -> str:
    """The GPU, driver and torch of the nights, and each night's Triton (their fingerprints)."""
    fps = doc.get("fingerprints") or {}
    if not fps:
        return "no night measured"
    order = [n.label for n in PLAN]  # night order (a proof.json read back has its keys sorted)
    labels = sorted(fps, key=lambda label: order.index(label) if label in order else len(order))
    first = fps[labels[0]]
    tritons = " ".join(f"{label}={fps[label].get('triton')}" for label in labels)
    return (f"{first.get('gpu_model')}, driver {first.get('driver')}, torch {first.get('torch')}; "
            f"Triton by night: {tritons}")


def table(doc: dict) -> str:
    """The short table printed at the end."""
    walls = {}
    for p in doc["phases"]:
        for name, (_, on, deciding) in EVENTS.items():
            if any(p["phase"].endswith(label) for label in (on, *deciding)):
                walls[name] = walls.get(name, 0.0) + (p.get("wall_s") or 0.0)
    lines = [machine_line(doc), f"{'event':10s} {'expected':10s} {'reported':12s} {'wall_s':>7s}  evidence"]
    for name, e in sorted(doc["events"].items(), key=lambda item: list(EVENTS).index(item[0])):
        ev = e["evidence"]
        if name == "toolchain" and ev.get("toolchain_ab"):
            said = "toolchain A/B (old/new Triton, as the step): " + _ab(ev["toolchain_ab"])
        elif name == "code" and ev.get("bisect"):
            b = ev["bisect"]
            said = (f"first bad {str(b.get('first_bad'))[:10]} (planted {str(b.get('planted'))[:10]}, "
                    f"{b.get('runs')} gate runs); re-measure: {_ab(ev.get('remeasure'))}")
        elif ev.get("steps"):  # the empty night's step records, as each night left them
            said = "; ".join(f"a step on {len(r['keys'])} series (up to "
                             f"x{max((r.get('ratios') or {}).values(), default=0):.3f}) "
                             f"{r.get('cause') or 'undecided'}" for r in ev["steps"])
        else:
            said = f"{len(ev.get('keys', []))} series"
        if e["reported"] != e["expected"] and ev.get("why"):
            said += f"; why: {ev['why']}"
        wall = walls.get(name, 0.0)
        lines.append(f"{name:10s} {e['expected']:10s} {e['reported']:12s} {wall:7.0f}  {said}")
    lines.append(f"{'passed' if doc['passed'] else 'FAILED'} in {doc.get('wall_s', 0):.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.proof", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="a new or empty folder: proof.json, logs/, issues/")
    p.add_argument("--work", default=None, metavar="DIR",
                   help="the clone, the data folder and the installed Triton, about 1 GB (default: a new "
                        "folder in the system's temporary folder, kept; not under OUT, which is small)")
    p.add_argument("--judge", default=None, metavar="DIR",
                   help="judge the finished proof in DIR again from its stored nights (nothing measured)")
    p.add_argument("--previous-triton-wheels", metavar="DIR",
                   help="a folder holding the previous Triton's wheel (installed with pip --no-index)")
    p.add_argument("--previous-triton", default="3.9.0", help="its version (default: 3.9.0)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help=f"the whole proof's time limit in seconds (default: {BUDGET_S})")
    args = p.parse_args(argv)
    from perf import toolchain

    if args.judge:
        doc = rejudge(os.path.abspath(args.judge), os.path.abspath(args.work) if args.work else None)
        print(table(doc), flush=True)
        return EXIT_OK if doc["passed"] else EXIT_FAIL
    if not args.out or not args.previous_triton_wheels:
        raise ConfigError("--out and --previous-triton-wheels are needed to run the proof "
                          "(or --judge DIR to judge a finished one)")

    toolchain.parse(f"triton=={args.previous_triton}")
    if not glob.glob(os.path.join(args.previous_triton_wheels, f"triton-{args.previous_triton}-*.whl")):
        raise ConfigError(f"--previous-triton-wheels {args.previous_triton_wheels}: no "
                          f"triton-{args.previous_triton}-*.whl there; put the wheel in that folder")
    if args.previous_triton == toolchain.installed_version():
        raise ConfigError(f"--previous-triton {args.previous_triton} is the installed Triton; name another "
                          f"version (the proof compares the two)")
    files.check_output(args.out, "--out", directory=True)
    if os.path.isdir(args.out) and os.listdir(args.out):
        raise ConfigError(f"--out {args.out}: not empty; name a new folder")
    work = os.path.abspath(args.work) if args.work else None
    if work and os.path.isdir(work) and os.listdir(work):
        raise ConfigError(f"--work {args.work}: not empty; name a new folder")
    out = os.path.abspath(args.out)
    try:
        doc = prove(out, args.previous_triton_wheels, args.previous_triton, args.budget_s, work=work)
    except BaseException:  # an interrupt (the caller's time limit) or a failed setup: what it had
        saved = os.path.join(out, "proof.json")
        if os.path.exists(saved):
            print(f"proof: stopped early; {saved} holds what it did:", flush=True)
            print(table(read_proof(saved, "run the proof again")), flush=True)
        raise
    print(table(doc), flush=True)
    print(f"proof: {os.path.join(args.out, 'proof.json')}", flush=True)
    return EXIT_OK if doc["passed"] else EXIT_FAIL


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
