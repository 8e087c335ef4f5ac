"""Lab: named launch configurations of static_grid timed beside its heuristics' own and the peers.

    python -m perf.lab.candidates PLAN.yaml [--rounds 5] [--samples 25] [--peers a,b] [--out DIR]

A lab tool, not a gate: it decides whether a kernel change or a heuristic branch is worth
keeping, in one process on one GPU. PLAN.yaml maps scenario names (perf/scenarios.py) to
candidates, each a label and the `heuristics.Config` fields it changes from the heuristics'
own choice for that scenario:

    llama3-8b/decode/batch64-kv4096/block32/fp8/bf16:
      qk16: {qk_fp16: true}
      qk16-o32: {qk_fp16: true, offsets_32: true}

Per scenario the batch and its fp32 reference are made once; every candidate (and `default`,
the heuristics' choice) is called through the production entry, `static_grid` with the
`config` hint, and every peer through perf/peers.py, each checked against the reference on a
poisoned output before it is timed and again after (a wrong one is reported, never timed).
Then `--rounds` rounds, the candidates in a fresh shuffled order each round, each a
CUDA-graph replay with L2 flushed before every sample (perf/measure/timing.py); a cell is
the median of the rounds' medians. The run measures the GPU's copy bandwidth and bf16 matmul
peak first, and each row says how far it is from them (perf/roofline.py).
Writes DIR/candidates.json (every round's median) after each scenario, so a run stopped by a
time limit keeps what it measured; `--resume` then goes on where it stopped: the rows of that file
measured from the same source (commit, and uncommitted kernel changes), GPU, rounds, samples and
peers whose candidates plan to the same configurations are kept, and the rest are timed, against
the same copy and matmul limits. Without `--resume` every scenario is timed anew. At the end
DIR/candidates.md, and the table printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics

from perf.errors import ConfigError

ROUNDS = 5  # unmeasured default: what the peers table runs per process
SAMPLES = 25  # per round and candidate; unmeasured default, as perf run's


def load_plan(path: str) -> dict[str, dict[str, dict]]:
    """scenario -> {label: Config overrides}, every field a Config field."""
    from kernels.paged_attention.heuristics import Config
    from perf import files, scenarios

    doc = files.load_yaml(path, "a candidates plan", "see `python -m perf.lab.candidates --help`")
    fields = {f.name for f in dataclasses.fields(Config)} - {"source"}
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{path}: a mapping of scenario names to candidates")
    for name, cands in doc.items():
        scenarios.Scenario.parse(str(name))  # refuses an unknown name in one line
        if not isinstance(cands, dict) or not all(isinstance(v, dict) for v in cands.values()):
            raise ConfigError(f"{path}: {name}: a mapping of labels to Config fields")
        for label, over in cands.items():
            unknown = set(over) - fields
            if unknown or label == "default":
                raise ConfigError(f"{path}: {name}: {label}: " + (
                    "'default' is the heuristics' own choice, always timed" if label == "default"
                    else f"unknown Config fields {', '.join(sorted(unknown))}"))
    return doc


class _Scenario:
    """One scenario's batch, the heuristics' configuration and each candidate's call."""

    def __init__(self, name: str, overrides: dict, device: str):
        from kernels import VARIANTS
        from kernels.batch import build_batch
        from kernels.paged_attention import heuristics, planning
        from perf import scenarios
        from perf.measure.cases import host_hints

        self.name, self.scenario = name, scenarios.Scenario.parse(name)
        self.spec = self.scenario.spec()
        # Unfilled until its turn (`ready`): planning needs the shapes only, and a plan of a hundred
        # multi-GB batches would otherwise fill them all before the first compile.
        self.batch = build_batch(self.spec, device, fill=False)
        self.variant = VARIANTS["static_grid"]
        self.hints = host_hints(self.variant, self.spec)
        vendor, sms = planning.resolve_target()  # this device's vendor and SM count
        default = heuristics.choose(vendor, heuristics.features_from_spec(self.spec, sms))
        self.configs, self.refused = {}, {}
        for label, over in {"default": {}, **overrides}.items():
            try:
                self.configs[label] = dataclasses.replace(default, **over)
            except (TypeError, ValueError) as exc:  # a Config the kernels cannot take
                self.refused[label] = f"{type(exc).__name__}: {exc}"

    def planned(self, label: str) -> list:
        """A candidate's launches as the production entry plans them."""
        return self.variant.plan(*self.batch.args(), out=self.batch.new_output(), config=self.configs[label],
                                 **self.batch.options, **self.hints)[1]

    def launches(self) -> list:
        """Every candidate's planned launches (to compile them together)."""
        found = []
        for label in self.configs:
            try:
                found += self.planned(label)
            except Exception as exc:  # refused by the planner: reported, not timed
                self.refused[label] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return found

    def tolerance(self, label: str) -> tuple[float, float]:
        """The check's (atol, rtol) for a candidate, as its plan calls for (`check.tolerance`: its
        dtype's, or the e4m3 operands' where the planner applies them)."""
        from perf.measure import check

        return check.tolerance(self.spec.dtype, [launch.config() for launch in self.planned(label)])

    def held_to(self, label: str, expected) -> tuple:
        """(the reference output, (atol, rtol)) a candidate's output is checked with, as its plan calls
        for (`check.Reference.of`, `check.tolerance`); `expected` the batch's `check.Reference`."""
        return expected.of([launch.config() for launch in self.planned(label)]), self.tolerance(label)

    def ready(self, peers: list[str], device: str) -> tuple[list, object]:
        """[(label, fn, out)] of the candidates and peers whose output matches the fp32
        reference (out None for a peer), and the batch's `check.Reference`."""
        import torch

        from kernels.batch import build_batch
        from perf.measure import check
        from perf.measure.cases import reference_for
        from perf.measure.peer_cases import make_case

        self.batch = build_batch(self.spec, device)
        expected = reference_for(self.batch)
        self.errors = {}  # label -> max |out - reference| before timing (the peers' are not kept)
        ready = []
        for label, config in self.configs.items():
            if label in self.refused:
                continue
            out = self.batch.new_output()

            def fn(config=config, out=out):
                self.variant(*self.batch.args(), out=out, config=config, **self.batch.options, **self.hints)
            try:
                reference, tolerance = self.held_to(label, expected)
                found = check.check_call(fn, out, reference, torch.cuda.synchronize, tolerance)
            except Exception as exc:  # fails to compile or launch: reported, not timed
                self.refused[label] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                continue
            if not found.ok:
                self.refused[label] = check.wrong_reason(found, "before timing")
                continue
            self.errors[label] = found.max_error
            ready.append((label, fn, out))
        for peer in peers:
            case = make_case(peer, self.scenario, device, self.batch, expected)
            if case.fn is None:
                self.refused["peer:" + peer] = case.skip
            else:
                ready.append(("peer:" + peer, case.fn, None))
        return ready, expected


def source_state() -> dict:
    """What the timed code is: this checkout's commit and, when dirty, its uncommitted kernel changes."""
    import hashlib

    from perf import git
    from perf.checkout import ROOT

    state = git.commit_info(ROOT)
    if state.get("dirty"):
        diff = git.git(ROOT, "diff", "HEAD", "--", "kernels", timeout=30) or ""
        state["kernels_diff"] = hashlib.sha256(diff.encode()).hexdigest()[:16]
    return state


def earlier_run(path: str, settings: dict) -> dict:
    """The earlier run in `path` (candidates.json) to resume: refused in one line unless it was made
    with the same `settings` (GPU, source, rounds, samples, peers); none when there is no file."""
    from perf import files

    fix = "remove it, name another --out, or leave out --resume"
    if not os.path.exists(path):
        return {}
    doc = files.load_json(path, "an earlier candidates run", fix)
    limits = doc.get("limits")
    if (not isinstance(doc.get("rows"), dict) or not isinstance(limits, dict)
            or set(limits) != {"copy_tb_s", "matmul_tflop_s"}):
        raise ConfigError(f"{path}: not a candidates run (no rows and limits); {fix}")
    for key, value in settings.items():
        if doc.get(key) != value:
            raise ConfigError(f"{path}: made with {key} {doc.get(key)!r}, this run's is {value!r}; {fix}")
    return doc


def kept_rows(before: dict, cases: list, peers: list[str]) -> dict:
    """The earlier run's rows whose scenario plans today to the same configurations, label for label,
    and asked for the same peers: what a resumed run need not time again."""
    kept = {}
    for case in cases:
        row = before.get("rows", {}).get(case.name)
        if not isinstance(row, dict):
            continue
        asked = {"default", *case.configs, *case.refused, *("peer:" + p for p in peers)}
        seen = set(row.get("configs", {})) | set(row.get("refused", {})) | set(row.get("ms", {}))
        configs = {k: dataclasses.asdict(c) for k, c in case.configs.items()}
        if asked == seen and row.get("configs") == configs:
            kept[case.name] = row
    return kept


def measure(plan: dict, rounds: int, samples: int, peers: list[str], threads: int, seed: int = 0,
            before: dict | None = None, save=None) -> dict:
    """Times each scenario of `plan` but those `kept_rows` keeps of `before` (an earlier run of the
    same settings) and calls `save(doc)` after each, so an interrupted run loses at most the
    scenario it was timing."""
    import torch

    from perf import roofline
    from perf.measure import check, timing
    from perf.tune import precompile

    device = "cuda"
    cases = [_Scenario(name, overrides, device) for name, overrides in plan.items()]  # unfilled: cheap
    rows = kept_rows(before or {}, cases, peers)
    if rows:  # the kept rows' limits, so every row of the table has one basis
        limits = roofline.Limits(**before["limits"])
        print(f"candidates: {len(rows)} of {len(plan)} scenarios kept from the earlier run", flush=True)
        for name, row in rows.items():
            for label, why in row.get("refused", {}).items():
                print(f"candidates: kept {name}: {label} refused then: {why}", flush=True)
    else:
        limits = roofline.measure_limits(device)
    print(f"candidates: copy {limits.copy_tb_s:.2f} TB/s, bf16 matmul {limits.matmul_tflop_s:.0f} TFLOP/s",
          flush=True)
    doc = {"limits": dataclasses.asdict(limits), "rows": rows}
    cases = [case for case in cases if case.name not in rows]
    launches = [launch for case in cases for launch in case.launches()]
    print(f"candidates: compiling {len(launches)} launches in {threads} threads", flush=True)
    precompile(launches, threads)
    rng = random.Random(seed)
    for i, case in enumerate(cases, 1):
        ready, expected = case.ready(peers, device)
        graphs = {label: timing.capture_graph(fn) for label, fn, _ in ready}
        times: dict[str, list[float]] = {label: [] for label, *_ in ready}
        for _ in range(rounds):
            order = list(ready)
            rng.shuffle(order)
            for label, fn, _ in order:
                times[label].append(timing.time_graph(fn, samples=samples, graph=graphs[label]).median)
        for label, _, out in ready:  # the output of the timed graph, checked again
            if out is not None:
                reference, tolerance = case.held_to(label, expected)
                found = check.check_call(graphs[label].replay, out, reference, torch.cuda.synchronize,
                                         tolerance)
                if not found.ok:
                    case.refused[label] = check.wrong_reason(found, "after timing")
                    times.pop(label)
        rows[case.name] = {"ms": {k: statistics.median(v) for k, v in times.items()}, "rounds": times,
                           "configs": {k: dataclasses.asdict(c) for k, c in case.configs.items()},
                           "refused": case.refused, "limit_ms": roofline.limit_ms(case.spec, limits),
                           "max_error": {k: v for k, v in case.errors.items() if k in times}}
        print(f"candidates [{i}/{len(cases)}] {case.name}: "
              + ", ".join(f"{k} {v:.4f}" for k, v in rows[case.name]["ms"].items()), flush=True)
        if save is not None:
            save(doc)
        del graphs, ready
        case.batch = None
        torch.cuda.empty_cache()
    doc["rows"] = {name: rows[name] for name in plan if name in rows}  # the plan's order
    return doc


def render(doc: dict, gpu: str) -> str:
    lim = doc["limits"]
    lines = [f"Candidates on {gpu}: graph replay, L2 flushed, median of the rounds' medians (ms); "
             f"copy bandwidth {lim['copy_tb_s']:.2f} TB/s, bf16 matmul {lim['matmul_tflop_s']:.0f} TFLOP/s "
             f"measured in the same run; `limit`: the larger of bytes / bandwidth and flops / peak.", "",
             "| scenario | candidate | ms | vs default | % of limit | note |", "|---|---|---|---|---|---|"]
    for name, r in doc["rows"].items():
        base = r["ms"].get("default")
        for label, ms in sorted(r["ms"].items(), key=lambda kv: kv[1]):
            ratio = f"{ms / base:.3f}" if base else "n/a"
            error = r.get("max_error", {}).get(label)
            note = "" if error is None else f"max error {error:.3g}"
            share = f"{100 * r['limit_ms'] / ms:.0f} %"
            lines.append(f"| {name} | {label} | {ms:.4f} | {ratio} | {share} | {note} |")
        for label, why in r["refused"].items():
            lines.append(f"| {name} | {label} | – | – | – | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.candidates", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="YAML: scenario -> {label: Config fields}")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--samples", type=int, default=SAMPLES)
    p.add_argument("--peers", default="", help="comma-separated peers of perf/peers.py (default: none)")
    p.add_argument("--threads", type=int, default=16, help="compile threads (default: 16)")
    p.add_argument("--out", default=os.path.join("results", "candidates"))
    p.add_argument("--resume", action="store_true",
                   help="keep the rows of an interrupted run in --out (same source, GPU and settings)")
    args = p.parse_args(argv)
    from perf import files, vendor

    plan = load_plan(args.plan)
    peers = [x for x in args.peers.split(",") if x]
    if not vendor.on_gpu():
        raise ConfigError("python -m perf.lab.candidates: no GPU visible to torch; it times kernels on one")
    files.check_output(args.out, "--out", directory=True)
    import torch

    path = os.path.join(args.out, "candidates.json")
    settings = {"gpu": torch.cuda.get_device_name(), "source": source_state(), "rounds": args.rounds,
                "samples": args.samples, "peers": peers}
    before = earlier_run(path, settings) if args.resume else {}
    doc = measure(plan, args.rounds, args.samples, peers, args.threads, before=before,
                  save=lambda doc: files.write_json(path, {**doc, **settings}))
    doc.update(settings)
    files.write_json(path, doc)
    markdown = render(doc, doc["gpu"])
    files.write_text(os.path.join(args.out, "candidates.md"), markdown)
    print(markdown, flush=True)
    return 0


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
