"""Kernel benchmark (not a test): every variant and PyTorch SDPA on the paper's scenarios.

    python -m perf.kernel_benchmark --out DIR            # the table of docs/kernels.md
    python -m perf.kernel_benchmark --out DIR --sweep    # the sweep behind heuristics.py

Llama-3-8B heads (32 query heads, 8 KV heads, head size 128), bfloat16, cache block 16.
Decode: batch 1, 8, 32, 128 x context 1k, 8k, 32k; causal prefill: 1 x 2k, 1 x 8k, 4 x 2k.
Two metrics per (implementation, scenario), each the median of its samples (p20/p80 kept):
`eager` is `triton.testing.do_bench` (device events, L2 flushed before every call, launch
overhead included, launches planned outside the timed region); `graph` is the replay of a
CUDA/HIP graph holding one call, L2 flushed before every replay. Derived once from
latency: KV-read bandwidth (the KV bytes of every sequence read once) and TFLOP/s
(4 * head_size * query heads * visible (query, key) pairs). Peers (`perf.peers`) run the
same shapes laid out densely, not paged. Writes DIR/kernel_benchmark.jsonl (one record per
measurement, appended as it goes), DIR/kernel_benchmark.json and DIR/kernel_benchmark.md.

`--sweep` times launch configurations of `static_grid` (graph replay) by coordinate descent
over the knobs of `heuristics.Config`, per representative scenario, and writes
DIR/sweep.json and DIR/sweep.md: what `heuristics.py`'s NVIDIA branches cite.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from perf.latency import timing
from perf.latency.timing import Samples

MODEL = dict(num_q_heads=32, num_kv_heads=8, head_size=128)  # Llama-3-8B attention heads
DTYPE = "bfloat16"
BLOCK_SIZE = 16
VARIANT_ORDER = ("naive", "qblock", "parallel", "flex_tile", "static_grid")


@dataclass(frozen=True)
class Scenario:
    name: str
    num_seqs: int
    query_len: int  # per sequence; 1 = decode
    kv_len: int  # per sequence, the new tokens included

    @property
    def kind(self) -> str:
        return "decode" if self.query_len == 1 else "prefill"

    def spec(self):
        from kernels.batch import BatchSpec
        return BatchSpec((self.query_len,) * self.num_seqs, (self.kv_len,) * self.num_seqs,
                         block_size=BLOCK_SIZE, dtype=DTYPE, **MODEL)


SCENARIOS = {s.name: s for s in [
    *(Scenario(f"decode_b{b}_{k}k", b, 1, k * 1024) for b in (1, 8, 32, 128) for k in (1, 8, 32)),
    Scenario("prefill_1x2k", 1, 2048, 2048),
    Scenario("prefill_1x8k", 1, 8192, 8192),
    Scenario("prefill_4x2k", 4, 2048, 2048),
]}


# ------------------------------------------------------------------ inputs and metrics


def device_batch(spec, device: str = "cuda"):
    """A PagedBatch like `kernels.batch.build_batch`, drawn on the device (a 128 x 32k cache
    is 17 GB: drawing it on the host takes minutes). Shuffled block table, random data."""
    from kernels.batch import PagedBatch
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    blocks = spec.blocks_per_seq()
    num_blocks = sum(blocks) + 3
    physical = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    table = torch.zeros(spec.num_seqs, max(blocks), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(blocks):
        table[i, :n] = physical[start:start + n]
        start += n
    shape = (num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size)
    dtype = spec.torch_dtype

    def randn(*s):
        return torch.randn(*s, generator=gen, device=device, dtype=dtype)
    cu = [0]
    for n in spec.query_lens:
        cu.append(cu[-1] + n)
    return PagedBatch(
        spec=spec, q=randn(spec.num_tokens, spec.num_q_heads, spec.head_size),
        k_cache=randn(*shape), v_cache=randn(*shape), block_table=table,
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(spec.kv_lens, dtype=torch.int32, device=device),
        options={"scale": spec.head_size ** -0.5},
    )


def kv_read_bytes(spec) -> int:
    """Every sequence's K and V read once."""
    item = 1 if spec.fp8_kv else spec.torch_dtype.itemsize
    return sum(spec.kv_lens) * spec.num_kv_heads * spec.head_size * 2 * item


def attention_flops(spec) -> int:
    """4 * head_size * query heads * visible (query, key) pairs under the causal mask."""
    pairs = 0
    for q, kv in zip(spec.query_lens, spec.kv_lens):
        first = kv - q + 1  # keys seen by the sequence's first query
        pairs += q * first + q * (q - 1) // 2
    return 4 * spec.head_size * spec.num_q_heads * pairs


# ------------------------------------------------------------------ timing


def _summary(samples: Samples) -> dict:
    return {"samples": sorted(samples.values), "median": samples.median, "p20": samples.p20,
            "p80": samples.p80}


def time_eager(fn) -> dict:
    """do_bench, as the issue's table asks: device events, L2 flushed before each call (ms)."""
    import triton.testing
    return _summary(Samples(tuple(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all"))))


def time_graph(fn, samples: int = 100, budget_ms: float = 100.0) -> dict:
    """Graph replays of one call, L2 flushed before each (the harness's perf.latency.timing), in ms."""
    return _summary(timing.time_graph(fn, samples=samples, budget_ms=budget_ms))


# ------------------------------------------------------------------ implementations


def hints(spec) -> dict:
    """What a serving engine knows on the host (vLLM passes these)."""
    return {"max_seqlen_q": max(spec.query_lens), "max_seqlen_k": max(spec.kv_lens)}


def plan_variant(name: str, batch, config=None):
    """(closure running the planned launches, their configs); planning outside timing."""
    from kernels import VARIANTS
    from kernels.inputs import trusted_metadata
    variant = VARIANTS[name]
    extra = hints(batch.spec) if variant.hints else {}
    if config is not None:
        extra["config"] = config
    out = batch.new_output()
    variant(*batch.args(), out=out, **batch.options, **extra)  # validates once, compiles
    with trusted_metadata():
        _, launches = variant.plan(*batch.args(), out=out, **batch.options, **extra)

    def run():
        for launch in launches:
            launch()
    return run, [launch.config() for launch in launches], out


def warm_up(jobs: list, threads: int) -> None:
    """Compile many planned launches at once (Triton compiles in threads, mostly GIL-free)."""
    def compile_one(launch):
        try:
            launch.kernel.warmup(**launch.args, **launch.constexprs, grid=launch.grid,
                                 num_warps=launch.num_warps, num_stages=launch.num_stages,
                                 **launch.vendor_options)
        except Exception as exc:  # surfaces again, with its message, when the config is timed
            return f"{type(exc).__name__}: {exc}"
        return None
    with ThreadPoolExecutor(max(1, threads)) as pool:
        list(pool.map(compile_one, jobs))


def environment() -> dict:
    import triton

    from kernels import platform
    p = platform.current()
    env = {
        "vendor": p.vendor, "arch": p.arch, "gpu": p.device_name, "num_sms": p.num_sms,
        "torch": torch.__version__, "triton": triton.__version__,
        "cuda": torch.version.cuda, "hip": torch.version.hip,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        import subprocess
        env["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        env["driver"] = "unknown"
    return env


# ------------------------------------------------------------------ benchmark


def run_benchmark(args) -> int:
    from rich.progress import Progress

    from perf.peers import PEERS, DenseShape, PeerUnavailable
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    jsonl = os.path.join(args.out, "kernel_benchmark.jsonl")
    open(jsonl, "w").close()
    records = []

    def record(impl, label, scenario, metric, summary, config=None, note=""):
        spec = scenario.spec()
        med = summary["median"] if summary else None
        rec = {"variant": impl, "label": label, "scenario": scenario.name, "metric": metric,
               **(summary or {"samples": [], "median": None, "p20": None, "p80": None}),
               "kv_read_tb_s": kv_read_bytes(spec) / (med * 1e-3) / 1e12 if med else None,
               "tflop_s": attention_flops(spec) / (med * 1e-3) / 1e12 if med else None,
               "config": config, "note": note, "environment": env}
        records.append(rec)
        with open(jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")

    scenarios = [SCENARIOS[s] for s in (args.scenarios or SCENARIOS)]
    variants = args.variants or list(VARIANT_ORDER)
    peers = [p for p in (args.peers if args.peers is not None else list(PEERS))]
    with Progress() as progress:
        task = progress.add_task("benchmark", total=len(scenarios) * (len(variants) + len(peers)))
        for scenario in scenarios:
            spec = scenario.spec()
            batch = device_batch(spec)
            planned = {}
            for name in variants:
                try:
                    planned[name] = plan_variant(name, batch)
                except Exception as exc:  # recorded as a note; the table shows n/a
                    planned[name] = exc
            for name in variants:
                progress.update(task, description=f"{scenario.name} {name}")
                if isinstance(planned[name], Exception):
                    exc = planned[name]
                    record(name, name, scenario, "eager", None, None,
                           f"unavailable: {type(exc).__name__}: {str(exc)[:120]}")
                    progress.advance(task)
                    continue
                fn, config, _ = planned[name]
                if name == "naive" and scenario.kind == "prefill" and scenario.kv_len > 4096 \
                        and args.skip_slow_naive:
                    record(name, name, scenario, "eager", None, config, "skipped: --skip-slow-naive")
                    progress.advance(task)
                    continue
                record(name, name, scenario, "eager", time_eager(fn), config)
                record(name, name, scenario, "graph", time_graph(fn), config)
                print(f"{scenario.name} {name}: eager {records[-2]['median']:.4f} ms, "
                      f"graph {records[-1]['median']:.4f} ms", flush=True)
                progress.advance(task)
            del planned
            shape = DenseShape(scenario.num_seqs, scenario.query_len, scenario.kv_len,
                               MODEL["num_q_heads"], MODEL["num_kv_heads"], MODEL["head_size"],
                               spec.torch_dtype)
            for peer_name in peers:
                peer = PEERS[peer_name]
                progress.update(task, description=f"{scenario.name} {peer_name}")
                try:
                    fn, layout = peer.setup(shape, "cuda")
                    record(peer_name, peer.label, scenario, "eager", time_eager(fn), None, layout)
                    record(peer_name, peer.label, scenario, "graph", time_graph(fn), None, layout)
                    del fn
                except PeerUnavailable as exc:
                    record(peer_name, peer.label, scenario, "eager", None, None, f"unavailable: {exc}")
                except Exception as exc:  # out of memory, a backend error: a note, not a crash
                    record(peer_name, peer.label, scenario, "eager", None, None,
                           f"unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                progress.advance(task)
            del batch
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "kernel_benchmark.json"), "w") as f:
        json.dump({"schema_version": 1, "environment": env, "records": records}, f)
    markdown = render_markdown(records, env)
    with open(os.path.join(args.out, "kernel_benchmark.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    return 0


def _median(records, impl, scenario, metric):
    for r in records:
        if (r["variant"], r["scenario"], r["metric"]) == (impl, scenario, metric):
            return r["median"]
    return None


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def render_markdown(records, env) -> str:
    impls = list(dict.fromkeys(r["variant"] for r in records))
    labels = {r["variant"]: r["label"] for r in records}
    scenarios = list(dict.fromkeys(r["scenario"] for r in records))
    lines = [f"Measured on {env['gpu']} ({env['arch']}, {env['num_sms']} SMs), torch {env['torch']}, "
             f"triton {env['triton']}, {env['time'][:10]}. Llama-3-8B heads (32 q / 8 kv / 128), "
             f"bf16, block 16. Cells: median ms, eager (do_bench, L2 flushed) / graph replay "
             f"(L2 flushed). Peers: dense, not paged.", ""]
    lines.append("| scenario | " + " | ".join(labels[i] for i in impls) + " |")
    lines.append("|---" * (len(impls) + 1) + "|")
    for s in scenarios:
        cells = []
        for i in impls:
            e, g = _median(records, i, s, "eager"), _median(records, i, s, "graph")
            cells.append("n/a" if e is None else f"{e:.3f} / {g:.3f}" if g else f"{e:.3f} / n/a")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    notes = sorted({f"{r['variant']} {r['scenario']}: {r['note']}" for r in records
                    if r["note"] and r["note"].startswith(("unavailable", "skipped"))})
    layouts = sorted({f"{r['variant']}: {r['note']}" for r in records
                      if r["note"] and not r["note"].startswith(("unavailable", "skipped"))})
    if layouts:
        lines += ["", "Peer layouts: " + "; ".join(layouts) + "."]
    if notes:
        lines += ["", "Not measured: " + "; ".join(notes) + "."]

    prod = "static_grid"
    lines += ["", f"`paged_attention` (= `{prod}`), graph replay, against SDPA cuDNN (graph replay):", "",
              "| scenario | ms | KV read TB/s | TFLOP/s | cuDNN ms | ratio |", "|---|---|---|---|---|---|"]
    ratios = {}
    for s in scenarios:
        rec = next((r for r in records
                    if (r["variant"], r["scenario"], r["metric"]) == (prod, s, "graph")), None)
        if rec is None or rec["median"] is None:
            continue
        ref = _median(records, "sdpa_cudnn", s, "graph")
        ratio = rec["median"] / ref if ref else None
        ratios[s] = ratio
        ref_text = "n/a" if ref is None else f"{ref:.3f}"
        ratio_text = "n/a" if ratio is None else f"{ratio:.2f}"
        lines.append(f"| {s} | {rec['median']:.3f} | {rec['kv_read_tb_s']:.2f} | {rec['tflop_s']:.1f} | "
                     f"{ref_text} | {ratio_text} |")
    gm = _geomean(list(ratios.values()))
    decode8 = [r for s, r in ratios.items() if s.startswith("decode") and int(s.split("_")[1][1:]) >= 8 and r]
    lines += ["", f"Geometric mean of latency ratios to cuDNN (graph): {gm:.2f}" if gm else
              "Geometric mean: n/a (no cuDNN numbers)"]
    if decode8:
        lines.append(f"Decode batch >= 8: worst ratio {max(decode8):.2f}, "
                     f"geometric mean {_geomean(decode8):.2f}")
    gm_eager = _geomean([(_median(records, prod, s, "eager") or 0) / r for s in scenarios
                         if (r := _median(records, "sdpa_cudnn", s, "eager"))])
    if gm_eager:
        lines.append(f"Geometric mean of latency ratios to cuDNN (eager): {gm_eager:.2f}")

    lines += ["", "Progression: geometric mean of latency (ms) over each group of scenarios:", ""]
    groups = {"prefill": [s for s in scenarios if s.startswith("prefill")],
              "few long decodes (b<=8, >=8k)": [s for s in scenarios if s.startswith("decode")
                                                 and int(s.split("_")[1][1:]) <= 8
                                                 and int(s.split("_")[2][:-1]) >= 8],
              "all": scenarios}
    lines.append("| group | " + " | ".join(i for i in impls if i in VARIANT_ORDER) + " |")
    lines.append("|---" * (1 + sum(i in VARIANT_ORDER for i in impls)) + "|")
    for group, names in groups.items():
        for metric in ("eager", "graph"):
            cells = [_geomean([_median(records, i, s, metric) for s in names])
                     for i in impls if i in VARIANT_ORDER]
            text = " | ".join("n/a" if c is None else f"{c:.3f}" for c in cells)
            lines.append(f"| {group} ({metric}) | {text} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ sweep


SWEEP_SCENARIOS = ("decode_b1_32k", "decode_b8_8k", "decode_b32_8k", "decode_b128_1k", "decode_b8_32k",
                   "prefill_1x8k", "prefill_4x2k")


def _candidates(stage: str, best, scenario: Scenario):
    C = dataclasses.replace
    if stage == "tile_warps" and scenario.kind == "decode":
        return [C(best, tile_size=t, num_warps=w) for t in (16, 32, 64, 128) for w in (2, 4, 8)]
    if stage == "tile_warps":
        return [C(best, block_m=m, tile_size=t, num_warps=w)
                for m in (64, 128) for t in (32, 64, 128) for w in (4, 8)]
    if stage == "stages":
        return [C(best, num_stages=s) for s in (1, 2, 3, 4)]
    if stage == "segments" and scenario.kind == "decode":
        s = best.num_segments
        return [C(best, num_segments=n) for n in sorted({1, max(1, s // 4), max(1, s // 2), s, s * 2, s * 4})
                if n <= 128]  # a runtime argument: no recompilation
    if stage == "programs":
        return [C(best, programs_per_sm=p) for p in (1, 2, 3, 4)]
    return []


def _sweep_scenario(scenario: Scenario, env: dict, vendor: str, threads: int, progress, task) -> dict:
    """Coordinate descent from the heuristics' choice: each stage keeps the best so far."""
    from kernels import VARIANTS
    from kernels.inputs import trusted_metadata
    from kernels.paged_attention import heuristics
    spec = scenario.spec()
    batch = device_batch(spec)
    default = heuristics.choose(vendor, heuristics.features_from_spec(spec, env["num_sms"]))
    tried = {}

    def measure(cfg):
        key = json.dumps(dataclasses.asdict(dataclasses.replace(cfg, source="")), sort_keys=True)
        if key not in tried:
            try:
                fn, _, _ = plan_variant("static_grid", batch, cfg)
                tried[key] = (cfg, time_graph(fn, samples=60, budget_ms=40)["median"], "")
            except Exception as exc:  # out of resources: recorded, never chosen
                tried[key] = (cfg, None, f"{type(exc).__name__}: {str(exc)[:120]}")
        return tried[key][1]

    best, best_ms = default, measure(default)
    default_ms = best_ms
    for stage in ("tile_warps", "stages", "segments", "programs"):
        progress.update(task, description=f"{scenario.name} {stage}")
        candidates = _candidates(stage, best, scenario)
        jobs = []
        for cfg in candidates:
            with trusted_metadata():
                _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(),
                                                           config=cfg, **batch.options)
            jobs += launches
        warm_up(jobs, threads)
        for cfg in candidates:
            ms = measure(cfg)
            if ms is not None and (best_ms is None or ms < best_ms):
                best, best_ms = cfg, ms
        progress.advance(task)
    print(f"sweep {scenario.name}: default {default_ms} ms, best {best_ms} ms {best}", flush=True)
    return {
        "default": dataclasses.asdict(default), "default_ms": default_ms,
        "best": dataclasses.asdict(best), "best_ms": best_ms,
        "tried": [{"config": dataclasses.asdict(c), "ms": ms, "error": err} for c, ms, err in tried.values()],
    }


def run_sweep(args) -> int:
    from rich.progress import Progress

    from kernels import platform
    os.makedirs(args.out, exist_ok=True)
    env = environment()
    vendor = platform.current().vendor
    results = {}
    scenarios = [SCENARIOS[s] for s in (args.scenarios or SWEEP_SCENARIOS)]
    with Progress() as progress:
        task = progress.add_task("sweep", total=len(scenarios) * 4)
        for scenario in scenarios:
            results[scenario.name] = _sweep_scenario(scenario, env, vendor, args.threads, progress, task)
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"environment": env, "results": results}, f)
    lines = [f"Sweep of static_grid launch configurations (graph replay, L2 flushed, median ms) on "
             f"{env['gpu']}, {env['time'][:10]}.", "",
             "| scenario | default config | default ms | best config | best ms | gain |",
             "|---|---|---|---|---|---|"]

    def short(c):
        return (f"M{c['block_m']} T{c['tile_size']} S{c['num_segments']} w{c['num_warps']} "
                f"s{c['num_stages']} p{c['programs_per_sm']}")
    for name, r in results.items():
        gain = r["default_ms"] / r["best_ms"] if r["default_ms"] and r["best_ms"] else None
        ms = {k: "n/a" if r[k] is None else f"{r[k]:.4f}" for k in ("default_ms", "best_ms")}
        lines.append(f"| {name} | {short(r['default'])} | {ms['default_ms']} | {short(r['best'])} | "
                     f"{ms['best_ms']} | {'n/a' if gain is None else f'{gain:.2f}x'} |")
    markdown = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.kernel_benchmark",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the JSON and Markdown results")
    parser.add_argument("--sweep", action="store_true", help="sweep static_grid configurations instead")
    parser.add_argument("--scenarios", nargs="*", choices=list(SCENARIOS), help="default: all")
    parser.add_argument("--variants", nargs="*", help="default: every variant")
    parser.add_argument("--peers", nargs="*", help="default: every registered peer")
    parser.add_argument("--skip-slow-naive", action="store_true", help="skip naive on prefill > 4k")
    parser.add_argument("--threads", type=int, default=12, help="compile threads for the sweep")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf.kernel_benchmark: no CUDA/ROCm GPU found; this benchmark needs one (the CPU "
              "interpreter's timings mean nothing)", file=sys.stderr)
        return 2
    return run_sweep(args) if args.sweep else run_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
