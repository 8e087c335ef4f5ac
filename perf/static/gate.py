"""Static gate: cross-compile every variant for every target, compare head with base (CPU only).

The steps live in their own modules: plan.py (targets, planning as if on a target, binding
as Triton's launcher does, cache keys), probe.py (whether this Triton can compile for a
target at all), build.py (the probes, compile jobs, caches, worker pool),
metrics.py (what the compilers report), report.py (terminal, Markdown, results records);
the verdict rules are perf.verdicts.static_findings and target_finding. This module runs
the two sides and compares them.

With `--toolchain triton==X` the two sides are one checkout (the working tree) compiled
under two Tritons: the installed one (base) and X (head, from perf/toolchain.py, its own
folder first on the side process's PYTHONPATH). Findings, report and exit codes are those
of a commit A/B; titles and results name both Triton versions.

Head and base are compiled by the same driver (this checkout's perf/), each in its own
process importing that side's `kernels/` (the base from a `git worktree`), so a change in
the driver can never show up as a kernel regression. The two processes run at the same
time, each with half the `--jobs`, going through their launches in the same order: the
cold compile time of a variant on a target (CPU seconds, summed over its specializations)
is judged head against base (perf.verdicts.compile_time_finding), and whatever load the
machine carries meanwhile falls on both sides alike. `python -m perf compile` gates the
working tree against the merge base; `--emit-json` compiles one side only (what the gate
runs per side, as `python -m perf.static.gate`). Exit codes: 0 pass (warnings allowed),
1 regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from perf import checkout, files, git, toolchain, validate
from perf.checkout import ROOT
from perf.errors import EXIT_BAD_INPUT, EXIT_FAIL, ConfigError
from perf.static import build, plan, report
from perf.thresholds import compile_calibration_for

SIDE_SCHEMA = "perf-static/1"  # the per-side JSON this module writes and reads
DEFAULT_CACHE = ".perf-cache/compile"
DEFAULT_SUITE = "pr"


# ------------------------------------------------------------------------- input


def _variants(args: argparse.Namespace, registered) -> list[str]:
    """The `--variants` to plan: checked against `registered`, except on the base side, which
    may predate a variant the head adds (its entries are then skipped with the reason)."""
    if args.gate_side == "base" and args.variants:
        return [n.strip() for n in args.variants.split(",") if n.strip()]
    return validate.variants(args.variants, registered)


# ------------------------------------------------------------------------- one side


def run_side(args: argparse.Namespace, thresholds) -> dict:
    """Plan and compile this process's kernels (from --source) for every target."""
    import triton

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise ConfigError("TRITON_INTERPRET=1 is set: --emit-json compiles real kernels in this process; "
                          "unset it (without --emit-json the gate unsets it for its subprocesses)")
    import kernels

    registered = kernels.VARIANTS
    # the base may predate a variant of default_variants: its entries are skipped there
    targets = plan.load_targets(thresholds, args.targets, None if args.gate_side == "base" else registered)
    scenarios = validate.scenarios(args.suite, args.scenarios)
    source = os.path.abspath(args.source or os.getcwd())
    doc = {"schema": SIDE_SCHEMA, "triton": triton.__version__, "source": source,
           "triton_path": os.path.dirname(os.path.realpath(triton.__file__)),
           "commit": git.head(source), "suite": args.suite,
           "targets": [dataclasses.asdict(t) for t in targets], "comparable": True, "reason": "",
           "variants": [], "entries": []}
    if not all({"vendor", "num_sms"} <= v.hints for v in registered.values()):
        doc.update(comparable=False, reason="its variants cannot be planned for another vendor (no vendor= / "
                                            "num_sms= hints); rebase onto a newer main to compare")
        return doc
    doc["variants"] = list(registered)
    start = time.perf_counter()
    cache = build.DiskCache(None if args.no_cache else args.cache_dir)
    doc["cannot_compile"] = build.probe_targets(targets, cache)  # target -> the compiler's reason
    compilable = [t for t in targets if t.name not in doc["cannot_compile"]]
    variants, named = _variants(args, registered), bool(args.variants)
    planned = {t.name: plan.variants_for(t, variants, named) for t in compilable}
    doc["default_variants"] = {name: only for name, only in planned.items() if only != variants}
    entries, jobs = plan.plan_side(variants, scenarios, compilable, named=named)
    results, compiled = build.compile_all(jobs, cache, args.jobs, quiet=args.quiet,
                                          label=args.gate_side or "")
    for e in entries:
        if "key" in e:
            r = results[e["key"]]
            e.update(status=r["status"], metrics=r["metrics"], error=r.get("error", ""),
                     cached=r.get("cached", False))
    doc.update(entries=entries, jobs=len(jobs), compiled=compiled,
               wall_s=round(time.perf_counter() - start, 2))
    return doc


def write_doc(path: str, doc: dict) -> None:
    files.write_json(path, doc)


def read_doc(path: str) -> dict:
    doc = files.load_json(path, "a static-gate side file", "rerun `python -m perf compile`")
    if doc.get("schema") != SIDE_SCHEMA:
        raise ConfigError(f"{path}: schema {doc.get('schema')!r}, expected {SIDE_SCHEMA!r}; recompile it")
    return doc


# ------------------------------------------------------------------------- comparison


def _match_key(e: dict) -> tuple:
    return (e["variant"], e["scenario"], e["target"], e["kernel"], e.get("occurrence", 0))


def _position_key(e: dict) -> tuple:
    """A launch's place in its plan: matches a kernel the head renamed to its base entry."""
    return (e["variant"], e["scenario"], e["target"], e.get("launch"))


def compare(base_doc: dict, head_doc: dict, thresholds) -> list:
    """Findings (gate "static") of head against base, collapsed over scenarios that agree
    (the compile times: `compile_time_findings`)."""
    from perf.verdicts import static_findings, target_finding

    limits = {t["name"]: t for t in head_doc["targets"]}
    comparable = base_doc.get("comparable", True)
    entries = base_doc.get("entries", []) if comparable else []
    by_name = {_match_key(e): e for e in entries}
    by_position = {_position_key(e): e for e in entries if e.get("launch") is not None}
    head_names = {_match_key(h) for h in head_doc["entries"]}
    rows: list = []
    for h in head_doc["entries"]:
        if h["status"] == "skip":
            continue
        b = by_name.get(_match_key(h))
        if b is None:  # renamed kernel: the base's launch at the same place, if its name is gone
            b = by_position.get(_position_key(h))
            if b is not None and (_match_key(b) in head_names or b["kernel"] == h["kernel"]):
                b = None
        rows += static_findings(h, b, thresholds.vendor(h["vendor"]).static, limits[h["target"]],
                                base_comparable=comparable)
    for name, why in head_doc.get("cannot_compile", {}).items():
        vendor = limits[name]["vendor"]
        note = report.cannot_compile_line(name, head_doc["triton"], why)
        rows.append(target_finding(name, vendor, note, thresholds.vendor(vendor).static))
    return collapse(rows)


def compile_time_findings(base_doc: dict, head_doc: dict, thresholds, calibration=None) -> list:
    """One finding per variant and target: the cold compile CPU seconds of its specializations,
    head against base (perf.verdicts.compile_time_finding); `calibration`: the
    perf.thresholds.CompileCalibration that sets the noise (None: the ratios of thresholds.yaml)."""
    from perf.verdicts import compile_time_finding

    base = report.compile_times(base_doc) if base_doc.get("comparable", True) else {}
    vendors = {t["name"]: t["vendor"] for t in head_doc["targets"]}
    source = os.path.relpath(calibration.path) if calibration is not None else ""
    out = []
    for (variant, target), head in sorted(report.compile_times(head_doc).items()):
        vendor = vendors[target]
        noise = calibration.noise(variant, target) if calibration is not None else None
        out.append(compile_time_finding(variant, target, vendor, base.get((variant, target)), head,
                                        thresholds.vendor(vendor).compile_time, noise, source))
    return out


def collapse(findings: list) -> list:
    """One row for findings that differ only in the scenario: "scenario (+n)"."""
    groups: dict[tuple, list] = {}
    for f in findings:
        key = (f.gate, f.vendor, f.target, f.variant, f.metric, f.base, f.head, f.verdict, f.threshold,
               f.note)
        groups.setdefault(key, []).append(f)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) > 1:
            first.scenario = f"{first.scenario} (+{len(group) - 1})"
        out.append(first)
    return out


# ------------------------------------------------------------------------- two sides


def _side_env(tc: toolchain.Toolchain | None = None) -> dict:
    """A side process's environment: this checkout on PYTHONPATH (behind a toolchain's Triton)."""
    return (tc or toolchain.installed()).env(drop=("TRITON_INTERPRET",))


def side_command(source: str, out: str, args: argparse.Namespace, side: str, jobs: int) -> list[str]:
    """The command line of one side process: this driver on `source`'s kernels."""
    cmd = [sys.executable, "-m", "perf.static.gate", "--emit-json", out, "--source", source,
           "--gate-side", side, "--thresholds", os.path.abspath(args.thresholds), "--suite", args.suite,
           "--jobs", str(jobs), "--cache-dir", os.path.abspath(args.cache_dir)]
    for flag in ("targets", "variants", "scenarios"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", getattr(args, flag)]
    if args.no_cache:
        cmd.append("--no-cache")
    if args.quiet:
        cmd.append("--quiet")
    return cmd


def compile_sides(sides: list[tuple[str, str, str, str, toolchain.Toolchain | None]],
                  args: argparse.Namespace) -> list[dict]:
    """Compile every side (source, out, side, label, toolchain) in its own process, all at the
    same time, each with an equal share of `--jobs`; returns their side documents in order.
    An interrupt or a failing side stops them all (perf.process.stop_group)."""
    import subprocess

    from perf.process import stop_group

    jobs = max(1, args.jobs // len(sides))
    procs = []
    try:
        for source, out, side, label, tc in sides:
            if not args.quiet:
                print(f"{label}: compiling {source} ({jobs} compile process{'es' if jobs > 1 else ''}, "
                      f"beside the other side)", file=sys.stderr, flush=True)
            procs.append(subprocess.Popen(side_command(source, out, args, side, jobs), cwd=ROOT,
                                          env=_side_env(tc), start_new_session=True))
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            stop_group(p, grace=10)
        raise
    docs = []
    for (source, out, _, label, _), code in zip(sides, codes):
        if code == EXIT_BAD_INPUT:
            raise ConfigError(f"{label} side ({source}): bad input (see the line above)")
        if code != 0 or not os.path.exists(out):
            raise RuntimeError(f"{label} side ({source}) crashed with exit code {code}")
        docs.append(read_doc(out))
    return docs


def check_input(args: argparse.Namespace, thresholds) -> str:
    """Every mistake in the options, refused before anything is checked out or compiled;
    returns the head's checkout."""
    validate.scenarios(args.suite, args.scenarios)
    if args.toolchain is not None:
        toolchain.parse(args.toolchain)
        if args.base_ref:
            raise ConfigError("--toolchain compiles this checkout under two Tritons; drop --base-ref "
                              "(or drop --toolchain to compare commits)")
    root = git.repo_root(os.getcwd())
    # the head's registry decides; the base may predate a variant
    registered = checkout.variant_names(root)
    plan.load_targets(thresholds, args.targets, registered)
    if args.variants:
        validate.variants(args.variants, registered)
    return root


def gate(args: argparse.Namespace, thresholds) -> int:
    """Compile base and head, compare, report; the exit code of perf.verdicts."""
    root = check_input(args, thresholds)
    if args.toolchain is not None:
        return toolchain_gate(args, thresholds, root)
    base, ref = git.resolve_base(root, args.base_ref)
    head, dirty = git.head(root) or "?", git.commit_info(root)["dirty"]
    aa = base == head and dirty is False
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()
    with git.worktree(root, base) as tree:
        base_doc, head_doc = compile_sides([
            (tree, os.path.join(out_dir, "base.json"), "base", f"base {base[:10]}", None),
            (root, os.path.join(out_dir, "head.json"), "head", "head (working tree)", None)], args)
    calibration, cal_note = compile_calibration_for(thresholds)
    findings = compare(base_doc, head_doc, thresholds) + compile_time_findings(base_doc, head_doc, thresholds,
                                                                               calibration)
    notes = _notes(base, ref, dirty, base_doc, head_doc, time.perf_counter() - start) + [cal_note]
    if aa:
        notes.insert(0, "nothing to compare: HEAD is its own base (A/A); static metrics of HEAD below")
    return _finish(args, root, findings, head_doc, notes)


def _finish(args: argparse.Namespace, root: str, findings: list, head_doc: dict, notes: list[str],
            title: str = report.TITLE, meta: dict | None = None) -> int:
    """report.md, findings.json, static.jsonl and the terminal screen; the exit code."""
    from perf.verdicts import exit_code

    out_dir = os.path.abspath(args.out)
    paths = [os.path.join(args.out, name) for name in ("report.md", "findings.json", "static.jsonl")]
    markdown = report.markdown(findings, head_doc, notes, title)
    files.write_text(os.path.join(out_dir, "report.md"), markdown)
    report.step_summary(markdown)
    write_doc(os.path.join(out_dir, "findings.json"),
              {**(meta or {}), "findings": [f.to_dict() for f in findings]})
    report.write_results(os.path.join(out_dir, "static.jsonl"), head_doc, root,
                         {"triton": head_doc["triton"], **(meta or {})})
    report.terminal(findings, head_doc, notes[0], notes[1:], paths)
    return exit_code(findings)


def toolchain_gate(args: argparse.Namespace, thresholds, root: str) -> int:
    """This checkout compiled under the installed Triton (base) and `--toolchain` (head)."""
    base_tc = toolchain.installed()
    try:
        head_tc = toolchain.ensure(args.toolchain, quiet=args.quiet)
    except toolchain.ToolchainBroken as e:
        print(f"static gate: FAIL — {e}", file=sys.stderr)
        return EXIT_FAIL
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()
    sides = [(root, os.path.join(out_dir, f"{side}.json"), side, f"{side} ({tc.describe()})", tc)
             for side, tc in (("base", base_tc), ("head", head_tc))]
    base_doc, head_doc = compile_sides(sides, args)
    for (_, _, side, _, tc), doc in zip(sides, (base_doc, head_doc)):
        if doc["triton"] != tc.version:  # perf/toolchain.py checked it; a side must not drift
            raise RuntimeError(f"{side} side compiled with Triton {doc['triton']}, not {tc.version}")
    calibration, cal_note = compile_calibration_for(thresholds)
    findings = compare(base_doc, head_doc, thresholds) + compile_time_findings(base_doc, head_doc, thresholds,
                                                                               calibration)
    versions = f"Triton {base_tc.version} → {head_tc.version}"
    dirty = git.commit_info(root)["dirty"]
    notes = [f"toolchain A/B: {versions}; one checkout, {(head_doc.get('commit') or '?')[:12]}"
             f"{' + working tree' if dirty is not False else ''}, compiled under both (base: the installed "
             f"Triton, {base_doc['triton_path']}; head: {head_doc['triton_path']}); "
             f"suite `{head_doc['suite']}`; targets " + ", ".join(t["name"] for t in head_doc["targets"]),
             _cost_note(base_doc, head_doc, time.perf_counter() - start), *coverage_notes(head_doc), cal_note]
    if base_tc.version == head_tc.version:
        notes.insert(0, f"nothing to compare: Triton {head_tc.version} is the installed one (A/A)")
    harness = sum(1 for e in head_doc["entries"] if e["status"] == "error"
                  and e.get("error", "").startswith(("bind failed", "plan failed")))
    if harness:
        notes.append(f"{harness} launches could not be planned or bound under Triton {head_tc.version} (the "
                     f"'plan failed' / 'bind failed' rows): a target that Triton does not know, or an API "
                     f"change that perf/static/plan.py (which binds as Triton's launcher does) must follow; "
                     f"each row's message says which")
    meta = {"toolchain": {"base": base_tc.version, "head": head_tc.version, "spec": head_tc.spec}}
    return _finish(args, root, findings, head_doc, notes, f"{report.TITLE} — {versions}", meta)


def coverage_notes(head_doc: dict) -> list[str]:
    """Targets compiled for fewer variants (default_variants) or for none (Triton cannot)."""
    notes = []
    for name, only in head_doc.get("default_variants", {}).items():
        notes.append(f"{name}: compiled for {', '.join(only) or 'no variant'} only (its default_variants in "
                     f"thresholds.yaml, to bound CI time; `--variants` compiles others)")
    for name, why in head_doc.get("cannot_compile", {}).items():
        notes.append(report.cannot_compile_line(name, head_doc["triton"], why) + "; nothing checked on it")
    return notes


def _cost_note(base_doc: dict, head_doc: dict, wall: float) -> str:
    return (f"compiled {base_doc.get('compiled', 0)} (base) + {head_doc.get('compiled', 0)} (head) "
            f"specializations of {head_doc.get('jobs', 0)} (the two sides at once, each compiling what the "
            f"other has not claimed), the rest from .perf-cache; wall {wall:.1f} s")


def _notes(base: str, ref: str, dirty: bool | None, base_doc: dict, head_doc: dict, wall: float) -> list[str]:
    """What was compared and what it cost; the first says which commits."""
    tree = " + working tree" if dirty is not False else ""
    notes = [f"base {base[:12]} ({ref}) vs head {(head_doc.get('commit') or '?')[:12]}{tree}; "
             f"suite `{head_doc['suite']}`; Triton {head_doc['triton']}; targets "
             + ", ".join(t["name"] for t in head_doc["targets"]),
             _cost_note(base_doc, head_doc, wall)]
    notes += coverage_notes(head_doc)
    if not base_doc.get("comparable", True):
        notes.append(f"base not comparable: {base_doc['reason']}; every finding is ok, its note says "
                     f"what it would be")
    return notes


# ------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--base-ref", default=None,
      help="base commit (default: merge base of HEAD with origin/main, else main)")
    a("--toolchain", default=None, metavar="triton==X",
      help="compile this checkout under the installed Triton (base) and Triton X (head, installed from "
           "the package index into .perf-cache/toolchains; PIP_NO_INDEX / PIP_FIND_LINKS apply)")
    a("--emit-json", default=None, metavar="PATH",
      help="compile one side (this checkout or --source) into PATH; no gate")
    a("--source", default=None, help="checkout whose kernels/ to compile (with --emit-json)")
    a("--gate-side", default=None, choices=("base", "head"), help=argparse.SUPPRESS)  # set by the gate
    a("--suite", default=DEFAULT_SUITE, help=f"suite of perf/suites.yaml (default: {DEFAULT_SUITE})")
    a("--variants", default=None, help="comma-separated variants (default: every registered)")
    a("--scenarios", default=None, help="comma-separated fnmatch globs over scenario names")
    a("--targets", default=None, help="comma-separated targets (default: all of thresholds.yaml)")
    a("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes (default: CPUs)")
    a("--cache-dir", default=DEFAULT_CACHE, help=f"metrics cache (default: {DEFAULT_CACHE})")
    a("--no-cache", action="store_true", help="compile everything again")
    a("--out", default="results/static", help="directory for base/head JSON, report, findings")
    a("--results", default=None, metavar="PATH",
      help="with --emit-json: also write the side's metrics as results records (perf/results.py), with "
           "its compile time per variant and target (what the nightly records; add --no-cache for cold "
           "compiles)")
    a("--quiet", action="store_true", help="no progress")


def check_arguments(a: argparse.Namespace) -> None:
    """The combinations of compile's options, and --source a checkout, before --out is claimed
    (perf.cli's registry runs this before the command)."""
    if a.emit_json and a.toolchain:
        raise ConfigError("--emit-json compiles one side in this process, under its own Triton; drop "
                          "--toolchain (or --emit-json, to compare the two Tritons)")
    if a.source is not None:
        checkout.require_kernels(a.source, "--source")
        if not a.emit_json:
            raise ConfigError("--source compiles one checkout's kernels with --emit-json PATH; add "
                              "--emit-json, or drop --source to gate this checkout against its base")
    if a.results and not a.emit_json:
        raise ConfigError("--results writes one side's records with --emit-json PATH; add --emit-json "
                          "(the gate writes its own static.jsonl into --out)")


def main(args: argparse.Namespace) -> int:
    from perf.thresholds import load_thresholds

    thresholds = load_thresholds(args.thresholds)  # its options were checked: check_arguments
    if args.emit_json:
        checkout.import_kernels(args.source)
        doc = run_side(args, thresholds)
        write_doc(args.emit_json, doc)
        if args.results:
            report.write_results(args.results, doc, os.path.abspath(args.source or os.getcwd()))
        if args.gate_side is None and doc["comparable"]:
            report.console().print(report.summary_table(doc, of=doc["source"]))
            for name, why in doc["cannot_compile"].items():
                print(report.cannot_compile_line(name, doc["triton"], why), flush=True)
        return 0
    return gate(args, thresholds)


if __name__ == "__main__":  # `python -m perf.static.gate`: a side process of the gate (`compile`)
    from perf import cli, process

    process.entry(lambda argv: cli.main(["compile", *argv]), internal=True)
