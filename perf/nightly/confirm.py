"""Re-measure the nightly's alerts with the latency gate before anyone is told about them.

    python -m perf alert --confirm [--dry-run] [--max-cases N] [--machine NAME]

The nightly compares the newest commit with the nights before it (perf/nightly/alert.py):
different processes, different nights, so a machine that moved can pass for a regression. An
alert (a FAIL) is therefore measured again by the latency gate's same-process A/B
(`python -m perf gate --base-ref GOOD --head-ref FLAGGED`, perf/latency/ab.py): both commits'
kernels side by side in fresh processes, on the same tensors, with the gate's own thresholds
and its re-measure of a failing case. The gate's verdict decides (perf.verdicts.remeasure_status):
FAIL confirms the regression, anything else marks the alert as noise, with the gate's ratio
and interval as evidence.

GOOD, the last good commit of a case, is the newest earlier commit of the history that
measured the case and that the alert, replayed on the history as it stood that night, did not
fail for it (alert.last_good). The flagged cases of a machine are grouped into one gate run per
(flagged, last good) pair, usually one run per flagged commit; the gate measures every
combination of the group's variants, scenarios and metrics and reads the flagged ones. At most
`--max-cases` cases (the largest nightly ratios first) are re-measured; the others stay
pending, with a note.

Only this runner's history is re-measured, or the pooled one of a nightly over several runners
of this GPU (`--machine` names another): a history's alerts are about its GPU and runner. Each
gate run writes into `<out>/remeasure/<machine>/<flagged>-vs-<good>/` and resumes there (the
gate's gate.json); a finished run's findings.json is reused, so the command picks up where an
interrupted one stopped. `--dry-run`, or no GPU, measures nothing and prints the gate commands
it would run. Confirmed regressions are rendered as issue bodies into `<out>/issues/`
(perf/nightly/issues.py posts them in a job of their own), every status goes into alert.json
(and a table into remeasure.md and the job summary), and the
dashboard's alert tables are rewritten (site.relink).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from perf import files, verdicts
from perf.ci import jobs
from perf.ci.github import REPO
from perf.errors import EXIT_INTERRUPTED, EXIT_OK, ConfigError
from perf.latency.request import GateRequest, run_in_process
from perf.names import slug
from perf.nightly import alert, issues
from perf.nightly.history import History
from perf.results import COMPILE_TIME
from perf.verdicts import Finding, Verdict

# Cases re-measured per flagged commit and machine. The gate measures the cross product of the
# cases' variants, scenarios and metrics in 3 processes (and 3 more for what fails), so its
# cost grows with them; 8 covers one variant slowed on 4 scenarios in both metrics. Unmeasured
# default (2026-11-22).
MAX_CASES = 8
REMEASURE_DIR = "remeasure"

# The gate runner: the gate of a request in a process of its own in the repository (it starts its
# own measuring processes; output shown), perf.latency.request.run_in_process; returns the exit code.
# Tests inject one.
GateRunner = Callable[[GateRequest, str], int]


@dataclass
class Run:
    """One gate run: the flagged commit against one last good commit, for a group of cases."""

    machine: str
    vendor: str
    head: str  # the flagged commit
    base: str  # the last good commit
    cases: list[tuple[str, str, str]]  # (variant, scenario, metric), largest nightly ratio first
    out: str  # the gate's --out
    gate: GateRequest  # its --out relative to the repository, where it runs
    changed: dict = field(default_factory=dict)  # fingerprint fields that differ between the two nights

    @property
    def command(self) -> str:
        return self.gate.command_line()


def _key(a: dict) -> tuple[str, str, str]:
    return (a["variant"], a["scenario"], a["metric"])


def _path(path: str, root: str) -> str:
    """`path` as the gate (run in `root`) and a person reading an issue should see it: relative
    to the repository when inside it."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def plan(h: History, result: dict, thresholds, settings: alert.Settings, out: str, suite: str,
         thresholds_path: str, max_cases: int = MAX_CASES, root: str = ".", vendor: str | None = None,
         ) -> tuple[list[Run], dict]:
    """The gate runs for `result`'s alerts (alert.machine_result of history `h`, judged with the
    thresholds of `vendor`, default the history's), and a record for each alert that gets none
    (beyond the cap, no last good commit): key -> remeasure dict. Paths in the gate's command
    are relative to the repository `root`, where it runs."""
    alerts = sorted(result["alerts"], key=lambda a: -(a.get("ratio") or 0.0))
    skipped = {}
    groups: dict[str, list] = {}
    for i, a in enumerate(alerts):
        key = _key(a)
        if i >= max_cases:
            skipped[key] = {"status": verdicts.PENDING,
                            "note": f"not re-measured: beyond the {max_cases} cases re-measured per flagged "
                                    f"commit (--max-cases); the largest ratios went first"}
            continue
        good = alert.last_good(h, thresholds, key, settings, vendor=vendor or h.vendor)
        if key[2].startswith(f"{COMPILE_TIME}/"):  # the latency gate times kernels, not compiles
            target = key[2].split("/", 1)[1]
            skipped[key] = {"status": verdicts.PENDING,
                            "note": "a compile time: not re-measured by the latency gate; `python -m perf "
                                    f"compile --base-ref {(good or 'LAST_GOOD')[:12]} --targets {target} "
                                    f"--variants {key[0]} --no-cache` re-measures it"}
            continue
        if good is None:
            skipped[key] = {"status": verdicts.INCONCLUSIVE, "note": "no last good commit: every earlier "
                            "commit that measured this case alerted for it too"}
            continue
        groups.setdefault(good, []).append(key)
    runs = []
    for good, cases in groups.items():
        name = f"{h.latest.short}-vs-{good[:8]}"
        folder = _path(os.path.join(out, REMEASURE_DIR, slug(h.machine), name), root)
        gate = GateRequest.of_cases(cases, base_ref=good, head_ref=h.latest.sha, suite=suite,
                                    thresholds=_path(thresholds_path, root), out=folder,
                                    # every case timed: the status and the issue quote the gate's ratio
                                    # and interval; an alert between identical launches (not caused by
                                    # the code) would get neither and stay inconclusive, where a
                                    # measurement clears it as noise with evidence
                                    all_cases=True)
        runs.append(Run(h.machine, result["vendor"], h.latest.sha, good, cases, os.path.join(root, folder),
                        gate, changed=changed_between(h, good, h.latest.sha)))
    return runs, skipped


def changed_between(h: History, good: str, bad: str) -> dict:
    """The toolchain and environment fields (perf.fingerprint) that differ between the nights that
    measured `good` and `bad`, from the history's environments."""
    env = {c.sha: c.environment for c in h.commits}
    return alert.environment_diff(env.get(good), env.get(bad))


def finished(run: Run) -> dict[tuple[str, str, str], Finding] | None:
    """The gate's findings of `run` when its findings.json is for these two commits and holds every
    case; None otherwise (not run, interrupted, or another run's folder)."""
    path = os.path.join(run.out, "findings.json")
    if not os.path.exists(path):
        return None
    try:
        doc, findings = verdicts.load_findings(path)
    except ConfigError as e:  # the gate rewrites it when run again: measured anew, nothing lost
        print(f"note: {e}; the gate runs again", file=sys.stderr, flush=True)
        return None
    commits = [(doc.get(side) or {}).get("commit") if isinstance(doc.get(side), dict) else None
               for side in ("base", "head")]
    if commits != [run.base, run.head]:
        return None
    found = {(f.variant, f.scenario, f.metric): f for f in findings}
    return found if all(k in found for k in run.cases) else None


def _record(run: Run, gate: Finding | None, note: str = "") -> dict:
    rec = {"status": verdicts.remeasure_status(gate, run.changed), "base": run.base, "head": run.head,
           "out": run.out, "command": run.command}
    if run.changed:
        rec["changed"] = {k: list(v) for k, v in run.changed.items()}
        if gate is not None and gate.ratio is not None and gate.verdict in (Verdict.OK, Verdict.IMPROVED):
            note = (f"no step between the commits under today's toolchain, but {', '.join(run.changed)} "
                    f"changed between their nights: not cleared (perf.nightly.attribute names the cause)"
                    + (f"; {note}" if note else ""))
    if gate is not None:
        rec.update(verdict=gate.verdict.value, ratio=gate.ratio, ci_low=gate.ci_low, ci_high=gate.ci_high,
                   p_value=gate.p_value, min_detectable=gate.min_detectable, threshold=gate.threshold,
                   note=gate.note)
    if note:
        rec["note"] = note
    return rec


def execute(runs: list[Run], repo: str, runner: GateRunner | None, why_not: str = "") -> dict:
    """Run (or, with `why_not` set, only print) each gate run; key -> remeasure record."""
    out = {}
    for run in runs:
        found = finished(run)
        what = f"{run.machine}: {len(run.cases)} case(s), {run.head[:8]} against last good {run.base[:8]}"
        if found is None and why_not:
            print(f"would re-measure {what} ({why_not}):\n  {run.command}", flush=True)
            for key in run.cases:
                out[key] = {**_record(run, None), "status": verdicts.PENDING,
                            "note": f"not re-measured: {why_not}"}
            continue
        if found is None:
            print(f"re-measuring {what}:\n  {run.command}", flush=True)
            rc = runner(run.gate, repo)
            if rc == EXIT_INTERRUPTED:
                raise KeyboardInterrupt
            found = finished(run)
            if found is None:
                for key in run.cases:
                    out[key] = _record(run, None, f"the gate ended with exit code {rc} and no findings for "
                                                  f"this case (its message is in the log above; {run.out})")
                continue
        else:
            print(f"re-measured already ({run.out}/findings.json): {what}", flush=True)
        for key in run.cases:
            out[key] = _record(run, found[key])  # finished(): every case has a finding
    return out


# --- the command --------------------------------------------------------------------------------


def check_options(args) -> None:
    """What `--confirm` takes, checked before anything is measured."""
    if getattr(args, "dry_run", False) and not args.confirm:
        raise ConfigError("--dry-run shows what --confirm would re-measure; pass --confirm --dry-run")
    if args.max_cases < 1:
        raise ConfigError(f"--max-cases {args.max_cases}: must be >= 1 (the cases re-measured per flagged "
                          f"commit)")
    if args.repo and not REPO.fullmatch(args.repo):
        raise ConfigError(f"--repo {args.repo!r}: expected OWNER/NAME (default: $GITHUB_REPOSITORY)")
    jobs.dashboard_url("", args.dashboard_url or os.environ.get(jobs.DASHBOARD_VARIABLE, ""))


def confirm(args, conf: dict, machines: list[dict], histories: list[History],
            runner: GateRunner | None = None) -> int:
    """Re-measure every machine's alerts, record the outcome, render the issues; the exit code."""
    from perf.thresholds import load_thresholds

    th = load_thresholds(args.thresholds)
    settings = alert.Settings(window=args.window, min_history=args.min_history)
    by_machine = {h.machine: h for h in histories}
    why_not = "dry run" if args.dry_run else ""
    this = args.machine
    if not why_not:
        from perf.vendor import on_gpu

        if not on_gpu():
            why_not = "no GPU here: the re-measure runs the latency gate on the machine's GPU"
        elif this is None:
            from perf.nightly.selection import machine_name

            this = machine_name()
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    context = issues.Context(
        repo=repo if REPO.fullmatch(repo or "") else "",
        dashboard=jobs.dashboard_url(repo, args.dashboard_url or os.environ.get(jobs.DASHBOARD_VARIABLE, "")),
        run_url=_run_url(repo))
    items, statuses = [], []
    for m in machines:
        if not m["alerts"]:
            continue
        h = by_machine[m["machine"]]
        suite = h.latest.suite or "nightly"
        runs, records = plan(h, m, th, settings, args.out, suite, args.thresholds, args.max_cases,
                             conf["_root"], vendor=args.vendor)
        other = not why_not and this is not None and not _here(m["machine"], this, bool(args.machine))
        reason = why_not or (f"alerts of machine {m['machine']}; this runner is {this} (--machine "
                             f"{m['machine']} re-measures them here)" if other else "")
        records.update(execute(runs, conf["_root"], runner or run_in_process, reason))
        for a in m["alerts"]:
            a["remeasure"] = records[_key(a)]
            statuses.append(a["remeasure"]["status"])
        items += issues.items_for(m, context, dry_run=bool(args.dry_run))
    _write(args, conf, machines, items)
    return EXIT_OK if args.dry_run else verdicts.alert_exit_code(statuses)


def _here(machine: str, this: str, named: bool) -> bool:
    """Whether this GPU re-measures `machine`'s alerts: the machine named with --machine, else
    this runner's (`<runner>_<gpu>`) or the pooled history of a nightly over several runners of
    this GPU (`<M>-runners_<gpu>`, perf/nightly/shard.py), which any of them may re-measure."""
    if machine == this or named:
        return machine == this
    runner, _, gpu = machine.partition("_")
    return gpu == this.partition("_")[2] and runner.endswith("-runners") and runner[:-8].isdigit()


def _run_url(repo: str) -> str:
    run = os.environ.get("GITHUB_RUN_ID", "")
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
    return f"{server}/{repo}/actions/runs/{run}" if repo and run.isdigit() else ""


def _write(args, conf: dict, machines: list[dict], items: list[dict]) -> None:
    from perf.nightly import site
    from perf.report import publish

    alert.write(args.out, machines)  # alert.json and alert.md again, now with each alert's re-measure
    written = issues.write_items(os.path.join(args.out, issues.ISSUES_DIR), items, dry_run=bool(args.dry_run))
    html = os.path.join(conf["_html_dir"], "nightly")
    if os.path.isdir(html):
        site.relink(html, {m["machine"]: m for m in machines})
    text = summary(machines, written, bool(args.dry_run))
    files.write_text(os.path.join(args.out, "remeasure.md"), text)
    publish(text)


def summary(machines: list[dict], written: list[str], dry_run: bool) -> str:
    """The job summary: each alert's re-measure, and where the issue bodies are."""
    lines = ["## Nightly alerts, re-measured" + (" (dry run: nothing measured)" if dry_run else ""), "",
             "| status | machine | variant | scenario | metric | nightly ratio | re-measure ratio "
             "| interval |", "|---|---|---|---|---|---|---|---|"]
    n = 0
    for m in machines:
        for a in m["alerts"]:
            r = a.get("remeasure") or {}
            ci = (f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r.get("ci_low") is not None
                  and r.get("ci_high") is not None else "–")
            ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else "–"
            lines.append(f"| {r.get('status', verdicts.PENDING)} | {m['machine']} | {a['variant']} | "
                         f"{a['scenario']} | {a['metric']} | {a['ratio']:.3f} | {ratio} | {ci} |")
            n += 1
    if not n:
        lines.append("| – | no alert | | | | | | |")
    lines += ["", (f"Issue bodies ({'previews, not posted' if dry_run else 'posted by the issues job'}): "
                   + ", ".join(f"`{p}`" for p in written)) if written else "No issue to open."]
    return "\n".join(lines) + "\n"
