"""The GPU proof's orchestration (perf/lab/proof.py) on a CPU: a real clone with its empty and
planted commits, the real attribution and judging of the events, with the nights and the gate's
experiments answered by a model (the GPU run itself is the lead's command in docs/nightly.md)."""

from __future__ import annotations

import json
import math
import os
import subprocess

import numpy as np
import pytest

from perf import git, verdicts
from perf.errors import ConfigError
from perf.lab import proof

pytestmark = pytest.mark.slow  # starts processes

GPU = "NVIDIA H100 80GB HBM3"
PREVIOUS = "3.9.0"


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _planted(repo: str, sha: str = "HEAD") -> bool:
    text = git.git(repo, "show", f"{sha}:kernels/paged_attention/common.py") or ""
    return "_selftest_delay" in text


class ModelRunner:
    """Stands in for `python ...` of each step: the nights from a model of the machine (Triton
    `previous` makes the decodes `toolchain` x faster, the plant makes static_grid 10 % slower),
    the attribution run in-process with the model's experiments."""

    def __init__(self, toolchain: float = 1.08, hang: str | None = None):
        self.toolchain, self.hang, self.rng = toolchain, hang, np.random.default_rng(3)
        self.calls: list[str] = []
        self.paths: dict[str, str | None] = {}

    def __call__(self, argv, env, cwd, timeout, log):
        from perf import toolchain

        name = os.path.basename(log)[:-4]
        self.calls.append(name)
        self.paths[name] = env.get("PYTHONPATH")
        if self.hang and name.startswith(self.hang):
            raise subprocess.TimeoutExpired(argv, timeout)
        if argv[0] == "-c":
            assert env["PIP_NO_INDEX"] == "1" and os.path.isdir(env["PIP_FIND_LINKS"])
            os.makedirs(os.path.join(env[toolchain.CACHE_ENV], toolchain.folder_name(PREVIOUS), "triton"))
            return 0
        if argv[3] == "run":
            return self._night(argv, env, cwd)
        return self._attribute(argv, cwd)

    def _night(self, argv, env, cwd) -> int:
        from perf import results, toolchain
        from perf.measure.timing import Samples
        from perf.nightly import store

        folder = toolchain.folder_name(PREVIOUS)
        triton = PREVIOUS if folder in env.get("PYTHONPATH", "").split(os.pathsep)[0] else "3.6.0"
        sha = git.git(cwd, "rev-parse", "HEAD")
        planted = _planted(cwd)
        today = "2026-11-26"
        header = {"environment": {"time": f"{today}T03:00:00+00:00", "vendor": "nvidia", "gpu": GPU,
                                  "arch": "sm_90", "driver": "580.159.04", "triton": triton,
                                  "torch": "2.11.0+cu130", "commit": sha},
                  "nightly": {"commit": sha, "machine": proof.MACHINE}, "suite": "pr"}
        path = os.path.join(_value(argv, "--out"), "night.jsonl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with results.ResultsWriter(path, header, resume=False) as w:
            for i, scenario in enumerate(_value(argv, "--scenarios").split(",")):
                for name in (proof.VARIANT, f"peer:{proof.PEER}"):
                    for metric in ("eager", "graph"):
                        level = 0.05 * (i + 1) * (2 if name == proof.VARIANT else 3)
                        ours = not name.startswith("peer:")
                        if ours and triton != PREVIOUS and "/decode/" in scenario:
                            level *= self.toolchain
                        if ours and planted:
                            level *= 1.10
                        shift = self.rng.normal(0, 0.002)
                        for r in range(proof.REPEATS):
                            x = level * math.exp(shift + self.rng.normal(0, 0.001))
                            w.record(variant=name, scenario=scenario, metric=metric, repeat=r,
                                     samples=Samples((x * 0.999, x, x * 1.001)), config=[], digest="m")
        fp = {"gpu_model": GPU, "driver": "580.159.04", "torch": "2.11.0+cu130", "triton": triton}
        store.write_night(_value(argv, "--data"), proof.MACHINE, today, path, fp, None)
        return 0

    def _attribute(self, argv, cwd) -> int:
        from perf.ci import github
        from perf.nightly import attribute
        from perf.thresholds import load_thresholds

        th = load_thresholds(_value(argv, "--thresholds"))
        ctx = attribute.Context(proof.MACHINE, th, ModelLab(cwd, self),
                                github.tracker(dry_run_dir=_value(argv, "--dry-run"), journal=True),
                                attribute.Settings(bisect_budget=int(_value(argv, "--bisect-budget"))))
        attribute.attribute(_value(argv, "--data"), ctx, _value(argv, "--date"))
        return 0


class ModelLab:
    def __init__(self, repo: str, model: ModelRunner):
        self.repo, self.model = repo, model

    @staticmethod
    def _record(ratio: float, slower: bool) -> dict:
        return {"status": verdicts.CONFIRMED if slower else verdicts.NOISE, "ratio": ratio,
                "verdict": "fail" if slower else "ok"}

    def remeasure(self, runner, good, bad, cases):
        slower = _planted(self.repo, bad) and not _planted(self.repo, good)
        return {k: self._record(1.10 if slower else 1.0, slower) for k in cases}

    def toolchain_ab(self, runner, sha, old, new, cases):
        assert (old["triton"], new["triton"]) == (PREVIOUS, "3.6.0")
        slower = self.model.toolchain > 1.03
        return {k: self._record(self.model.toolchain if slower else 1.0, slower) for k in cases}

    def commits(self, good, bad):
        return attribute_commits(self.repo, good, bad)

    def bisect_step(self, runner, good, case):
        from perf.latency import bisect

        def step(commit):
            bad = _planted(self.repo, commit)
            return bisect.Step(commit, bisect.BAD if bad else bisect.GOOD, "fail" if bad else "ok")

        return step


def attribute_commits(repo: str, good: str, bad: str) -> list[str]:
    from perf.nightly import attribute

    return attribute.GateLab(repo, os.path.join(repo, ".out"), "thresholds.yaml").commits(good, bad)


@pytest.fixture
def wheels(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / f"triton-{PREVIOUS}-cp312-cp312-manylinux_2_27_x86_64.whl").write_bytes(b"")
    return folder


def test_the_proof_names_all_three_events_with_their_evidence(tmp_path, wheels):
    runner = ModelRunner()
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=runner,
                      work=str(tmp_path / "work"))
    events = doc["events"]
    assert {n: e["reported"] for n, e in events.items()} == {"empty": "none", "toolchain": "toolchain",
                                                            "code": "code"}, json.dumps(events, indent=1)
    assert doc["passed"]
    ab = events["toolchain"]["evidence"]["toolchain_ab"]
    assert ab and all(v["status"] == verdicts.CONFIRMED for v in ab.values())
    assert all(v["ratio"] == pytest.approx(1.08) for v in ab.values())
    assert all("/decode/" in k for k in ab) and events["toolchain"]["evidence"]["fingerprint"]["triton"] == [
        PREVIOUS, "3.6.0"]
    b = events["code"]["evidence"]["bisect"]
    assert b["first_bad"] == doc["commits"]["planted"] and b["result"] == "found"
    assert len(doc["nights"]) == len(proof.PLAN) and doc["phases"][0]["phase"] == "clone"
    on_disk = json.loads((tmp_path / "out" / "proof.json").read_text())
    assert on_disk["passed"] and on_disk["events"] == json.loads(json.dumps(events))
    keys = {i["key"].split("/")[0] for i in doc["issues"]}
    assert keys == {"toolchain", "code"}
    said = proof.table(doc)
    assert "passed" in said and "first bad" in said and "llama3-8b/decode graph 1.080 confirmed" in said
    assert said.startswith(f"{GPU}, driver 580.159.04, torch 2.11.0+cu130; Triton by night: baseline-1=3.9.0")
    assert [fp["triton"] for fp in doc["fingerprints"].values()] == [PREVIOUS] * 3 + ["3.6.0"] * 4


def test_a_toolchain_that_changes_nothing_fails_the_proof(tmp_path, wheels):
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=ModelRunner(toolchain=1.0),
                      work=str(tmp_path / "work"))
    assert doc["events"]["toolchain"]["reported"] == "none" and not doc["passed"]
    assert doc["events"]["code"]["reported"] == "code"


def test_a_step_that_times_out_ends_the_proof_with_what_it_had(tmp_path, wheels):
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=ModelRunner(hang="night-6"),
                      work=str(tmp_path / "elsewhere"))
    assert (tmp_path / "elsewhere" / "repo").is_dir() and not (tmp_path / "out" / "work").exists()
    assert not doc["passed"]
    hung = [p for p in doc["phases"] if p["phase"].startswith("night-6")]
    assert hung[0]["rc"] is None and "timed out" in hung[0]["note"]
    assert doc["events"]["toolchain"]["reported"] == "toolchain"  # kept from before the timeout
    assert doc["events"]["code"]["reported"] == "not measured"
    saved = json.loads((tmp_path / "out" / "proof.json").read_text())
    assert saved["events"]["toolchain"]["reported"] == "toolchain"


def test_a_spent_budget_runs_nothing_more(tmp_path, wheels):
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, budget_s=0, runner=ModelRunner(),
                      work=str(tmp_path / "work"))
    assert doc["phases"][1]["note"].startswith("not run") and not doc["passed"]


def test_bad_input_is_one_line(tmp_path, wheels, capsys):
    from perf.process import entry

    out = str(tmp_path / "o")
    for argv, said in ((["--out", out, "--previous-triton-wheels", str(tmp_path)], "no triton-3.9.0"),
                       (["--out", str(tmp_path / "o"), "--previous-triton-wheels", str(wheels),
                         "--previous-triton", "3.6.0"], "no triton-3.6.0")):
        with pytest.raises(SystemExit) as e:
            entry(proof.main, argv)
        assert e.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.skipif(not os.environ.get("PERF_PROOF_WHEELS"),
                    reason="the GPU proof needs an NVIDIA GPU and PERF_PROOF_WHEELS, a folder holding the "
                           "previous Triton's wheel (docs/nightly.md, 'The proof on a GPU')")
def test_the_proof_on_a_gpu(tmp_path):
    from perf.process import entry

    with pytest.raises(SystemExit) as e:
        entry(proof.main, ["--out", str(tmp_path / "proof"), "--previous-triton-wheels",
                           os.environ["PERF_PROOF_WHEELS"]])
    assert e.value.code == 0, (tmp_path / "proof" / "proof.json").read_text()


def test_a_tree_without_git_is_copied_and_committed(tmp_path):
    src = tmp_path / "tree"
    (src / "perf").mkdir(parents=True)
    (src / "perf" / "x.py").write_text("x = 1\n")
    (src / ".nox").mkdir()
    (src / ".nox" / "big").write_text("an environment")
    how = proof.clone(str(src), str(tmp_path / "repo"))
    assert how.startswith("a copy") and git.git(str(tmp_path / "repo"), "ls-files") == "perf/x.py"
    assert proof.clone(str(tmp_path / "repo"), str(tmp_path / "again")) == "git clone of HEAD"


def test_the_steps_import_the_clone_under_the_triton_of_their_night(tmp_path, wheels, monkeypatch):
    """The caller's PYTHONPATH stays (it may hold the dependencies) but not this checkout; the
    previous Triton's folder comes first on the nights that use it, and nowhere else."""
    from perf import toolchain
    from perf.checkout import ROOT

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/deps", str(ROOT)]))
    runner = ModelRunner()
    assert proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=runner,
                       work=str(tmp_path / "work"))["passed"]
    folder = os.path.join(str(tmp_path / "work" / "toolchains"), toolchain.folder_name(PREVIOUS))
    for name, path in runner.paths.items():
        label = name.split("-", 2)[2] if name.startswith("night-") else ""
        previous = label in ("baseline-1", "baseline-2", "empty")
        assert path == (os.pathsep.join([folder, "/deps"]) if previous else "/deps"), name


def test_the_gate_labs_bisect_step_hands_bisect_its_own_options(tmp_path, monkeypatch):
    """attribute.GateLab's bisect step is `perf bisect GOOD COMMIT --scenario ...`'s own plan
    (bisect.make_plan, in the repository), each step's gate with the lab's thresholds."""
    from perf.latency import bisect as bisect_mod
    from perf.latency.request import GateRequest
    from perf.nightly import attribute

    seen = {}

    def make_plan(good, bad, scenario, variant, metric, out, gate):
        seen.update(good=good, bad=bad, scenario=scenario, variant=variant, metric=metric, out=out,
                    gate=gate, cwd=os.getcwd())
        return "plan"

    monkeypatch.setattr(bisect_mod, "make_plan", make_plan)
    monkeypatch.setattr(bisect_mod, "gate_step",
                        lambda plan: lambda commit: bisect_mod.Step(commit, bisect_mod.BAD))
    (tmp_path / "repo").mkdir()
    th = str(tmp_path / "thresholds.yaml")
    lab = attribute.GateLab(str(tmp_path / "repo"), str(tmp_path / "out"), th, "pr")
    case = (proof.VARIANT, proof.SCENARIOS[0], "graph")
    step = lab.bisect_step(proof.MACHINE, "a" * 40, case)("b" * 40)
    assert step.outcome == bisect_mod.BAD
    assert (seen["good"], seen["bad"], seen["scenario"], seen["variant"], seen["metric"]) == (
        "a" * 40, "b" * 40, proof.SCENARIOS[0], proof.VARIANT, "graph")
    assert seen["gate"] == GateRequest(thresholds=th) and seen["cwd"] == str(tmp_path / "repo")
    assert seen["out"] == os.path.join(str(tmp_path / "out"), "bisect", proof.MACHINE)


def test_the_lean_thresholds_keep_the_calibration(tmp_path):
    """The lean copy reads the calibration beside it (perf.thresholds: calibration/ beside the
    thresholds file), so the nights and the gates judge with the calibrated thresholds as
    production does, and only the re-measure of a failing case is gone."""
    from perf.checkout import ROOT
    from perf.thresholds import calibration_for, load_calibration, load_thresholds

    path = proof.lean_thresholds(os.path.join(ROOT, "thresholds.yaml"), str(tmp_path / "lean"))
    th = load_thresholds(path)
    gpu = load_calibration(os.path.join(ROOT, "calibration", "nvidia.yaml")).gpu
    cal, said = calibration_for(th, "nvidia", gpu)
    assert cal is not None and cal.cases, said
    assert th.vendor("nvidia").statistics.retries == 0
    assert th.vendor("nvidia").latency == load_thresholds(os.path.join(ROOT, "thresholds.yaml")).vendor(
        "nvidia").latency


def _tool(path, version="12.9"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version}, V{version}.1'\n")
    path.chmod(0o755)
    return str(path)


def test_a_previous_triton_without_ptxas_blackwell_gets_the_newest_ptxas(tmp_path, monkeypatch):
    """Triton 3.9 runs ptxas-blackwell for sm_90 too; a wheel without it compiles nothing on an H100
    unless TRITON_PTXAS_BLACKWELL_PATH names a ptxas: the newest one found, never over the caller's."""
    folder = tmp_path / "triton-3.9.0"
    own = _tool(folder / "triton" / "backends" / "nvidia" / "bin" / "ptxas", "12.9")
    cuda = _tool(tmp_path / "cuda" / "bin" / "ptxas", "13.0")
    old = _tool(tmp_path / "old" / "bin" / "ptxas", "12.4")
    monkeypatch.setattr(proof, "ptxas_candidates", lambda f, env: [old, cuda, own])
    path, why = proof.ptxas_for(str(folder), {})
    assert path == cuda and "CUDA 13.0" in why and "3 found" in why
    said = f"{proof.PTXAS_ENV}={old} (set by the caller)"
    assert proof.ptxas_for(str(folder), {proof.PTXAS_ENV: old}) == (None, said)
    monkeypatch.setattr(proof, "ptxas_candidates", lambda f, env: [])
    path, why = proof.ptxas_for(str(folder), {})
    assert path is None and "set TRITON_PTXAS_BLACKWELL_PATH" in why
    _tool(folder / "triton" / "backends" / "nvidia" / "bin" / "ptxas-blackwell", "13.0")
    assert proof.ptxas_for(str(folder), {})[0] is None


def test_the_candidates_are_real_tools_and_include_the_folders_own(tmp_path):
    folder = tmp_path / "triton-3.9.0"
    own = _tool(folder / "triton" / "backends" / "nvidia" / "bin" / "ptxas")
    home = _tool(tmp_path / "home" / "bin" / "ptxas")
    found = proof.ptxas_candidates(str(folder), {"PATH": "", "CUDA_HOME": str(tmp_path / "home")})
    assert found.index(home) < found.index(own) == len(found) - 1
    assert all(os.access(p, os.X_OK) for p in found) and len(set(found)) == len(found)


class NoVariantUnder(ModelRunner):
    """A Triton that compiles none of our kernels: its nights hold the library's series only."""

    def _night(self, argv, env, cwd) -> int:
        from perf import toolchain

        rc = super()._night(argv, env, cwd)
        if toolchain.folder_name(PREVIOUS) in env.get("PYTHONPATH", "").split(os.pathsep)[0]:
            path = os.path.join(_value(argv, "--out"), "night.jsonl")
            with open(path, encoding="utf-8") as f:
                lines = [x for x in f if f'"variant": "{proof.VARIANT}"' not in x]
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(lines)
            from perf.nightly import store

            store.write_night(_value(argv, "--data"), proof.MACHINE, "2026-11-26", path, None, None)
        return rc


def test_a_night_without_our_series_ends_the_proof_there(tmp_path, wheels, capsys):
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=NoVariantUnder(),
                      work=str(tmp_path / "work"))
    night = [p for p in doc["phases"] if p["phase"].startswith("night-")]
    assert len(night) == 1 and "no static_grid series" in night[0]["note"]
    assert len(night[0]["missing"]) == len(proof.SCENARIOS) * 2 and not doc["passed"]
    assert not any(p["phase"].startswith("attribute-") for p in doc["phases"])
    assert doc["events"]["toolchain"]["reported"] == "not measured"
    assert "12 of 24 series not measured" in capsys.readouterr().out


def test_a_failing_step_prints_its_log_and_a_failing_setup_is_recorded(tmp_path, wheels, capsys):
    def failing(argv, env, cwd, timeout, log):
        with open(log, "a", encoding="utf-8") as f:
            f.write("line one\nConfigError: the reason it failed\n")
        return 2

    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=failing, work=str(tmp_path / "w1"))
    assert doc["phases"][-1]["phase"] == "install" and doc["phases"][-1]["rc"] == 2
    assert "    | ConfigError: the reason it failed" in capsys.readouterr().out
    src = tmp_path / "tree"  # no kernels to plant a slowdown in
    (src / "perf").mkdir(parents=True)
    (src / "perf" / "x.py").write_text("x = 1\n")
    (src / "thresholds.yaml").write_text("version: 1\n")
    with pytest.raises(FileNotFoundError):  # plant.py reads kernels/paged_attention/common.py
        proof.prove(str(tmp_path / "out2"), str(wheels), PREVIOUS, runner=failing, source=str(src),
                    work=str(tmp_path / "w2"))
    saved = json.loads((tmp_path / "out2" / "proof.json").read_text())
    assert saved["phases"][0]["phase"] == "clone" and saved["phases"][0]["rc"] is None
    assert saved["phases"][0]["note"] and saved["clone"].startswith("a copy")


def test_an_interrupted_proof_prints_what_it_had(tmp_path, wheels, monkeypatch, capsys):
    """The caller's time limit (SIGTERM, an interrupt here) mid-night: the step says so in proof.json,
    and the output still ends with the table of what was done, the events decided so far in it."""
    model = ModelRunner()

    def runner(argv, env, cwd, timeout, log):
        if os.path.basename(log).startswith("night-6"):
            raise KeyboardInterrupt
        return model(argv, env, cwd, timeout, log)

    monkeypatch.setattr(proof, "run_python", runner)
    with pytest.raises(KeyboardInterrupt):  # perf.process.entry makes it exit 130
        proof.main(["--out", str(tmp_path / "out"), "--previous-triton-wheels", str(wheels),
                    "--work", str(tmp_path / "work")])
    out = capsys.readouterr().out
    assert "stopped early" in out and "toolchain  toolchain  toolchain" in out and "FAILED in" in out
    events = [x.split()[0] for x in out.split("stopped early")[1].splitlines()[3:6]]
    assert events == list(proof.EVENTS)  # in the plan's order, as proof.json's sorted keys are not
    saved = json.loads((tmp_path / "out" / "proof.json").read_text())
    assert saved["phases"][-1]["phase"] == "night-6-code-1" and saved["phases"][-1]["note"] == "interrupted"


def _step(night: str, cause: str | None, keys=("static_grid|llama3-8b/decode|eager",),
          direction: str = "slower") -> dict:
    return {"night": night, "direction": direction, "keys": list(keys), "ratios": {k: 1.018 for k in keys},
            "cause": cause}


HELD = _step("2000-01-03", None)
GAIN = _step("2000-01-03", None, direction="faster")


@pytest.mark.parametrize("tonight, later, reported", [
    (HELD, {"decided": [_step("2000-01-03", verdicts.NOISE_CAUSE)]}, "none"),  # held, then judged noise
    (HELD, {"decided": [_step("2000-01-03", None)]}, "none"),  # decided without a cause: no issue
    (HELD, {}, "none"),  # dropped: not kept the next night
    (HELD, {"pending": [HELD]}, "a step, no cause yet"),  # still held undecided
    (HELD, {"decided": [_step("2000-01-03", verdicts.CODE, keys=("a|b|eager", "c|d|graph"))]},
     verdicts.CODE),  # kept with widened keys and given an issue's cause: an alert
    (GAIN, {}, "none"),  # a gain not kept leaves no record
    (GAIN, {"pending": [GAIN]}, "none"),  # a gain opens no issue
])
def test_the_empty_night_alerts_only_for_an_issue_or_a_step_still_held(tonight, later, reported):
    dates = {"empty": "2000-01-03", "toolchain-1": "2000-01-04"}
    states = {"empty": {"pending": [tonight], "decided": []},
              "toolchain-1": {"pending": [], "decided": [], **later}}
    assert proof.judge_event("empty", dates, states, {})["reported"] == reported
    only_tonight = {"empty": states["empty"]}  # the deciding night not run yet: a slower step is undecided
    assert proof.judge_event("empty", dates, only_tonight, {})["reported"] == (
        "a step, no cause yet" if tonight is HELD else "none")


def test_a_finished_proof_is_judged_again_from_its_nights(tmp_path, wheels, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    doc = proof.prove(str(out), str(wheels), PREVIOUS, runner=ModelRunner(), work=str(work))
    assert doc["passed"]
    saved = json.loads((out / "proof.json").read_text())
    saved["events"]["empty"]["reported"], saved["passed"] = "a step, no cause yet", False  # an older judge
    (out / "proof.json").write_text(json.dumps(saved))
    assert proof.main(["--judge", str(out)]) == 0
    again = json.loads((out / "proof.json").read_text())
    assert again["passed"] and again["judged"]["before"]["empty"] == "a step, no cause yet"
    assert again["phases"] == saved["phases"] and again["wall_s"] == saved["wall_s"]
    assert "passed in" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="no data folder"):
        proof.main(["--judge", str(out), "--work", str(tmp_path / "elsewhere")])
    with pytest.raises(ConfigError, match="--previous-triton-wheels are needed"):
        proof.main(["--out", str(tmp_path / "new")])
