"""What each CI job runs, installs and leaves behind: the one list both sides read.

perf/ci/workflows.py writes these commands into .github/workflows/*.yml; perf/ci/gpu_job.py
runs the GPU job's list on a developer's machine (`nox -s ci`), so a red GPU check
reproduces with the very commands the job ran; perf/ci/comment.py reads the artifacts
the jobs upload, under the names and paths defined here. Stdlib only: the comment
workflow runs on a bare hosted runner.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from perf.change.plan import GRID, KINDS, LATENCY
from perf.ci.grid import TESTS as GRID_TESTS
from perf.vendor import VENDORS

NOX = "nox==2026.10.20"  # the version .ci/run installs
RESULTS_DIR = "results"  # where gates write results JSON, reports and plots (gitignored /results/)
TRUST_LABEL = "safe-to-test"  # a maintainer's label that lets a fork's PR reach the GPU runners

# Packages a GPU job installs next to the image's torch and triton (the project's runtime and
# test needs from pyproject.toml; never torch or triton, whose vendor builds must stay).
# pytest and pytest-xdist as pyproject.toml's test extra pins them: a pair whose `--dist loadgroup`
# groups (the GPU grid's groups; tests/ci/test_xdist_groups.py), kept equal by tests/ci's check.
PYTEST_PAIR = ("pytest==9.1.1", "pytest-xdist==3.8.0")
GPU_JOB_PACKAGES = (NOX, *PYTEST_PAIR, "pytest-benchmark>=4", "pyyaml>=6",
                    "scipy>=1.11", "rich>=13", "matplotlib>=3.8")
NIGHTLY_PACKAGES = ("asv>=0.6",)
# Beside those, per vendor: the GPU management library the environment fingerprint reads
# (perf/fingerprint.py), as its record names it (perf/vendor.py Vendor.smi_packages).
# amdsmi is no package of an index: ROCm ships its Python module in share/amd_smi, and PyTorch's
# ROCm CI images install it from there (.ci/docker/common/install_amdsmi.sh); where the image's
# Python cannot import it, the job does the same (copied first: the build writes into its folder;
# --no-deps: nothing of the image moves). A failure only warns: the fingerprint says why.
AMDSMI_FROM_ROCM = (
    'python -c "import amdsmi" 2>/dev/null || { rm -rf /tmp/amd_smi && '
    'cp -r "${ROCM_PATH:-/opt/rocm}/share/amd_smi" /tmp/amd_smi && '
    "python -m pip install --no-cache-dir --quiet --no-deps /tmp/amd_smi; } || "
    'echo "::warning::amdsmi could not be installed from the ROCm of the image; the fingerprint leaves '
    'the GPU fields empty and says why"'
)


def gpu_job_packages(vendor: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a GPU job of `vendor` installs next to the image's torch and triton."""
    return (*GPU_JOB_PACKAGES, *extra, *VENDORS[vendor].smi_packages)


@dataclass(frozen=True)
class Command:
    """One step of a job; `nox -s ci` runs the GPU job's list verbatim."""

    id: str  # the step's id in the job
    name: str  # the step's name in the GitHub UI
    argv: tuple[str, ...]  # "{vendor}" is filled in; "python" is the interpreter holding torch
    base_flag: str | None = None  # followed by the PR's base commit, when one is known
    gpu: str = ""  # what the step needs a GPU for ("" = runs anywhere)
    shard_flag: str | None = None  # followed by the runner's share `I/M` in a matrix job
    data_flag: str | None = None  # followed by the checkout of the data branch (the nightly's history)
    plan_flag: str | None = None  # followed by the grid plan, when the `changes` job made one

    def words(self, vendor: str) -> list[str]:
        return [w.replace("{vendor}", vendor) for w in self.argv]

    def title(self, vendor: str) -> str:
        return self.name.replace("{vendor}", vendor)

    def shell(self, vendor: str, base: str | None = None, shard: str | None = None,
              data: str | None = None) -> str:
        """The step as one shell line; `base`, `shard` and `data` are shell words such as "$BASE_SHA"."""
        line = shlex.join(self.words(vendor))
        for flag, word in ((self.base_flag, base), (self.shard_flag, shard), (self.data_flag, data)):
            if flag and word:
                line += f" {flag} {word}"
        return line


GRID_STEP = "tests"  # the correctness grid's step id (pr.yml's `changes` job decides whether it runs)
_NOX_GPU = ("python", "-m", "nox", "--no-venv")  # keep the image's vendor torch: no virtualenv
VERIFY = Command("verify", "Check that torch is the {vendor} build and sees the GPU",
                 ("python", "-m", "perf.ci.gpu_job", "--verify-torch", "--vendor", "{vendor}"),
                 gpu="the vendor's torch build and a visible GPU")
PR_GPU_COMMANDS = (
    VERIFY,
    # The kernels' test modules (perf/ci/grid.py TESTS), skipped when no input of theirs changed;
    # the harness's tests run on the CPU job. xdist: the whole grid compiles hundreds of
    # specializations. `-n auto` starts one worker per CPU (perf.devices.WORKERS_PER_CPU: the grid
    # is compile-bound), each pinned to one GPU of the job's by tests/conftest.py, round-robin;
    # `loadgroup` keeps each xdist_group (one compiled specialization) on one worker, so it
    # compiles once (docs/workflows.md).
    # With the `changes` job's grid plan (`--grid-plan`, tests/conftest.py) the keyed cases whose
    # launches are identical on base and head are deselected.
    Command(GRID_STEP, "GPU correctness grid (nox -s tests, the kernels' tests)",
            (*_NOX_GPU, "-s", "tests", "--", *GRID_TESTS, "-q", "-n", "auto", "--dist", "loadgroup",
             f"--junitxml={RESULTS_DIR}/tests-{{vendor}}.xml"),
            gpu="the whole correctness grid, CUDA/HIP graphs included", plan_flag="--grid-plan"),
    # The latency gate alone: the static gate (the rest of `nox -s perf`) runs on the CPU job, and
    # here it took 59-65 s of the GPU job (H100, 2026-11-27, docs/latency.md's cost table).
    Command("perf", "Latency gate against the PR's base (perf gate)",
            (*_NOX_GPU, "-s", "cli", "--", "gate", "--vendor", "{vendor}"), base_flag="--base-ref",
            gpu="the A/B latency measurement"),
)
PR_CPU_COMMANDS = (
    Command("lint", "Lint (nox -s lint)", ("nox", "-s", "lint")),
    Command("tests", "Interpreter tests (nox -s tests)", ("nox", "-s", "tests")),
    Command("static", "Static gate against the PR's base (nox -s compile)", ("nox", "-s", "compile", "--"),
            base_flag="--base-ref"),
    Command("workflows", "Workflows match thresholds.yaml and pass actionlint (nox -s workflows)",
            ("nox", "-s", "workflows", "--", "--check")),
)
NIGHTLY_COMMANDS = (
    VERIFY,
    Command("nightly", "asv run, publish and report (nox -s nightly)", (*_NOX_GPU, "-s", "nightly", "--"),
            gpu="the nightly measurements", data_flag="--data"),
)
ALERT = Command("alert", "Change-point alert (nox -s alert)", (*_NOX_GPU, "-s", "alert", "--"),
                data_flag="--data")
# After an alert, on the GPU: each flagged commit against its last good one in the latency gate
# (perf/nightly/confirm.py); it writes the confirmed regressions' issues for the issues job.
REMEASURE = Command("remeasure", "Re-measure the alerts with the latency gate (nox -s alert -- --confirm)",
                    (*_NOX_GPU, "-s", "alert", "--", "--confirm"), data_flag="--data",
                    gpu="the latency gate's A/B of each flagged commit against its last good one")
ISSUES_PLAN = f"{RESULTS_DIR}/nightly/issues/issues.json"  # perf/nightly/issues.py ISSUES_DIR/PLAN in --out
# This commit under the newest Triton release and pre-release against the image's Triton, both
# gates; before the nightly, whose dashboard shows its summary (perf/nightly/toolchain.py).
TOOLCHAIN = Command("toolchain", "Toolchain A/B: newest Triton release and pre-release (perf toolchain)",
                    ("python", "-m", "perf", "toolchain"),
                    gpu="the latency side (the static side runs anywhere)")

# --- The nightly's memory: the data branch (perf/nightly/store.py, docs/nightly.md) ---------------
DATA_BRANCH = "perf-data"  # one folder per runner and night: nights/<runner>/<YYYY-MM-DD>/
# After the night (and its alert and re-measure): commit this runner's night folder to the data
# branch and push, with retries (several runners push to one branch).
SAVE = Command("save", f"Save this night to the {DATA_BRANCH} branch (perf nightly save)",
               ("python", "-m", "perf", "nightly", "save", "--branch", DATA_BRANCH), data_flag="--data")
# After the alert and its re-measure, before the save: one cause per step the nightly found
# (perf/nightly/attribute.py), its state in alert.json (committed with the night); the GPU job has
# no token, so its issues go into a folder that the issues job posts (perf/nightly/issues.py).
ATTRIBUTED_DIR = f"{RESULTS_DIR}/nightly/issues/attributed"  # perf/nightly/issues.py ATTRIBUTED_DIR in --out
ATTRIBUTE = Command("attribute", "Attribute each step to its cause (perf nightly attribute)",
                    ("python", "-m", "perf", "nightly", "attribute", "--dry-run", ATTRIBUTED_DIR),
                    data_flag="--data",
                    gpu="the A/Bs that name a step's cause (re-measure, toolchain, bisect)")
# Before the night: the branch's tip as a folder the nightly and the alert read (`--data`); an
# empty history where the branch does not exist yet, an error where the remote cannot be reached.
CHECKOUT = Command("checkout", f"Check out the {DATA_BRANCH} branch, the nightly's history (perf nightly "
                   f"checkout)", ("python", "-m", "perf", "nightly", "checkout", "--branch", DATA_BRANCH),
                   data_flag="--data")
# A night older than this on the data branch opens (or updates) the heartbeat issue: the command's
# own default (perf/nightly/heartbeat.py MAX_AGE_HOURS, by reasoning: one missed night plus half a
# day), written out so that the job says what it checks; a test keeps the two equal.
HEARTBEAT_MAX_AGE_HOURS = 36
HEARTBEAT = Command("heartbeat", f"A night on {DATA_BRANCH} within {HEARTBEAT_MAX_AGE_HOURS} h, else an "
                    f"issue (perf nightly heartbeat)",
                    ("python", "-m", "perf", "nightly", "heartbeat", "--branch", DATA_BRANCH,
                     "--max-age-hours", str(HEARTBEAT_MAX_AGE_HOURS)))

# --- By hand on a GPU runner (workflow_dispatch): bisect a slowdown, try another Triton ----------
# Their inputs are checked on a hosted runner before a GPU runner is taken (workflows.py).
BISECT = Command("bisect", "Bisect GOOD..BAD for the first slower commit (perf bisect)",
                 ("python", "-m", "perf", "bisect"), gpu="a latency gate per bisection step")
TOOLCHAIN_AB = Command("toolchain", "Both gates: this commit under Triton X against the image's (perf "
                       "toolchain --versions X)", ("python", "-m", "perf", "toolchain"),
                       gpu="the latency side (the static side runs anywhere)")

# --- The nightly over M runners (thresholds.yaml runners.nightly_shards > 1) ------------------
# Each matrix job measures its share on all its GPUs and uploads it; one merge job on a hosted
# runner merges the parts, records them with asv, publishes and alerts (perf/nightly/shard.py).
NIGHTLY_PARTS_DIR = f"{RESULTS_DIR}/nightly/shards"  # where `nightly run --shard I/M` writes a part
NIGHTLY_PARTS_IN = f"{RESULTS_DIR}/nightly-parts"  # where the merge job downloads the parts
NIGHTLY_SHARD_COMMANDS = (
    VERIFY,
    Command("nightly", "Measure this runner's share of the nightly (nox -s nightly -- run --shard)",
            (*_NOX_GPU, "-s", "nightly", "--", "run"), shard_flag="--shard",
            gpu="the nightly measurements"),
)
NIGHTLY_MERGE = Command("nightly", "Merge the parts, asv run, publish and report (nox -s nightly)",
                        (*_NOX_GPU, "-s", "nightly", "--", "--merge-shards", NIGHTLY_PARTS_IN),
                        data_flag="--data")
# The merge job's packages: no torch or triton (merging and asv's lookups never import them).
NIGHTLY_MERGE_PACKAGES = (NOX, "pyyaml>=6", "scipy>=1.11", "rich>=13", "matplotlib>=3.8", *NIGHTLY_PACKAGES)


def nightly_part_artifact(vendor: str, shard: str) -> str:
    """A matrix job's part (`shard` may be the `${{ matrix.shard }}` expression)."""
    return f"nightly-{vendor}-part-{shard}"

# --- What a pull request's GPU jobs must run (pr.yml's `changes` job) ------------------------------
# Files that cannot change what a GPU job runs or measures: a change touching only these skips
# the GPU jobs (by their `if:`, so that their required checks still report: docs/workflows.md).
# Bash `case` globs over the paths `git diff --name-only` prints; `*` also matches `/`.
DOCS_ONLY = ("docs/*", "*.md", "LICENSE", "LICENSE.*", "COPYING", "COPYING.*", "NOTICE", "NOTICE.*",
             "AUTHORS", "AUTHORS.*", "CITATION.cff")
CHANGES_JOB = "Changes: which GPU jobs and latency cases this change needs"
# The change plans (perf/change/plan.py) the `changes` job makes on the hosted runner, per vendor:
# the latency gate's (`perf gate --plan-only`: which latency cases can differ; identical launches
# cannot) and, where the grid runs and every changed input is selectable (perf/change/grid_plan.py),
# the correctness grid's (`perf grid --cases`: which keyed cases can compute something else). Each
# go into one folder, uploaded as one artifact per vendor (`plans-<vendor>`); the GPU jobs download
# it, and time only those cases or deselect the others (`pytest --grid-plan`).
PLAN_FILE = KINDS[LATENCY].file
GRID_PLAN_FILE = KINDS[GRID].file


def plan_artifact(vendor: str) -> str:
    """The one artifact of `vendor`'s plans (plans-nvidia: plan.json, and grid-plan.json where the
    grid's plan was made); not `pr-*`: the comment workflow downloads those."""
    return f"plans-{vendor}"


def plan_dir(vendor: str) -> str:
    """The folder the `changes` job writes both plans into and the GPU jobs download them to."""
    return f"{RESULTS_DIR}/{plan_artifact(vendor)}"


PLAN = Command("plan", "Plan the {vendor} latency gate: cases to time (perf gate --plan-only)",
               ("nox", "-s", "cli", "--", "gate", "--plan-only", "--vendor", "{vendor}",
                "--out", plan_dir("{vendor}")), base_flag="--base-ref")
GRID_PLAN = Command("grid-plan", "Plan the {vendor} correctness grid: keyed cases to run (perf grid --cases)",
                    ("nox", "-s", "cli", "--", "grid", "--cases", "--vendor", "{vendor}",
                     "--out", plan_dir("{vendor}"), "--github-output"), base_flag="--base-ref")
# `perf grid --compile-cache` on hosted CPU runners, per vendor, where the grid runs: the grid's
# kernels compiled in the GPU job's own image (a Triton cache hits only under the very Triton build,
# ptxas and environment that compiled it: perf/change/grid_cache.py), split over a matrix of shards by
# compile key; the GPU job merges the shards' folders and points TRITON_CACHE_DIR at them. A miss
# compiles on the GPU as before. Not under RESULTS_DIR: the cache is no result (gitignored too).
GRID_CACHE_DIR = ".grid-cache"
# Shards of the compile job. By division, not measured in a workflow: the H100 grid (16 CPUs,
# 2026-11-26) spent 85 % of 16 workers x 9.4 min in Triton's compiler over 3,161 compiles, about
# 2.4 CPU-s a kernel; 3,161 x 2.4 CPU-s / (8 runners x 4 CPUs of a hosted runner) is about 4 min
# of compiling per shard, beside the image's pull.
GRID_COMPILE_SHARDS = 8


def grid_cache_dir(vendor: str) -> str:
    return f"{GRID_CACHE_DIR}/{vendor}"


def grid_cache_artifact(vendor: str, shard: str) -> str:
    """A compile shard's cache (`shard` may be `${{ matrix.shard }}` or `*`); not `pr-*`: the comment
    workflow downloads those."""
    return f"grid-cache-{vendor}-{shard}"


GRID_COMPILE = Command("grid-compile", "Compile the {vendor} grid's kernels into a Triton cache (perf grid "
                       "--compile-cache)", ("python", "-m", "perf", "grid", "--compile-cache",
                                            grid_cache_dir("{vendor}"), "--vendor", "{vendor}"),
                       shard_flag="--shard", plan_flag="--grid-plan")
# The CPU build of torch for the hosted jobs that install the noxfile's pins: pip takes
# torch==X+cpu from this index over PyPI's X, which pulls in the CUDA libraries (gigabytes).
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

# --- The PR run's jobs and artifacts, as the comment workflow finds them ---------------------
PR_WORKFLOW = "PR"  # pr.yml's `name:`, which the comment workflow's `workflow_run` trigger names
CPU_JOB = "CPU: lint, interpreter tests, static gate, workflows"


def gpu_job_name(vendor: str, gpus: str) -> str:
    """The display name of a vendor's PR GPU job (GitHub's jobs API reports this name)."""
    return f"GPU {vendor} ({gpus}): correctness, latency gate"


def is_gpu_job(name: str, vendor: str) -> bool:
    return name.startswith(f"GPU {vendor} (") and name.endswith("): correctness, latency gate")


CPU_ARTIFACT = "pr-cpu-results"  # the CPU job's RESULTS_DIR


def gpu_artifact(vendor: str) -> str:
    return f"pr-{vendor}-results"  # a GPU job's RESULTS_DIR


# The PR's number, written by the CPU job: a `workflow_run` event lists no pull request for
# a fork's branch, so the comment workflow learns the number from this artifact (and checks
# it against the PR's head commit before it trusts it).
PR_NUMBER_ARTIFACT = "pr-number"
PR_NUMBER_FILE = "number"
# Findings inside those artifacts (relative to RESULTS_DIR): the default --out of
# `python -m perf gate` (results/ab) and of `python -m perf compile` (results/static).
LATENCY_FINDINGS = "ab/findings.json"
STATIC_FINDINGS = "static/findings.json"


# --- The nightly dashboard on GitHub Pages, as the PR comment and the nightly's issues link it ---
# The nightly workflow's `pages` job publishes each vendor's site artifact `site-<vendor>`
# (asv's site with our report under nightly/) as the folder `<vendor>/` of one Pages site.
DASHBOARD_VARIABLE = "PERF_DASHBOARD_URL"  # a repository variable (or environment variable) that overrides


def nightly_site_artifact(vendor: str) -> str:
    return f"site-{vendor}"


def dashboard_url(repository: str = "", given: str = "") -> str:
    """The dashboard's root URL: `given` (the workflow passes the repository variable
    PERF_DASHBOARD_URL, for a custom domain), else GitHub Pages' address of a project site,
    `https://<owner>.github.io/<repo>/` (GitHub's documented default), else "" (no link).
    ConfigError for a `given` that is not an https URL (it is written into links)."""
    import re

    from perf.errors import ConfigError

    if given.strip():
        url = given.strip().rstrip("/") + "/"
        if not re.fullmatch(r"https://[\w.-]+(:\d+)?(/[\w./~%-]*)?", url):
            raise ConfigError(f"dashboard URL {given!r}: expected an https:// URL (--dashboard-url or the "
                              f"repository variable {DASHBOARD_VARIABLE})")
        return url
    owner, _, name = repository.strip().partition("/")
    if not owner or not name or "/" in name:
        return ""
    return f"https://{owner.lower()}.github.io/{name}/"


def dashboard_link(root: str, vendor: str, *path: str) -> str:
    """A page or plot of the published report: `<root><vendor>/nightly/<path...>` ("" without a root)."""
    return f"{root}{vendor}/nightly/{'/'.join(path)}" if root else ""
