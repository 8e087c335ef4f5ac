"""The model of a GitHub Actions job and the steps every generated workflow shares.

What the workflows need of each vendor's runners (`VendorCI`, from thresholds.yaml and the
vendor's record, perf/vendor.py), the pinned actions, the policy (hosted runner, time limits,
schedules) and the steps: checkout, the vendor's container started and stopped, clocks locked
and restored, uploads, a job's environment, a command of perf/ci/jobs.py as a step.
perf/ci/pr_yml.py, comment_yml.py, nightly_yml.py and dispatch_yml.py build the workflows
from them; perf/ci/workflows.py renders, writes and checks them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from perf.ci.jobs import AMDSMI_FROM_ROCM, Command, gpu_job_packages
from perf.errors import ConfigError
from perf.fingerprint import IMAGE_DIGEST_ENV
from perf.thresholds import Thresholds
from perf.vendor import VENDORS

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
# What GitHub itself sets and the harness records (commit, run, runner name for asv machines).
FORWARDED_ENV = ("CI", "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_REF", "GITHUB_RUN_ID",
                 "RUNNER_NAME")
# PyTorch's workers share tensors through /dev/shm; Docker's default of 64 MiB is too small.
# 16g is an unmeasured default; `--ipc=host` (the host's /dev/shm) makes it unnecessary.
DEFAULT_SHM = "--shm-size=16g"
# Labels actionlint knows without configuration (GitHub's own); the rest go to actionlint.yaml.
BUILTIN_LABELS = frozenset({"self-hosted", "linux", "macos", "windows", "x64", "x86", "arm", "arm64"})


# --- Runner description from thresholds.yaml -----------------------------------------------


@dataclass(frozen=True)
class VendorCI:
    """What the workflows need of one vendor's section of thresholds.yaml."""

    vendor: str  # a key of perf/vendor.py VENDORS
    labels: tuple[str, ...]  # runs-on of its GPU jobs
    container: str  # image the GPU jobs run in ("" = the runner's own Python)
    container_options: str  # `docker run` options (devices, groups, IPC, shared memory)
    env: dict[str, str] = field(default_factory=dict)  # job environment, forwarded into the container
    image_digest: str = ""  # the container's pinned digest (sha256:...), for the fingerprint
    lock_clocks: int | None = None  # MHz to lock the GPU clock at; None = leave clocks alone
    # the runner's GPU-isolation variables to forward (thresholds.yaml, else the vendor's record)
    isolation_env: tuple[str, ...] = ()
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
        iso = VENDORS[name].isolation_env if r.isolation_env is None else r.isolation_env
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
    record = VENDORS[vendor]
    for need in record.container_needs:
        if need not in options:
            raise ConfigError(f"{path}: {vendor}.runners.container_options: lacks {need!r}; add "
                              f"`{record.container_options}` (the {record.runtime} runtime needs them)")
    if "--ipc=host" not in options and "--shm-size" not in options:
        options = f"{options} {DEFAULT_SHM}".strip()
    return options


# --- Steps -----------------------------------------------------------------------------------


def uses(key: str, title: str, /, **with_: object) -> dict:
    step: dict = {"name": title, "uses": ACTIONS[key].uses}
    if with_:
        step["with"] = {k.replace("_", "-"): v for k, v in with_.items()}
    return step


def checkout() -> dict:
    # Full history: the gates check out the base commit in a git worktree.
    return uses("checkout", "Check out (full history)", fetch_depth=0, persist_credentials=False)


def exec_prefix(v: VendorCI, words: str = "") -> str:
    """`docker exec` into the job's container; `words`: more options (a shell array's expansion)."""
    if not v.container:
        return ""
    return f'docker exec --workdir "$GITHUB_WORKSPACE" --env GITHUB_STEP_SUMMARY {words}"$CI_CONTAINER" '


DATA = '"$PERF_DATA"'  # the checkout of the data branch (_data_checkout), for commands that read history


def command_step(c: Command, v: VendorCI | None, base: str | None, shard: str | None = None) -> dict:
    vendor = v.vendor if v else ""
    step = {"id": c.id, "name": c.title(vendor),
            "run": (exec_prefix(v) if v else "") + c.shell(vendor, base, shard, DATA)}
    return step


def install(v: VendorCI, extra: tuple[str, ...] = ()) -> str:
    """The pip line that installs a GPU job's packages (jobs.gpu_job_packages) next to the image's
    torch and triton; the grid compile job runs the same line, so its Python is the GPU job's."""
    return shlex.join(["python", "-m", "pip", "install", "--no-cache-dir", "--quiet",
                       *gpu_job_packages(v.vendor, extra)])


def start_container(v: VendorCI, extra: tuple[str, ...] = ()) -> list[dict]:
    """Start the vendor's container (the job's env and the runner's GPU isolation forwarded into
    it) and install the GPU job's packages (jobs.gpu_job_packages) in it; on AMD, amdsmi from the
    image's ROCm where it is not importable (jobs.AMDSMI_FROM_ROCM)."""
    digest = (IMAGE_DIGEST_ENV,) if v.image_digest else ()  # set by job_env
    forwarded = sorted({*v.isolation_env, *v.env, *digest, *FORWARDED_ENV})
    env_flags = " ".join(f"--env {n}" for n in forwarded)
    pip = install(v, extra)
    amdsmi = [AMDSMI_FROM_ROCM] if VENDORS[v.vendor].smi == "amdsmi" else []
    if not v.container:
        return [{"name": "Install the harness's tools next to the runner's torch",
                 "run": "\n".join([pip, *amdsmi]) + "\n"}]
    script = (
        "# Started by hand, not with `container:`, so that the runner's own GPU-isolation\n"
        "# variables (set in its environment, invisible to `container:`) reach the job.\n"
        f'docker run --detach --name "$CI_CONTAINER" {v.container_options} \\\n'
        f"  {env_flags} \\\n"
        '  --volume "$GITHUB_WORKSPACE:$GITHUB_WORKSPACE" --volume "$RUNNER_TEMP:$RUNNER_TEMP" \\\n'
        '  --workdir "$GITHUB_WORKSPACE" "$CI_IMAGE" sleep infinity\n'
        'docker exec "$CI_CONTAINER" git config --global --add safe.directory "$GITHUB_WORKSPACE"\n'
        f'docker exec "$CI_CONTAINER" {pip}\n'
        + "".join(f'docker exec "$CI_CONTAINER" bash -c {shlex.quote(line)}\n' for line in amdsmi)
    )
    return [{"name": f"Start the {v.vendor} container", "run": script}]


def stop_container(v: VendorCI) -> list[dict]:
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
# Each vendor's clock lock and reset on the runner host, by its management tool and over the GPUs
# its isolation variables name (a vendor without an entry gets no clock lock, whatever
# runners.lock_clocks says)
CLOCK_LOCK = {
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


def lock_clocks(v: VendorCI) -> list[dict]:
    """Opt-in clock lock on the runner host; never fails the job (many runners forbid it)."""
    if not v.lock_clocks or v.vendor not in CLOCK_LOCK:
        return []
    lock = CLOCK_LOCK[v.vendor][0].replace("{mhz}", str(v.lock_clocks))
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


def restore_clocks(v: VendorCI) -> list[dict]:
    if not v.lock_clocks or v.vendor not in CLOCK_LOCK:
        return []
    script = (_SUDO + CLOCK_LOCK[v.vendor][1]
              + '  || echo "::warning::could not restore the GPU clocks; reset them on this runner"\n')
    return [{"name": "Restore GPU clocks", "if": "always() && steps.lock-clocks.outputs.locked == 'true'",
             "run": script}]


def upload(name: str, path: str, when: str = "always()") -> dict:
    step = uses("upload-artifact", f"Upload {name}", name=name, path=path,
                if_no_files_found="warn", retention_days=ARTIFACT_RETENTION_DAYS)
    return {"if": when, **step} if when else step


def job_env(v: VendorCI, kind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(extra or {})
    if v.container:
        env["CI_IMAGE"] = v.container
        env["CI_CONTAINER"] = f"{kind}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}-{v.vendor}"
    if v.image_digest:  # the fingerprint's image_digest (perf/fingerprint.py), forwarded into the container
        env[IMAGE_DIGEST_ENV] = v.image_digest
    env.update(v.env)
    return env


def annotate(*findings: str, prefix: str = "") -> dict:
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
