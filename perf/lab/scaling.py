"""The nightly over 1, 2, 4 GPUs of one host: wall times, and the same cases in every run.

    python -m perf.lab.scaling --out DIR [--gpus 1,2,4] [--minutes 12] [--suite nightly]
                                   [--scenarios GLOBS] [--variants ...] [--peers auto] [--allow-cpu]

A lab tool, not a step of the nightly. It measures one fixed nightly subset with the nightly's
own sharding (`perf.nightly.shard.measure`, one worker per GPU, the merge) once per GPU count,
each run in a process of its own with an empty Triton cache of its own (every run compiles
cold, as a fresh runner does), and reports per count the wall time from start to merged
file, the speedup over the first count, and whether the merged file holds exactly the cases
of the first run: the same (variant, scenario, metric, repeat) measurements and the same
skips. DIR/scaling.json is rewritten after each count, so an interrupted run keeps the counts
it finished and a rerun with the same selection measures only the others; DIR/scaling.md is
the table, DIR/scaling.png the plot (with matplotlib). Exit 0 when every run holds the first
run's cases and every goal of GOALS is met, 1 otherwise, 2 for bad input.

The subset: without --scenarios, the suite's scenarios of at most 1/16 of the wanted minutes
each (by the deal's own estimate, `shard.cost`), in suite order, until their estimated sum
reaches --minutes; so four GPUs get shares of even size, and no share is one long scenario.
One run of the subset on one GPU takes at least that long; a call limit shorter than the whole
(three runs: about 1.75 x --minutes) needs it detached: `setsid nohup python -m
perf.lab.scaling ... > DIR.log 2>&1 &`, then read DIR/scaling.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace

from perf import files, git, lab
from perf.errors import EXIT_FAIL, EXIT_OK, ConfigError
from perf.nightly.selection import ROOT, Selection
from perf.process import child_env

GOALS = {2: 1.8, 4: 3.3}  # GPUs -> least speedup over one GPU (the sharding's goal, 2026-11-26)
MINUTES = 12.0  # default size of the subset on one GPU: the goal's 10 GPU-minutes with a margin
SHARE_OF_ONE = 16  # a subset scenario costs at most 1/16 of it: 4 GPUs get 4+ each (by reasoning, unmeasured)
HEADER_ENV = "PERF_SCALING_HEADER"  # one run's extra header fields (JSON), from the driver


def subset(sel: Selection, minutes: float) -> tuple[str, ...]:
    """The suite's scenarios of at most `minutes` / SHARE_OF_ONE each, in suite order, until
    their estimated seconds reach `minutes`; ConfigError when the suite holds too few."""
    from perf.nightly import shard

    chosen, total = [], 0.0
    for name in sel.scenarios:
        cost = shard.cost(name, sel)
        if cost <= minutes * 60 / SHARE_OF_ONE:
            chosen.append(name)
            total += cost
        if total >= minutes * 60:
            return tuple(chosen)
    raise ConfigError(f"--minutes {minutes:g}: the suite {sel.suite}'s scenarios of at most "
                      f"{minutes * 60 / SHARE_OF_ONE:.0f} s each add up to {total / 60:.1f} estimated "
                      f"minutes; ask for fewer minutes or name the scenarios (--scenarios)")


def cases(path: str) -> tuple[tuple[set, set], str]:
    """((measured (variant, scenario, metric, repeat), skipped (kind, variant, scenario)), GPU) of
    a results file: what "the same cases" compares (a skip's reason may state a call time)."""
    from perf import results

    res = results.load(path)
    gpu = str(res.environment.get("gpu") or "interpreter")
    return (res.done(), {(r["kind"], r["variant"], r["scenario"]) for r in res.skips()}), gpu


def compare(first: tuple[set, set], other: tuple[set, set]) -> dict:
    """What a run holds beyond or short of the first run's cases (empty lists: the same)."""
    missing = sorted(map(list, (first[0] - other[0]) | (first[1] - other[1])))
    extra = sorted(map(list, (other[0] - first[0]) | (other[1] - first[1])))
    return {"same_cases": not missing and not extra, "missing": missing[:20], "extra": extra[:20],
            "missing_count": len(missing), "extra_count": len(extra)}


def digest(sel: Selection, commit: str) -> str:
    """What a finished run of a count must share with this invocation to be kept."""
    doc = {**asdict(replace(sel, results="")), "commit": commit}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def load_previous(path: str, key: str) -> list[dict]:
    """The finished runs of an earlier invocation with the same selection and commit (the
    validating reader of scaling.json); [] when there is none or it measured something else."""
    if not os.path.exists(path):
        return []
    fix = "remove it or name a new --out"
    doc = files.load_json(path, "the scaling table", fix)
    runs = doc.get("runs")
    fields = {"gpus": int, "wall_s": (int, float), "results": str}
    if not isinstance(runs, list) or not all(
            isinstance(r, dict) and all(isinstance(r.get(f), t) for f, t in fields.items()) for r in runs):
        raise ConfigError(f"{path}: `runs` is not a list of {{gpus, wall_s, results}}; {fix}")
    if doc.get("key") != key:
        return []
    return [r for r in runs if os.path.exists(r["results"])]


def measure_one(gpus: int, sel: Selection, out: str, cache: str, allow_cpu: bool) -> float:
    """Wall seconds of one run of `sel` over `gpus` workers, in a process of its own."""
    env = child_env(ROOT, **sel.to_env(), TRITON_CACHE_DIR=cache,
                    **{HEADER_ENV: os.environ.get(HEADER_ENV, "{}")})
    if allow_cpu:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, "-m", "perf.lab.scaling", "--one", str(gpus), "--out", out]
    start = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=ROOT, check=False)
    wall = time.monotonic() - start
    if done.returncode == 2:  # bad input: the child said what (its output is above)
        raise ConfigError(f"the run over {gpus} GPU(s) refused its input (exit 2, its output is above)")
    if done.returncode != 0:
        raise RunFailed(f"the run over {gpus} GPU(s) ended with exit {done.returncode} after {wall:.0f} s "
                        f"(its output is above, the workers' logs beside {out}); the counts finished "
                        f"before it are in scaling.json")
    return wall


class RunFailed(ConfigError):
    """A run that did not finish: exit 1, the finished counts kept."""

    exit_code = EXIT_FAIL


def rows(runs: list[dict], judged: bool) -> list[dict]:
    """Each run with its speedup over the first count and its goal (`judged`: on GPUs; the
    interpreter's stand-in workers share the CPUs, which says nothing of GPUs)."""
    base = runs[0]["wall_s"] if runs else None
    out = []
    for r in runs:
        speedup = base / r["wall_s"] if base and r["wall_s"] > 0 else None
        goal = GOALS.get(r["gpus"]) if judged else None
        out.append({**r, "speedup": speedup, "efficiency": speedup / r["gpus"] if speedup else None,
                    "goal": goal, "goal_met": None if goal is None or speedup is None else speedup >= goal})
    return out


def table(doc: dict) -> str:
    lines = [f"# Nightly scaling: {doc['gpu']} ({doc['date']}, commit {doc['commit'][:12]})", "",
             f"{len(doc['selection']['scenarios'])} scenarios of the {doc['selection']['suite']} suite x "
             f"{len(doc['selection']['variants'])} variants + {len(doc['selection']['peers'])} libraries, "
             f"{doc['selection']['repeats']} repeats of {doc['selection']['samples']} samples; "
             f"estimated {doc['estimate_s'] / 60:.1f} GPU-minutes; each run compiles cold.", "",
             "| GPUs | wall | speedup | efficiency | goal | cases | same cases as the first run |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        goal = "" if r["goal"] is None else f"{r['goal']:.1f}x ({'met' if r['goal_met'] else 'missed'})"
        same = "yes" if r["same_cases"] else f"no: {r['missing_count']} missing, {r['extra_count']} extra"
        lines.append(f"| {r['gpus']} | {r['wall_s']:.0f} s ({r['wall_s'] / 60:.1f} min) | "
                     f"{r['speedup']:.2f}x | {r['efficiency']:.0%} | {goal} | "
                     f"{r['measured']} measured, {r['skipped']} skipped | {same} |")
    lines += ["", "passed" if doc["passed"] else "FAILED"]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: str) -> str | None:
    """Speedup against GPUs beside the ideal line and the goals; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    gpus = [r["gpus"] for r in doc["runs"]]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(gpus, gpus, "--", color="grey", label="ideal")
    ax.plot(gpus, [r["speedup"] for r in doc["runs"]], "o-", label="measured")
    ax.plot(list(GOALS), list(GOALS.values()), "x", color="red", label="goal")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(f"speedup over {gpus[0]} GPU(s)")
    ax.set_title(doc["gpu"], fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=100)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)
    return path


def run(args: argparse.Namespace) -> dict:
    from perf import devices, validate
    from perf import peers as peers_mod
    from perf import vendor as vendor_mod
    from perf.nightly import selection, shard

    counts = lab.counts(args.gpus, "--gpus", "GPU counts")
    pool = devices.host_pool()
    if pool is None and not args.allow_cpu:
        raise ConfigError("no GPU visible to torch: the scaling is measured on a host of several GPUs "
                          "(--allow-cpu tries it in Triton's interpreter)")
    if pool is not None and max(counts) > len(pool.devices):
        raise ConfigError(f"--gpus {args.gpus}: this job may use {len(pool.devices)} GPU(s) "
                          f"({pool.encode()}); name at most that many")
    vendor = vendor_mod.detect()
    peers, absent = peers_mod.resolve(args.peers, vendor)
    sel = Selection(args.suite, selection.resolve_scenarios(args.suite, args.scenarios),
                    tuple(validate.variants(args.variants, selection.default_variants())), peers,
                    repeats=args.repeats or selection.DEFAULT_REPEATS,
                    samples=args.samples or selection.DEFAULT_SAMPLES)
    if not args.scenarios:
        sel = replace(sel, scenarios=subset(sel, args.minutes))
    sha, date = git.head_commit(ROOT)
    key = digest(sel, sha)
    out = os.path.abspath(args.out)
    doc_path = os.path.join(out, "scaling.json")
    kept = {r["gpus"]: r for r in load_previous(doc_path, key)}
    os.environ[HEADER_ENV] = json.dumps({"nightly": {"machine": "scaling", "commit": sha, "commit_date": date,
                                                     "dirty": bool(git.commit_info(ROOT)["dirty"])},
                                         "peers_absent": absent})
    estimate = sum(shard.cost(n, sel) for n in sel.scenarios)
    print(f"scaling: {len(sel.scenarios)} scenarios x {len(sel.variants)} variants + {len(sel.peers)} "
          f"libraries, estimated {estimate / 60:.1f} min on one GPU; runs over "
          f"{', '.join(map(str, counts))} GPU(s)"
          + (f" ({', '.join(str(k) for k in counts if k in kept)} kept from the last run)" if kept else ""),
          flush=True)
    doc = {"key": key, "commit": sha, "date": time.strftime("%Y-%m-%d"), "gpu": "interpreter",
           "selection": {**asdict(replace(sel, results="")), "scenarios": list(sel.scenarios)},
           "estimate_s": estimate, "peers_absent": absent, "runs": []}
    finished: list[dict] = []
    first = None
    for k in counts:
        results_path = os.path.join(out, f"gpus-{k}", "results.jsonl")
        if k in kept:
            r = kept[k]
        else:
            folder = os.path.dirname(results_path)
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted run of this count starts over
            os.makedirs(folder)
            print(f"scaling: {k} GPU(s)...", flush=True)
            wall = measure_one(k, sel, results_path, os.path.join(folder, "triton-cache"), args.allow_cpu)
            shutil.rmtree(os.path.join(folder, "triton-cache"), ignore_errors=True)
            r = {"gpus": k, "wall_s": round(wall, 1), "results": results_path}
        got, gpu = cases(r["results"])
        first = first or got
        doc["gpu"] = doc["gpu"] if finished else gpu
        r = {**r, "measured": len(got[0]), "skipped": len(got[1]), **compare(first, got)}
        finished.append(r)
        doc["runs"] = rows(finished, judged=not args.allow_cpu)
        doc["passed"] = all(x["same_cases"] and x["goal_met"] is not False for x in doc["runs"])
        files.write_json(doc_path, doc)
        files.write_text(os.path.join(out, "scaling.md"), table(doc))
        print(f"scaling: {k} GPU(s): {r['wall_s']:.0f} s, speedup {doc['runs'][-1]['speedup']:.2f}x, "
              f"{'the same cases' if r['same_cases'] else 'NOT the same cases'} -> {doc_path}", flush=True)
    if plot(doc, os.path.join(out, "scaling.png")) is None:
        print("note: no plot (matplotlib is not installed); the table is scaling.md", flush=True)
    return doc


def one_main(gpus: int, out: str) -> int:
    """One run (the child process): the selection from PERF_NIGHTLY_*, the nightly's sharding."""
    from perf.nightly import shard

    shard.measure(Selection.from_env(), out, gpus=str(gpus), header_extra=json.loads(os.environ[HEADER_ENV]))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.scaling", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder: scaling.json, scaling.md, scaling.png, gpus-K/")
    p.add_argument("--gpus", default="1,2,4",
                   help="the GPU counts to run, the first the baseline (default: 1,2,4)")
    p.add_argument("--minutes", type=float, default=MINUTES,
                   help=f"estimated minutes of the subset on one GPU (default: {MINUTES:g})")
    p.add_argument("--suite", default="nightly", help="the suite the subset is taken from (default: nightly)")
    p.add_argument("--scenarios", default=None, help="globs or names instead of the subset")
    p.add_argument("--variants", default=None, help="comma list (default: every variant)")
    p.add_argument("--peers", default="auto",
                   help="vendor libraries: auto, none or a comma list (default: auto)")
    p.add_argument("--repeats", type=int, default=None, help="repeats a case (default: the nightly's)")
    p.add_argument("--samples", type=int, default=None, help="samples a repeat (default: the nightly's)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="no GPU: interpreter workers (checks the plumbing)")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one run
    args = p.parse_args(argv)
    if args.one is not None:
        return one_main(args.one, args.out)
    if not args.minutes > 0:
        raise ConfigError(f"--minutes {args.minutes:g}: must be above 0")
    files.check_output(args.out, "--out", directory=True)
    doc = run(args)
    print(table(doc), flush=True)
    return EXIT_OK if doc["passed"] else EXIT_FAIL


if __name__ == "__main__":
    if "--allow-cpu" in sys.argv or "--one" in sys.argv:  # before Triton is imported
        from perf.vendor import interpreter_without_gpu

        interpreter_without_gpu()
    from perf.process import entry

    entry(main)
