"""Toolchain A/B: a second Triton from a folder of wheels, both gates wired to it, the nightly's choice.

The fake toolchain is a real wheel built here, `triton-9.9.0-py3-none-any.whl`, installed by
real pip from a folder (PIP_NO_INDEX=1, PIP_FIND_LINKS, as on an offline GPU machine): its
`triton` package runs the installed Triton's code under another version number, so the
kernels import and compile under it and every check of perf/toolchain.py applies. The static
gate then compiles one small kernel for one target on both sides (about 20 s); the latency
gate's process alternation and statistics run on injected results (a fake measuring process).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import uuid
import zipfile
from importlib import metadata

import numpy as np
import pytest
import yaml
from interpreter_support import CPU_ONLY, NO_GPU, needs_interpreter

from perf import results, toolchain
from perf.checkout import ROOT
from perf.errors import ConfigError
from perf.latency import ab, analysis
from perf.latency.worker import PROTOCOL
from perf.measure.timing import Samples
from perf.nightly import site
from perf.nightly import toolchain as nightly_toolchain
from perf.thresholds import load_thresholds
from perf.verdicts import Verdict

FAKE = "9.9.0"
REAL_TRITON = os.path.dirname(importlib.util.find_spec("triton").origin)
TH = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "triton": "3.6.0"}
pytestmark = pytest.mark.slow  # starts processes

# The stand-in's triton/__init__.py: the installed Triton's code (its folder appended to the
# package path), reporting another version.
REEXPORT = """\
import os as _os
__path__.append({real!r})
_init = _os.path.join({real!r}, "__init__.py")
exec(compile(open(_init).read(), _init, "exec"))
__version__ = {version!r}
"""


def _wheel(folder, version: str, init: str, backends: bool = True) -> str:
    """A minimal wheel of a `triton` package (PEP 427: METADATA, WHEEL, RECORD), with the
    installed Triton's entry points (through which Triton 3.6 finds its compiler backends)."""
    dist = f"triton-{version}.dist-info"
    files = {"triton/__init__.py": init,
             **({f"{dist}/entry_points.txt": metadata.distribution("triton").read_text("entry_points.txt")}
                if backends else {}),
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: triton\nVersion: {version}\n",
             f"{dist}/WHEEL": ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                               "Tag: py3-none-any\n")}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = os.path.join(str(folder), f"triton-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """A folder of wheels: the stand-in 9.9.0, and broken ones: 9.9.1 cannot import the kernels,
    9.9.2 reports another version, 9.9.3 lacks its backends' entry points."""
    folder = tmp_path_factory.mktemp("wheels")
    _wheel(folder, FAKE, REEXPORT.format(real=REAL_TRITON, version=FAKE))
    _wheel(folder, "9.9.1", "__version__ = '9.9.1'\n")
    _wheel(folder, "9.9.2", "__version__ = '1.0.0'\n")  # a package that reports another version
    _wheel(folder, "9.9.3", REEXPORT.format(real=REAL_TRITON, version="9.9.3"), backends=False)
    return str(folder)


@pytest.fixture
def offline(wheels, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", wheels)
    return wheels


@pytest.fixture(scope="module")
def installed_fake(wheels, tmp_path_factory):
    """The stand-in installed once for the module (perf.toolchain.ensure, real pip, offline)."""
    root = str(tmp_path_factory.mktemp("toolchains"))
    mp = pytest.MonkeyPatch()
    mp.setenv("PIP_NO_INDEX", "1")
    mp.setenv("PIP_FIND_LINKS", wheels)
    mp.setenv(toolchain.CACHE_ENV, root)
    try:
        yield toolchain.ensure(f"triton=={FAKE}", quiet=True), root
    finally:
        mp.undo()


# --- perf/toolchain.py ----------------------------------------------------------------------


@pytest.mark.parametrize("spec,version", [("triton==3.5.1", "3.5.1"), (" triton==3.10.0rc1 ", "3.10.0rc1"),
                                          ("triton==3.7.0.dev20260101", "3.7.0.dev20260101")])
def test_parse_takes_a_pinned_triton(spec, version):
    assert toolchain.parse(spec) == version


@pytest.mark.parametrize("spec", ["triton>=3.5", "triton", "triton==latest", "torch==2.13.0", "", "3.5.1",
                                  "triton==3.5.1,<4"])
def test_parse_refuses_anything_else_with_the_fix(spec):
    with pytest.raises(ConfigError) as e:
        toolchain.parse(spec)
    assert str(e.value).startswith(f"--toolchain {spec!r}: not a pinned Triton")
    assert "triton==X.Y.Z" in str(e.value)


def test_installed_version_needs_no_install(tmp_path):
    def never(version, folder):
        raise AssertionError("the installed Triton must not be installed again")

    tc = toolchain.ensure(f"triton=={toolchain.installed_version()}", root=str(tmp_path), installer=never)
    assert tc.installed and tc.pythonpath("x") == os.pathsep.join([ROOT, "x"])


def test_installs_from_a_folder_of_wheels_checks_and_reuses(installed_fake, monkeypatch):
    tc, root = installed_fake
    assert tc.version == FAKE and tc.path == os.path.join(root, toolchain.folder_name(FAKE))
    with open(os.path.join(tc.path, toolchain.STAMP)) as f:
        stamp = json.load(f)
    assert stamp["version"] == FAKE and "static_grid" in stamp["variants"]
    assert stamp["offline"]["PIP_NO_INDEX"] == "1"
    # the environment puts the toolchain before the checkout and keeps what PYTHONPATH held
    env = tc.env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [tc.path, ROOT, "/elsewhere"]
    seen = toolchain.probe(tc)
    assert seen["triton"] == FAKE and seen["file"].startswith(os.path.realpath(tc.path))

    def never(version, folder):
        raise AssertionError("a checked toolchain is reused, not installed again")

    assert toolchain.ensure(f"triton=={FAKE}", root=root, installer=never) == tc
    assert not [n for n in os.listdir(root) if n.startswith(".install-")]  # no leftovers


def test_an_install_says_what_it_fetches_and_where_before_pip_runs(tmp_path, capsys):
    """About 300 MB (650 MB installed) are never fetched without a word, even with quiet."""
    said = []

    def installer(version, folder):
        said.append(capsys.readouterr().err)
        raise ConfigError("stop before installing")

    with pytest.raises(ConfigError, match="stop before installing"):
        toolchain.ensure("triton==9.9.9", root=str(tmp_path), installer=installer, quiet=True)
    (line,) = said[0].splitlines()
    assert "installing triton==9.9.9 into " + str(tmp_path) in line and "about 300 MB" in line
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".install-")]  # the half install is gone


def test_a_version_pip_cannot_find_is_one_line_naming_what_it_can(offline, tmp_path):
    with pytest.raises(ConfigError) as e:
        toolchain.ensure("triton==8.0.0", root=str(tmp_path), quiet=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("--toolchain triton==8.0.0: not in the wheels in PIP_FIND_LINKS=")
    assert FAKE in msg and "PIP_NO_INDEX=1 PIP_FIND_LINKS=FOLDER" in msg
    assert os.listdir(tmp_path) == []  # the failed install left nothing behind


def test_pip_failing_otherwise_is_one_line(tmp_path):
    def broken(version, folder):
        stderr = "Looking in indexes: ...\nERROR: HTTP error 503 while getting it\n"
        raise toolchain._pip_error(version, stderr, 1, folder)

    with pytest.raises(ConfigError) as e:
        toolchain.ensure("triton=9", root=str(tmp_path), installer=broken)
    assert "not a pinned Triton" in str(e.value)
    with pytest.raises(ConfigError) as e:
        toolchain.ensure("triton==8.0.1", root=str(tmp_path), installer=broken, quiet=True)
    assert "failed (exit 1): ERROR: HTTP error 503" in str(e.value) and "PIP_FIND_LINKS" in str(e.value)


def test_a_package_reporting_another_version_is_refused(offline, tmp_path):
    with pytest.raises(ConfigError) as e:
        toolchain.ensure("triton==9.9.2", root=str(tmp_path), quiet=True)
    assert "imports Triton 1.0.0" in str(e.value) and "not 9.9.2" in str(e.value)
    assert not os.path.exists(os.path.join(tmp_path, toolchain.folder_name("9.9.2")))


def test_a_triton_without_its_backends_is_refused(offline, tmp_path):
    with pytest.raises(ConfigError) as e:
        toolchain.ensure("triton==9.9.3", root=str(tmp_path), quiet=True)
    assert "finds no compiler backend" in str(e.value)


def test_kernels_that_do_not_import_are_a_finding_not_bad_input(offline, tmp_path):
    with pytest.raises(toolchain.ToolchainBroken) as e:
        toolchain.ensure("triton==9.9.1", root=str(tmp_path), quiet=True)
    assert "do not import under Triton 9.9.1" in str(e.value)


def test_newest_release_and_prerelease():
    versions = ["3.9.0", "3.10.0rc1", "3.8.0", "3.10.0b2", "3.9.1.dev3", "3.2.0", "3.10.0a1"]
    assert toolchain.newest(versions) == ("3.9.0", "3.10.0rc1")
    assert toolchain.newest(["3.9.0", "3.8.0rc1"]) == ("3.9.0", None)  # an older pre-release is no news
    assert toolchain.newest(["3.10.0", "3.10.0rc1"]) == ("3.10.0", None)
    order = ["3.9.1.dev3", "3.10.0a1", "3.10.0b2", "3.10.0rc1", "3.10.0", "3.10.0.post1", "3.10.1"]
    assert sorted(reversed(order), key=toolchain.version_key) == order


# --- command lines: bad input is one line, exit 2 -------------------------------------------


def _perf(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "perf", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(env, PYTHONPATH=ROOT, **NO_GPU))


BAD = [
    (["compile", "--toolchain", "triton>=3.5"], "--toolchain 'triton>=3.5': not a pinned Triton"),
    (["compile", "--toolchain", "triton==3.5.1", "--base-ref", "HEAD"], "drop --base-ref"),
    (["compile", "--toolchain", "triton==3.5.1", "--emit-json", "OUT/side.json"], "drop --toolchain"),
    (["gate", "--toolchain", "triton", "--no-gpu-ok"], "--toolchain 'triton': not a pinned"),
    (["gate", "--toolchain", "triton==3.5.1", "--base-ref", "HEAD", "--no-gpu-ok"], "drop --base-ref"),
    (["toolchain", "--versions", "3.x", "--out", "OUT"], "--versions '3.x': 3.x is not a version"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_refused_in_one_line(args, expected, tmp_path):
    done = _perf(*[a.replace("OUT", str(tmp_path)) for a in args])
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert "installing" not in done.stderr and "compiling" not in done.stderr  # refused before any work


# --- the static gate: one checkout, two Tritons -------------------------------------------


def test_static_gate_compiles_under_both_tritons(installed_fake, tmp_path):
    tc, root = installed_fake
    out = tmp_path / "static"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=ROOT, **{toolchain.CACHE_ENV: root}, **NO_GPU)
    # Compile time is a measurement: one cold compile of 0.2 CPU s per side, here under pytest's
    # load rather than the gate's (A/B ratios of 1.28 were seen), so its verdict is out of this
    # test (perf.verdicts.compile_time_rule has its own tests). What is tested: which Triton each
    # side imported and that the deterministic static metrics agree.
    with open(os.path.join(ROOT, "thresholds.yaml")) as f:
        th = yaml.safe_load(f)
    for vendor in ("nvidia", "amd"):
        th[vendor]["compile"]["compile_time"].update(warn=100, fail=100)  # the most the file takes
    (tmp_path / "thresholds.yaml").write_text(yaml.safe_dump(th))
    done = subprocess.run([sys.executable, "-m", "perf", "compile", "--toolchain", f"triton=={FAKE}",
                           "--thresholds", str(tmp_path / "thresholds.yaml"), "--suite", "smoke",
                           "--variants", "naive", "--scenarios", "tiny/decode/*", "--targets", "sm_90",
                           "--jobs", "1", "--no-cache", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    base, head = (json.loads((out / f"{s}.json").read_text()) for s in ("base", "head"))
    assert base["triton"] == toolchain.installed_version() and head["triton"] == FAKE
    assert head["triton_path"].startswith(os.path.realpath(tc.path))  # the head imported the toolchain's
    assert not base["triton_path"].startswith(os.path.realpath(root))
    assert base["source"] == head["source"] and base["commit"] == head["commit"]  # one checkout
    assert [e["status"] for e in head["entries"]] == ["ok"] and head["compiled"] == 1
    findings = json.loads((out / "findings.json").read_text())
    assert findings["toolchain"] == {"base": toolchain.installed_version(), "head": FAKE,
                                     "spec": f"triton=={FAKE}"}
    times = [f for f in findings["findings"] if f["metric"] == "compile_time"]
    assert [(f["target"], f["variant"]) for f in times] == [("sm_90", "naive")]
    assert times[0]["base"] > 0 and times[0]["head"] > 0  # both sides compiled cold and were timed
    static = [f for f in findings["findings"] if f["metric"] != "compile_time"]
    assert static and all(f["verdict"] == "ok" for f in static), static  # the same compiler
    report = (out / "report.md").read_text()
    assert f"Triton {toolchain.installed_version()} → {FAKE}" in report.splitlines()[0]
    assert f"toolchain A/B: Triton {toolchain.installed_version()} → {FAKE}" in done.stdout
    assert results.load(str(out / "static.jsonl")).environment["triton"] == FAKE


# --- the latency gate: one side per process, alternating, decided at the process level ------


def test_processes_per_side_let_the_process_test_decide():
    assert ab.toolchain_processes(3, 0.01) == 5  # thresholds.yaml: 3 processes, alpha 0.01
    for configured, alpha in ((3, 0.01), (6, 0.01), (2, 0.05), (3, 0.001)):
        n = ab.toolchain_processes(configured, alpha)
        assert n >= configured and 2 / math.comb(2 * n, n) < alpha
        assert n == configured or 2 / math.comb(2 * (n - 1), n - 1) >= alpha  # the fewest that can


def test_schedule_alternates_abba():
    assert ab.toolchain_schedule(3) == ["base", "head", "head", "base", "base", "head"]
    order = ab.toolchain_schedule(5)
    assert order.count("base") == order.count("head") == 5
    positions = {s: [i for i, x in enumerate(order) if x == s] for s in ("base", "head")}
    assert abs(np.mean(positions["base"]) - np.mean(positions["head"])) <= 0.5  # drift falls alike


def _write_sides(tmp_path, effect: float, per_side: int, tau: float, sigma: float = 0.002, rounds: int = 10,
                 seed: int = 0):
    """Each side's records from its own processes (a process offset of sd `tau`, rounds of sd `sigma`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for side, factor in (("base", 1.0), ("head", effect)):
        w = results.ResultsWriter(str(tmp_path / f"{side}.jsonl"), {"environment": ENV, "side": side},
                                  resume=False)
        for p in range(per_side):
            offset = rng.normal(0, tau)
            for r in range(rounds):
                value = 0.1 * factor * math.exp(offset + rng.normal(0, sigma))
                w.record(variant="static_grid", scenario="s", metric="graph", repeat=p * rounds + r,
                         samples=Samples((value,)), config=[], digest="d", process=f"{side}{p}", position=0)
        w.close()
        out[side] = results.load(str(tmp_path / f"{side}.jsonl"))
    return out["base"], out["head"]


@pytest.mark.parametrize("effect,per_side,tau,verdict", [
    (1.10, 5, 0.005, Verdict.FAIL),      # 10 % slower, processes 0.5 % apart: caught at 5 per side
    (1.10, 3, 0.005, Verdict.WARN),      # the same at 3 per side: beyond fail, never significant
    (1.00, 5, 0.02, None),               # processes 2 % apart, no change: never a fail
    (0.90, 5, 0.005, Verdict.IMPROVED),
])
def test_process_level_analysis(tmp_path, effect, per_side, tau, verdict):
    base, head = _write_sides(tmp_path, effect, per_side, tau)
    (f,) = analysis.unpaired_findings(base, head, TH, "nvidia", by_process=True)
    assert f.ratio == pytest.approx(effect, rel=0.02)
    assert f"{per_side} vs {per_side} processes" in f.note and "one Triton per process" in f.note
    if verdict is None:
        assert f.verdict is not Verdict.FAIL
    else:
        assert f.verdict is verdict
    # a process is one observation, whatever its rounds: the p-value is that of the process means
    if verdict is Verdict.FAIL:
        assert f.p_value == pytest.approx(1 / math.comb(2 * per_side, per_side))


def _fake_worker(calls: list, effect: float):
    """run_process stand-in: writes the records one measuring process of `--side` would."""
    def run_process(cmd, log_path, label, reporter, pythonpath=ROOT):
        opt = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
        side = opt["--side"]
        calls.append((side, pythonpath, label))
        version = FAKE if side == "head" else toolchain.installed_version()
        pid = uuid.uuid4().hex[:12]
        w = results.ResultsWriter(os.path.join(opt["--out-dir"], f"{side}.jsonl"),
                                  {"environment": dict(ENV, gpu=None, vendor="cpu", triton=version),
                                   "side": side, "suite": opt["--suite"], "metrics": ["eager"], "samples": 3},
                                  resume=True)
        first = int(opt["--first-repeat"])
        for r in range(int(opt["--repeats"])):
            value = 0.1 * (effect if side == "head" else 1.0) * (1 + 0.001 * r)
            w.record(variant="static_grid", scenario="tiny/decode/batch1-kv16/block16", metric="eager",
                     repeat=first + r, samples=Samples((value,)), config=[], digest="d", process=pid,
                     position=0)
        w.close()
        return {"event": "done", "process": pid, "pairs": int(opt["--repeats"])}
    return run_process


@pytest.mark.no_gpu  # the interpreter's run sizes: 2 processes a side can never be significant
def test_latency_gate_alternates_sides_under_their_tritons(tmp_path, monkeypatch, capsys):
    fake = toolchain.Toolchain(FAKE, str(tmp_path / "tc"))
    monkeypatch.setattr(toolchain, "ensure", lambda spec, **kw: fake)
    monkeypatch.setattr(ab, "check_clean", lambda repo: None)
    calls: list = []
    monkeypatch.setattr(ab, "run_process", _fake_worker(calls, 1.3))
    from perf.cli import main

    out = tmp_path / "ab"
    rc = main(["gate", "--toolchain", f"triton=={FAKE}", "--suite", "smoke", "--variants", "static_grid",
               "--scenarios", "tiny/decode/*", "--out", str(out), "--lock-timeout", "600"])
    assert rc == 0  # the interpreter's 2 per side can never be significant: 30 % slower only warns
    assert [s for s, _, _ in calls] == ["base", "head", "head", "base"]
    assert all(p == (fake.pythonpath() if s == "head" else ROOT) for s, p, _ in calls)
    assert "(head: Triton 9.9.0)" in calls[1][2]
    data = json.loads((out / "findings.json").read_text())
    assert data["toolchain"]["schedule"] == ["base", "head", "head", "base"]
    assert data["base"]["commit"] == data["head"]["commit"]
    (f,) = data["findings"]
    assert f["verdict"] == "warn" and f["ratio"] == pytest.approx(1.3, rel=1e-6)
    report = (out / "report.md").read_text()
    assert f"Triton {toolchain.installed_version()} → {FAKE}" in report.splitlines()[0]
    assert "pairing across processes" in report and "no case can be significant" in report
    gate = json.loads((out / "gate.json").read_text())
    assert [p["side"] for p in gate["processes"]] == ["base", "head", "head", "base"]
    assert gate["identity"]["toolchain"] == f"triton=={FAKE}"


@pytest.mark.no_gpu
def test_latency_gate_measures_the_named_commit_under_both_tritons(tmp_path, monkeypatch):
    """`--head-ref C` with `--toolchain`: both sides run commit C's kernels (the nightly's toolchain
    A/B names the step's commit, which need not be the checkout's), never this checkout's."""
    from perf import git as git_mod
    from perf.cli import main

    fake = toolchain.Toolchain(FAKE, str(tmp_path / "tc"))
    monkeypatch.setattr(toolchain, "ensure", lambda spec, **kw: fake)
    worker = _fake_worker([], 1.0)
    roots: list = []

    def run_process(cmd, log_path, label, reporter, pythonpath=ROOT):
        opt = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
        head = opt["--head-from"]
        roots.append((opt["--base-from"], head, git_mod.git(head, "rev-parse", "HEAD")))
        return worker(cmd, log_path, label, reporter, pythonpath)

    monkeypatch.setattr(ab, "run_process", run_process)
    parent = git_mod.git(ROOT, "rev-parse", "HEAD~1", check=True)
    out = tmp_path / "ab"
    rc = main(["gate", "--toolchain", f"triton=={FAKE}", "--head-ref", parent, "--suite", "smoke",
               "--variants", "static_grid", "--scenarios", "tiny/decode/*", "--out", str(out),
               "--lock-timeout", "600"])
    assert rc == 0
    assert len(roots) == 4 and all(b == h != ROOT and sha == parent for b, h, sha in roots)
    data = json.loads((out / "findings.json").read_text())
    assert data["base"]["commit"] == data["head"]["commit"] == parent


def test_latency_gate_refuses_a_side_that_ran_another_triton(tmp_path, monkeypatch):
    fake = toolchain.Toolchain("9.9.5", str(tmp_path / "tc"))  # the fake worker reports 9.9.0
    monkeypatch.setattr(toolchain, "ensure", lambda spec, **kw: fake)
    monkeypatch.setattr(ab, "check_clean", lambda repo: None)
    monkeypatch.setattr(ab, "run_process", _fake_worker([], 1.0))
    from perf.cli import main

    rc = main(["gate", "--toolchain", "triton==9.9.5", "--suite", "smoke", "--variants", "static_grid",
               "--scenarios", "tiny/decode/*", "--out", str(tmp_path / "ab"), "--lock-timeout", "600"])
    assert rc == 1


@needs_interpreter
def test_worker_measures_one_side_only(tmp_path):
    cmd = [sys.executable, "-m", "perf.latency.worker", "--base-from", ROOT, "--head-from", ROOT,
           "--out-dir", str(tmp_path), "--first-repeat", "4", "--suite", "smoke", "--scenarios",
           "tiny/decode/*", "--variants", "static_grid", "--metrics", "eager", "--repeats", "2",
           "--samples", "1", "--side", "head"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **CPU_ONLY, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(x[len(PROTOCOL):]) for x in out.stdout.splitlines() if x.startswith(PROTOCOL)]
    assert events[-1]["event"] == "done" and events[-1]["pairs"] == 2
    assert not (tmp_path / "base.jsonl").exists()
    head = results.load(str(tmp_path / "head.jsonl"))
    assert head.header["side"] == "head"
    assert [(r["repeat"], r["position"]) for r in head.measurements()] == [(4, 0), (5, 0)]


# --- the nightly: which versions, the summary, the dashboard ---------------------------------


def test_nightly_chooses_the_newest_release_and_prerelease(monkeypatch):
    monkeypatch.setattr(toolchain, "index_versions", lambda: ["3.9.0", "3.10.0rc1", "3.8.0"])
    assert nightly_toolchain.choose("auto") == [("3.9.0", "release"), ("3.10.0rc1", "pre-release")]
    assert nightly_toolchain.choose("3.5.1") == [("3.5.1", "release")]


def test_nightly_summary_and_dashboard(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "index_versions", lambda: [toolchain.installed_version(), "9.10.0rc1"])
    ran = []

    def gate(kind, spec, run, out):
        ran.append([kind, spec])
        if kind == "gate":
            return {"exit": 0, "seconds": 1.0, "out": out, "findings": None}  # no GPU: skipped
        return {"exit": 1, "seconds": 90.0, "out": out, "top": ["fail sm_90 naive s spill_stores: 0 -> 8"],
                "findings": {"fail": 1, "warn": 0, "ok": 10, "improved": 2}}

    monkeypatch.setattr(nightly_toolchain, "_gate", gate)
    from perf.cli import main

    assert main(["toolchain", "--out", str(tmp_path)]) == 1
    spec = "triton==9.10.0rc1"
    assert ran == [["compile", spec], ["gate", spec]]
    summary = nightly_toolchain.load_summary(str(tmp_path))
    first, second = summary["versions"]
    assert "installed one" in first["skipped"] and second["kind"] == "pre-release"
    html = "\n".join(site.toolchain_section(summary))
    assert "<h2>Toolchain</h2>" in html and "9.10.0rc1" in html and "1 fail, 0 warn" in html
    assert "skipped (no GPU)" in html and "spill_stores: 0 -&gt; 8" in html
    index = site.build([], str(tmp_path / "site"), toolchain=summary)
    assert "Toolchain" in open(index).read()
    assert "did not run" in "".join(site.toolchain_section({"error": "no index", "versions": []}))


def test_nightly_workflow_runs_the_toolchain_step_without_blocking():
    from perf.ci import workflows

    files = workflows.generate(os.path.join(ROOT, "thresholds.yaml"), ROOT)
    import yaml

    nightly = yaml.safe_load(files[".github/workflows/nightly.yml"])
    measuring = [j for j in nightly["jobs"].values() if any(s.get("id") == "nightly" for s in j["steps"])]
    assert measuring  # the jobs that measure (not the issues job, which only posts)
    for job in measuring:
        names = [s.get("id") for s in job["steps"]]
        step = job["steps"][names.index("toolchain")]
        assert step["continue-on-error"] is True and "python -m perf toolchain" in step["run"]
        assert names.index("toolchain") < names.index("nightly")  # the dashboard shows its summary
