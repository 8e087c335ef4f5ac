"""Lab: a kernel's source edited, against the tree's, in one process on one GPU.

    python -m perf.lab.source_ab CANDIDATE.py SCENARIO[,SCENARIO...] [--twin] [--rounds 11] [--out DIR]

CANDIDATE.py is a copy of a module of kernels/ with an edit, kept outside the tree. For each
scenario (perf/scenarios.py) the production entry plans its launches as a call would run them
(static_grid, the heuristics' configuration, the harness's host hints); the candidate's call runs
the same launches, but each one whose kernel the candidate defines under the same name runs the
candidate's kernel. So only the edited kernel differs, on the arguments and constants the tree
gives it. `--twin`: over an e4m3 cache, also the tree's call and the candidate's on the same lengths
over the 16-bit cache of q's dtype (a scenario's lengths are drawn from its name, so the 16-bit
scenario of the same name is another batch and no twin): an edit that touches both paths is judged
by its own e4m3 / 16-bit ratio, not by the tree's.

Each call is checked on a poisoned output against the fp32 reference (twice: a kernel's counters
must come back to zero), and the candidate's output is compared bit for bit with the tree's;
then `--rounds` rounds, the calls in alternating order, each a CUDA-graph replay with L2 flushed
before every sample (perf/measure/timing.py), and the outputs of the timed graphs checked again.
A cell is the median of the rounds' medians; a ratio the median of the rounds' ratios, with
their range. A wrong call is reported, never timed. Writes DIR/source_ab.json after each
scenario, so a run stopped by a time limit keeps what it measured, and DIR/source_ab.md at the
end. A lab tool, not a gate: `perf gate` decides between commits, over processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import os
import statistics

from perf.errors import ConfigError

ROUNDS = 11  # unmeasured default: what the lab's one-process A/Bs of 2026-11-30 ran
SAMPLES = 25  # per round and call; unmeasured default, as perf run's
TREE, CANDIDATE, TWIN, CANDIDATE_TWIN = "tree", "candidate", "twin", "candidate twin"


def load_candidate(path: str):
    """The candidate module at `path`, imported under a name of its own; refused in one line."""
    if not path.endswith(".py") or not os.path.isfile(path):
        raise ConfigError(f"{path}: no such Python file (a copy of a module of kernels/ with an edit)")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(f"source_ab_candidate_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"{path}: does not import: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    module.source_ab_digest = digest
    return module


def swapped(launches: list, candidate) -> tuple[list, list[str]]:
    """Copies of the planned `launches`, each whose kernel the candidate defines (a kernel of the same
    kind: Triton's, Gluon's, or the interpreter's stand-in) running the candidate's, and those kernels'
    names; refused in one line when it defines none of them."""
    out, names = [], []
    for launch in launches:
        kernel = getattr(candidate, launch.name, None)
        if isinstance(kernel, type(launch.kernel)):
            out.append(_copy(launch, kernel=kernel))
            names.append(launch.name)
        else:
            out.append(_copy(launch))
    if not names:
        raise ConfigError(f"{candidate.__file__}: defines none of the planned kernels "
                          f"({', '.join(sorted({x.name for x in launches}))})")
    return out, sorted(set(names))


def _copy(launch, **changes):
    """A copy of a planned launch that nothing else edits, run through Triton's JIT dispatch (as the
    candidate's are: a candidate kernel has no compiled launches of the plan)."""
    return dataclasses.replace(launch, args=dict(launch.args), constexprs=dict(launch.constexprs),
                               compiled=None, **changes)


def twin_spec(spec):
    """The same lengths over the 16-bit cache of q's dtype, for a spec over an e4m3 cache."""
    if not spec.fp8_kv:
        raise ConfigError("--twin: the scenario's cache is not e4m3 (its twin is itself)")
    return dataclasses.replace(spec, fp8_kv=False)


def ratio_summary(num: list[float], den: list[float]) -> dict:
    """The rounds' ratios num / den, round for round: their median and range."""
    ratios = sorted(a / b for a, b in zip(num, den))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}


class _Planned:
    """One batch (poisoned), the launches the production entry plans for it, its output and the fp32
    reference with the tolerance the plan calls for (`check.tolerance`)."""

    def __init__(self, spec, device: str):
        from kernels import VARIANTS
        from kernels.batch import build_batch
        from perf.measure import check
        from perf.measure.cases import host_hints, reference_for

        # poisoned: the cache slots no sequence owns hold NaN, so a kernel reading one shows
        self.batch = build_batch(spec, device, poison=True)
        self.out = self.batch.new_output()
        variant = VARIANTS["static_grid"]
        hints = host_hints(variant, spec)
        planned = variant.plan(*self.batch.args(), out=self.out, **self.batch.options, **hints)[1]
        self.launches = [_copy(x) for x in planned]
        configs = [x.config() for x in self.launches]
        self.expected = reference_for(self.batch).of(configs)  # the reference output it is held to
        self.tolerance = check.tolerance(spec.dtype, configs)


@dataclasses.dataclass
class _Call:
    """A labelled sequence of launches writing `planned.out`."""

    label: str
    planned: _Planned
    launches: list

    def __call__(self) -> None:
        for launch in self.launches:
            launch()

    def check(self, sync, fn=None):
        """A poisoned output of the call (or of `fn`, its graph) against the reference."""
        from perf.measure import check

        p = self.planned
        return check.check_call(fn or self, p.out, p.expected, sync, p.tolerance)


def measure_scenario(name: str, candidate, twin: bool, rounds: int, samples: int, device: str = "cuda",
                     timer=None) -> dict:
    """One scenario's row (module docstring). `timer(call, samples)`: a call's time in ms (default: a
    CUDA-graph replay, L2 flushed, its output checked again after timing); the tests give another where
    there is no GPU."""
    import torch

    from kernels.paged_attention import planning
    from perf.measure import check, timing
    from perf.scenarios import Scenario

    spec = Scenario.parse(name).spec()
    sync = torch.cuda.synchronize if device == "cuda" else None
    planning.release_buffers()  # the last scenario's persistent buffers
    planned = _Planned(spec, device)
    row = {"kernels": [], "refused": {}, "max_error": {}}
    calls = [_Call(TREE, planned, planned.launches)]
    try:
        swapped_launches, row["kernels"] = swapped(planned.launches, candidate)
        calls.append(_Call(CANDIDATE, planned, swapped_launches))
    except ConfigError as exc:  # this scenario's plan runs none of its kernels: the others still run
        row["refused"][CANDIDATE] = str(exc)
    if twin:
        other = _Planned(twin_spec(spec), device)
        calls.append(_Call(TWIN, other, other.launches))
        try:
            calls.append(_Call(CANDIDATE_TWIN, other, swapped(other.launches, candidate)[0]))
        except ConfigError:  # the 16-bit plan runs none of the candidate's kernels: no twin of its own
            pass
    outputs = {}
    for call in calls:
        found = call.check(sync)
        if found.ok:  # twice: a kernel's counters must come back to zero
            found = call.check(sync)
        if not found.ok:
            row["refused"][call.label] = check.wrong_reason(found, "before timing")
            continue
        row["max_error"][call.label] = found.max_error
        outputs[call.label] = call.planned.out.clone()
    for key, (a, b) in {"same_bits": (TREE, CANDIDATE), "twin_same_bits": (TWIN, CANDIDATE_TWIN)}.items():
        if a in outputs and b in outputs:
            row[key] = bool(torch.equal(outputs[a], outputs[b]))
    ready = [call for call in calls if call.label not in row["refused"]]
    graphs = {}
    if timer is None:
        graphs = {call.label: timing.capture_graph(call) for call in ready}

        def timer(call, n):
            return timing.time_graph(call, samples=n, graph=graphs[call.label]).median
    times: dict[str, list[float]] = {call.label: [] for call in ready}
    for r in range(rounds):
        for call in ready if r % 2 == 0 else ready[::-1]:
            times[call.label].append(timer(call, samples))
    for call in ready:
        if call.label in graphs:  # the timed graph's output, checked again
            found = call.check(sync, graphs[call.label].replay)
            if not found.ok:
                row["refused"][call.label] = check.wrong_reason(found, "after timing")
                times.pop(call.label)
    row["ms"] = {k: statistics.median(v) for k, v in times.items()}
    row["rounds"] = times
    if TREE in times and CANDIDATE in times:
        row["candidate_over_tree"] = ratio_summary(times[CANDIDATE], times[TREE])
    if TREE in times and TWIN in times:
        row["tree_over_twin"] = ratio_summary(times[TREE], times[TWIN])
    if CANDIDATE in times and CANDIDATE_TWIN in times:
        row["candidate_over_its_twin"] = ratio_summary(times[CANDIDATE], times[CANDIDATE_TWIN])
    return row


def render(doc: dict) -> str:
    """The run as a markdown table."""
    def ratio(r):
        return f"{r['median']:.4f} [{r['min']:.4f}, {r['max']:.4f}]" if r else "–"

    lines = [f"`{doc['candidate']['path']}` (sha256 {doc['candidate']['sha256']}) against the tree on "
             f"{doc['gpu']}: graph replay, L2 flushed, median of {doc['rounds']} rounds' medians (ms); "
             "ratios: the median of the rounds' ratios [their range]; twin: the tree on the same lengths "
             "over the 16-bit cache, the candidate's twin the candidate there.", "",
             "| scenario | kernels | tree ms | candidate ms | candidate / tree | same bits | twin ms | "
             "tree / twin | candidate's twin ms | candidate / its twin | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in doc["rows"].items():
        ms = r.get("ms", {})
        cell = {k: f"{ms[k]:.4f}" if k in ms else "–" for k in (TREE, CANDIDATE, TWIN, CANDIDATE_TWIN)}
        note = "; ".join(f"{k}: {v}" for k, v in r.get("refused", {}).items())
        errors = ", ".join(f"{k} {v:.3g}" for k, v in r.get("max_error", {}).items())
        lines.append(f"| {name} | {', '.join(r.get('kernels', []))} | {cell[TREE]} | {cell[CANDIDATE]} | "
                     f"{ratio(r.get('candidate_over_tree'))} | {r.get('same_bits', '–')} | {cell[TWIN]} | "
                     f"{ratio(r.get('tree_over_twin'))} | {cell[CANDIDATE_TWIN]} | "
                     f"{ratio(r.get('candidate_over_its_twin'))} | {note or 'max error ' + errors} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.source_ab", description=__doc__.split("\n")[0])
    p.add_argument("candidate", help="a copy of a module of kernels/ with an edit")
    p.add_argument("scenarios", help="comma-separated scenario names (perf/scenarios.py)")
    p.add_argument("--twin", action="store_true",
                   help="also the tree and the candidate on the same lengths over the 16-bit cache "
                        "(e4m3 scenarios)")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--samples", type=int, default=SAMPLES)
    p.add_argument("--out", default=os.path.join("results", "source_ab"))
    args = p.parse_args(argv)
    from perf import files, vendor
    from perf.lab.candidates import source_state
    from perf.scenarios import Scenario

    names = [x for x in args.scenarios.split(",") if x]
    if not names:
        raise ConfigError("no scenario named (comma-separated names of perf/scenarios.py)")
    for name in names:
        try:
            spec = Scenario.parse(name).spec()
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if args.twin:
            twin_spec(spec)
    if args.rounds < 1 or args.samples < 1:
        raise ConfigError("--rounds and --samples: counts >= 1")
    candidate = load_candidate(args.candidate)
    if not vendor.on_gpu():
        raise ConfigError("python -m perf.lab.source_ab: no GPU visible to torch; it times kernels on one")
    files.check_output(args.out, "--out", directory=True)
    import torch

    doc = {"gpu": torch.cuda.get_device_name(), "source": source_state(), "rounds": args.rounds,
           "samples": args.samples, "rows": {},
           "candidate": {"path": args.candidate, "sha256": candidate.source_ab_digest}}
    path = os.path.join(args.out, "source_ab.json")
    for i, name in enumerate(names, 1):
        doc["rows"][name] = row = measure_scenario(name, candidate, args.twin, args.rounds, args.samples)
        files.write_json(path, doc)
        over = row.get("candidate_over_tree")
        times = ", ".join(f"{k} {v:.4f}" for k, v in row["ms"].items())
        print(f"source_ab [{i}/{len(names)}] {name}: {times}"
              + (f"; candidate / tree {over['median']:.4f}" if over else "")
              + f"; same bits {row.get('same_bits', '–')}", flush=True)
        torch.cuda.empty_cache()
    markdown = render(doc)
    files.write_text(os.path.join(args.out, "source_ab.md"), markdown)
    print(markdown, flush=True)
    return 0


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
