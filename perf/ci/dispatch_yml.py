"""bisect.yml and toolchain.yml: run by hand on a GPU runner (`workflow_dispatch`), their
inputs checked on a hosted runner before one is taken.
"""

from __future__ import annotations

from perf.ci.jobs import BISECT, RESULTS_DIR, TOOLCHAIN_AB, VERIFY
from perf.ci.steps import (
    BISECT_BUDGET_DEFAULT,
    BISECT_BUDGET_MINUTES,
    HOSTED_RUNNER,
    TIMEOUT,
    VendorCI,
    annotate,
    checkout,
    command_step,
    exec_prefix,
    job_env,
    lock_clocks,
    restore_clocks,
    start_container,
    stop_container,
    upload,
)

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
        "steps": [checkout(),
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
        "env": job_env(v, kind, env),
        "steps": [
            checkout(),
            *start_container(v),
            *lock_clocks(v),
            command_step(VERIFY, v, None),
            step,
            *after,
            upload(artifact, f"{out}/"),
            *restore_clocks(v),
            *stop_container(v),
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
               + exec_prefix(v) + BISECT.shell(v.vendor) + ' "$GOOD" "$BAD" "${args[@]}"\n')
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
        run = exec_prefix(v) + TOOLCHAIN_AB.shell(v.vendor) + f' --versions "$VERSION" --out {out}\n'
        jobs[f"toolchain-{v.vendor}"] = _dispatch_gpu_job(
            v, "toolchain", "Toolchain A/B", f"inputs.vendor == 'all' || inputs.vendor == '{v.vendor}'",
            TIMEOUT["toolchain"], {"VERSION": "${{ needs.inputs.outputs.version }}"},
            {"id": TOOLCHAIN_AB.id, "name": TOOLCHAIN_AB.title(v.vendor), "run": run},
            f"toolchain-{v.vendor}", out,
            # perf toolchain's gates write OUT/<version>/static and OUT/<version>/latency
            # (perf/nightly/toolchain.py); their failing cases as annotations, as in pr.yml.
            (annotate(*(f"{out}/$VERSION/{gate}/findings.json" for gate in ("static", "latency")),
                      prefix=exec_prefix(v)),))
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
