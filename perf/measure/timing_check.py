"""`python -m perf.measure.timing_check`: is a graph-replay sample free of host time?

For each scenario, the production entry's call is captured in a CUDA/HIP graph and timed
four ways, medians in microseconds:

- `synced`: the old method: the host synchronizes after the L2 flush, then records the
  start event and launches one replay, so the host's launch latency is inside the sample;
- `one`: perf/measure/timing.py with one replay per sample (flush, spin, start, replay, end);
- `gate`: perf/measure/timing.py as the gate uses it (several replays per sample below
  MIN_SAMPLE_MS);
- `many`: `many_replays_ms`: 200 back-to-back replays per event pair, warm L2.

`gate` and `one` should sit within a few percent of `many` (they read the KV cache cold
after the flush, `many` warm); `synced` above it by the launch latency. The eager call is
timed the old way (host-inclusive) and the gate's way for comparison. Results are printed
and written as JSON (`--out`); docs/latency.md quotes them.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from perf import files
from perf import vendor as vendor_mod

SCENARIOS = ("llama3-8b/prefill/batch8-kv16/block16,llama3-8b/decode/batch1-kv128/block16,"
             "llama3-8b/decode/batch32-kv1024/block16")


def _synced(fn, samples: int) -> float:
    """The old timing: host sync between the flush and the start event (ms per call)."""
    import torch

    from perf.measure import timing

    cache = timing._flush_buffer("cuda")
    values = []
    for _ in range(samples):
        cache.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        values.append(start.elapsed_time(end))
    return float(np.median(values))


def check(scenario_names: list[str], variant: str, samples: int) -> list[dict]:
    from perf import checkout, scenarios
    from perf.measure import cases as measure
    from perf.measure import timing

    kernels = checkout.import_kernels()
    build_batch = kernels.batch.build_batch
    rows = []
    for name in scenario_names:
        scenario = scenarios.Scenario.parse(name)
        batch = build_batch(scenario.spec(), "cuda")
        case = measure.make_case(kernels, variant, scenario, "cuda", batch)
        if case.fn is None:
            rows.append({"scenario": name, "skip": case.skip})
            continue
        graph = timing.capture_graph(case.fn)
        plan = timing.plan(graph.replay)
        one = timing.Plan(reps=1, spin_ms=plan.spin_ms / plan.reps, estimate_ms=plan.estimate_ms)
        eager_plan = timing.plan(case.fn)
        row = {
            "scenario": name, "variant": variant, "reps": plan.reps,
            "synced_us": 1e3 * _synced(graph.replay, samples),
            "one_us": 1e3 * timing.time_graph(case.fn, samples=samples, graph=graph, plan_=one).median,
            "gate_us": 1e3 * timing.time_graph(case.fn, samples=samples, graph=graph, plan_=plan).median,
            "many_us": 1e3 * timing.many_replays_ms(graph),
            "eager_synced_us": 1e3 * _synced(case.fn, samples),
            "eager_gate_us": 1e3 * timing.time_eager(case.fn, samples=samples, plan_=eager_plan).median,
        }
        row["gate_vs_many"] = row["gate_us"] / row["many_us"]
        row["one_vs_many"] = row["one_us"] / row["many_us"]
        row["synced_vs_many"] = row["synced_us"] / row["many_us"]
        rows.append(row)
        del graph, case, batch
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.measure.timing_check",
                                description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=SCENARIOS)
    p.add_argument("--variant", default="static_grid")
    p.add_argument("--samples", type=int, default=25)
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    if args.out:
        files.check_output(args.out, "--out")
    if not vendor_mod.on_gpu():
        print("error: no GPU: this checks device timing on a GPU", file=sys.stderr)
        return 2
    import torch

    rows = check(args.scenarios.split(","), args.variant, args.samples)
    print(f"{torch.cuda.get_device_name()}: graph replay of {args.variant}, median us per call")
    print(f"{'scenario':40s} {'reps':>4s} {'synced':>8s} {'one':>8s} {'gate':>8s} {'many':>8s} "
          f"{'gate/many':>9s} {'eager synced':>12s} {'eager gate':>10s}")
    for r in rows:
        if "skip" in r:
            print(f"{r['scenario']:40s} skipped: {r['skip']}")
            continue
        print(f"{r['scenario']:40s} {r['reps']:4d} {r['synced_us']:8.2f} {r['one_us']:8.2f} "
              f"{r['gate_us']:8.2f} {r['many_us']:8.2f} {r['gate_vs_many']:9.3f} "
              f"{r['eager_synced_us']:12.2f} {r['eager_gate_us']:10.2f}")
    if args.out:
        files.write_json(args.out, {"gpu": torch.cuda.get_device_name(), "rows": rows})
    return 0


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
