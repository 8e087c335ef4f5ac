"""nightly.yml: each vendor's nightly (asv, dashboard, alert, its re-measure, attribution and
issues; over several runners when thresholds.yaml shards it), the data branch's checkout and
save, the Pages site, and the heartbeat (docs/nightly.md).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from perf import files as files_mod
from perf.ci.jobs import (
    ALERT,
    ATTRIBUTE,
    ATTRIBUTED_DIR,
    CHECKOUT,
    DASHBOARD_VARIABLE,
    DATA_BRANCH,
    HEARTBEAT,
    HEARTBEAT_MAX_AGE_HOURS,
    ISSUES_PLAN,
    NIGHTLY_COMMANDS,
    NIGHTLY_MERGE,
    NIGHTLY_MERGE_PACKAGES,
    NIGHTLY_PACKAGES,
    NIGHTLY_PARTS_DIR,
    NIGHTLY_PARTS_IN,
    NIGHTLY_SHARD_COMMANDS,
    REMEASURE,
    RESULTS_DIR,
    SAVE,
    TOOLCHAIN,
    VERIFY,
    nightly_part_artifact,
    nightly_site_artifact,
)
from perf.ci.steps import (
    DATA,
    HEARTBEAT_CRON,
    HOSTED_RUNNER,
    NIGHTLY_CRON,
    PYTHON,
    TIMEOUT,
    VendorCI,
    checkout,
    command_step,
    exec_prefix,
    job_env,
    lock_clocks,
    restore_clocks,
    start_container,
    stop_container,
    upload,
    uses,
)
from perf.errors import ConfigError


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
    """Each vendor's nightly (on one runner, or over `nightly_shards`), the Pages site of what they
    measured and the heartbeat: on the nightly's schedule, the heartbeat's, or by hand."""
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
        jobs[f"nightly-{v.vendor}"] = _nightly_job(v, wanted, key, results_dir, html_dir)
        jobs[f"nightly-{v.vendor}-issues"] = _issues_job(v, f"nightly-{v.vendor}")
        publishers += [f"nightly-{v.vendor}", f"nightly-{v.vendor}-issues"]
    jobs["pages"] = _pages_job(publishers)
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


def _nightly_job(v: VendorCI, wanted: str, key: str, results_dir: str, html_dir: str) -> dict:
    """A vendor's nightly on one runner: asv and its history, the toolchain A/B, the alert, its
    re-measure and attribution, the night saved to the data branch, the site and results uploaded."""
    steps = [
        checkout(),
        # asv's history of this runner kind, kept between nightly runs (each run saves a new
        # entry; the newest is restored). The published site holds the same data.
        {"id": "history", **uses("cache-restore", "Restore the asv history", path=results_dir,
                                 key=f"{key}-${{{{ github.run_id }}}}", restore_keys=f"{key}-")},
        *start_container(v, NIGHTLY_PACKAGES),
        _data_checkout(v),
        *lock_clocks(v),
        _toolchain_step(v),
        *[command_step(c, v, None) for c in NIGHTLY_COMMANDS],
        {"if": "always()", **uses("cache-save", "Save the asv history", path=results_dir,
                                  key=f"{key}-${{{{ github.run_id }}}}")},
        # The alert, then its re-measure here, before the uploads (which run whatever failed),
        # so that the site and the results carry what the re-measure found.
        _alert_step(v),
        _remeasure_step(v, "steps.alert.outcome == 'failure'"),
        _attribute_step(v),
        _save_step(v),
        upload(nightly_site_artifact(v.vendor), f"{html_dir}/"),
        upload(f"nightly-{v.vendor}-results", f"{RESULTS_DIR}/"),
        *restore_clocks(v),
        *stop_container(v),
    ]
    return {
        "name": f"Nightly {v.title}: asv, dashboard, alert",
        "if": wanted,
        "runs-on": list(v.labels),
        "timeout-minutes": TIMEOUT["nightly"],
        # One nightly per vendor at a time: a dispatch waits for the scheduled run.
        "concurrency": {"group": f"nightly-{v.vendor}", "cancel-in-progress": False},
        # The save step pushes to the data branch; the token reaches it and the checkout only.
        "permissions": {"contents": "write"},
        "env": job_env(v, "nightly"),
        # the issues job posts the re-measure's confirmed regressions and the attributed causes
        "outputs": {"issues": f"${{{{ steps.{REMEASURE.id}.outputs.issues || "
                              f"steps.{ATTRIBUTE.id}.outputs.issues }}}}"},
        "steps": steps,
    }


_INDEX = (
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


def _pages_job(publishers: list[str]) -> dict:
    """The vendors' sites under one index page, deployed to GitHub Pages after `publishers`."""
    return {
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
            uses("download-artifact", "Download the vendors' sites", pattern="site-*", path="site"),
            {"name": "Write the index page", "run": _INDEX},
            uses("configure-pages", "Configure Pages"),
            uses("upload-pages-artifact", "Upload the site", path="site"),
            {"id": "deployment", **uses("deploy-pages", "Deploy to GitHub Pages")},
        ],
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
            "env": dict(_TOKEN), "run": _GIT_AUTH + _git_exec_prefix(v) + SAVE.shell("", data=DATA) + "\n"}


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
            uses("checkout", "Check out this workflow's commit (full history)", fetch_depth=0,
                 persist_credentials=False),
            uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON),
            {"name": "Install the harness's tools (no torch)",
             "run": shlex.join(["python", "-m", "pip", "install", "--quiet", *NIGHTLY_MERGE_PACKAGES])},
            {"id": HEARTBEAT.id, "name": HEARTBEAT.title(""), "env": dict(_TOKEN),
             "run": _GIT_AUTH + HEARTBEAT.shell("") + "\n"},
        ],
    }


def _toolchain_step(v: VendorCI) -> dict:
    """The toolchain A/B before the nightly (its dashboard shows the summary). A regression of a
    newer Triton is news, not a broken commit: the step reports and the job goes on."""
    return {**command_step(TOOLCHAIN, v, None), "continue-on-error": True,
            "timeout-minutes": TIMEOUT["toolchain"]}


def _sharded_nightly(v: VendorCI, wanted: str, key: str, results_dir: str, html_dir: str) -> dict:
    """A vendor's nightly over `nightly_shards` runners: a matrix job per runner measures its
    share on all its GPUs and uploads it; a merge job on a hosted runner (no GPU, no torch)
    merges the parts, records them with asv, publishes the site and alerts; a re-measure job back
    on a GPU runner confirms the alerts, and the issues job posts the confirmed ones."""
    m = v.nightly_shards
    shard = "${{ matrix.shard }}"
    env = job_env(v, f"nightly-{shard}", {"NIGHTLY_SHARD": f"{shard}/{m}"})
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
            checkout(),
            *start_container(v),
            *lock_clocks(v),
            *[command_step(c, v, None, '"$NIGHTLY_SHARD"') for c in NIGHTLY_SHARD_COMMANDS],
            upload(nightly_part_artifact(v.vendor, shard), f"{NIGHTLY_PARTS_DIR}/"),
            *restore_clocks(v),
            *stop_container(v),
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
            checkout(),
            uses("setup-python", f"Set up Python {PYTHON}", python_version=PYTHON),
            {"name": "Install the merge job's tools (no torch: it merges and records, measures nothing)",
             "run": shlex.join(["python", "-m", "pip", "install", "--quiet", *NIGHTLY_MERGE_PACKAGES])},
            {"id": "history", **uses("cache-restore", "Restore the asv history", path=results_dir,
                                     key=f"{key}-${{{{ github.run_id }}}}", restore_keys=f"{key}-")},
            uses("download-artifact", "Download the runners' parts",
                 pattern=nightly_part_artifact(v.vendor, "*"), path=NIGHTLY_PARTS_IN, merge_multiple=True),
            _data_checkout(None),
            command_step(NIGHTLY_MERGE, None, None),
            {"if": "always()", **uses("cache-save", "Save the asv history", path=results_dir,
                                      key=f"{key}-${{{{ github.run_id }}}}")},
            upload(nightly_site_artifact(v.vendor), f"{html_dir}/"),
            upload(f"nightly-{v.vendor}-results", f"{RESULTS_DIR}/"),
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
    return {**command_step(ALERT, v, None), "continue-on-error": True}


def _remeasure_step(v: VendorCI, after: str | None) -> dict:
    """`alert --confirm` in the container (no token there), when the alert step alerted (`after`);
    it fails the job for a confirmed regression and tells the issues job whether there is one."""
    prefix = ('docker exec --workdir "$GITHUB_WORKSPACE" --env GITHUB_STEP_SUMMARY '
                   f'--env {DASHBOARD_VARIABLE} "$CI_CONTAINER" ' if v.container else "")
    script = ("# exit 1: a regression the gate confirmed, or an alert it could not clear. The issues job\n"
              "# posts the confirmed ones: only it holds a token that may write issues.\n"
              "rc=0\n"
              f"{prefix}{REMEASURE.shell(v.vendor, data=DATA)} || rc=$?\n"
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
    script = (f"{exec_prefix(v)}{ATTRIBUTE.shell(v.vendor, data=DATA)}\n"
              f'if compgen -G "{ATTRIBUTED_DIR}/*.json" > /dev/null; then '
              f'echo "issues=true" >> "$GITHUB_OUTPUT"; fi\n')
    return {"id": ATTRIBUTE.id, "name": ATTRIBUTE.title(v.vendor),
            "if": "${{ !cancelled() && steps.nightly.outcome == 'success' }}", "run": script}


def _reupload(name: str, path: str) -> dict:
    """Upload an artifact again under the same name (what a later job of the run changed in it)."""
    step = upload(name, path)
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
            uses("checkout", "Check out this workflow's commit (the poster)", persist_credentials=False),
            uses("download-artifact", "Download the nightly's results (data only)", name=results,
                 path=f"{temp}/results"),
            uses("download-artifact", "Download the nightly's site (data only)", name=site,
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
        "env": job_env(v, "nightly-remeasure"),
        "outputs": {"issues": f"${{{{ steps.{REMEASURE.id}.outputs.issues }}}}"},
        "steps": [
            checkout(),
            uses("cache-restore", "Restore the asv history the merge job saved", path=results_dir,
                 key=f"{key}-${{{{ github.run_id }}}}"),
            uses("download-artifact", "Download the merge job's site", name=site, path=f"{html_dir}/"),
            uses("download-artifact", "Download the merge job's results", name=results,
                 path=f"{RESULTS_DIR}/"),
            *start_container(v),
            *lock_clocks(v),
            _data_checkout(v),
            command_step(VERIFY, v, None),
            _remeasure_step(v, None),
            _reupload(site, f"{html_dir}/"),
            _reupload(results, f"{RESULTS_DIR}/"),
            *restore_clocks(v),
            *stop_container(v),
        ],
    }
