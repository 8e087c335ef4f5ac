"""The nightly's toolchain A/B: this commit under the newest Triton release and pre-release.

    python -m perf toolchain [--versions auto|X,Y] [--out results/nightly/toolchain]

`auto` (the default) asks the package index which Tritons exist (`pip index versions triton
--pre`, so pip's own options apply: PIP_INDEX_URL, PIP_NO_INDEX with PIP_FIND_LINKS) and
takes the newest release and, when there is one, the newest pre-release above it. Each
version X is compared with the installed Triton by both gates, in their own processes:
`python -m perf compile --toolchain triton==X` (every variant and target; any machine) and
`python -m perf gate --toolchain triton==X --no-gpu-ok` (the production entry; skipped
without a GPU). Their outputs land in OUT/X/static and OUT/X/latency; OUT/toolchain.json
sums them up for the dashboard (perf/nightly/site.py, "Toolchain"). A version equal to the
installed one is listed, not measured (it would be an A/A).

Exit code: the worst of the gates' (2 if any had bad input); the nightly step continues on
error, since a regression of a future Triton is news, not a broken commit.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import subprocess
import sys
import time
from dataclasses import replace

from perf import files, toolchain
from perf.checkout import ROOT
from perf.errors import ConfigError
from perf.process import child_env
from perf.verdicts import load_findings

DEFAULT_OUT = os.path.join("results", "nightly", "toolchain")
SUMMARY = "toolchain.json"
SUMMARY_VERSION = 1
# The latency side measures the production entry over the pr suite: 2 x 5 processes on an
# H100 is about the pr gate's cost (unmeasured default: docs/latency.md, "Toolchain A/B").
LATENCY_VARIANTS = "static_grid"
DEFAULT_SUITE = "pr"
TOP_FINDINGS = 5  # findings that are not ok, per gate, shown on the dashboard


def choose(wanted: str) -> list[tuple[str, str]]:
    """(version, "release" | "pre-release") to compare: `auto` asks the index, else a comma list."""
    if wanted != "auto":
        versions = [v.strip() for v in wanted.split(",") if v.strip()]
        bad = [v for v in versions if not toolchain.VERSION.match(v)]
        if bad or not versions:
            raise ConfigError(f"--versions {wanted!r}: {', '.join(bad) or 'nothing'} is not a version; pass "
                              f"auto or Triton versions X,Y (e.g. 3.9.0,3.10.0rc1)")
        return [(v, "pre-release" if toolchain.is_prerelease(v) else "release") for v in versions]
    release, pre = toolchain.newest(toolchain.index_versions())
    if release is None and pre is None:
        raise ConfigError("`pip index versions triton --pre` lists no version; check the index access")
    return [(v, kind) for v, kind in ((release, "release"), (pre, "pre-release")) if v]


def _gate(gate: str, spec: str, run, out: str) -> dict:
    """Run one gate (`gate`: compile or gate, under Triton `spec`; `run(out)` runs it and returns its
    exit code) to its end; its exit code, wall time and findings."""
    stale = os.path.join(out, "findings.json")  # an earlier night's, in the same folder
    if os.path.exists(stale):
        os.remove(stale)
    start = time.monotonic()
    code = run(out)
    result = {"exit": code, "seconds": round(time.monotonic() - start, 1), "out": out}
    path = os.path.join(out, "findings.json")
    if not os.path.exists(path):  # the latency gate without a GPU, or a gate that stopped early
        result["findings"] = None
        return result
    findings = [f.to_dict() for f in load_findings(path)[1]]
    counts = {v: sum(x["verdict"] == v for x in findings) for v in ("fail", "warn", "ok", "improved")}
    rank = {"fail": 0, "warn": 1, "improved": 2}
    shown = sorted((x for x in findings if x["verdict"] in rank), key=lambda x: rank[x["verdict"]])
    result.update(findings=counts, top=[
        f"{x['verdict']} {x.get('target') or ''} {x['variant']} {x['scenario']} {x['metric']}: "
        f"{x.get('base')} -> {x.get('head')}" + (f" ({x['note'][:100]})" if x.get("note") else "")
        for x in shown[:TOP_FINDINGS]])
    return result


def run(args: argparse.Namespace) -> dict:
    """Both gates for every chosen version; the summary written to OUT/toolchain.json."""
    files.check_output(args.out, "--out", directory=True)
    installed = toolchain.installed().version
    summary = {"version": SUMMARY_VERSION, "kind": "toolchain",
               "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "installed": installed, "suite": args.suite, "versions": []}
    try:
        chosen = choose(args.versions)
    except ConfigError as e:  # the dashboard says why nothing ran
        summary["error"] = str(e)
        write_summary(args.out, summary)
        raise
    common = ["--thresholds", os.path.abspath(args.thresholds), "--suite", args.suite]
    if args.scenarios:
        common += ["--scenarios", args.scenarios]

    def static(spec: str):  # the static gate's command line (it has no typed request)
        return lambda out: subprocess.call([sys.executable, "-m", "perf", "compile", "--toolchain", spec,
                                            *common, "--out", out], cwd=ROOT, env=child_env(ROOT))

    def latency(spec: str):
        from perf.latency.request import GateRequest, run_in_process

        request = GateRequest(toolchain=spec, no_gpu_ok=True, variants=args.variants, suite=args.suite,
                              scenarios=args.scenarios, thresholds=os.path.abspath(args.thresholds))
        return lambda out: run_in_process(replace(request, out=out), ROOT, child_env(ROOT))
    for version, kind in chosen:
        entry = {"version": version, "kind": kind}
        if version == installed:
            entry["skipped"] = f"Triton {version} is the installed one"
        else:
            spec = f"{toolchain.PACKAGE}=={version}"
            where = os.path.join(os.path.abspath(args.out), version)
            print(f"toolchain A/B: Triton {installed} -> {version} ({kind})", file=sys.stderr, flush=True)
            entry["static"] = _gate("compile", spec, static(spec), os.path.join(where, "static"))
            entry["latency"] = _gate("gate", spec, latency(spec), os.path.join(where, "latency"))
        summary["versions"].append(entry)
        write_summary(args.out, summary)
    return summary


def write_summary(out: str, summary: dict) -> str:
    return files.write_json(os.path.join(out, SUMMARY), summary)


def load_summary(out: str) -> dict | None:
    """OUT/toolchain.json, or None when the toolchain A/B did not run (the dashboard omits it);
    ConfigError naming the file when it is there but not a summary of this version."""
    path = os.path.join(out, SUMMARY)
    if not os.path.exists(path):
        return None
    fix = "run `python -m perf toolchain` again (or remove it)"
    data = files.load_json(path, "the toolchain A/B's summary", fix)
    if data.get("kind") != "toolchain" or data.get("version") != SUMMARY_VERSION or \
            not isinstance(data.get("versions"), list) or \
            not all(isinstance(v, dict) for v in data["versions"]):
        raise ConfigError(f"{path}: not a toolchain summary of version {SUMMARY_VERSION} (kind, version, "
                          f"versions); {fix}")
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--versions", default="auto",
                        help="auto (default: the index's newest release and newer pre-release) or X,Y")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"folder for the gates' outputs (default: {DEFAULT_OUT})")
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help=f"suite of both gates (default: {DEFAULT_SUITE})")
    parser.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over the suite")
    parser.add_argument("--variants", default=LATENCY_VARIANTS,
                        help=f"variants the latency side measures (default: {LATENCY_VARIANTS}, the "
                             f"production entry; the static side compiles every variant)")


def main(args: argparse.Namespace) -> int:
    summary = run(args)
    codes = [g["exit"] for v in summary["versions"] for g in (v.get("static"), v.get("latency")) if g]
    for v in summary["versions"]:
        if "skipped" in v:
            print(f"toolchain A/B: {v['version']}: {v['skipped']}", file=sys.stderr)
    print(f"wrote {os.path.join(args.out, SUMMARY)}", file=sys.stderr)
    return 2 if 2 in codes else max(codes, default=0)
