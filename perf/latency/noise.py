"""Noise of the latency gate, from an A/A run: what it can and cannot see, per case.

`python -m perf noise DIR` reads an A/A gate's --out (or `perf calibrate`'s) and reports per
(variant, scenario, metric): the round-to-round spread of the paired log ratio within a
process (`sigma_round`), the spread of process means beyond it (`tau`: what a process adds),
the standard deviation of the gate's estimate at the gate's processes x rounds (`noise`),
the thresholds that noise gives under thresholds.yaml's rule, and the smallest slowdown the
gate fails with 95 % power. Every number comes from the code the gate itself runs:
perf.stats (noise_components, gate_sigma, min_detectable), perf.thresholds (the noise rule)
and the calibrated variance the gate's test would use. Where calibration/<vendor>.yaml
already holds the case, its calibrated noise is shown beside the measured one; `--write`
writes these results as the calibration file (what `perf calibrate` does after measuring).

A calibration is measured data: `write_calibration` (locked and atomic, perf/files.py) never
replaces one measured on another GPU or vendor, or on a GPU with Triton's interpreter's
numbers, without `--force` (the file records `meta.interpreter`), and never writes a file
without cases or one the reader (perf/thresholds.py) would refuse.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os

import numpy as np

from perf import files, stats
from perf import results as results_mod
from perf.errors import ConfigError, NothingMeasured
from perf.latency import analysis
from perf.thresholds import (
    CALIBRATION_FIX,
    CALIBRATION_VERSION,
    VENDORS,
    Calibration,
    CaseNoise,
    Thresholds,
    calibration_for,
    load_calibration,
    load_thresholds,
    measured_environment,
    parse_calibration,
)

POWER = analysis.POWER


def load_aa(out_dir: str) -> tuple[results_mod.Results, results_mod.Results, set[str] | None]:
    """base.jsonl, head.jsonl and the finished first-attempt processes of a gate's --out."""
    paths = [os.path.join(out_dir, f) for f in ("base.jsonl", "head.jsonl")]
    if not os.path.isdir(out_dir) or not all(os.path.exists(p) for p in paths):
        raise ConfigError(f"{out_dir}: no base.jsonl/head.jsonl; pass the --out directory of an A/A "
                          f"`python -m perf gate --base-ref HEAD --all-cases` or of `python -m perf "
                          f"calibrate`")
    processes = None
    ledger = os.path.join(out_dir, "gate.json")
    if os.path.exists(ledger):
        fix = "rerun the gate into a fresh --out"
        done = files.load_json(ledger, "the gate's ledger", fix).get("processes", [])
        if not isinstance(done, list) or not all(
                isinstance(p, dict) and isinstance(p.get("process"), str) and type(p.get("attempt")) is int
                for p in done):
            raise ConfigError(f"{ledger}: processes must be a list of {{process, attempt}} entries; {fix}")
        processes = {p["process"] for p in done if p["attempt"] == 0}
    return results_mod.load(paths[0]), results_mod.load(paths[1]), processes


def noise_rows(base, head, processes: set[str] | None, th: Thresholds, vendor: str,
               gate_processes: int, gate_repeats: int, calibration=None) -> list[dict]:
    """One row per case with paired A/A rounds in at least two processes (module docstring)."""
    s = th.vendor(vendor).statistics
    rows = []
    for key, case in sorted(analysis.pairs(base, head, processes).items()):
        groups = case.groups()
        if len(groups) < 2:
            continue
        sigma, tau = stats.noise_components(groups)
        aa_ratio = stats.paired(groups, resamples=200).ratio
        measured = CaseNoise(sigma, tau, len(groups), int(sum(g.size for g in groups)),
                             float(np.median(case.side(1))), math.log(aa_ratio))
        noise = stats.gate_sigma(sigma, tau, gate_processes, gate_repeats)
        t = th.latency(vendor, *key, noise=noise, bias=measured.side_bias())
        df = float(measured.processes - 1 + gate_processes - 1)  # the gate pools both (perf/stats.py)
        se = math.sqrt(measured.variance(gate_repeats) / gate_processes)
        mde = stats.min_detectable(se, t.fail, s.alpha, df, POWER, attempts=1 + s.retries)
        cal = calibration.case(*key) if calibration is not None else None
        rows.append({
            "variant": key[0], "scenario": key[1], "metric": key[2], "case": measured,
            "aa_ratio": aa_ratio, "noise": noise,
            "calibrated_noise": None if cal is None else stats.gate_sigma(cal.sigma_round, cal.tau,
                                                                          gate_processes, gate_repeats),
            "warn": t.warn, "fail": t.fail, "min_detectable": mde,
        })
    return rows


def calibration_doc(rows: list[dict], vendor: str, environment: dict, meta: dict) -> dict:
    """The calibration file's content (perf/thresholds.py parses it)."""
    return {
        "version": CALIBRATION_VERSION, "vendor": vendor, "gpu": environment.get("gpu"),
        "meta": {"date": _dt.date.today().isoformat(), "driver": environment.get("driver"),
                 "commit": environment.get("commit"), "torch": environment.get("torch"),
                 "triton": environment.get("triton"), "interpreter": bool(environment.get("interpreter")),
                 **meta},
        "cases": [{"variant": r["variant"], "scenario": r["scenario"], "metric": r["metric"],
                   "sigma_round": round(r["case"].sigma_round, 7), "tau": round(r["case"].tau, 7),
                   "processes": r["case"].processes, "rounds": r["case"].rounds,
                   "median_ms": round(r["case"].median_ms, 6), "aa_log": round(r["case"].aa_log, 7)}
                  for r in rows],
    }


def doc_environment(doc: dict) -> dict:
    """What a calibration document was measured on (perf.files.guard_measured's terms)."""
    return {"vendor": doc["vendor"], "gpu": doc["gpu"], "interpreter": bool(doc["meta"].get("interpreter"))}


def existing_calibration(path: str, force: bool) -> Calibration | None:
    """The calibration in `path`, None if there is none (or, with `force`, none readable).
    A file that is not a valid calibration is not replaced without --force either."""
    if not os.path.exists(path):
        return None
    try:
        return load_calibration(path)
    except ConfigError as e:
        if force:
            return None
        raise ConfigError(f"{e}; it is not replaced unread: fix or remove it, or pass --force") from None


def refuse_replacing(path: str, environment: dict, force: bool) -> Calibration | None:
    """The calibration in `path`, after refusing (ConfigError) to replace one measured on
    another vendor or GPU, or on a GPU with interpreter data, unless `force`."""
    old = existing_calibration(path, force)
    files.guard_measured(path, None if old is None else measured_environment(old), environment, force)
    return old


HEADER = ("# Measured noise of the latency gate on one GPU: written by `python -m perf calibrate`\n"
          "# (perf/latency/calibrate.py), read by perf/thresholds.py. Do not edit by hand; rerun it.\n"
          "# sigma_round: std. dev. of a round's paired log(head/base) within a process (A/A);\n"
          "# tau: std. dev. of process means beyond it (what a process adds); both natural-log units.\n")


def render_calibration(doc: dict) -> str:
    """The calibration file's text: the header, the fields, one flow mapping per case."""
    from perf.thresholds import render_calibration_text

    return render_calibration_text(HEADER, doc)


def write_calibration(path: str, doc: dict, launch_cost: dict | None = None, force: bool = False) -> None:
    """Write the calibration file, under its lock and atomically. Refused (ConfigError) where
    it would replace data measured elsewhere without `force` (`refuse_replacing`), or hold no
    case. A launch_cost section already there is kept unless replaced, if measured alike."""
    if not doc["cases"]:
        raise NothingMeasured(f"no case to calibrate; {path} is left as it is")
    environment = doc_environment(doc)

    def make() -> str:
        old = refuse_replacing(path, environment, force)
        new = dict(doc)
        if launch_cost is not None:
            new["launch_cost"] = launch_cost
        elif old is not None and old.launch_cost and measured_environment(old) == environment:
            new["launch_cost"] = old.launch_cost
        text = render_calibration(new)
        try:  # never write a file the gate would refuse to read
            parse_calibration(files.parse_yaml(text, path, CALIBRATION_FIX), path)
        except ConfigError as e:
            raise ConfigError(f"refusing to write a calibration the gate could not read: {e}") from None
        return text

    files.rewrite(path, make)


def check_write_path(path: str, vendor: str, flag: str = "--write") -> str:
    """Refuse, before any work, a calibration path that cannot be written or that is named
    for another vendor (calibration/amd.yaml for nvidia data: the gate would refuse it)."""
    files.check_output(path, flag)
    stem, ext = os.path.splitext(os.path.basename(path))
    named = stem.split("-")[0]  # <vendor>.yaml or <vendor>-<GPU model>.yaml (thresholds.calibration_path)
    if ext in (".yaml", ".yml") and named in VENDORS and named != vendor:
        raise ConfigError(f"{flag} {path}: the file is named for {named}, the data is {vendor}'s; write "
                          f"calibration/{vendor}.yaml")
    return path


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("variant", "scenario", "metric", "processes x rounds", "median ms", "sigma_round", "tau",
                "A/A ratio", "noise", "calibrated", "warn", "fail", "min. detectable"):
        table.add_column(col)
    for r in sorted(rows, key=lambda r: -r["noise"]):
        c = r["case"]
        table.add_row(r["variant"], r["scenario"], r["metric"],
                      f"{c.processes} x {c.rounds / c.processes:.3g}",
                      f"{c.median_ms:.4g}", f"{100 * c.sigma_round:.2f} %", f"{100 * c.tau:.2f} %",
                      f"{r['aa_ratio']:.4f}", f"{100 * r['noise']:.3f} %",
                      "–" if r["calibrated_noise"] is None else f"{100 * r['calibrated_noise']:.3f} %",
                      f"{r['warn']:.4f}", f"{r['fail']:.4f}", f"{100 * (r['min_detectable'] - 1):.2f} %")
    Console(width=220).print(table)
    if rows:
        noise = np.array([r["noise"] for r in rows])
        mde = np.array([r["min_detectable"] for r in rows])
        see = ", ".join(f"{int((mde <= 1 + e + 1e-9).sum())} see {100 * e:g} %" for e in (0.02, 0.05, 0.10))
        print(f"{len(rows)} cases: noise median {100 * np.median(noise):.3f} %, "
              f"max {100 * noise.max():.3f} %; with 95 % power {see}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs=1, help="--out directory of an A/A gate or of `perf calibrate`")
    parser.add_argument("--vendor", default=None, help="thresholds section (default: from the results)")
    parser.add_argument("--processes", type=int, default=None,
                        help="gate processes to evaluate (default: thresholds)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="gate rounds per process (default: thresholds)")
    parser.add_argument("--write", default=None, metavar="PATH",
                        help="also write these results as a calibration file (e.g. calibration/nvidia.yaml)")
    parser.add_argument("--force", action="store_true",
                        help="with --write: replace a calibration measured on another GPU or vendor, or "
                             "one from a GPU with data from Triton's interpreter")


def main(args: argparse.Namespace) -> int:
    th = load_thresholds(args.thresholds)
    base, head, processes = load_aa(args.paths[0])
    vendor = args.vendor or base.environment.get("vendor")
    if vendor not in th.vendors:
        raise ConfigError(f"{args.paths[0]}: measured on {vendor!r}; pass --vendor nvidia|amd")
    if args.write:
        check_write_path(args.write, vendor)
        refuse_replacing(args.write, {"vendor": vendor, "gpu": head.environment.get("gpu"),
                                      "interpreter": bool(head.environment.get("interpreter"))}, args.force)
    s = th.vendor(vendor).statistics
    p, r = args.processes or s.processes, args.repeats or s.repeats
    cal, note = calibration_for(th, vendor, head.environment.get("gpu"))
    rows = noise_rows(base, head, processes, th, vendor, p, r, cal)
    if not rows:
        raise NothingMeasured(f"{args.paths[0]}: no case has paired rounds in two or more processes"
                              + (f"; {args.write} is left as it is" if args.write else ""))
    print_table(rows, f"A/A noise ({args.paths[0]}); gate: {p} processes x {r} rounds, alpha {s.alpha:g}, "
                      f"95 % power, {1 + s.retries} measurements to fail")
    print(f"calibration: {note}")
    if args.write:
        doc = calibration_doc(rows, vendor, head.environment, {
            "processes": max(r["case"].processes for r in rows), "repeats": head.header.get("repeats"),
            "samples": head.header.get("samples"), "suite": head.header.get("suite")})
        write_calibration(args.write, doc, force=args.force)
        print(f"wrote {args.write}")
    return 0
