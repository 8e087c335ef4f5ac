"""Nightly performance history: one store of nights, our report and asv's site drawn from it.

    python -m perf nightly [all|run|publish|report] [options]   # nox -s nightly
    python -m perf nightly save|checkout|heartbeat [options]    # the data branch (below)
    python -m perf alert [options]                              # nox -s alert
    python -m perf alert --confirm [--dry-run] [options]        # re-measure the alerts, render issues

`run` measures every variant and vendor library over the `nightly` suite on this GPU
(perf/nightly/collect.py) into `--out` (`<machine>-<sha8>.jsonl`) and puts the night into the
store (perf/nightly/store.py: the checkout `--data DIR` of the data branch, else the local
`.asv/perf-data`); `publish` writes asv's results from the store's nights (perf/nightly/asvrun.py,
one step in this process: asv measures nothing and runs no benchmark) and runs `asv publish`;
`report` writes our pages and plots into `<html_dir>/nightly/` (perf/nightly/site.py) and the
change-point findings into `--out` (perf/nightly/alert.py: computed once per night and stored with
it, read from there afterwards); `all` (the default) does the three. `alert` finds steps
at the newest commit, writes alert.json and alert.md, and exits 1 when there is one; with
`--confirm` it re-measures each alert with the latency gate first (perf/nightly/confirm.py)
and renders the issues of the confirmed ones (perf/nightly/issues.py posts them).
`run` uses every GPU of this host (`--gpus`) and, split over runners, measures one share
(`--shard I/M`) that `--merge-shards DIR` merges and records (perf/nightly/shard.py).
The history lives on the data branch (perf/nightly/store.py): `save` commits this runner's
night (results, fingerprint, alert state) and pushes it, `checkout --data DIR` makes DIR a
checkout of it, and `report` and `alert` read the history from `--data DIR`. `heartbeat` opens an
issue for each runner whose newest night is too old (perf/nightly/heartbeat.py).
`simulate --seed S --nights N --out DIR` replays a history with known events through the
attribution (perf/nightly/simulate.py).
The same actions: `python -m perf.nightly {all,run,publish,report,save,...,alert}`.

This module only parses arguments; everything heavy is imported when a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from perf import files, git
from perf import vendor as vendor_mod
from perf.vendor import on_gpu

# Actions that measure nothing, each "module:function" called with (args, asv config); its
# options are added by the module's add_arguments (add_nightly_arguments). One line per action.
DATA_ACTIONS = {
    "save": "perf.nightly.store:save_main",
    "checkout": "perf.nightly.store:checkout_main",
    "heartbeat": "perf.nightly.heartbeat:main",
    "attribute": "perf.nightly.attribute:action_main",  # one cause per step (perf/nightly/attribute.py)
    "simulate": "perf.nightly.simulate:main",  # the replay (perf/nightly/simulate.py)
}
ACTIONS = ("all", "run", "publish", "report", *DATA_ACTIONS)
DEFAULT_OUT = os.path.join("results", "nightly")


def _detector_options(p: argparse.ArgumentParser) -> None:
    from perf.nightly.alert import MIN_HISTORY, WINDOW

    p.add_argument("--config", default="asv.conf.json", help="asv configuration (default: ./asv.conf.json)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"folder for alert.json, alert.md and a copy of the results (default: {DEFAULT_OUT})")
    p.add_argument("--window", type=int, default=WINDOW,
                   help=f"earlier commits the newest is compared with (default: {WINDOW})")
    p.add_argument("--min-history", type=int, default=MIN_HISTORY,
                   help=f"fewer earlier commits give no verdict (default: {MIN_HISTORY})")
    p.add_argument("--vendor", default=None,
                   help="thresholds section to apply (default: each machine's own vendor)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="a checkout of the data branch (perf/nightly/store.py): the store the night goes "
                        "into and the history is read from (without it: the local .asv/perf-data; heartbeat "
                        "checks the branch out); save and checkout keep it up to date")


def add_nightly_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", default="all", choices=ACTIONS,
                   help="all (default): run, publish, report; or one of them; save, checkout, heartbeat, "
                        "attribute: "
                        "the data branch (perf/nightly/store.py, heartbeat.py); simulate: the replay")
    _detector_options(p)
    p.add_argument("--suite", default=None, help="suite of perf/suites.yaml (default: nightly)")
    p.add_argument("--scenarios", default=None,
                   help="comma-separated scenario names or fnmatch globs over the suite (a quicker run)")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: every registered)")
    p.add_argument("--peers", default="auto",
                   help="vendor libraries: auto (this vendor's installed ones), none, or a comma list")
    p.add_argument("--repeats", type=int, default=None, help="repeat medians per case (default: 5)")
    p.add_argument("--samples", type=int, default=None, help="most samples per repeat (default: 25)")
    p.add_argument("--budget-ms", type=float, default=None,
                   help="a slow case's repeat is cut to about this many ms (default: 250)")
    p.add_argument("--max-call-ms", type=float, default=None,
                   help="a case whose one call takes longer is recorded as a skip, not timed (default: 5000)")
    p.add_argument("--machine", default=None, help="asv machine name (default: <runner or host>_<gpu>)")
    p.add_argument("--bench", action="append", default=None, metavar="REGEX",
                   help="publish: asv's results of matching benchmarks only (as `asv run --bench` matches)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted measurement of this commit instead of starting over")
    p.add_argument("--allow-dirty", action="store_true",
                   help="measure uncommitted changes as HEAD (default: refuse a dirty tree)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="no GPU: run in Triton's interpreter (wall-clock, no graphs) to try the pipeline")
    p.add_argument("--no-compile-time", action="store_true",
                   help="record no compile times (each variant cold-compiled for every target: "
                        "perf/nightly/compiletime.py; CPU only, docs/nightly.md says its cost)")
    p.add_argument("--no-asv", action="store_true",
                   help="measure and keep the night (results, --data) without recording it in asv: `all` "
                        "then skips publish (the data branch is the history; asv's site is the dashboard)")
    p.add_argument("--force", action="store_true",
                   help="record into a machine's history measured on another GPU, vendor or the interpreter "
                        "(its older nights are then left out of it, and said so)")
    from perf.nightly import shard

    shard.add_arguments(p)  # --gpus, --shard I/M, --merge-shards DIR (perf/nightly/shard.py)
    for module in dict.fromkeys(target.split(":")[0] for target in DATA_ACTIONS.values()):
        importlib.import_module(module).add_arguments(p)


def add_alert_arguments(p: argparse.ArgumentParser) -> None:
    from perf.ci.jobs import DASHBOARD_VARIABLE
    from perf.nightly.confirm import MAX_CASES

    _detector_options(p)
    g = p.add_argument_group("re-measure before alerting (perf/nightly/confirm.py, docs/nightly.md)")
    g.add_argument("--confirm", action="store_true",
                   help="re-measure each alert with the latency gate (flagged commit vs its last good one, "
                        "same processes); record confirmed or noise; render the confirmed ones' issues")
    g.add_argument("--dry-run", action="store_true",
                   help="with --confirm: measure nothing, print the gate commands, write issue previews")
    g.add_argument("--max-cases", type=int, default=MAX_CASES,
                   help=f"cases re-measured per flagged commit, largest ratios first (default: {MAX_CASES})")
    g.add_argument("--machine", default=None,
                   help="the history whose alerts this GPU re-measures (default: this runner's, as "
                        "`perf nightly` names it)")
    g.add_argument("--dashboard-url", default=None,
                   help=f"the published dashboard the issues link (default: ${DASHBOARD_VARIABLE}, else "
                        f"https://<owner>.github.io/<repo>/ of $GITHUB_REPOSITORY)")
    g.add_argument("--repo", default=None, help="OWNER/NAME for compare links (default: $GITHUB_REPOSITORY)")


def check_nightly(args: argparse.Namespace) -> None:
    """What `perf nightly` is asked, checked before --out is claimed (perf.cli's registry runs
    this first): the names and the GPU rule (perf.validate), --shard with run only, a replay's
    seed and length, and every folder name of the store the heartbeat reads."""
    from perf import validate
    from perf.nightly import shard, simulate, store

    validate.nightly_args(args)
    shard.check_action(args)
    if args.action == "simulate":
        simulate.check_arguments(args.seed, args.nights)
    if args.action == "heartbeat" and args.data:
        store.nights(store.check_data(args.data))


def check_alert(args: argparse.Namespace) -> None:
    """What `perf alert` is asked, checked before --out is claimed: its names, the vendor, and
    what --confirm takes."""
    from perf import validate
    from perf.nightly import confirm

    validate.alert_args(args)
    if args.vendor is not None:
        vendor_mod.check_name(args.vendor)
    confirm.check_options(args)


def nightly_main(args: argparse.Namespace) -> int:
    from perf.nightly import asvrun

    files.check_output(args.out, "--out", directory=True)
    conf = asvrun.read_config(args.config)
    if args.action in DATA_ACTIONS:
        module, function = DATA_ACTIONS[args.action].split(":")
        return getattr(importlib.import_module(module), function)(args, conf)
    publish = args.action == "publish" or (args.action == "all" and not args.no_asv)
    if publish:  # before hours of measuring, not after
        asvrun.require_asv()
    if args.action in ("all", "run"):
        _run(args, conf)
    if publish or args.action in ("all", "report"):
        histories, unreadable = _histories(args, conf)
        if publish:
            asvrun.publish(conf, histories, args.bench)
        if args.action in ("all", "report"):
            _report(args, conf, histories, unreadable, publish_summary=True)
    return 0


def alert_main(args: argparse.Namespace) -> int:
    from perf.errors import NothingMeasured
    from perf.nightly import asvrun, confirm

    files.check_output(args.out, "--out", directory=True)
    conf = asvrun.read_config(args.config)
    histories, unreadable = _histories(args, conf)
    machines = _report(args, conf, histories, unreadable, publish_summary=True, site=False)
    if not any(m["findings"] for m in machines):  # no series was compared on any machine
        why = "; ".join(f"{m['machine']}: {'; '.join(m['notes']) or 'no series at the newest commit'}"
                        for m in machines)
        raise NothingMeasured(f"no change-point verdict on any machine ({why}); alert.md says so too")
    if args.confirm:
        return confirm.confirm(args, conf, machines, histories)
    return 1 if any(m["alerts"] for m in machines) else 0


def _run(args: argparse.Namespace, conf: dict) -> int:
    from perf.nightly import selection, shard

    part = shard.parse_part(args.shard)
    if args.merge_shards:  # the merge job: the runners' parts; no GPU, no torch needed
        name, sha, _, out = shard.merge_parts(args.merge_shards, conf, args.machine, args.force,
                                              out_dir=args.out, data=_data(args, conf))
        return _record(args, conf, name, sha, out)
    from perf import peers as peers_mod
    from perf.errors import ConfigError

    root = conf["_root"]
    gpu = on_gpu()
    if not gpu and not args.allow_cpu:
        raise ConfigError("no GPU visible to torch: the nightly measures GPU latency; run it on a GPU runner "
                          "(or pass --allow-cpu to try the pipeline in Triton's interpreter)")
    if not gpu:  # Triton's interpreter must be chosen before anything imports triton
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sha, date = git.head_commit(root)
    dirty = git.commit_info(root)["dirty"]
    if dirty and not args.allow_dirty:
        raise ConfigError(f"{root}: uncommitted changes would be recorded as commit {sha[:8]}; commit or "
                          f"stash them, or pass --allow-dirty")
    vendor = vendor_mod.detect() or "cpu"
    name = shard.machine_name(args.machine, part)
    _guard_history(conf, name, args.force, args.data)
    peers, absent = peers_mod.resolve(args.peers, vendor)
    suite = args.suite or selection.DEFAULT_SUITE
    out = shard.part_path(args.out, name, sha, part) if part else shard.night_path(args.out, name, sha)
    from perf import validate
    from perf.thresholds import load_thresholds

    stats = load_thresholds(args.thresholds).vendor(
        vendor if vendor in vendor_mod.VENDORS else vendor_mod.INTERPRETER_VENDOR).statistics
    sel = selection.Selection(
        suite=suite, scenarios=selection.resolve_scenarios(suite, args.scenarios),
        variants=tuple(validate.variants(args.variants, selection.default_variants())),
        peers=peers, repeats=args.repeats or selection.DEFAULT_REPEATS,
        samples=args.samples or stats.samples,
        budget_ms=args.budget_ms or selection.DEFAULT_REPEAT_BUDGET_MS,
        max_call_ms=args.max_call_ms or selection.DEFAULT_MAX_CALL_MS, results=out)
    for p, reason in absent.items():
        print(f"note: vendor library {p} is not measured here: {reason}", flush=True)
    print(f"nightly: machine {name}, commit {sha[:8]} ({date}), {len(sel.scenarios)} scenarios x "
          f"{len(sel.variants)} variants + {len(sel.peers)} libraries -> {out}", flush=True)
    shard.measure(sel, out, gpus=args.gpus, part=part, resume=args.resume, header_extra={
        "nightly": {"machine": name, "commit": sha, "commit_date": date, "dirty": bool(dirty)},
        "peers_absent": absent})
    if part is not None:
        if part.index == 1 and not args.no_compile_time:  # the merge job has no torch to compile with
            from perf.nightly import compiletime

            side = compiletime.side_path(os.path.dirname(out), name, sha)
            if compiletime.compile_side(side, root, args.thresholds):
                print(f"nightly: runner 1 wrote the compile times {side} for the merge job", flush=True)
        print(f"nightly: wrote runner {part}'s part {out}; the merge job records it", flush=True)
        return 0
    return _record(args, conf, name, sha, out)


def _data(args: argparse.Namespace, conf: dict) -> str:
    """The store this command reads and writes: `--data`, else the local one (store.local)."""
    from perf.nightly import store

    return args.data or store.local(conf["_results_dir"])


def _guard_history(conf: dict, name: str, force: bool, data: str | None = None) -> None:
    """A night measured here may join machine `name`'s history only if the history is this GPU's,
    vendor's and interpreter's (perf.files.guard_measured): the newest night of it in the store
    (`data`, else the local one); with `force` it starts the history over on this machine (the
    older nights stay, left out and said so)."""
    from perf import names, results
    from perf.nightly import store

    data = data or store.local(conf["_results_dir"])
    newest = store.newest(data, name) if names.RUNNER.fullmatch(name) else None
    if newest is not None:
        files.guard_measured(newest.path, newest.results().environment, results.environment(), force)


def _record(args: argparse.Namespace, conf: dict, name: str, sha: str, out: str) -> int:
    """The night measured into `out` (its measuring processes' end fingerprint beside it): the
    compile times appended to it (perf/nightly/compiletime.py, unless --no-compile-time), then
    put into the store, where the report, the alert, asv's publish and `nightly save` read it."""
    from perf.nightly import store

    if not args.no_compile_time:
        from perf.nightly import compiletime

        merged = getattr(args, "merge_shards", None)  # a sharded night: runner 1 compiled (`_run`)
        compiletime.record(out, conf["_root"], args.thresholds,
                           compiletime.find_side(merged, sha) if merged else None)
    data = _data(args, conf)
    night = store.tonight(out, machine=name)
    store.write_night(data, night.runner, night.date, out, night.fingerprint, None)
    print(f"nightly: {name}'s night {night.date} put into {data} (`nightly save` commits it)", flush=True)
    return 0


def _histories(args: argparse.Namespace, conf: dict) -> tuple[list, list[str]]:
    """Every machine's history in the store (perf/nightly/history.py) and the nights of no readable
    history, each said on stderr; ConfigError when the store holds no readable night."""
    from perf.errors import ConfigError
    from perf.nightly import history, store

    data = _data(args, conf)
    unreadable: list[str] = []
    fresh = not args.data and not os.path.isdir(os.path.join(data, store.NIGHTS))  # no night stored here yet
    histories = [] if fresh else history.load_data(data, unreadable)
    if not histories:
        more = f" and {len(unreadable) - 1} more" if unreadable[1:] else ""
        found = f" (the only files there: {unreadable[0]}{more})" if unreadable else ""
        raise ConfigError(f"{data}: no nightly history (no readable nights/*/*/results.jsonl{found}); run "
                          f"`python -m perf nightly run` on a GPU first")
    history.say_skipped(histories, unreadable)
    return histories, unreadable


def _copy(src: str, dst: str) -> None:
    files.write_text(dst, files.read_text(src, "the night's alert", "run the alert again"))


def _report(args: argparse.Namespace, conf: dict, histories: list, unreadable: list[str],
            publish_summary: bool, site: bool = True) -> list[dict]:
    """Each machine's alert about its newest night (alert.tonight: stored with the night, computed
    once), alert.json and alert.md into --out, and (`site`) the dashboard; the machines' alerts."""
    from perf.errors import ConfigError
    from perf.nightly import alert
    from perf.report import publish
    from perf.thresholds import load_thresholds

    th = load_thresholds(args.thresholds)
    settings = alert.Settings(window=args.window, min_history=args.min_history)
    if settings.window < 1 or settings.min_history < 1:
        raise ConfigError("--window and --min-history must be >= 1")
    machines = [alert.tonight(h, th, settings, vendor=args.vendor) for h in histories]
    if unreadable:  # said in the first machine's notes as well: alert.md and the dashboard show them
        first = machines[0] = {**machines[0], "notes": list(machines[0]["notes"])}
        first["notes"] += [line for line in (f"left out of the nightly history: {u}" for u in unreadable)
                           if line not in first["notes"]]
    json_path, md_path = alert.write(args.out, machines)
    if site:
        from perf.nightly import site as site_mod
        from perf.nightly import toolchain

        out_dir = os.path.join(conf["_html_dir"], "nightly")
        index = site_mod.build(histories, out_dir, {m["machine"]: m for m in machines},
                               toolchain.load_summary(os.path.join(args.out, "toolchain")))
        for p in (json_path, md_path):
            _copy(p, os.path.join(out_dir, os.path.basename(p)))
        print(f"wrote {index}", flush=True)
    if publish_summary:
        publish(files.read_text(md_path, "alert.md", "run the alert again"))
    print(f"wrote {json_path} and {md_path}", flush=True)
    return machines


def cli_main(argv: list[str] | None = None) -> int:
    """`python -m perf.nightly ...`, through perf.cli so errors end the same way (one line, exit 2)."""
    from perf import cli

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "alert":
        return cli.main(["alert", *argv[1:]])
    return cli.main(["nightly", *argv])
