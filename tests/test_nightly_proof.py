"""The GPU proof's orchestration (perf/nightly/proof.py) on a CPU: a real clone with its empty and
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
from perf.nightly import proof

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
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=runner)
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
    assert "passed" in proof.table(doc) and "first bad" in proof.table(doc)


def test_a_toolchain_that_changes_nothing_fails_the_proof(tmp_path, wheels):
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=ModelRunner(toolchain=1.0))
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
    doc = proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, budget_s=0, runner=ModelRunner())
    assert doc["phases"][1]["note"].startswith("not run") and not doc["passed"]


def test_bad_input_is_one_line(tmp_path, wheels, capsys):
    from perf.cli import entry

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
    from perf.cli import entry

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
    assert proof.prove(str(tmp_path / "out"), str(wheels), PREVIOUS, runner=runner)["passed"]
    folder = os.path.join(str(tmp_path / "out" / "work" / "toolchains"), toolchain.folder_name(PREVIOUS))
    for name, path in runner.paths.items():
        label = name.split("-", 2)[2] if name.startswith("night-") else ""
        previous = label in ("baseline-1", "baseline-2", "empty")
        assert path == (os.pathsep.join([folder, "/deps"]) if previous else "/deps"), name
