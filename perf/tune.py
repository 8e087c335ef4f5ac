"""Sweep static_grid's launch configurations: the numbers kernels/paged_attention/heuristics.py cites.

    python -m perf tune [--suite tune] [--scenarios GLOBS] [--stages LIST] [--out DIR] [--threads N]

Per scenario, coordinate descent from the heuristics' own choice over the knobs of
`heuristics.Config`, each stage keeping the fastest configuration so far: (tile, warps), with
BLOCK_M for prefill; pipeline stages; the block-table read-ahead; the cache addressing (block
ids per cache block, int32 offsets); the causal edge's tile (prefill); KV segments (decode
only: a runtime argument, no recompilation); the fused reduction and the reduction by query (split
decodes); programs per SM (0: one program per work item); sequence work items (decode); the P V
product in fp16, both products in fp16 and Q K^T on e4m3 (bf16 queries over an OCP fp8 cache
only); V and K as pairs of dims (OCP e4m3 caches); the warp-specialized Gluon prefill (prefill, taken
on sm_90 only). `--stages` runs some of them, in that order. Every configuration is timed like `perf run`'s
graph metric (perf.measure.timing: one CUDA/HIP-graph replay, L2 flushed before each sample) and its
output must match the fp32 reference within the tolerance its plan calls for (perf.measure.check:
e4m3 operands have their own); one that fails to compile or is wrong is recorded with the reason,
never chosen. A stage's candidates compile together in threads (Triton
compiles mostly outside the GIL). Writes DIR/tune.json (every configuration tried) and
DIR/tune.md (default against best, per scenario).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor

from perf.errors import ConfigError

STAGES = ("tile_warps", "stages", "read_ahead", "addressing", "edge_tile", "segments", "fused_reduce",
          "reduce_by_query", "pdl_reduce", "reduce_warps", "programs", "seq_items", "decode_layout",
          "pv_fp16", "qk_fp16", "qk_e4m3", "pairs", "warp_specialized")
SAMPLES = 60  # per configuration; unmeasured default carried over from the first sweep (H200, 2026-11-21)
BUDGET_MS = 40.0  # a slow configuration gets fewer samples (at least timing.MIN_SAMPLES); unmeasured default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="tune", help="suite of perf/suites.yaml (default: tune)")
    p.add_argument("--scenarios", default=None, help="comma-separated fnmatch globs over the suite")
    p.add_argument("--out", default=os.path.join("results", "tune"), help="folder for tune.json and tune.md")
    p.add_argument("--threads", type=int, default=12, help="compile threads per stage (default: 12)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated stages to run, in this order (default: all: {','.join(STAGES)})")
    p.add_argument("--force", action="store_true",
                   help="replace a tune.json in --out measured on another GPU, vendor or the interpreter")


def check_arguments(args: argparse.Namespace) -> None:
    """Before any work (the registry's check of `perf tune`): the stages, the scenarios, a GPU."""
    from perf import validate

    validate.named(args.stages, list(STAGES), "--stages", "stage", f"expected some of {', '.join(STAGES)}")
    validate.scenarios(args.suite, args.scenarios)
    validate.gpu("perf tune")


def candidates(stage: str, best, decode: bool, pv_fp16: bool = False, ocp_e4m3: bool = False) -> list:
    """The configurations a stage tries around `best` (a heuristics.Config); `pv_fp16`: the
    scenario is one where `Config.pv_fp16` changes the kernel (`planning.pv_fp16_applies`);
    `ocp_e4m3`: its cache is OCP e4m3, which `Config.v_pairs` and `.k_pairs` read as pairs."""
    C = dataclasses.replace
    if stage == "tile_warps" and decode:
        return [C(best, tile_size=t, num_warps=w) for t in (16, 32, 64, 128) for w in (2, 4, 8)]
    if stage == "tile_warps":
        return [C(best, block_m=m, tile_size=t, num_warps=w)
                for m in (64, 128) for t in (32, 64, 128) for w in (4, 8)]
    if stage == "stages":
        return [C(best, num_stages=s) for s in (1, 2, 3, 4)]
    if stage == "read_ahead":
        return [C(best, read_ahead=r) for r in (False, True)]
    if stage == "addressing":  # block ids per cache block and int32 offsets, each and both
        return [C(best, block_vector=v, offsets_32=o) for v in (False, True) for o in (False, True)]
    if stage == "edge_tile" and not decode:  # the causal edge in halves or quarters of a tile
        edges = (0, best.tile_size // 2, best.tile_size // 4)
        return [C(best, edge_tile=e) for e in edges if e == 0 or e >= 16]
    if stage == "segments" and decode:
        s = best.num_segments
        return [C(best, num_segments=n) for n in sorted({1, max(1, s // 4), max(1, s // 2), s, s * 2, s * 4})
                if n <= 128]
    if stage == "fused_reduce" and decode and best.num_segments > 1:
        return [C(best, fused_reduce=f) for f in (False, True)]
    if stage == "reduce_by_query" and decode and best.num_segments > 1 and not best.fused_reduce:
        return [C(best, reduce_by_query=r) for r in (False, True)]
    # a split launch's reduction, multi-token decodes' too (their rules' labs: not `decode`, all queries 1)
    if stage == "pdl_reduce" and best.num_segments > 1 and not best.fused_reduce:
        return [C(best, pdl_reduce=r) for r in (False, True)]
    if stage == "reduce_warps" and best.num_segments > 1 and not best.fused_reduce:
        return [C(best, reduce_warps=w) for w in (1, 2, 4)]
    if stage == "programs":  # 0: one program per work item of the shapes' bound, not persistent
        return [C(best, programs_per_sm=p) for p in (0, 1, 2, 3, 4)]
    if stage == "seq_items" and decode:
        return [C(best, seq_items=i) for i in (False, True)]
    if stage == "decode_layout" and decode and not best.seq_items:  # Q-block items only
        return [C(best, decode_layout=d) for d in (False, True)]
    if stage == "pv_fp16" and pv_fp16:  # P V in fp16: bf16 queries over an OCP fp8 cache
        return [C(best, pv_fp16=f) for f in (False, True)]
    if stage == "qk_fp16" and pv_fp16:  # both products in fp16: the same caches
        return [C(best, qk_fp16=f) for f in (False, True)]
    if stage == "qk_e4m3" and pv_fp16 and not best.fp8_products:  # Q K^T on e4m3: the same caches
        return [C(best, qk_e4m3=f) for f in (False, True)]
    if stage == "pairs" and ocp_e4m3:  # V, K as 16-bit pairs of dims, each and both
        return [C(best, v_pairs=v, k_pairs=k) for v in (False, True) for k in (False, True)]
    if stage == "warp_specialized" and decode:  # decodes over OCP e4m3: the Gluon kernel's token items
        # (`Config.ws_token_items`), q in two e4m3 parts and in one, or the Q-block kernel
        if not ocp_e4m3 or best.fp8_products:
            return []
        tokens = C(best, warp_specialized=True, ws_token_items=True)
        return [C(best, warp_specialized=False, ws_token_items=False), tokens,
                C(tokens, qk_e4m3=not best.qk_e4m3)]
    if stage == "warp_specialized":  # the Gluon prefill kernel (sm_90) or the Q-block kernel
        # and over e4m3 where `qk_e4m3` is off, that kernel's q in one e4m3 part and in two
        # and over 16-bit caches with and without its decodes' heads packed (`Config.ws_pack_gqa`)
        rounded = [C(best, warp_specialized=True, ws_q_rounded=not best.ws_q_rounded)] if (
            ocp_e4m3 and not best.qk_e4m3) else []
        packed = [] if pv_fp16 or ocp_e4m3 else [
            C(best, warp_specialized=True, ws_pack_gqa=not best.ws_pack_gqa)]
        return [C(best, warp_specialized=w) for w in (False, True)] + rounded + packed
    return []


class _Scenario:
    """One scenario's batch, the default configuration's output, and every timing so far."""

    def __init__(self, kernels, scenario, device: str):
        from kernels.batch import build_batch

        self.variant = kernels.VARIANTS["static_grid"]
        self.spec = scenario.spec()
        self.batch = build_batch(self.spec, device)
        self.hints = {"max_seqlen_q": max(self.spec.query_lens), "max_seqlen_k": max(self.spec.kv_lens)}
        self.expected = None  # the batch's fp32 reference outputs (perf.measure.check.Reference)
        self.tried: dict[str, tuple] = {}  # config key -> (config, ms or None, error)

    def plan(self, cfg):
        out = self.batch.new_output()
        _, launches = self.variant.plan(*self.batch.args(), out=out, config=cfg, **self.hints,
                                        **self.batch.options)
        return launches, out

    def measure(self, cfg) -> float | None:
        import torch

        from perf.measure import check, timing
        from perf.measure.cases import reference_for

        key = json.dumps(dataclasses.asdict(dataclasses.replace(cfg, source="")), sort_keys=True)
        if key not in self.tried:
            try:
                launches, out = self.plan(cfg)

                def fn():
                    for launch in launches:
                        launch()
                fn()  # compiles
                if self.expected is None:
                    self.expected = reference_for(self.batch)
                sync = torch.cuda.synchronize if out.is_cuda else None
                configs = [launch.config() for launch in launches]
                found = check.check_call(fn, out, self.expected.of(configs), sync,
                                         check.tolerance(out.dtype, configs))
                if not found.ok:
                    self.tried[key] = (cfg, None, check.wrong_reason(found, "before timing"))
                    return None
                ms = timing.time_graph(fn, samples=SAMPLES, budget_ms=BUDGET_MS).median
                self.tried[key] = (cfg, ms, "")
            except Exception as exc:  # out of resources, refused by the planner: recorded, never chosen
                self.tried[key] = (cfg, None, f"{type(exc).__name__}: {exc}".splitlines()[0][:160])
        return self.tried[key][1]

    def compile(self, configs, threads: int) -> None:
        """Compile the candidates' kernels at once, in threads; errors surface when timed."""
        jobs = []
        for cfg in configs:
            try:
                jobs += self.plan(cfg)[0]
            except Exception:  # the planner refuses it: measure() records why
                continue
        precompile(jobs, threads)


def precompile(launches, threads: int) -> None:
    """Compile planned launches in threads (Triton compiles mostly outside the GIL); a launch
    that fails to compile is left for its first call to report."""
    def one(launch):
        try:
            launch.kernel.warmup(**launch.args, **launch.constexprs, grid=launch.grid,
                                 num_warps=launch.num_warps, num_stages=launch.num_stages,
                                 **launch.vendor_options)
        except Exception:  # the first call reports the error with its message
            pass
    with ThreadPoolExecutor(max(1, threads)) as pool:
        list(pool.map(one, launches))


def _short(c: dict) -> str:
    return (f"M{c['block_m']} T{c['tile_size']} S{c['num_segments']} w{c['num_warps']} s{c['num_stages']} "
            f"p{c['programs_per_sm']}" + (" ra" if c.get("read_ahead") else "")
            + (" fr" if c.get("fused_reduce") else "") + (" si" if c.get("seq_items") else "")
            + (" dl" if c.get("decode_layout") else "")
            + (f" e{c['edge_tile']}" if c.get("edge_tile") else "") + (" bv" if c.get("block_vector") else "")
            + (" o32" if c.get("offsets_32") else "") + (" pv16" if c.get("pv_fp16") else "")
            + (" qk16" if c.get("qk_fp16") else "") + (" qk8" if c.get("qk_e4m3") else "")
            + (" rq" if c.get("reduce_by_query") else "") + (" pdl" if c.get("pdl_reduce") else "")
            + (" vp" if c.get("v_pairs") else "") + (" kp" if c.get("k_pairs") else "")
            + (" ws" if c.get("warp_specialized") else "") + (" q1" if c.get("ws_q_rounded") else "")
            + (" tok" if c.get("ws_token_items") else "") + (" pk" if c.get("ws_pack_gqa") else "")
            + (f" rw{c['reduce_warps']}" if c.get("reduce_warps", 4) != 4 else ""))


def render(env: dict, results: dict) -> str:
    lines = [f"Sweep of static_grid launch configurations on {env.get('gpu')} ({env.get('arch')}), "
             f"{str(env.get('time', ''))[:10]}: graph replay, L2 flushed, median ms "
             f"(`python -m perf tune`).", "",
             "| scenario | default config | default ms | best config | best ms | gain |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        d, b = r["default_ms"], r["best_ms"]
        gain = f"{d / b:.2f}x" if d and b else "n/a"
        ms = ["n/a" if x is None else f"{x:.4f}" for x in (d, b)]
        lines.append(f"| {name} | {_short(r['default'])} | {ms[0]} | {_short(r['best'])} | {ms[1]} | "
                     f"{gain} |")
    return "\n".join(lines) + "\n"


def load_sweep(path: str) -> dict:
    """tune.json of an earlier sweep: {"environment": {...}, "results": {scenario: {...}}}."""
    from perf import files

    doc = files.load_json(path, "a sweep's tune.json", "remove it or pass another --out")
    if not isinstance(doc.get("environment"), dict) or not isinstance(doc.get("results"), dict):
        raise ConfigError(f"{path}: needs an `environment` and a `results` object; not a sweep of "
                          f"`python -m perf tune`: remove it or pass another --out")
    return doc


def main(args: argparse.Namespace) -> int:
    from perf import checkout, files, results, scenarios
    from perf import vendor as vendor_mod
    from perf.measure.rounds import interleave

    stages = [st.strip() for st in args.stages.split(",") if st.strip()]  # checked: check_arguments
    if not vendor_mod.on_gpu():
        raise ConfigError("python -m perf tune: no GPU visible to torch; the sweep times kernels on one (the "
                          "interpreter's timings mean nothing); run it on a GPU machine")
    kernels = checkout.import_kernels(checkout.ROOT)
    from kernels import inputs, platform
    from kernels.paged_attention import heuristics, planning

    chosen = scenarios.select(scenarios.suite(args.suite), args.scenarios)
    files.check_output(args.out, "--out", directory=True)
    env = results.environment(checkout.ROOT)
    sweep = os.path.join(args.out, "tune.json")
    if os.path.exists(sweep):  # an earlier sweep is measured data: another GPU's only with --force
        files.guard_measured(sweep, load_sweep(sweep)["environment"], env, getattr(args, "force", False))
    vendor = platform.current().vendor
    out: dict[str, dict] = {}
    for i, scenario in enumerate(chosen, 1):
        s = _Scenario(kernels, scenario, "cuda")
        decode = all(q == 1 for q in s.spec.query_lens)
        pv_fp16 = planning.pv_fp16_applies(s.batch.q, s.batch.k_cache)
        ocp_e4m3 = s.batch.k_cache.dtype == inputs.OCP_E4M3
        default = heuristics.choose(vendor, heuristics.features_from_spec(s.spec, env["num_sms"]))
        best, best_ms = default, s.measure(default)
        default_ms = best_ms
        for stage in stages:
            configs = candidates(stage, best, decode, pv_fp16, ocp_e4m3)
            print(f"tune [{i}/{len(chosen)}] {scenario.name}: {stage}, {len(configs)} configurations",
                  flush=True)
            s.compile(configs, args.threads)
            timed: list = []  # one round of the measuring loop, the candidates in the stage's order
            interleave(configs, 1, lambda cfg, *_, into=timed, sc=s: into.append((cfg, sc.measure(cfg))),
                       order=lambda i, c: c)
            for cfg, ms in timed:
                if ms is not None and (best_ms is None or ms < best_ms):
                    best, best_ms = cfg, ms
        print(f"tune {scenario.name}: default {default_ms} ms, best {best_ms} ms "
              f"({_short(dataclasses.asdict(best))})", flush=True)
        out[scenario.name] = {
            "digest": s.spec.digest(), "default": dataclasses.asdict(default), "default_ms": default_ms,
            "best": dataclasses.asdict(best), "best_ms": best_ms,
            "tried": [{"config": dataclasses.asdict(c), "ms": ms, "error": err}
                      for c, ms, err in s.tried.values()],
        }
        del s
        import torch

        torch.cuda.empty_cache()
    files.write_json(sweep, {"environment": env, "results": out})
    markdown = render(env, out)
    files.write_text(os.path.join(args.out, "tune.md"), markdown)
    print(markdown, flush=True)
    return 0
