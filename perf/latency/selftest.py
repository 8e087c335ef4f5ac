"""`nox -s gate-selftest` (`python -m perf.latency.selftest`): proof that the gate works.

On the GPU it gates, over and over, with the gate's own command (`python -m perf gate` of a
`gate_request`, in the checkout gated):

- A/A: HEAD against itself, `--aa-runs` times (seeds 0, 1, ...). Every FAIL is a false fail,
  every WARN a false warning; the gate promises none of the first and at most 1 % of the
  second.
- Planted slowdowns: for each `--plants` percentage, HEAD plus perf/latency/plant.py's change
  (every program of the production kernel spins that many % longer) committed on a
  temporary worktree, gated `--plant-runs` times against HEAD with a 0 % plant (the same
  code but for one immediate, so the spin is all that differs; runs record it as their
  `baseline`). A case counts as detected
  when its verdict is FAIL. The gate promises: at 2 %, >= 95 % of runs on every graph-replay
  case of >= 0.1 ms; at 10 %, >= 95 % of runs on every case. So the plants below the largest
  gate the graph metric only (`--metrics graph`), which halves their cost; the largest gates
  both metrics.
- Cost: the wall time of every gate run (the pr suite must stay within 10 GPU-minutes).

Runs are interleaved (A/A 0, each plant's run 0, A/A 1, ...) so that a run cut short by
`--max-minutes` still holds some of each; the report says exactly how many ran. The
summary lands in --out as selftest.json and selftest.md (the table docs/latency.md shows),
with the GPU, driver, date and commit. Exit code: 1 if any promise is broken by what ran,
0 otherwise (also when fewer runs than asked for fit: the report says so), 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace

import numpy as np

from perf import files, results
from perf import vendor as vendor_mod
from perf.errors import ConfigError, NothingMeasured
from perf.git import commit_all, git, repo_root
from perf.latency.plant import plant
from perf.latency.request import GateRequest, run_in_process
from perf.process import child_env
from perf.thresholds import CALIBRATION_DIR, DEFAULT_PATH

ZERO_PLANT = "plant0"  # a run's `baseline`: gated against HEAD with a 0 % plant (earlier runs: HEAD)
LONG_MS = 0.1  # graph-replay cases at least this long must see the smallest plant
SMALLEST, LARGEST = 2, 10  # the plants the promises are about (percent)
POWER = 0.95
MAX_WARN_SHARE = 0.01
MAX_GATE_MINUTES = 10.0
EFFECT_SHARE = 0.75  # judged: cases the plant slowed by >= this share of its size (graph cases catch 1.3 %)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m perf.latency.selftest", description=__doc__.splitlines()[0])
    p.add_argument("--thresholds", default=DEFAULT_PATH, metavar="PATH")
    p.add_argument("--suite", default="pr")
    p.add_argument("--variants", default="static_grid", help="variants gated (default: the production entry)")
    p.add_argument("--scenarios", default=None)
    p.add_argument("--aa-runs", type=int, default=20, help="A/A gate runs (default 20)")
    p.add_argument("--plants", default="2,5,10", help="planted slowdowns in percent (default 2,5,10)")
    p.add_argument("--plant-runs", type=int, default=20, help="gate runs per planted slowdown (default 20)")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no gate run expected to end after this many minutes (expected: the median "
                        "time of the earlier gates of its kind and size; default: no limit)")
    p.add_argument("--out", default="results/selftest")
    p.add_argument("--summarize", action="store_true", help="only summarize the runs already in --out")
    p.add_argument("--reanalyze", action="store_true",
                   help="with --summarize: recompute every run's findings from its raw results with this "
                        "checkout's statistics and thresholds (perf.latency.ab.recompute)")
    return p


def gate_request(repo: str, out: str, base: str, seed: int, args: argparse.Namespace,
                 percent: int | None = None) -> GateRequest:
    """The gate of an A/A run (`percent` None) or a planted one, run in the checkout `repo`. Both
    time every case (`all_cases`): an A/A's change plan would find every launch identical and time
    nothing, and what the self-test measures is the statistics of timed cases, whose rate of
    false fails and power must not depend on which cases a plan picks (the plan has its own
    proof: tests/change/test_change_plan.py, and `python -m perf.latency.plant --compare` on a GPU)."""
    gate = GateRequest(suite=args.suite, variants=args.variants, scenarios=args.scenarios, base_ref=base,
                       out=out, seed=seed, allow_dirty=True, thresholds=os.path.join(repo, "thresholds.yaml"),
                       all_cases=True)
    if percent is not None and percent < LARGEST:
        return replace(gate, metrics="graph")  # what their promise is about (and what 2 % can show)
    return gate


def typical_minutes(runs: list[dict], kind: str, percent: int | None) -> float:
    """How long the next gate of this kind and size is expected to take: the median of the
    earlier ones (the +10 % plants measure both metrics and take about twice as long as the
    A/A and +2 % gates, H100 runs file of 2026-11-23), else of every gate, else 0. With
    `--max-minutes` a gate is started only if it is expected to end within the limit, so a
    device call's time limit does not cut a long gate short."""
    same = [r["seconds"] for r in runs if r["kind"] == kind and r["percent"] == percent]
    pool = same or [r["seconds"] for r in runs]
    return float(np.median(pool)) / 60 if pool else 0.0


def _gate(repo: str, out: str, base: str, seed: int, args: argparse.Namespace, percent: int | None,
          batches: str) -> dict:
    """One gate run, as a user runs it (in `repo`, sharing the built `batches`); its exit code
    and wall time."""
    t0 = time.monotonic()
    env = child_env(repo, PERF_BATCH_CACHE=batches)
    rc = run_in_process(gate_request(repo, out, base, seed, args, percent), repo, env, log=out + ".log")
    return {"rc": rc, "seconds": time.monotonic() - t0}


def _planted_repo(repo: str, percent: int, vendor: str, parent: str) -> str:
    """A worktree of HEAD with the slowdown planted and committed (with this checkout's
    calibration, so the gate there sees the same thresholds)."""
    path = os.path.join(parent, f"plant-{percent}")
    git(repo, "worktree", "add", "--detach", path, "HEAD", check=True)
    src = os.path.join(repo, CALIBRATION_DIR)
    if os.path.isdir(src):
        shutil.copytree(src, os.path.join(path, CALIBRATION_DIR), dirs_exist_ok=True)
    plant(path, percent, vendor)
    commit_all(path, f"selftest: planted {percent} % slowdown", "gate-selftest")
    return path


def _findings(out: str) -> list[dict]:
    """The findings a gate run wrote (none when it wrote no findings.json: it crashed or stopped)."""
    from perf.verdicts import load_findings

    path = os.path.join(out, "findings.json")
    if not os.path.exists(path):
        return []
    return [f.to_dict() for f in load_findings(path)[1]]


RUNS_FIX = "remove it (and the run folders beside it) or pass another --out"
_RUN_FIELDS = {"name": str, "kind": str, "rc": int, "seconds": (int, float), "findings": list}


def load_runs(path: str) -> list[dict]:
    """runs.json: the gate runs of a self-test so far, each checked (ConfigError naming the entry);
    [] when there is none yet."""
    from perf.verdicts import finding_from

    if not os.path.exists(path):
        return []
    runs = files.load_json(path, "the self-test's runs file", RUNS_FIX, expect=list)
    for i, r in enumerate(runs):
        bad = (not isinstance(r, dict) or r.get("kind") not in ("aa", "plant") or
               any(not isinstance(r.get(k), t) or isinstance(r.get(k), bool) for k, t in _RUN_FIELDS.items()))
        if bad or (r["kind"] == "plant" and not isinstance(r.get("percent"), int)):
            raise ConfigError(f"{path}: run {i} is not a gate run of the self-test (needs name, kind "
                              f"aa|plant, "
                              f"percent for a plant, rc, seconds, findings); {RUNS_FIX}")
        for j, f in enumerate(r["findings"]):
            finding_from(f, path, f"run {i} findings[{j}]")
    return runs


def _reanalyze(runs: list[dict], out_dir: str, args: argparse.Namespace) -> list[dict]:
    from perf.latency import ab
    from perf.thresholds import calibration_for, load_thresholds

    th = load_thresholds(args.thresholds)
    out = []
    for r in runs:
        run_dir = os.path.join(out_dir, r["name"])
        gpu = results.load(os.path.join(run_dir, "head.jsonl")).environment.get("gpu")
        vendor = results.load(os.path.join(run_dir, "head.jsonl")).environment.get("vendor")
        cal, _ = calibration_for(th, vendor, gpu)
        findings = [f.to_dict() for f in ab.recompute(run_dir, th, vendor, cal)]
        out.append({**r, "findings": findings, "reanalyzed": True})
    return out


def summarize(runs: list[dict], out_dir: str, args: argparse.Namespace) -> tuple[dict, bool]:
    """The promises, checked against what ran: (summary, every promise kept)."""
    aa = [r for r in runs if r["kind"] == "aa"]
    verdicts = [f for r in aa for f in r["findings"] if f.get("ratio") is not None]
    fails = sum(f["verdict"] == "fail" for f in verdicts)
    warns = sum(f["verdict"] == "warn" for f in verdicts)
    improved = sum(f["verdict"] == "improved" for f in verdicts)
    summary: dict = {"aa": {"runs": len(aa), "case_verdicts": len(verdicts), "fail": fails, "warn": warns,
                            "improved": improved, "exit_codes": [r["rc"] for r in aa]}}
    ok = fails == 0 and (not verdicts or warns / len(verdicts) <= MAX_WARN_SHARE) and \
        all(r["rc"] == 0 for r in aa)
    summary["plants"] = {}
    for pct in sorted({r["percent"] for r in runs if r["kind"] == "plant"}):
        pr = [r for r in runs if r["kind"] == "plant" and r["percent"] == pct]
        # Runs against a 0 % plant, where there are any: against the unplanted commit the added
        # code moved some cases by itself (plant.py), so those runs are counted apart.
        current = [r for r in pr if r.get("baseline") == ZERO_PLANT]
        earlier = len(pr) - len(current) if current else 0
        pr = current or pr
        cases: dict[tuple, dict] = {}
        for r in pr:
            for f in r["findings"]:
                if f.get("ratio") is None:
                    continue
                c = cases.setdefault((f["variant"], f["scenario"], f["metric"]),
                                     {"base_ms": f["base"], "ratios": [], "detected": 0, "runs": 0})
                c["ratios"].append(f["ratio"])
                c["runs"] += 1
                c["detected"] += f["verdict"] == "fail"
        rows = [{"variant": k[0], "scenario": k[1], "metric": k[2], "base_ms": c["base_ms"],
                 "effect": float(np.exp(np.mean(np.log(c["ratios"])))), "detected": c["detected"],
                 "runs": c["runs"]} for k, c in sorted(cases.items())]
        # Judged: the cases the planted change slowed by at least 75 % of its size (the gate's
        # own estimate, over all runs). A code change moves more than the spin: on the H100 the
        # 2 % plant made phi-3-mini's graph replay 1.7 % faster and the 544-block case 0.4 %
        # slower; a metric that also holds host time, or the decode's untouched reduce kernel,
        # slows by less. Those are listed with their effect, not judged.
        slowed = [x for x in rows if x["effect"] >= 1 + EFFECT_SHARE * pct / 100]
        if pct == SMALLEST:
            scope = [x for x in slowed if x["metric"] == "graph" and x["base_ms"] >= LONG_MS]
            promise = f"graph-replay cases >= {LONG_MS:g} ms slowed by >= {EFFECT_SHARE * pct:g} %"
        elif pct == LARGEST:
            scope, promise = slowed, f"every case slowed by >= {EFFECT_SHARE * pct:g} %"
        else:
            scope, promise = [], "none (reported)"
        kept = all(x["detected"] >= POWER * x["runs"] for x in scope)
        ok &= kept
        summary["plants"][pct] = {
            "runs": len(pr), "earlier_runs": earlier,
            "baseline": ZERO_PLANT if current else "HEAD", "promise": promise,
            "kept": kept if scope else None, "cases": rows,
            "in_scope": len(scope), "detected_in_scope": sum(x["detected"] for x in scope),
            "verdicts_in_scope": sum(x["runs"] for x in scope),
            "min_rate_in_scope": min((x["detected"] / x["runs"] for x in scope), default=None),
            "detected_all": sum(x["detected"] for x in rows), "verdicts_all": sum(x["runs"] for x in rows)}
    minutes = [r["seconds"] / 60 for r in runs]
    summary["cost"] = {"gate_runs": len(runs), "max_minutes": max(minutes) if minutes else None,
                       "median_minutes": float(np.median(minutes)) if minutes else None}
    ok &= not minutes or max(minutes) <= MAX_GATE_MINUTES
    summary["asked"] = {"aa_runs": args.aa_runs, "plants": args.plants, "plant_runs": args.plant_runs}
    return summary, ok


def markdown(summary: dict, env: dict) -> str:
    a = summary["aa"]
    # a runs file summarized without its raw results (a copied runs.json) does not know its GPU
    where = (f"on {env['gpu']} (driver {env.get('driver')}), {env.get('date')}, "
             f"commit {str(env.get('commit'))[:10]}" if env.get("gpu") else
             f"summarized {env.get('date')} from the runs file alone (GPU, driver and commits: no raw "
             f"results in --out; each run records its commit)")
    lines = [f"Gate self-test {where}; suite {env.get('suite')}, variants {env.get('variants')}.", "",
             "| check | promise | ran | result |", "|---|---|---|---|",
             f"| A/A false fails | 0 FAIL | {a['runs']} runs ({a['case_verdicts']} case verdicts; asked for "
             f"{summary['asked']['aa_runs']}) | {a['fail']} FAIL, {a['warn']} warn "
             f"({100 * a['warn'] / max(1, a['case_verdicts']):.2f} %), {a['improved']} improved |"]
    for pct, p in summary["plants"].items():
        rate = "–" if p["min_rate_in_scope"] is None else f"{100 * p['min_rate_in_scope']:.0f} %"
        against = "a 0 % plant" if p["baseline"] == ZERO_PLANT else "HEAD, unplanted"
        earlier = f"; {p['earlier_runs']} earlier runs against HEAD not counted" if p["earlier_runs"] else ""
        lines.append(f"| planted +{pct} % (against {against}) | {p['promise']}: >= 95 % of runs | "
                     f"{p['runs']} runs (asked for {summary['asked']['plant_runs']}{earlier}) | in scope: "
                     f"{p['detected_in_scope']}/{p['verdicts_in_scope']} case-runs FAIL over {p['in_scope']} "
                     f"cases (worst case {rate}); all cases: {p['detected_all']}/{p['verdicts_all']} |")
    c = summary["cost"]
    if c["max_minutes"] is not None:
        lines.append(f"| cost | <= {MAX_GATE_MINUTES:g} GPU-minutes per gate | {c['gate_runs']} gate runs | "
                     f"median {c['median_minutes']:.1f}, max {c['max_minutes']:.1f} minutes |")
    lines.append("")
    for pct, p in summary["plants"].items():
        lines += [f"Planted +{pct} %: measured effect (geometric mean of the gate's ratios) and detections "
                  "per case", "", "| variant | scenario | metric | base ms | effect | FAIL / runs |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {x['variant']} | {x['scenario']} | {x['metric']} | {x['base_ms']:.4g} | "
                  f"{x['effect']:.4f} | {x['detected']}/{x['runs']} |" for x in p["cases"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code


def changed_outside_calibration(repo: str) -> list[str]:
    """Tracked files changed in `repo`, except calibration/ (which `perf calibrate` rewrites)."""
    # `git` strips its output, so the first line loses its leading status blank: split, not slice
    paths = [line.split(None, 1)[-1] for line in
             (git(repo, "status", "--porcelain", "--untracked-files=no") or "").splitlines()]
    return [p for p in paths if not p.startswith(CALIBRATION_DIR + "/")]


def _main(args: argparse.Namespace) -> int:
    files.check_output(args.out, "--out", directory=True)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)  # each gate run's log is written there before runs.json
    runs = load_runs(os.path.join(out_dir, "runs.json"))
    repo = repo_root(os.getcwd())
    plants = [int(x) for x in args.plants.split(",") if x.strip()]
    if not args.summarize:
        _gate_runs(args, out_dir, runs, repo, plants)
    if not runs:
        raise NothingMeasured(f"{out_dir} holds no gate run of the self-test (runs.json); run it without "
                              f"--summarize on the GPU (or with a larger --max-minutes)")
    if args.summarize and args.reanalyze:
        runs = _reanalyze(runs, out_dir, args)
    return _summary(args, out_dir, runs)


def schedule(args: argparse.Namespace, plants: list[int]) -> list[tuple[str, int | None, int]]:
    """(kind, percent, run) of every gate run asked for, interleaved: A/A 0, each plant's run 0,
    A/A 1, ... (so that a run cut short by --max-minutes holds some of each)."""
    plan = []
    for i in range(max(args.aa_runs, args.plant_runs)):
        if i < args.aa_runs:
            plan.append(("aa", None, i))
        if i < args.plant_runs:
            plan += [("plant", pct, i) for pct in plants]
    return plan


def _gate_runs(args: argparse.Namespace, out_dir: str, runs: list[dict], repo: str,
               plants: list[int]) -> None:
    """The gate runs not yet in runs.json, each appended to it once done (planted commits on
    temporary worktrees, removed afterwards)."""
    if not vendor_mod.on_gpu():
        raise ConfigError("no GPU: the gate self-test measures on the GPU it proves the gate for; run "
                          "`nox -s gate-selftest` on the GPU machine")
    vendor = vendor_mod.resolve(None)
    dirty = changed_outside_calibration(repo)
    if dirty:
        raise ConfigError(f"{repo}: uncommitted changes ({dirty[0]}); the A/A runs gate HEAD against "
                          f"itself: commit or stash them (calibration/ may be modified)")
    head = git(repo, "rev-parse", "HEAD", check=True)
    t0 = time.monotonic()
    parent = tempfile.mkdtemp(prefix="perf-selftest-")
    # every gate run builds the same batches: share them (a cache given by the caller too)
    batches = os.environ.get("PERF_BATCH_CACHE") or os.path.join(parent, "batches")
    planted = {}
    try:
        for kind, pct, i in schedule(args, plants):
            # plant runs against the 0 % plant: `plantP-vs0-I` (plainly `plantP-I`: against HEAD)
            name = f"aa-{i}" if kind == "aa" else f"plant{pct}-vs0-{i}"
            if any(r["name"] == name for r in runs):
                continue
            elapsed = (time.monotonic() - t0) / 60
            typical = typical_minutes(runs, kind, pct)
            if args.max_minutes is not None and elapsed + typical > args.max_minutes:
                print(f"selftest: --max-minutes {args.max_minutes:g} reached after {elapsed:.1f} "
                      f"minutes; {len(runs)} gate runs in {out_dir}", file=sys.stderr)
                break
            where, base, extra = repo, head, {}
            if kind == "plant":
                for p in (0, pct):
                    if p not in planted:
                        planted[p] = _planted_repo(repo, p, vendor, parent)
                where = planted[pct]
                base = git(planted[0], "rev-parse", "HEAD", check=True)
                extra = {"baseline": ZERO_PLANT}
            out = os.path.join(out_dir, name)
            print(f"selftest: {name} ({elapsed:.1f} min so far)", file=sys.stderr, flush=True)
            r = _gate(where, out, base, i, args, pct, batches)
            runs.append({"name": name, "kind": kind, "percent": pct, "seed": i, "commit": head, **extra,
                         **r, "findings": _findings(out)})
            files.write_json(os.path.join(out_dir, "runs.json"), runs)
    finally:
        for path in planted.values():
            git(repo, "worktree", "remove", "--force", path)
        shutil.rmtree(parent, ignore_errors=True)
        git(repo, "worktree", "prune")


def _summary(args: argparse.Namespace, out_dir: str, runs: list[dict]) -> int:
    """selftest.json and selftest.md from the runs; exit 1 if a promise is broken."""
    summary, ok = summarize(runs, out_dir, args)
    env = {}
    for r in runs:
        p = os.path.join(out_dir, r["name"], "head.jsonl")
        if os.path.exists(p):
            env = results.load(p).environment
            break
    env = {"gpu": env.get("gpu"), "driver": env.get("driver"), "commit": env.get("commit"),
           "date": _dt.date.today().isoformat(), "suite": args.suite, "variants": args.variants}
    summary["environment"] = env
    files.write_json(os.path.join(out_dir, "selftest.json"), summary)
    md = markdown(summary, env)
    files.write_text(os.path.join(out_dir, "selftest.md"), md)
    print(md)
    print(f"selftest: {'every promise kept' if ok else 'A PROMISE IS BROKEN'} by {len(runs)} gate runs; "
          f"{out_dir}/selftest.md", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    from perf import cli, process

    def _selftest(argv: list[str]) -> int:
        vendor_mod.interpreter_without_gpu()
        return cli.main(["selftest", *argv])

    process.entry(_selftest)

