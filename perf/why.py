"""Why a case is slower: its launch plans, static metrics and device time, base and head side by side.

Every failing or warning case of the latency gate, every confirmed nightly alert and perf
bisect's answer gets a short section saying what changed between the two sides of that case:

- the launch plan of each side: the kernels, their grids, warps, stages and constants, and the
  configuration the heuristics chose (tile sizes, warps, stages, segments) with the branch of
  kernels/paged_attention/heuristics.py that chose it and its provenance line (`Config.source`);
  differences marked;
- the static metrics of each launched kernel compiled for the runner's target (registers, spills,
  shared memory/LDS, occupancy) and its instruction counts (global loads and stores, shared-memory
  loads and stores, tensor-core ops: perf.static.metrics.count_instructions over the PTX or
  AMDGCN the static build produces), base -> head;
- device time per kernel, base against head, where a GPU ran them (`kernel_times`: Proton where
  the installed Triton has it, else torch's profiler; the section says which, and where: in the
  gate's re-measure processes, whose records carry it (`recorded_kernel_times`), else in one
  process after the gate or for `perf why`);
- one line saying which of these moved most, in words.

Collecting needs Triton's real kernels (binding, compiling, and on a GPU running them), so it
runs in a process of its own without the interpreter, both checkouts' kernels loaded side by side
(perf/checkout.py), planned on the head's batch as the change plan plans them
(perf/change/keys.py): `python -m perf.why` (internal, started as the planning process is:
perf/change/side.py) writes why.json; `collect_cases` runs it. `render` turns one case into
Markdown: the one renderer of the gate's report and PR comment, the nightly's issue and bisect's
answer (`section` for several). `python -m perf why` is the command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable

from perf import files
from perf.change import side as side_process
from perf.errors import ConfigError

SCHEMA = "perf-why/1"
WHY_FILE = "why.json"
STATIC = ("registers", "spills", "shared_memory", "occupancy")
# heuristics.Config fields shown in the plan (the rest of a Config appears where it differs)
CONFIG_FIRST = ("block_m", "tile_size", "num_segments", "num_warps", "num_stages", "programs_per_sm")
MARK = "≠"  # a cell whose base and head differ
DEVICE_ROUNDS = 10  # profiled calls per side, alternated (unmeasured default: a few us per call on an H100)
# where a case's device time per kernel was measured, as the section says it
IN_GATE = "measured in the gate's re-measure processes"
AFTER_GATE = "measured after the gate in one process"
ONE_PROCESS = "measured in one process"


# --------------------------------------------------------------------------- collecting (one side)


@contextlib.contextmanager
def recording_choices(out: list):
    """Record every heuristics.Config the active checkout's planner chooses (its
    `planning.plan_q_blocks` gets a chooser that notes the answer); nothing for a checkout
    without that planner (naive, qblock and older kernels choose no configuration)."""
    planning = sys.modules.get("kernels.paged_attention.planning")
    real = getattr(planning, "plan_q_blocks", None)
    if real is None:
        yield
        return

    def wrapped(*args, choose, **kwargs):
        def chooser(vendor, features):
            config = choose(vendor, features)
            out.append(config)
            return config

        return real(*args, choose=chooser, **kwargs)

    planning.plan_q_blocks = wrapped
    try:
        yield
    finally:
        planning.plan_q_blocks = real


def _spills(m: dict) -> int:
    from perf.vendor import SPILL_METRICS

    return sum(int(m.get(k, 0)) for k in SPILL_METRICS)


def explain_side(kernels, name: str, batch, target, num_sms: int, cache) -> dict:
    """One side of a case: its status, the configuration the heuristics chose, and each planned
    launch (the change plan's launch key) with its static metrics on `target`. Run with that
    side's `kernels` active (perf/checkout.py `Side.active`)."""
    import dataclasses

    import torch

    from perf.change import keys as launch_keys
    from perf.change import side as change_side
    from perf.measure.cases import host_hints
    from perf.static import build, plan

    variant = getattr(kernels, "VARIANTS", {}).get(name)
    if variant is None:
        return {"status": "missing", "reason": f"variant {name!r} is not registered in this checkout"}
    hints = host_hints(variant, batch.spec)
    chosen: list = []
    # what the runner plans (the Gluon kernel is sm_90's), as the change plan does, on any host
    previous = change_side.as_if_on(kernels.platform, target, num_sms)
    try:
        out = torch.empty_like(batch.q)
        with recording_choices(chosen):
            launches = plan.plan_as_if_on(target, variant, batch, num_sms=num_sms, out=out, **hints)
        roles = launch_keys.Roles(launch_keys.call_tensors(batch, out))
        keys, jobs = [], []
        for launch in launches:
            keys.append(launch_keys.launch_key(launch, target, roles))
            jobs.append(plan.job_of(launch, target))
    except NotImplementedError as e:
        return {"status": "skip", "reason": str(e)}
    except Exception as e:  # a planner that breaks: said, not a crash of the explanation
        return {"status": "error", "reason": f"plan failed: {type(e).__name__}: {e}".splitlines()[0][:300]}
    finally:
        kernels.platform.current = previous
    results, _ = build.compile_all(jobs, cache, 1, quiet=True)  # in this process: the active side's kernels
    for key, job in zip(keys, jobs):
        r = results[job.key]
        key.update(compile_status=r["status"], error=r.get("error", ""), metrics=r.get("metrics") or {})
    config = None
    if chosen:
        c = chosen[-1]
        config = dataclasses.asdict(c) if dataclasses.is_dataclass(c) else dict(vars(c))
    return {"status": "ok", "launches": keys, "config": config}


def kernel_times(calls: dict[str, Callable[[], object]], rounds: int = DEVICE_ROUNDS) -> dict:
    """Device time per kernel of each side's call, in this process on this GPU: `rounds` calls
    per side, the sides alternated call by call (base, head, head, base, ...: `alternate`). Proton
    where the installed Triton has it, else torch's profiler. Returns {"tool", "note", "rounds",
    "times": {side: {kernel: mean microseconds per call}}}, or {"skipped": reason} without a GPU
    or under Triton's interpreter. The calls must already be warm (compiled): the gate's cases are."""
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return {"skipped": "Triton's interpreter runs no kernel on a device: no device time per kernel"}
    if not torch.cuda.is_available():
        return {"skipped": "no GPU in this process: no device time per kernel"}
    for fn in calls.values():  # warm: nothing compiles inside the profile
        fn()
    torch.cuda.synchronize()
    note = ""
    try:
        times = _proton_times(calls, rounds)
        if times and all(times.get(s) for s in calls):
            return {"tool": "proton", "note": "Triton's Proton profiler", "rounds": rounds, "times": times}
        note = "Proton recorded no kernels; "
    except Exception as e:  # not in this Triton, or its profiler cannot start here
        note = f"Proton unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); "
    return {"tool": "torch.profiler", "note": note + "torch's profiler (kineto)", "rounds": rounds,
            "times": _torch_times(calls, rounds)}


def side_field(result: dict, side: str) -> dict:
    """One side's share of a `kernel_times` result, as the gate's re-measure workers record it on
    that side's results record (field `kernel_times`): {"tool", "note", "rounds", "us": {kernel:
    us}}, or {"skipped": reason}."""
    if "skipped" in result:
        return {"skipped": result["skipped"]}
    return {"tool": result["tool"], "note": result["note"], "rounds": result["rounds"],
            "us": result["times"].get(side, {})}


def recorded_kernel_times(out_dir: str, cases: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Device time per kernel of `cases` as the gate's re-measure processes recorded it (the
    `kernel_times` field of their records in `out_dir`'s base.jsonl and head.jsonl): per case,
    the mean over every (process, metric) whose both sides carry times, in `kernel_times`' form
    plus "source", "processes" and "profiles". A case no record carries times for is absent."""
    from perf import results

    sides = {}
    for s in ("base", "head"):
        try:
            sides[s] = results.load(os.path.join(out_dir, f"{s}.jsonl"), warn=False)
        except (ConfigError, OSError):  # no gate's files here: the caller profiles instead
            return {}
    fields = {s: {(r["variant"], r["scenario"], r.get("process"), r["metric"]): r["kernel_times"]
                  for r in res.measurements() if "us" in (r.get("kernel_times") or {})}
              for s, res in sides.items()}
    out = {}
    for case in cases:
        keys = sorted(k for k in fields["base"] if k[:2] == case and k in fields["head"])
        if not keys:
            continue
        times = {}
        for s in ("base", "head"):
            total: dict[str, float] = {}
            for k in keys:
                for kernel, us in fields[s][k]["us"].items():
                    total[kernel] = total.get(kernel, 0.0) + float(us)
            times[s] = {kernel: round(us / len(keys), 3) for kernel, us in total.items()}
        said = [fields[s][k] for s in ("base", "head") for k in keys]
        out[case] = {"tool": ", ".join(sorted({f.get("tool", "?") for f in said})),
                     "note": "; ".join(sorted({f.get("note", "") for f in said} - {""})),
                     "rounds": fields["head"][keys[0]].get("rounds"),
                     "times": times, "source": IN_GATE, "processes": len({k[2] for k in keys}),
                     "profiles": len(keys), "metrics": sorted({k[3] for k in keys})}
    return out


def alternate(sides: list[str], rounds: int, each: Callable[[str], None]) -> None:
    """`each(side)` `rounds` times per side, the sides rotated round by round (base, head, head,
    base, ...), in the one measuring loop (perf.measure.rounds.interleave) with a single item."""
    from perf.measure.rounds import interleave

    interleave(["calls"], rounds, lambda item, side, position, i: each(side), order=lambda i, items: items,
               sides=lambda i: sides[i % len(sides):] + sides[:i % len(sides)])


def _proton_times(calls: dict, rounds: int) -> dict:
    """Per side and kernel, mean ns -> us per call, from a Proton session scoped by side."""
    import tempfile

    import torch
    import triton.profiler as proton

    def each(side: str) -> None:
        with proton.scope(side):
            calls[side]()

    with tempfile.TemporaryDirectory(prefix="perf-why-proton-") as tmp:
        path = os.path.join(tmp, "why")
        proton.start(path, context="shadow")
        try:
            alternate(list(calls), rounds, each)
            torch.cuda.synchronize()
        finally:
            proton.finalize()
        tree = files.load_json(path + ".hatchet", "Proton's profile", "Proton wrote no readable tree; "
                               "torch's profiler is the fallback", expect=(dict, list))
    return proton_kernel_times(tree, dict.fromkeys(calls, rounds))


def proton_kernel_times(tree, rounds: dict[str, int]) -> dict[str, dict[str, float]]:
    """Mean microseconds per call of each kernel under each side's scope of a Proton tree
    (`.hatchet` JSON: nodes {"frame": {"name"}, "metrics": {"time (ns)"}, "children"}); a side's
    kernels are the leaves under the node named after it, `rounds[side]` calls each."""
    out: dict[str, dict[str, float]] = {}

    def leaves(node: dict, into: dict) -> None:
        children = node.get("children") or []
        if not children:
            ns = (node.get("metrics") or {}).get("time (ns)")
            if ns:
                name = (node.get("frame") or {}).get("name", "?")
                into[name] = into.get(name, 0.0) + float(ns)
        for child in children:
            leaves(child, into)

    def find(node: dict) -> None:
        name = (node.get("frame") or {}).get("name")
        if name in rounds:
            into: dict[str, float] = {}
            leaves(node, into)
            out[name] = {k: round(v / 1e3 / rounds[name], 3) for k, v in into.items()}
            return
        for child in node.get("children") or []:
            find(child)

    for root in tree if isinstance(tree, list) else [tree]:
        find(root)
    return out


def _torch_times(calls: dict, rounds: int) -> dict:
    """Per side and kernel, mean device microseconds per call, from torch's profiler: one short
    profile per call, so each kernel is its side's."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    totals: dict[str, dict[str, float]] = {s: {} for s in calls}

    def each(side: str) -> None:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            calls[side]()
            torch.cuda.synchronize()
        for e in prof.events():
            if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            us = e.time_range.elapsed_us()
            totals[side][e.name] = totals[side].get(e.name, 0.0) + us

    alternate(list(calls), rounds, each)
    return {s: {k: round(v / rounds, 3) for k, v in t.items()} for s, t in totals.items()}


def collect(base_root: str, head_root: str, cases: list[tuple[str, str]], target, num_sms: int,
            cache_dir: str | None, device_time: set, source: str = "") -> list[dict]:
    """Every case explained (module docstring); run without the interpreter. The cases in
    `device_time` are also profiled per kernel here (`source` says where that was, in words)."""
    from perf import checkout, scenarios
    from perf.static import build, plan

    cache = build.DiskCache(cache_dir)
    sides = {s: checkout.load_side(root, f"kernels_why_{s}") for s, root in (("base", base_root),
                                                                            ("head", head_root))}
    out = []
    for variant, scenario_name in cases:
        scenario = scenarios.Scenario.parse(scenario_name)
        row = {"variant": variant, "scenario": scenario.name, "target": target.name, "num_sms": num_sms}
        with sides["head"].active():
            from kernels.batch import build_batch

            batch = build_batch(scenario.spec(), "cpu", fill=False, **plan.fp8_format(target))
        for s, side in sides.items():
            with side.active() as kernels:
                row[s] = explain_side(kernels, variant, batch, target, num_sms, cache)
        row["device_time"] = ({**_device_times(sides, variant, scenario), "source": source}
                              if (variant, scenario_name) in device_time else
                              {"skipped": "no GPU ran the two sides here: static explanation only"})
        out.append(row)
    return out


def _device_times(sides: dict, variant: str, scenario) -> dict:
    """Both sides' calls on the same GPU tensors (the head's batch), profiled per kernel."""
    from perf.measure.cases import make_case

    with sides["head"].active():
        from kernels.batch import build_batch

        batch = build_batch(scenario.spec(), "cuda")
    calls = {}
    for s, side in sides.items():
        with side.active() as kernels:
            case = make_case(kernels, variant, scenario, "cuda", batch)
        if case.fn is None:
            return {"skipped": f"the {s} side cannot run it: {case.skip}"}

        def call(side=side, fn=case.fn):
            with side.active():
                fn()

        calls[s] = call
    return kernel_times(calls)


def side_main(argv: list[str] | None = None) -> int:
    """`python -m perf.why`: the explaining process (internal; its parent is `collect_cases`)."""
    p = side_process.parser("python -m perf.why", "internal: explain cases", sides_required=True)
    p.add_argument("--cases", required=True, help="JSON list of [variant, scenario]")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--device-time", default="[]", help="JSON list of [variant, scenario] to profile")
    p.add_argument("--device-source", default="", help="where the profile ran, in words")
    args = p.parse_args(argv)
    side_process.refuse_interpreter("explaining binds and compiles real kernels")
    target = side_process.target_of(args)
    cases = [tuple(c) for c in json.loads(args.cases)]
    profiled = {tuple(c) for c in json.loads(args.device_time)}
    doc = {"schema": SCHEMA, "base": args.base, "head": args.head,
           "cases": collect(args.base, args.head, cases, target, args.num_sms, args.cache_dir,
                            profiled, args.device_source)}
    files.write_json(args.out, doc)
    return 0


def collect_cases(base_root: str, head_root: str, cases: list[tuple[str, str]], target, num_sms: int,
                  thresholds_path: str, out: str, *, device_time=False, cache_dir: str | None = None,
                  source: str = ONE_PROCESS) -> dict:
    """Explain `cases` (variant, scenario) in a process of its own; returns why.json's document
    (also written to `out`). `device_time`: profile both sides per kernel on this GPU, every case
    (True) or those listed; `source`: where that is, in words (the section says it)."""
    profiled = cases if device_time is True else list(device_time or [])
    cmd = side_process.argv("perf.why", base=base_root, head=head_root, target=target.name,
                            num_sms=num_sms, thresholds=os.path.abspath(thresholds_path),
                            cases=json.dumps([list(c) for c in cases]), out=out,
                            cache_dir=os.path.abspath(cache_dir) if cache_dir else None,
                            device_time=json.dumps([list(c) for c in profiled]) if profiled else None,
                            device_source=source if profiled else None)
    side_process.run(cmd, out, "why", process="explaining")
    return read(out)


def read(path: str) -> dict:
    doc = files.load_json(path, "a why file", "explain again with `python -m perf why`", expect=dict)
    if doc.get("schema") != SCHEMA or not isinstance(doc.get("cases"), list):
        raise ConfigError(f"{path}: not a {SCHEMA} document; explain again with `python -m perf why`")
    return doc


# --------------------------------------------------------------------------- what moved


def _ratio(b, h) -> float | None:
    if isinstance(b, (int, float)) and isinstance(h, (int, float)) and not isinstance(b, bool):
        return (h + 1e-9) / (b + 1e-9) if b or h else 1.0
    return None


def _static_row(m: dict) -> dict:
    from perf.static.metrics import INSTRUCTION_COUNTS

    row = {k: m.get(k) for k in ("registers", "shared_memory", "occupancy")}
    row["spills"] = _spills(m) if m else None
    row.update({k: m.get(k) for k in INSTRUCTION_COUNTS})
    return row


def changes_of(case: dict) -> list[dict]:
    """Everything that differs between the sides of a case, each {"what", "kernel", "base",
    "head", "size"} where size is |log(head / base)| (a change of branch or binary: a fixed size
    below any doubling, so that a measured doubling outranks it)."""
    base, head = case.get("base", {}), case.get("head", {})
    out: list[dict] = []
    if base.get("status") != "ok" or head.get("status") != "ok":
        return out
    bc, hc = base.get("config") or {}, head.get("config") or {}
    if bc.get("source") != hc.get("source") and (bc or hc):
        out.append({"what": "heuristic branch", "kernel": None, "base": bc.get("source"),
                    "head": hc.get("source"), "size": 0.5})
    for k in sorted(set(bc) | set(hc)):
        if k != "source" and bc.get(k) != hc.get(k):
            r = _ratio(bc.get(k), hc.get(k))
            out.append({"what": f"configuration {k}", "kernel": None, "base": bc.get(k), "head": hc.get(k),
                        "size": abs(math.log(r)) if r and r > 0 else 0.5})
    bl, hl = base.get("launches", []), head.get("launches", [])
    for i in range(max(len(bl), len(hl))):
        b = bl[i] if i < len(bl) else None
        h = hl[i] if i < len(hl) else None
        if b is None or h is None or b["kernel"] != h["kernel"]:
            out.append({"what": f"launch {i}", "kernel": (h or b)["kernel"], "base": b and b["kernel"],
                        "head": h and h["kernel"], "size": 1.0})
            continue
        kernel = h["kernel"]
        if b.get("binary") != h.get("binary"):
            out.append({"what": "compiled code", "kernel": kernel, "base": "base", "head": "changed",
                        "size": 0.3})
        if b.get("grid") != h.get("grid"):
            both = b.get("grid") and h.get("grid")
            r = _ratio(math.prod(b["grid"]), math.prod(h["grid"])) if both else None
            out.append({"what": "grid", "kernel": kernel, "base": b.get("grid"), "head": h.get("grid"),
                        "size": abs(math.log(r)) if r else 0.5})
        bs, hs = _static_row(b.get("metrics") or {}), _static_row(h.get("metrics") or {})
        for k in bs:
            if bs[k] is not None and hs[k] is not None and bs[k] != hs[k]:
                r = _ratio(bs[k] + 1, hs[k] + 1) if k in ("spills",) else _ratio(bs[k], hs[k])
                out.append({"what": k.replace("_", " "), "kernel": kernel, "base": bs[k], "head": hs[k],
                            "size": abs(math.log(r)) if r else 0.0})
    times = (case.get("device_time") or {}).get("times") or {}
    bt, ht = times.get("base", {}), times.get("head", {})
    for k in sorted(set(bt) | set(ht)):
        r = _ratio(bt.get(k), ht.get(k))
        if r is not None and r != 1.0:
            out.append({"what": "device time (us)", "kernel": k, "base": bt.get(k), "head": ht.get(k),
                        "size": abs(math.log(r)) * 2})  # measured time: what the gate judged
    return out


def _value(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def moved_most(case: dict) -> str:
    """One line, in words: which change between the sides is the largest."""
    found = sorted(changes_of(case), key=lambda c: -c["size"])
    if not found:
        base, head = case.get("base", {}), case.get("head", {})
        if base.get("status") != "ok" or head.get("status") != "ok":
            return (f"Moved most: nothing to compare: the base {base.get('status')} "
                    f"({base.get('reason', '')}), the head {head.get('status')} ({head.get('reason', '')}).")
        return ("Moved most: nothing: identical launches, binaries and static metrics on both sides "
                "(a difference would be outside the kernels: the machine, or noise).")
    causes = ("heuristic branch", "configuration", "compiled code")
    top = next((c for c in found if not c["what"].startswith(causes)), None)
    code = [c for c in found if c["what"] == "compiled code"]
    if top is None:
        line = "Moved most: " + (f"{code[0]['kernel']}'s compiled code (its static metrics did not move)"
                                 if code else "the configuration the heuristics chose")
    else:
        where = f"{top['kernel']}'s " if top["kernel"] else ""
        r = _ratio(top["base"], top["head"])
        size = f" ({r:.2f}x)" if r is not None and not isinstance(top["base"], bool) else ""
        line = f"Moved most: {where}{top['what']}, {_value(top['base'])} -> {_value(top['head'])}{size}"
        if any(c["kernel"] == top["kernel"] for c in code):
            line += ", its compiled code changed (its source, a function it calls or its constants)"
    branch = next((c for c in found if c["what"] == "heuristic branch"), None)
    config = [c for c in found if c["what"].startswith("configuration ")]
    if branch is not None:
        change = branch_change(branch["base"], branch["head"])
        line += f", after the heuristics took another branch ({change})"
    if config:
        line += (": " if branch is not None else ", after the configuration changed: ") + ", ".join(
            f"{c['what'].split(' ', 1)[1]} {_value(c['base'])} -> {_value(c['head'])}" for c in config[:4])
    return line + "."


def _rules(source) -> tuple[str, list[str]]:
    """A Config.source as (branch, its rules): "nvidia/decode: sweep ...; short context, tile
    16: H100 ..." -> ("nvidia/decode", ["sweep ...", "short context, tile 16: H100 ..."])."""
    if not source:
        return "none", []
    branch, _, rest = str(source).partition(": ")
    return branch, [r.strip() for r in rest.split("; ") if r.strip()]


def _rule_name(rule: str) -> str:
    return rule.split(":", 1)[0]


def _branch(source) -> str:
    """A Config.source's branch and rule names, without their numbers (the plan table's row)."""
    branch, rules = _rules(source)
    return branch + "".join(f" + {_rule_name(r)}" for r in rules[1:])


def branch_change(base_source, head_source) -> str:
    """Two sides' heuristic provenance in words: the branch, the rules dropped and added."""
    (bb, br), (hb, hr) = _rules(base_source), _rules(head_source)
    parts = [f"{bb} -> {hb}"] if bb != hb else [bb]
    dropped = [_rule_name(r) for r in br if r not in hr]
    added = [_rule_name(r) for r in hr if r not in br]
    if dropped:
        parts.append("no longer " + "; ".join(f"'{r}'" for r in dropped))
    if added:
        parts.append("now " + "; ".join(f"'{r}'" for r in added))
    return ": ".join(parts[:1]) + (", " + ", ".join(parts[1:]) if parts[1:] else "")


# --------------------------------------------------------------------------- rendering


def _cell(b, h) -> tuple[str, str]:
    """The base and head cells; the head marked when it differs."""
    return _value(b), _value(h) + (f" {MARK}" if b != h else "")


def render(case: dict, heading: str = "####") -> str:
    """One case's why section in Markdown (report.md, PR comment, issue body, bisect's answer)."""
    base, head = case.get("base", {}), case.get("head", {})
    lines = [f"{heading} Why: {case['variant']} on {case['scenario']} ({case['target']})", "",
             moved_most(case), ""]
    if base.get("status") != "ok" or head.get("status") != "ok":
        for s, side in (("base", base), ("head", head)):
            if side.get("status") != "ok":
                lines.append(f"- {s}: {side.get('status')}: {side.get('reason', '')}")
        return "\n".join(lines) + "\n"
    pairs = list(_launch_pairs(base, head))
    lines += _plan_table(case, base, head, pairs) + [""] + _static_table(case, pairs) + [""]
    lines += _device_time_lines(case.get("device_time") or {})
    return "\n".join(lines) + "\n"


def _launch_pairs(base: dict, head: dict):
    """(index, base launch, head launch) of every launch position ({} where a side has none)."""
    bl, hl = base.get("launches", []), head.get("launches", [])
    for i in range(max(len(bl), len(hl))):
        yield i, (bl[i] if i < len(bl) else {}), (hl[i] if i < len(hl) else {})


def _plan_table(case: dict, base: dict, head: dict, pairs: list) -> list[str]:
    """The launch plans side by side: the heuristics' configuration, then each launch."""
    lines = [f"Launch plan as on {case['target']} ({case['num_sms']} SMs/CUs); {MARK} marks what the head "
             f"changed:", "", "| | base | head |", "|---|---|---|"]
    bc, hc = base.get("config") or {}, head.get("config") or {}
    if bc or hc:
        b, h = _cell(_branch(bc.get("source")), _branch(hc.get("source")))
        lines.append(f"| heuristic branch | {b} | {h} |")
        b, h = _cell(bc.get("source"), hc.get("source"))
        lines.append(f"| its provenance (heuristics.py) | {b} | {h} |")
        keys = [k for k in CONFIG_FIRST if k in bc or k in hc]
        keys += [k for k in sorted(set(bc) | set(hc))
                 if k not in keys and k != "source" and bc.get(k) != hc.get(k)]
        for k in keys:
            b, h = _cell(bc.get(k), hc.get(k))
            lines.append(f"| {k} | {b} | {h} |")
    for i, lb, lh in pairs:
        b, h = _cell(lb.get("kernel"), lh.get("kernel"))
        lines.append(f"| launch {i}: kernel | {b} | {h} |")
        b, h = _cell(lb.get("grid"), lh.get("grid"))
        lines.append(f"| launch {i}: grid | {b} | {h} |")
        cb, ch = lb.get("config") or {}, lh.get("config") or {}
        for k in ("num_warps", "num_stages"):
            b, h = _cell(cb.get(k), ch.get(k))
            lines.append(f"| launch {i}: {k} | {b} | {h} |")
        kb, kh = cb.get("constexprs") or {}, ch.get("constexprs") or {}
        differ = [k for k in sorted(set(kb) | set(kh)) if kb.get(k) != kh.get(k)]
        if differ:
            lines.append(f"| launch {i}: constants that differ | "
                         + ", ".join(f"{k}={_value(kb.get(k))}" for k in differ) + " | "
                         + ", ".join(f"{k}={_value(kh.get(k))}" for k in differ) + f" {MARK} |")
        if lb and lh and lb.get("kernel") == lh.get("kernel"):
            same = lb.get("binary") == lh.get("binary")
            lines.append(f"| launch {i}: compiled code | – | "
                         + ("the same (Triton compile key)" if same else
                            f"differs: its source, a function it calls or its constants {MARK}") + " |")
    return lines


def _static_table(case: dict, pairs: list) -> list[str]:
    """Each launched kernel's static metrics and instruction counts, base -> head."""
    from perf.static.metrics import INSTRUCTION_COUNTS, occupancy_unit

    lines = [f"Static metrics of each launched kernel on {case['target']} (base -> head; instruction "
             f"counts from the {'PTX' if case['target'].startswith('sm_') else 'AMDGCN'}):", ""]
    cols = ("registers", "spills", "shared_memory", "occupancy", *INSTRUCTION_COUNTS)
    lines += ["| kernel | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
              "|---" * (len(cols) + 1) + "|"]
    for _, lb, lh in pairs:
        bs, hs = _static_row(lb.get("metrics") or {}), _static_row(lh.get("metrics") or {})
        cells = []
        for c in cols:
            b, h = bs.get(c), hs.get(c)
            cells.append(_value(h) if b == h else f"{_value(b)} -> {_value(h)} {MARK}")
        name = lh.get("kernel") or lb.get("kernel")
        bad = [f"{s}: {x.get('compile_status')}: {x.get('error', '')[:80]}"
               for s, x in (("base", lb), ("head", lh)) if x and x.get("compile_status") not in (None, "ok")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |" + (f" {'; '.join(bad)}" if bad else ""))
    vendor = "nvidia" if case["target"].startswith("sm_") else "amd"
    lines.append(f"\nspills: bytes (NVIDIA) or registers (AMD) spilled; shared memory in bytes; occupancy in "
                 f"{occupancy_unit(vendor)}.")
    return lines


def _device_time_lines(dt: dict) -> list[str]:
    """Device time per kernel, base against head, and where it was measured."""
    if dt.get("skipped"):
        return [f"Device time per kernel: skipped: {dt['skipped']}."]
    times = dt.get("times") or {}
    bt, ht = times.get("base", {}), times.get("head", {})
    how = dt.get("note") or dt.get("tool")
    if dt.get("processes"):
        n = dt["processes"]
        lines = [f"Device time per kernel, {IN_GATE}: mean us per call over {n} process"
                 f"{'es' if n != 1 else ''} ({dt.get('profiles')} profiles, metrics "
                 f"{', '.join(dt.get('metrics') or [])}), each {dt.get('rounds')} calls per side "
                 f"alternated on the tensors it timed, after its timed rounds ({how}):"]
    else:
        lines = [f"Device time per kernel, {dt.get('source') or ONE_PROCESS}: mean us per call over "
                 f"{dt.get('rounds')} calls per side alternated on the same tensors ({how}):"]
    lines += ["", "| kernel | base us | head us | head / base |", "|---|---|---|---|"]
    for k in sorted(set(bt) | set(ht), key=lambda k: -max(bt.get(k, 0), ht.get(k, 0))):
        r = _ratio(bt.get(k), ht.get(k))
        lines.append(f"| {k} | {_value(bt.get(k))} | {_value(ht.get(k))} | "
                     f"{'–' if r is None or k not in bt or k not in ht else f'{r:.3f}'} |")
    return lines


def section(doc: dict, title: str = "Why slower") -> str:
    """Every case of a why.json document, under one heading."""
    parts = [f"### {title}", ""]
    parts += [render(case) for case in doc.get("cases", [])]
    return "\n".join(parts)


# --------------------------------------------------------------------------- the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-ref", default=None,
                   help="base commit (default: merge base of HEAD with origin/main, else main)")
    p.add_argument("--head-ref", default=None, help="head commit (default: this checkout's working tree)")
    p.add_argument("--suite", default="pr", help="suite of perf/suites.yaml the scenarios come from")
    p.add_argument("--variants", default="static_grid",
                   help="comma-separated variants (default: static_grid)")
    p.add_argument("--scenarios", required=True, help="comma-separated fnmatch globs over scenario names")
    p.add_argument("--vendor", default=None, help="nvidia | amd (default: this GPU's; nvidia without one)")
    p.add_argument("--target", default=None,
                   help="compile target of thresholds.yaml to explain on (default: this GPU's, else the "
                        "vendor's first)")
    p.add_argument("--no-device-time", action="store_true", help="on a GPU too, skip the per-kernel profile")
    p.add_argument("--cache-dir", default=".perf-cache/compile", help="the static gate's metrics cache")
    p.add_argument("--out", default="results/why", help="directory for why.json and why.md")


def main(args: argparse.Namespace) -> int:
    from perf import git, validate
    from perf import vendor as vendor_mod
    from perf.static import plan
    from perf.thresholds import load_thresholds

    th = load_thresholds(args.thresholds)
    root = git.repo_root(os.getcwd())
    scenarios = validate.scenarios(args.suite, args.scenarios)
    from perf import checkout

    variants = validate.variants(args.variants, checkout.variant_names(root))
    on_gpu = vendor_mod.on_gpu()
    vendor = vendor_mod.resolve(args.vendor, cpu_default="nvidia")
    runner = side_process.runner_target(th, vendor, on_gpu)
    target, num_sms = runner.target, runner.num_sms
    if args.target:
        (target,) = plan.load_targets(th, args.target)
        here = on_gpu and runner.target is not None and runner.target.name == target.name
        num_sms = num_sms if here else target.facts.num_sms
    if target is None:
        raise ConfigError(f"{runner.note}; pass --target NAME of {th.path} to explain on")
    base, base_desc = git.resolve_base(root, args.base_ref)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    cases = [(v, s.name) for v in variants for s in scenarios]
    with contextlib.ExitStack() as stack:
        base_tree = stack.enter_context(git.worktree(root, base))
        head_tree = root
        if args.head_ref:
            head_sha = git.resolve_commit(root, args.head_ref)
            head_tree = stack.enter_context(git.worktree(root, head_sha, "head"))
        doc = collect_cases(base_tree, head_tree, cases, target, num_sms, args.thresholds,
                            os.path.join(out_dir, WHY_FILE), device_time=on_gpu and not args.no_device_time,
                            cache_dir=args.cache_dir)
    doc.update(base_commit=base, base_ref=base_desc, head_ref=args.head_ref or "working tree")
    files.write_json(os.path.join(out_dir, WHY_FILE), doc)
    md = section(doc, f"Why: {base_desc} ({base[:10]}) -> {args.head_ref or 'working tree'}")
    files.write_text(os.path.join(out_dir, "why.md"), md)
    print(md)
    return 0


if __name__ == "__main__":  # the explaining process (`collect_cases`): its parent reports an interrupt
    from perf.process import entry

    entry(side_main, internal=True)


# --------------------------------------------------------------------------- the consumers

MAX_CASES = 8  # red cases explained per gate run, worst first (unmeasured default: about a minute on a CPU)


def red_cases(findings: list) -> list[tuple[str, str]]:
    """The (variant, scenario) of every failing or warning latency finding, worst first, once each."""
    from perf.verdicts import Verdict, worst_first

    out: list[tuple[str, str]] = []
    for f in worst_first(findings):
        red = f.gate == "latency" and f.verdict in (Verdict.FAIL, Verdict.WARN)
        if red and (f.variant, f.scenario) not in out:
            out.append((f.variant, f.scenario))
    return out


def explain_red(findings: list, roots: dict[str, str], thresholds, vendor: str, out_dir: str,
                limit: int = MAX_CASES) -> str:
    """The latency gate's why section (report.md, the PR comment, the nightly's issue, bisect's
    step): its failing and warning cases explained (`collect_cases`) into `out_dir`/why.json and
    why.md. Device time per kernel comes from the gate's re-measure records
    (`recorded_kernel_times`); a case without them (a warning is not re-measured) is profiled
    after the gate on this GPU. "" when no case is red. An explanation that cannot be made is a
    line in the section, never a failure of the gate."""
    from perf import vendor as vendor_mod

    red = red_cases(findings)
    if not red:
        return ""
    title = "Why slower"
    try:
        on_gpu = vendor_mod.on_gpu()
        runner = side_process.runner_target(thresholds, vendor, on_gpu)
        if runner.target is None:
            return f"### {title}\n\nnot explained: {runner.note}\n"
        recorded = recorded_kernel_times(out_dir, red[:limit])
        profile = [c for c in red[:limit] if c not in recorded] if on_gpu else []
        doc = collect_cases(roots["base"], roots["head"], red[:limit], runner.target, runner.num_sms,
                            thresholds.path, os.path.join(out_dir, WHY_FILE), device_time=profile,
                            source=AFTER_GATE)
        for case in doc.get("cases", []):
            found = recorded.get((case.get("variant"), case.get("scenario")))
            if found is not None:
                case["device_time"] = found
        if recorded:
            files.write_json(os.path.join(out_dir, WHY_FILE), doc)
    except (ConfigError, RuntimeError, OSError) as e:
        return f"### {title}\n\nnot explained: {str(e).splitlines()[0] if str(e) else type(e).__name__}\n"
    md = section(doc, title)
    if len(red) > limit:
        md += f"\n{len(red) - limit} more red cases not explained here: `python -m perf why` explains any.\n"
    files.write_text(os.path.join(out_dir, "why.md"), md)
    return md


def case_section(out_dir: str, variant: str, scenario: str) -> str | None:
    """The rendered why of one case from a gate's `out_dir` (its why.json), None without one."""
    path = os.path.join(out_dir, WHY_FILE)
    if not os.path.exists(path):
        return None
    for case in read(path).get("cases", []):
        if case.get("variant") == variant and case.get("scenario") == scenario:
            return render(case)
    return None
