"""Noise of the latency gate, from an A/A run: what it can and cannot see.

`python -m perf noise DIR` (a gate's --out directory, or results files) reports per
(variant, scenario, metric) the coefficient of variation of the repeat medians (pooled over
both sides, each side's values divided by its own median so that a constant offset between
the two processes does not count as noise), the A/A ratio, and the smallest slowdown the
gate fails with 95 % power at the configured repeats, alpha and fail threshold
(`stats.min_detectable_effect`, by simulation). Use it to set thresholds.yaml: the fail
threshold should sit above the noise, and the detectable effect close to the threshold.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from rich.console import Console
from rich.table import Table

from perf import results as results_mod
from perf import stats
from perf.errors import ConfigError
from perf.thresholds import load_thresholds


def _files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = [os.path.join(p, f) for f in ("base.jsonl", "head.jsonl")]
            out += [f for f in found if os.path.exists(f)]
        else:
            out.append(p)
    if not out:
        raise ConfigError(f"{', '.join(paths)}: no results files (base.jsonl/head.jsonl) found")
    return out


def noise_rows(files: list[str], repeats: int, alpha: float, fail_of, power: float = 0.95,
               sims: int = 1000) -> list[dict]:
    """One row per (variant, scenario, metric) seen in every file."""
    per_file = [results_mod.load(f).medians() for f in files]
    keys = sorted(set.intersection(*(set(m) for m in per_file)))
    rows = []
    for key in keys:
        sides = [np.asarray(m[key], dtype=float) for m in per_file]
        normalized = np.concatenate([s / np.median(s) for s in sides])
        cv = stats.cv(normalized)
        fail = fail_of(*key)
        rows.append({
            "variant": key[0], "scenario": key[1], "metric": key[2], "n": min(len(s) for s in sides),
            "median_ms": float(np.median(sides[0])), "cv": cv,
            "aa_ratio": float(np.median(sides[-1]) / np.median(sides[0])) if len(sides) > 1 else None,
            "mde": stats.min_detectable_effect(max(cv, 1e-6), repeats, alpha, fail, power, sims=sims),
        })
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+",
                        help="a gate's --out directory or results files (A/A: base, head)")
    parser.add_argument("--vendor", default=None, help="thresholds section (default: from the results)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="repeats per side to evaluate (default: thresholds)")


def main(args: argparse.Namespace) -> int:
    th = load_thresholds(args.thresholds)
    files = _files(args.paths)
    vendor = args.vendor or results_mod.load(files[0]).environment.get("vendor")
    vt = th.vendor(vendor if vendor in th.vendors else "nvidia")
    repeats = args.repeats or vt.statistics.repeats
    rows = noise_rows(files, repeats, vt.statistics.alpha,
                      lambda v, s, m: th.latency(vt.name, v, s, m).fail)
    table = Table(title=f"A/A noise ({', '.join(files)}); gate: {repeats} repeats, alpha "
                        f"{vt.statistics.alpha:g}, 95 % power")
    for col in ("variant", "scenario", "metric", "n", "median ms", "CV of repeat medians", "A/A ratio",
                "smallest failed slowdown"):
        table.add_column(col)
    for r in sorted(rows, key=lambda r: -r["cv"]):
        table.add_row(r["variant"], r["scenario"], r["metric"], str(r["n"]), f"{r['median_ms']:.4g}",
                      f"{100 * r['cv']:.2f} %", "–" if r["aa_ratio"] is None else f"{r['aa_ratio']:.3f}",
                      f"{100 * (r['mde'] - 1):.1f} %")
    Console(width=200).print(table)
    cvs = np.array([r["cv"] for r in rows])
    mdes = np.array([r["mde"] for r in rows])
    if rows:
        print(f"{len(rows)} cases: CV median {100 * np.median(cvs):.2f} %, 90th percentile "
              f"{100 * np.percentile(cvs, 90):.2f} %, max {100 * cvs.max():.2f} %; smallest failed slowdown "
              f"median {100 * (np.median(mdes) - 1):.1f} %, max {100 * (mdes.max() - 1):.1f} %")
    return 0
