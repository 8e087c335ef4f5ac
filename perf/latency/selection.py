"""Which cases a gate times: the change plan (perf/change/latency.py).

Identical launches (compiled code, grid, options, arguments, tensors, order) cannot differ in
device time, so by default the gate times only the cases whose launches differ between base and
head, planned on this CPU as if on this GPU (or read from `--plan FILE`, made by
`perf gate --plan-only`), and reports the others `unchanged`. `--all-cases` and a toolchain A/B
(another Triton compiles every kernel anew) time every case.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from perf import validate
from perf import vendor as vendor_mod
from perf.change import latency as changes
from perf.errors import ConfigError
from perf.git import check_clean, git, repo_root, worktree
from perf.latency.request import GateRequest
from perf.thresholds import Thresholds
from perf.verdicts import Finding, Verdict


class Selection:
    """The cases a gate times and those it reports unchanged (identical launches), with the
    plan they come from (None: every case is timed, as with --all-cases or a toolchain A/B)."""

    def __init__(self, cases: list[tuple[str, str]], doc: dict | None, note: str):
        self.doc, self.note = doc, note
        chosen = set(cases)
        if doc is None:
            self.measure, self.unchanged = list(cases), []
        else:
            self.measure = [c for c in ((r["variant"], r["scenario"]) for r in doc["measure"]) if c in chosen]
            self.unchanged = [c for c in ((r["variant"], r["scenario"]) for r in doc["unchanged"])
                              if c in chosen]
        self.why = {(r["variant"], r["scenario"]): r["why"] for r in (doc or {}).get("measure", [])}

    @property
    def partial(self) -> bool:
        """Whether some case is not timed (the workers then get the cases to time as --keys)."""
        return bool(self.unchanged)

    def keys(self, metrics: str) -> set[tuple[str, str, str]]:
        """(variant, scenario, metric) of every case to time."""
        return {(v, s, m) for v, s in self.measure for m in metrics.split(",")}

    def unchanged_findings(self, vendor: str, gpu: str | None, metrics: str) -> list[Finding]:
        """One `unchanged` finding per case and metric not timed (never an "ok" of a measurement)."""
        from perf.validate import usable_metrics

        target = gpu or "Triton interpreter"
        where = f" on {self.doc['target']}" if self.doc else ""
        return [Finding("latency", vendor, target, v, s, m, None, None, None, None, None, None, "not timed",
                        Verdict.UNCHANGED, f"{changes.IDENTICAL}{where}: same compiled kernels, grids, "
                        f"options, arguments and tensors as the base; its device time cannot differ")
                for v, s in self.unchanged for m in usable_metrics(metrics.split(","))]

    def meta(self) -> dict | None:
        """What findings.json records of the plan."""
        if self.doc is None:
            return None
        return {"file": changes.PLAN_FILE, "target": self.doc["target"], "measure": len(self.measure),
                "unchanged": len(self.unchanged)}


def check_plan_options(request: GateRequest) -> None:
    """The gate's modes, one at a time and none with --toolchain (perf.validate.gate_modes)."""
    validate.gate_modes(request.plan_only, request.plan, request.all_cases, request.toolchain)


def _plan(request: GateRequest, th: Thresholds, vendor: str, base_sha: str, head_sha: str,
          roots: dict[str, str], cases: list[tuple[str, str]]) -> tuple[dict, str]:
    """The change plan of this gate and a note for its report: `--plan FILE` when it is this
    gate's and was made for this GPU's SM count, else planned now on this CPU."""
    runner = changes.runner_target(th, vendor, vendor_mod.on_gpu())
    target = runner.target
    if target is None:
        return changes.measure_all(vendor, runner.arch, base_sha, head_sha, cases, runner.note), runner.note
    given = request.plan
    if given and request.allow_dirty and git(repo_root(roots["head"]), "status", "--porcelain",
                                          "--untracked-files=no"):
        raise ConfigError(f"--plan {given}: made for commit {head_sha[:10]}, and the working tree has "
                          f"uncommitted changes it cannot know; drop --plan (the gate plans them) or commit")
    if given:
        doc = changes.check_plan(changes.read_plan(given), given, vendor=vendor, target=target.name,
                                 base=base_sha, head=head_sha, cases=cases)
        if runner.num_sms == target.facts.num_sms:
            return doc, f"change plan: {given} ({target.name})"
        print(f"--plan {given}: planned for {target.facts.num_sms} SMs/CUs of {target.facts.device_name}; "
              f"this GPU has {runner.num_sms}: planning again here", file=sys.stderr, flush=True)
    print(f"change plan: planning base and head on this CPU as if on {runner.note}", file=sys.stderr,
          flush=True)
    with tempfile.TemporaryDirectory(prefix="perf-plan-") as tmp:
        doc = changes.make_plan(vendor=vendor, target=target, num_sms=runner.num_sms, base=base_sha,
                                head=head_sha,
                                base_root=roots["base"], head_root=roots["head"], suite=request.suite,
                                variants=request.variants, scenarios=request.scenarios,
                                thresholds_path=os.path.abspath(request.thresholds), work_dir=tmp)
    return doc, f"change plan: planned on this CPU as if on {runner.note}"


def select_cases(request: GateRequest, th: Thresholds, vendor: str, base_sha: str, head_sha: str,
                 roots: dict[str, str], cases: list[tuple[str, str]], toolchains) -> Selection:
    """Which cases this gate times: all with --all-cases or a toolchain A/B, else those whose
    launches differ between base and head (the change plan)."""
    if toolchains:
        return Selection(cases, None, "every case timed: a toolchain A/B compiles every kernel anew")
    if request.all_cases:
        return Selection(cases, None, "every case timed (--all-cases), also those with identical launches")
    doc, note = _plan(request, th, vendor, base_sha, head_sha, roots, cases)
    selection = Selection(cases, doc, note)
    selection.note = (f"{note}: {len(selection.measure)} of {len(cases)} cases timed, "
                      f"{len(selection.unchanged)} unchanged ({changes.IDENTICAL}: compiled kernels, grids, "
                      f"options, scalar arguments, tensor shapes/strides/dtypes and launch order equal; "
                      f"{changes.PLAN_FILE})")
    print(selection.note, file=sys.stderr, flush=True)
    return selection


def plan_only(request: GateRequest, th: Thresholds, vendor: str, repo: str, base_sha: str, head_sha: str,
              cases: list[tuple[str, str]]) -> int:
    """`perf gate --plan-only`: plan.json in --out and one line; no GPU, nothing measured."""
    if not request.allow_dirty and not request.head_ref:
        check_clean(repo)
    with contextlib.ExitStack() as stack:
        base_root = stack.enter_context(worktree(repo, base_sha))
        head_root = stack.enter_context(worktree(repo, head_sha, "head")) if request.head_ref else repo
        doc, _ = _plan(request, th, vendor, base_sha, head_sha, {"base": base_root, "head": head_root}, cases)
    path = changes.write_plan(os.path.abspath(request.out), doc)
    print(changes.summary(doc), flush=True)
    print(f"plan: {path}", file=sys.stderr, flush=True)
    return 0
