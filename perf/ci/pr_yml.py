"""pr.yml: the `changes` job (does a change need the GPU, which latency cases and grid cases
can differ), the CPU job, the grid compile matrix and each vendor's GPU job.

Fork safety, the skips and the required checks: docs/workflows.md.
"""

from __future__ import annotations

import shlex

from perf.ci.jobs import (
    CHANGES_JOB,
    CPU_ARTIFACT,
    CPU_JOB,
    CPU_TORCH_INDEX,
    DOCS_ONLY,
    GRID_COMPILE,
    GRID_COMPILE_SHARDS,
    GRID_PLAN,
    GRID_PLAN_FILE,
    GRID_STEP,
    LATENCY_FINDINGS,
    NOX,
    PLAN,
    PLAN_FILE,
    PR_CPU_COMMANDS,
    PR_GPU_COMMANDS,
    PR_NUMBER_ARTIFACT,
    PR_NUMBER_FILE,
    PR_WORKFLOW,
    RESULTS_DIR,
    STATIC_FINDINGS,
    TRUST_LABEL,
    Command,
    gpu_artifact,
    gpu_job_name,
    grid_cache_artifact,
    grid_cache_dir,
    plan_artifact,
    plan_dir,
)
from perf.ci.steps import (
    GRID_CACHE_RETENTION_DAYS,
    HOSTED_RUNNER,
    PYTHON,
    TIMEOUT,
    VendorCI,
    annotate,
    checkout,
    command_step,
    exec_prefix,
    install,
    job_env,
    lock_clocks,
    restore_clocks,
    start_container,
    stop_container,
    upload,
    uses,
)

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
        checkout(),
        {"id": "paths", "name": "Documentation only? (then no GPU job runs)", "run": _docs_only_script()},
        {"if": gpu, **uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON, cache="pip",
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
        outputs[f"latency_{v.vendor}"] = f"${{{{ steps.{PLAN.id}-{v.vendor}.outputs.latency }}}}"
    for v in vendors:  # after the latency plans (the gate's cost first), in the same nox cli venv
        grid = f"{GRID_PLAN.id}-{v.vendor}"
        steps.append(_grid_plan_step(v))
        outputs[f"grid_plan_{v.vendor}"] = f"${{{{ steps.{grid}.outputs.grid_plan }}}}"
        # One artifact for both plans of the vendor (each consumer reads its file when it is there)
        steps.append(upload(plan_artifact(v.vendor), f"{plan_dir(v.vendor)}/",
                            f"steps.{PLAN.id}-{v.vendor}.outcome == 'success' || "
                            f"steps.{grid}.outputs.grid_plan == 'true'"))
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


def _download_plans(v: VendorCI) -> dict:
    """The vendor's plans (one artifact: the latency gate's and, where made, the grid's), where
    either came; a lost download runs the latency gate and the grid in full."""
    wanted = f"{_CHANGES}.latency_{v.vendor} == 'true' || {_CHANGES}.grid_plan_{v.vendor} == 'true'"
    return {"if": wanted, "continue-on-error": True,
            **uses("download-artifact", f"Download the {v.vendor} plans", name=plan_artifact(v.vendor),
                   path=f"{plan_dir(v.vendor)}/")}


def _latency_steps(v: VendorCI) -> list[dict]:
    """The latency gate, only where the plan left cases to time (an empty or failed plan runs it
    in full), with the plan when it came; then the failing cases as annotations."""
    out = f"{_CHANGES}.latency_{v.vendor}"
    plan = f"{plan_dir(v.vendor)}/{PLAN_FILE}"
    (perf,) = [c for c in PR_GPU_COMMANDS if c.id == "perf"]
    script = ("plan=()\n"
              f'if [ -f {plan} ]; then plan=(--plan {plan}); fi\n'
              + exec_prefix(v) + perf.shell(v.vendor, '"$BASE_SHA"') + ' "${plan[@]}"\n')
    findings = f"{RESULTS_DIR}/{LATENCY_FINDINGS}"
    return [
        {"id": perf.id, "name": perf.title(v.vendor), "if": f"{out} != 'false'", "run": script},
        {"name": "No latency case to time", "if": f"{out} == 'false'",
         "run": ('msg="latency gate skipped: every case of the plan has identical launches on both sides"\n'
                 'echo "::notice::$msg"\n'
                 f'echo "$msg ({plan_artifact(v.vendor)} artifact)." >> "$GITHUB_STEP_SUMMARY"\n')},
        annotate(findings, prefix=exec_prefix(v)),
    ]


def _gpu_command_steps(c: Command, v: VendorCI) -> list[dict]:
    """A GPU job's step; the correctness grid's only where the `changes` job found a changed
    input (an empty output, from a failed decision, runs it), else a notice of why not."""
    step = command_step(c, v, '"$BASE_SHA"')
    if c.id != GRID_STEP:
        return [step]
    out = f"{_CHANGES}.correctness_{v.vendor}"
    plan = f"{plan_dir(v.vendor)}/{GRID_PLAN_FILE}"
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
            **uses("download-artifact", f"Download the {v.vendor} grid's compiled kernels",
                   pattern=grid_cache_artifact(v.vendor, "*"), path=cache, merge_multiple=True)})
        # Triton's own default cache where nothing came (the grid compiles everything, as before).
        script += ("cache=()\n"
                   f'if [ -n "$(ls -A {cache} 2>/dev/null)" ]; then '
                   f'cache=(--env "TRITON_CACHE_DIR=$GITHUB_WORKSPACE/{cache}"); fi\n'
                   + exec_prefix(v, '"${cache[@]}" ') + c.shell(v.vendor, '"$BASE_SHA"'))
    else:
        script += step["run"]
    script += ' "${plan[@]}"\n'
    return [*cache_steps,
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
    plan = f"{plan_dir(v.vendor)}/{GRID_PLAN_FILE}"
    cache = grid_cache_dir(v.vendor)
    # Inside the container, from the step's environment (no shell of the runner reads it).
    inside = ('git config --global --add safe.directory "$PWD"\n'
              + install(v) + "\n"
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
            checkout(),
            {"name": "Free disk space for the image (remove the runner's unused toolchains)", "run": free},
            {"if": f"{_CHANGES}.grid_plan_{v.vendor} == 'true'", "continue-on-error": True,
             **uses("download-artifact", f"Download the {v.vendor} grid plan",
                    name=plan_artifact(v.vendor), path=f"{plan_dir(v.vendor)}/")},
            {"id": GRID_COMPILE.id, "name": GRID_COMPILE.title(v.vendor), "env": {"IN_CONTAINER": inside},
             "run": run},
            # What compiled before a failure is whole (Triton writes each file by rename): uploaded too.
            {"if": "${{ !cancelled() }}",
             **uses("upload-artifact", f"Upload {grid_cache_artifact(v.vendor, shard)}",
                    name=grid_cache_artifact(v.vendor, shard), path=f"{cache}/", if_no_files_found="warn",
                    retention_days=GRID_CACHE_RETENTION_DAYS,
                     # upload-artifact leaves out hidden files and folders unless told: the cache is one
                    include_hidden_files=True)},
        ],
    }


def build_pr(vendors: list[VendorCI]) -> dict:
    base_env = {"BASE_SHA": f"${{{{ {_EVENT_BASE} }}}}"}
    cpu_steps = [
        checkout(),
        uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON, cache="pip",
             cache_dependency_path="pyproject.toml\nnoxfile.py\n"),
        {"name": "Install nox", "run": f"python -m pip install {shlex.quote(NOX)}"},
    ]
    for c in PR_CPU_COMMANDS:
        cpu_steps.append(command_step(c, None, '"$BASE_SHA"'))
        if c.id == "static":
            cpu_steps.append(annotate(f"{RESULTS_DIR}/{STATIC_FINDINGS}"))
    cpu_steps += [upload(CPU_ARTIFACT, f"{RESULTS_DIR}/"), *_record_pr_number()]
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
            checkout(),
            *start_container(v),
            *lock_clocks(v),
            _download_plans(v),
            *[s for c in commands for s in _gpu_command_steps(c, v)],
            *_latency_steps(v),
            upload(gpu_artifact(v.vendor), f"{RESULTS_DIR}/"),
            *restore_clocks(v),
            *stop_container(v),
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
            "env": job_env(v, "pr", {"BASE_SHA": f"${{{{ {_CHANGES}.base || {_EVENT_BASE} }}}}"}),
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
            upload(PR_NUMBER_ARTIFACT, f"${{{{ runner.temp }}}}/{PR_NUMBER_ARTIFACT}/", when)]
