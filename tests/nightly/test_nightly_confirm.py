"""Nightly alerts re-measured by the latency gate, and the issues of the confirmed ones.

Fixture histories in the real results format (tests/nightly/test_nightly.py); the gate is replaced by
a runner that writes its findings.json with the gate's own writer (perf.latency.ab.write_outputs),
and GitHub by a fake API, so that nothing here needs a GPU, git commits or a token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf import verdicts
from perf.cli import main
from perf.nightly import alert, confirm, history, issues
from perf.verdicts import Finding, Verdict
from tests.nightly.test_nightly import ROOT, SCENARIOS, THRESHOLDS, _conf, synthetic, write_night

pytestmark = pytest.mark.slow  # starts processes

MACHINE = "runner-1_nvidia-h100"  # tests.nightly.test_nightly.synthetic's machine
DECODE, PREFILL = SCENARIOS[0], SCENARIOS[1]


class FakeGate:
    """Stands in for `python -m perf gate`: records each call and writes the findings a gate would,
    with the ratio `ratios` gives a case (1.0 otherwise) and the gate's verdict rule."""

    def __init__(self, ratios: dict | None = None, rc: int = 1, write: bool = True):
        self.ratios, self.rc, self.write, self.calls = ratios or {}, rc, write, []

    def __call__(self, request, cwd: str) -> int:
        from perf.latency.ab import write_outputs

        self.calls.append(request)
        if self.write:
            findings = []
            for v in request.variants.split(","):
                for s in request.scenarios.split(","):
                    for m in request.metrics.split(","):
                        r = self.ratios.get((v, s, m), 1.0)
                        p = 1e-4 if r > 1 else 0.5
                        verdict, why = verdicts.latency_verdict(r, p, 0.5, 1.03, 1.05, 0.01)
                        findings.append(Finding("latency", "nvidia", "NVIDIA H100 80GB HBM3", v, s, m, 0.1,
                                                0.1 * r, r, r - 0.01, r + 0.01, p, "warn > 1.03, fail > 1.05",
                                                verdict, why, min_detectable=1.02))
            write_outputs(os.path.join(cwd, request.out), findings, "A/B", [],
                          {"base": {"commit": request.base_ref}, "head": {"commit": request.head_ref}})
        return self.rc


def sha(i: int) -> str:
    return f"{i:040x}"


@pytest.fixture
def on_gpu(monkeypatch):
    monkeypatch.setattr("perf.vendor.on_gpu", lambda: True)


def _alert(tmp_path: Path, res: Path, *extra: str, gate: FakeGate | None = None, monkeypatch=None) -> int:
    if gate is not None:
        monkeypatch.setattr(confirm, "run_in_process", gate)
    return main(["alert", "--config", _conf(tmp_path, tmp_path / "asv"), "--data", str(res),
                 "--out", str(tmp_path / "out"), "--thresholds", str(ROOT / "thresholds.yaml"), *extra])


def _doc(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "alert.json").read_text())


def _stepped(tmp_path: Path, factors: list[float], key=("qblock", PREFILL, "graph")) -> Path:
    """A history where `key` has the level `factors[i]` at commit i (everything else flat)."""
    import numpy as np

    rng = np.random.default_rng(0)
    for i, factor in enumerate(factors):
        series = {}
        for name in ("qblock", "static_grid", "peer:sdpa_cudnn"):
            for s in (DECODE, PREFILL):
                f = factor if (name, s, "graph") == key else 1.0
                series[(name, s, "graph")] = list(0.2 * f * (1 + 0.005 * rng.standard_normal(5)))
        write_night(tmp_path / "data", MACHINE, sha(i), i + 1, series)
    return tmp_path / "data"


# --- the last good commit ---------------------------------------------------------------------


def test_last_good_is_the_newest_earlier_commit_that_did_not_alert(tmp_path):
    # slower at commit 4 (an alert that night) and slower again at 5: commit 4 is not good
    (h,) = history.load_data(str(_stepped(tmp_path, [1, 1, 1, 1, 1.3, 1.7])))
    key = ("qblock", PREFILL, "graph")
    findings, _ = alert.detect(h, THRESHOLDS)
    assert {(f.variant, f.scenario, f.metric) for f in findings if f.verdict is Verdict.FAIL} == {key}
    assert alert.last_good(h, THRESHOLDS, key) == sha(3)
    # a case flagged only at the newest commit: the commit before it
    (h2,) = history.load_data(str(_stepped(tmp_path / "b", [1, 1, 1, 1, 1, 1.3])))
    assert alert.last_good(h2, THRESHOLDS, key) == sha(4)


def test_too_short_a_history_counts_as_good_and_unmeasured_commits_are_passed_over(tmp_path):
    res = _stepped(tmp_path, [1, 1, 1, 1.5])
    night = res / "nights" / MACHINE / "2026-11-03" / "results.jsonl"  # commit 2's
    # commit 2 did not measure the case: its last good is commit 1 (no verdict there: 1 earlier commit)
    doc = [json.loads(x) for x in night.read_text().splitlines()]
    kept = [r for r in doc if not (r.get("variant") == "qblock" and r.get("scenario") == PREFILL)]
    night.write_text("".join(json.dumps(r) + "\n" for r in kept))
    (h,) = history.load_data(str(res))
    assert alert.last_good(h, THRESHOLDS, ("qblock", PREFILL, "graph")) == sha(1)


# --- the re-measure ---------------------------------------------------------------------------


def test_flagged_cases_are_remeasured_in_one_gate_run_with_the_right_refs(tmp_path, on_gpu, monkeypatch,
                                                                             capsys):
    steps = {("qblock", PREFILL, "graph"): 1.5, ("qblock", DECODE, "graph"): 1.4}
    res = synthetic(tmp_path, 5, cv=0.01, steps=steps)
    gate = FakeGate(ratios={("qblock", PREFILL, "graph"): 1.45})
    rc = _alert(tmp_path, res, "--confirm", "--machine", MACHINE, gate=gate, monkeypatch=monkeypatch)
    assert rc == 1  # one confirmed
    (request,) = gate.calls  # one run for the flagged commit: both cases share their last good commit
    assert request.base_ref == sha(3) and request.head_ref == sha(4)
    assert request.scenarios.split(",") == [PREFILL, DECODE]  # the larger ratio first
    assert request.variants == "qblock" and request.metrics == "graph" and request.suite == "nightly"
    assert request.all_cases  # measured even between identical launches: a ratio as evidence
    assert request.out == f"out/remeasure/runner-1-nvidia-h100/{sha(4)[:8]}-vs-{sha(3)[:8]}"
    by_case = {(a["variant"], a["scenario"]): a["remeasure"] for a in _doc(tmp_path)["machines"][0]["alerts"]}
    assert by_case[("qblock", PREFILL)]["status"] == "confirmed"
    assert by_case[("qblock", PREFILL)]["ratio"] == pytest.approx(1.45)
    noise = by_case[("qblock", DECODE)]
    assert noise["status"] == "noise" and noise["verdict"] == "ok" and noise["ratio"] == pytest.approx(1.0)
    assert noise["ci_low"] is not None and noise["base"] == sha(3) and "perf gate" in noise["command"]

    # Run again: the finished gate run is reused, nothing is measured twice.
    gate2 = FakeGate()
    assert _alert(tmp_path, res, "--confirm", "--machine", MACHINE, gate=gate2, monkeypatch=monkeypatch) == 1
    assert gate2.calls == [] and "re-measured already" in capsys.readouterr().out


def test_the_cap_leaves_the_smallest_ratios_pending(tmp_path, on_gpu, monkeypatch):
    steps = {("qblock", PREFILL, "graph"): 1.5, ("qblock", DECODE, "graph"): 1.3,
             ("naive", SCENARIOS[2], "eager"): 1.4}
    res = synthetic(tmp_path, 5, cv=0.01, steps=steps)
    gate = FakeGate()
    assert _alert(tmp_path, res, "--confirm", "--machine", MACHINE, "--max-cases", "2", gate=gate,
                  monkeypatch=monkeypatch) == 1  # a pending alert is not cleared
    (request,) = gate.calls
    assert DECODE not in request.scenarios
    by_case = {a["scenario"]: a["remeasure"] for a in _doc(tmp_path)["machines"][0]["alerts"]}
    assert by_case[DECODE]["status"] == "pending" and "--max-cases" in by_case[DECODE]["note"]
    assert by_case[PREFILL]["status"] == by_case[SCENARIOS[2]]["status"] == "noise"


def test_not_reproduced_is_noise_on_the_dashboard_and_exits_0(tmp_path, on_gpu, monkeypatch):
    pytest.importorskip("matplotlib")
    res = synthetic(tmp_path, 4, cv=0.01, steps={("static_grid", DECODE, "eager"): 1.4})
    assert main(["nightly", "report", "--config", _conf(tmp_path, tmp_path / "asv"), "--data", str(res),
                 "--out", str(tmp_path / "out")]) == 0
    page = tmp_path / "html" / "nightly" / "runner-1-nvidia-h100" / "index.html"
    png = page.parent / "alert_static-grid_llama3-8b-decode-batch1-kv1024-block16_eager.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.name in page.read_text()
    assert "not re-measured" in page.read_text()
    rc = _alert(tmp_path, res, "--confirm", "--machine", MACHINE, gate=FakeGate(), monkeypatch=monkeypatch)
    assert rc == 0  # every alert was noise
    (a,) = _doc(tmp_path)["machines"][0]["alerts"]
    assert a["remeasure"]["status"] == "noise" and a["remeasure"]["ratio"] == pytest.approx(1.0)
    text = page.read_text()
    row = next(x for x in text.splitlines() if x.startswith("<tr class=noise>"))
    assert "static_grid" in row and "<b>noise</b>: gate x1.000" in row
    assert "(1 noise)" in (page.parents[1] / "index.html").read_text()
    assert not (tmp_path / "out" / "issues" / "issues.json").exists()  # nothing to post


def test_dry_run_runs_nothing_and_previews_the_issue(tmp_path, monkeypatch, capsys):
    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", PREFILL, "graph"): 1.5})
    gate = FakeGate()
    assert _alert(tmp_path, res, "--confirm", "--dry-run", gate=gate, monkeypatch=monkeypatch) == 0
    out = capsys.readouterr().out
    assert gate.calls == [] and "would re-measure" in out and f"--head-ref {sha(3)}" in out
    (a,) = _doc(tmp_path)["machines"][0]["alerts"]
    assert a["remeasure"]["status"] == "pending" and "dry run" in a["remeasure"]["note"]
    (preview,) = (tmp_path / "out" / "issues" / "dry-run").glob("*.md")
    assert "Preview (`--dry-run`): not re-measured yet" in preview.read_text()
    assert not (tmp_path / "out" / "issues" / "issues.json").exists()  # never posted


def test_without_a_gpu_it_says_what_it_would_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("perf.vendor.on_gpu", lambda: False)
    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", PREFILL, "graph"): 1.5})
    gate = FakeGate()
    assert _alert(tmp_path, res, "--confirm", gate=gate, monkeypatch=monkeypatch) == 1  # still an alert
    assert gate.calls == [] and "no GPU here" in capsys.readouterr().out


def test_another_machines_alerts_stay_pending_here(tmp_path, on_gpu, monkeypatch):
    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", PREFILL, "graph"): 1.5})
    gate = FakeGate()
    assert _alert(tmp_path, res, "--confirm", "--machine", "other_gpu", gate=gate,
                  monkeypatch=monkeypatch) == 1
    (a,) = _doc(tmp_path)["machines"][0]["alerts"]
    assert gate.calls == [] and a["remeasure"]["status"] == "pending"
    assert "--machine" in a["remeasure"]["note"]


def test_a_gate_that_ends_without_findings_is_inconclusive(tmp_path, on_gpu, monkeypatch):
    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", PREFILL, "graph"): 1.5})
    assert _alert(tmp_path, res, "--confirm", "--machine", MACHINE, gate=FakeGate(rc=2, write=False),
                  monkeypatch=monkeypatch) == 1
    (a,) = _doc(tmp_path)["machines"][0]["alerts"]
    assert a["remeasure"]["status"] == "inconclusive" and "exit code 2" in a["remeasure"]["note"]


@pytest.mark.parametrize("argv, message", [
    (["--dry-run"], "--dry-run shows what --confirm"),
    (["--confirm", "--max-cases", "0"], "--max-cases"),
    (["--confirm", "--repo", "not a repo"], "--repo 'not a repo'"),
])
def test_bad_options_end_in_one_line_and_exit_2(tmp_path, capsys, argv, message):
    res = synthetic(tmp_path, 4, cv=0.01)
    assert _alert(tmp_path, res, *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


# --- the issue ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _confirmed_once(tmp_path_factory) -> Path:
    """A report and `alert --confirm` for one confirmed regression (and one noise), made once."""
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("confirmed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("perf.vendor.on_gpu", lambda: True)
        mp.setenv("GITHUB_REPOSITORY", "org/kernels")
        mp.setenv("GITHUB_RUN_ID", "42")
        mp.delenv("PERF_DASHBOARD_URL", raising=False)
        steps = {("qblock", PREFILL, "graph"): 1.5, ("qblock", DECODE, "graph"): 1.4}
        res = synthetic(root, 5, cv=0.01, steps=steps)
        assert main(["nightly", "report", "--config", _conf(root, root / "asv"), "--data", str(res),
                     "--out", str(root / "out")]) == 0
        gate = FakeGate(ratios={("qblock", PREFILL, "graph"): 1.45})
        assert _alert(root, res, "--confirm", "--machine", MACHINE, gate=gate, monkeypatch=mp) == 1
    return root


@pytest.fixture
def confirmed(_confirmed_once, tmp_path) -> Path:
    """This test's copy of what `alert --confirm` wrote (posting changes it): tmp_path/out."""
    import shutil

    shutil.copytree(_confirmed_once, tmp_path, dirs_exist_ok=True)
    return tmp_path / "out"


def test_confirmed_regression_renders_an_issue_with_marker_plot_range_and_bisect(confirmed):
    (item,) = issues.load_plan(str(confirmed))
    assert [c["scenario"] for c in item["cases"]] == [PREFILL]  # the noise case is not in it
    body = (confirmed / "issues" / item["body_file"]).read_text()
    assert issues.marker("nvidia", MACHINE, "qblock", PREFILL, "graph") in body
    assert item["key"] == f"code/nvidia/{MACHINE}/{sha(4)[:12]}"  # one issue per flagged commit and machine
    png = "alert_qblock_llama3-8b-prefill-batch8-kv1024-block16_graph.png"
    assert f"https://org.github.io/kernels/nvidia/nightly/runner-1-nvidia-h100/{png}" in body
    assert f"https://github.com/org/kernels/compare/{sha(3)}...{sha(4)}" in body
    assert (f"python -m perf bisect {sha(3)} {sha(4)} --scenario {PREFILL} --variant qblock --metric graph"
            in body)
    assert "| 1.496 |" in body or "| 1.5" in body  # the nightly's ratio
    assert "| 1.450 | [1.440, 1.460] | 1.020 |" in body  # re-measure: ratio, interval, smallest detectable
    assert "https://github.com/org/kernels/actions/runs/42" in body
    assert item["title"].startswith("Perf regression: qblock graph x1.45 on " + PREFILL)


def test_a_confirmed_cause_opens_one_issue_and_a_rerun_updates_it(confirmed, tmp_path):
    from perf.ci.github import tracker

    t = tracker(dry_run_dir=str(tmp_path / "posted"))
    t.upsert("unrelated", "an unrelated issue", "text")
    (act,) = issues.post(str(confirmed), t, str(tmp_path / "html" / "nightly"))
    assert act["action"] == "opened" and act["number"] == 2
    alerts = {a["scenario"]: a for a in _doc(tmp_path)["machines"][0]["alerts"]}
    assert alerts[PREFILL]["issue"] == {"action": "opened", "number": 2, "url": t.url(2)}
    assert "issue" not in alerts[DECODE]
    # The job run again (interrupted, retried): the issue is found by its key, none is added.
    (again,) = issues.post(str(confirmed), t)
    assert again["action"] == "updated" and again["number"] == 2
    assert [i["number"] for i in t.issues()] == [1, 2] and t.issues()[1]["updates"] == 0
    assert t.open_keys() == {"unrelated", act["key"]}


def test_post_dry_run_keeps_the_issues_in_a_folder(confirmed, tmp_path, capsys):
    out = tmp_path / "would-post"
    assert issues.cli(["post", "--results", str(confirmed), "--dry-run", str(out), "--repo", ""]) == 0
    (only,) = out.glob("*.json")
    doc = json.loads(only.read_text())
    assert doc["state"] == "open" and doc["title"].startswith("Perf regression")
    assert "perf-alert" in doc["body"]
    assert "opened: issue #1" in capsys.readouterr().out


def test_post_without_a_plan_or_repo_ends_in_one_line(tmp_path, capsys):
    assert issues.cli(["post", "--results", str(tmp_path), "--repo", "org/kernels"]) == 2
    assert issues.cli(["post", "--results", str(tmp_path), "--repo", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "issues.json: not found" in err[0] and "--repo 'nope'" in err[1]
    plan = tmp_path / "issues" / "issues.json"
    plan.parent.mkdir()
    plan.write_text(json.dumps({"version": 1, "items": [{"cases": []}]}))
    assert issues.cli(["post", "--results", str(tmp_path), "--repo", "org/kernels"]) == 2
    assert "not an issues plan" in capsys.readouterr().err


FAKE_GH = r"""
import json, os, sys
args = sys.argv[1:]
log = open(os.environ["GH_LOG"], "a")
payload = json.loads(sys.stdin.read()) if "--input" in args else None
log.write(json.dumps({"args": args, "payload": payload}) + "\n")
path = [a for a in args if not a.startswith("-") and a not in ("POST",)][-1]
if path.startswith("repos/org/kernels/issues?"):
    sys.stdout.write(json.dumps([{"number": 3, "body": "x"}]) + json.dumps([{"number": 4, "body": "y",
                     "pull_request": {}}]))  # two pages, one a pull request
elif path == "repos/org/kernels/issues":
    print(json.dumps({"number": 5, "html_url": "https://github.com/org/kernels/issues/5"}))
else:
    sys.exit("unexpected " + path)
"""


def test_gh_api_client_pages_and_posts_json(confirmed, tmp_path, monkeypatch):
    """The real client against a stand-in for `gh`, in a process that may import the standard
    library and perf only: the issues job runs on a bare hosted runner."""
    gh = tmp_path / "gh"
    gh.write_text(f"#!{sys.executable}\n{FAKE_GH}")
    gh.chmod(0o755)
    blocked = ["yaml", "numpy", "scipy", "torch", "triton", "rich", "matplotlib"]  # as test_ci_comment does
    script = (
        f"import sys; sys.modules.update(dict.fromkeys({blocked!r}))\n"
        "from perf.ci.github import GhTracker\n"
        "from perf.nightly import issues\n"
        f"issues.post({str(confirmed)!r}, GhTracker('org/kernels', gh={str(gh)!r}), "
        f"{str(tmp_path / 'html' / 'nightly')!r})\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "GH_LOG": str(tmp_path / "gh.log")})
    assert done.returncode == 0, done.stderr
    calls = [json.loads(x) for x in (tmp_path / "gh.log").read_text().splitlines()]
    assert calls[0]["args"] == ["api", "--paginate", "repos/org/kernels/issues?state=open&per_page=100"]
    assert calls[1]["args"][:4] == ["api", "--method", "POST", "repos/org/kernels/issues"]
    payload = calls[1]["payload"]
    assert payload["title"].startswith("Perf regression") and "perf-alert" in payload["body"]
    assert payload["body"].startswith("<!-- perf-key: code/nvidia/") and payload["labels"] == ["performance",
                                                                                               "nightly"]
    (a,) = [a for a in _doc(tmp_path)["machines"][0]["alerts"] if "issue" in a]
    assert a["issue"]["url"] == "https://github.com/org/kernels/issues/5"
    page = (tmp_path / "html" / "nightly" / "runner-1-nvidia-h100" / "index.html").read_text()
    assert "<a href='https://github.com/org/kernels/issues/5'>issue #5</a>" in page


def test_a_runner_remeasures_its_own_history_or_the_pooled_one_of_its_gpu():
    here = "gpu-7_nvidia-h100-80gb-hbm3"
    assert confirm._here(here, here, named=False)
    assert confirm._here("4-runners_nvidia-h100-80gb-hbm3", here, named=False)  # a sharded nightly's
    assert not confirm._here("gpu-8_nvidia-h100-80gb-hbm3", here, named=False)  # another runner's
    assert not confirm._here("4-runners_nvidia-h200", here, named=False)  # another GPU's
    assert not confirm._here("4-runners_nvidia-h100-80gb-hbm3", here, named=True)  # --machine is exact


@pytest.mark.parametrize("verdict, ratio, status", [
    (Verdict.FAIL, 1.3, "confirmed"), (Verdict.OK, 1.004, "noise"), (Verdict.IMPROVED, 0.9, "noise"),
    (Verdict.WARN, 1.3, "inconclusive"),  # beyond fail but not significant: neither confirmed nor cleared
    (Verdict.OK, None, "inconclusive"),  # skipped on both sides: no ratio
])
def test_the_gates_verdict_decides_what_became_of_an_alert(verdict, ratio, status):
    f = Finding("latency", "nvidia", "H100", "qblock", DECODE, "graph", 0.1, 0.13, ratio, None, None, 0.02,
                "warn > 1.03, fail > 1.05", verdict)
    assert verdicts.remeasure_status(f) == status
    assert verdicts.remeasure_status(None) == "inconclusive"


# --- the alert, computed once per night ---------------------------------------------------------------


def test_the_alert_is_computed_once_per_night_and_stored_with_it(tmp_path, monkeypatch):
    from perf.nightly import store

    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", PREFILL, "graph"): 1.5})
    assert _alert(tmp_path, res) == 1
    night = store.newest(str(res), MACHINE)
    (m,) = night.alert()["machines"]  # stored with the night it is about
    assert m["commit"] == sha(3) and [a["scenario"] for a in m["alerts"]] == [PREFILL]
    assert m["rules"]["vendor"] == "nvidia" and m["window"] == alert.WINDOW
    assert _doc(tmp_path)["machines"] == [m]
    computed, detect = [], alert.detect
    monkeypatch.setattr(alert, "detect", lambda *a, **k: computed.append(a) or detect(*a, **k))
    assert _alert(tmp_path, res) == 1 and computed == []  # read from the night, not judged again
    assert _alert(tmp_path, res, "--window", "2") == 1 and len(computed) == 1  # other settings: judged again
    assert store.newest(str(res), MACHINE).alert()["machines"][0]["window"] == 2


def test_the_last_good_commit_reads_each_earlier_night_s_stored_alert(tmp_path, monkeypatch):
    (h,) = history.load_data(str(_stepped(tmp_path, [1, 1, 1, 1, 1.3, 1.7])))
    for c in h.commits[:-1]:  # each night's alert, as the nightly stored it that night
        alert.tonight(h.upto(c.sha), THRESHOLDS)
    monkeypatch.setattr(alert, "detect", lambda *a, **k: pytest.fail("an earlier night was judged again"))
    assert alert.last_good(h, THRESHOLDS, ("qblock", PREFILL, "graph")) == sha(3)
