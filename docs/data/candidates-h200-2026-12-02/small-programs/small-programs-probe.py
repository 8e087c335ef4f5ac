"""Probe: many small programs over the paged fp8 decode's bytes, and how much of the copy limit each rung of a
decode keeps. A program takes one segment of SEG keys of one (sequence, KV head) item; a grid of items x
segments programs, several resident on an SM (no warp specialization, no TMA: plain loads, Triton's own
software pipeline over STAGES). The rungs (MODE):
  0  read: K and V bytes summed as integers (the bound of this grid),
  1  convert: K and V converted to fp16 and summed,
  3  decode: both products on fp16 tensor cores (q in fp16), online softmax; each program stores its
     normalised part (the output's dtype) and its log-sum-exp; merged afterwards by torch (untimed),
  4  decode and merge: as 3, and the last program of an item to finish (a counter an item, acq_rel)
     merges the item's parts into the output and zeroes its counter: one launch, no reduction kernel.
Beside them, the production entry (static_grid) on the same batch, timed in the same process (the harness's
graph replay, L2 flushed before every sample). Rungs 3 and 4 are checked against an fp32 reference on a
poisoned output before they are timed. Run from the repository root on an sm_90 GPU; writes $OUT/split.json.
On a CPU with TRITON_INTERPRET=1, `python probe.py --check` runs the small correctness cases only."""
import itertools
import json
import math
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def split_decode(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr, lock_ptr,
                 s_qt, s_qh, s_kb, s_kp, s_kh, s_bt, s_ot, s_oh,
                 kv_heads, items, seg_keys, qk_scale, v_scale,
                 GROUP: tl.constexpr, ROWS: tl.constexpr, MROWS: tl.constexpr, D: tl.constexpr,
                 BLOCK: tl.constexpr, TILE: tl.constexpr, SEGS: tl.constexpr, MODE: tl.constexpr,
                 STAGES: tl.constexpr, EVEN: tl.constexpr):
    pid = tl.program_id(0)
    item = pid % items  # programs item-major within a segment index: the first wave spreads over the items
    seg = pid // items
    seq = item // kv_heads
    head = item % kv_heads
    n = tl.load(lens_ptr + seq)
    start = seg * seg_keys
    end = tl.minimum(start + seg_keys, n)
    rows = tl.arange(0, ROWS)
    dims = tl.arange(0, D)
    keys = tl.arange(0, TILE)
    table = table_ptr + seq.to(tl.int64) * s_bt
    if MODE >= 3:
        q = tl.load(q_ptr + seq * s_qt + (head * GROUP + rows)[:, None] * s_qh + dims[None, :],
                    mask=(rows < GROUP)[:, None], other=0.0).to(tl.float16)
    m = tl.full([ROWS], float("-inf"), tl.float32)
    l = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, D], tl.float32)
    isum = tl.zeros([TILE, D], tl.int32)
    hsum = tl.zeros([TILE, D], tl.float16)
    for t0 in tl.range(start, end, TILE, num_stages=STAGES):
        pos = t0 + keys
        if EVEN:
            block = tl.load(table + pos // BLOCK)
            off = block * s_kb + (pos % BLOCK) * s_kp + head * s_kh
            k = tl.load(k_ptr + off[:, None] + dims[None, :])
            v = tl.load(v_ptr + off[:, None] + dims[None, :])
        else:
            ok = pos < end
            block = tl.load(table + pos // BLOCK, mask=ok, other=0)
            off = block * s_kb + (pos % BLOCK) * s_kp + head * s_kh
            k = tl.load(k_ptr + off[:, None] + dims[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(v_ptr + off[:, None] + dims[None, :], mask=ok[:, None], other=0.0)
        if MODE == 0:
            isum += k.to(tl.uint8, bitcast=True).to(tl.int32) + v.to(tl.uint8, bitcast=True).to(tl.int32)
        elif MODE == 1:
            hsum += k.to(tl.float16) + v.to(tl.float16)
        else:
            s = tl.dot(q, tl.trans(k.to(tl.float16))) * qk_scale  # log2 domain
            if not EVEN:
                s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(s - m_new[:, None])
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
            m = m_new
    if MODE == 0:
        tl.store(out_ptr + pid, tl.sum(tl.sum(isum, 1), 0).to(out_ptr.dtype.element_ty))
    elif MODE == 1:
        tl.store(out_ptr + pid, tl.sum(tl.sum(hsum.to(tl.float32), 1), 0).to(out_ptr.dtype.element_ty))
    else:
        # the part normalised in the output's dtype, its log-sum-exp (log2) in fp32; an empty segment: -inf
        safe = tl.where(l > 0, l, 1.0)
        part = acc / safe[:, None] * v_scale
        lse = tl.where(l > 0, m + tl.log2(safe), float("-inf"))
        here = item * SEGS + seg
        tl.store(part_ptr + (here * GROUP + rows)[:, None] * D + dims[None, :], part.to(part_ptr.dtype.element_ty),
                 mask=(rows < GROUP)[:, None])
        tl.store(lse_ptr + here * ROWS + rows, lse)
        if MODE == 4:
            tl.debug_barrier()  # every thread's part stored before the counter's release
            if tl.atomic_add(lock_ptr + item, 1, sem="acq_rel", scope="gpu") == SEGS - 1:
                mr = tl.arange(0, MROWS)
                segs = tl.arange(0, SEGS)
                lses = tl.load(lse_ptr + (item * SEGS + segs)[:, None] * ROWS + mr[None, :], cache_modifier=".cg")
                top = tl.max(lses, 0)
                top = tl.where(top == float("-inf"), 0.0, top)
                total = tl.zeros([MROWS, D], tl.float32)
                weight = tl.zeros([MROWS], tl.float32)
                for i in tl.static_range(SEGS):
                    w = tl.exp2(tl.load(lse_ptr + (item * SEGS + i) * ROWS + mr, cache_modifier=".cg") - top)
                    got = tl.load(part_ptr + ((item * SEGS + i) * GROUP + mr)[:, None] * D + dims[None, :],
                                  mask=(mr < GROUP)[:, None], other=0.0, cache_modifier=".cg")
                    total += got.to(tl.float32) * w[:, None]
                    weight += w
                tl.store(out_ptr + seq * s_ot + (head * GROUP + mr)[:, None] * s_oh + dims[None, :],
                         (total / weight[:, None]).to(out_ptr.dtype.element_ty), mask=(mr < GROUP)[:, None])
                tl.atomic_xchg(lock_ptr + item, 0)


class Split:
    """One launch configuration of split_decode over a paged decode batch (one query a sequence)."""

    def __init__(self, batch, segs, tile, warps, stages, mode):
        q, k = batch.q, batch.k_cache
        self.batch, self.segs, self.mode = batch, segs, mode
        seqs, kv_heads, d = batch.block_table.shape[0], k.shape[2], k.shape[3]
        self.group = q.shape[1] // kv_heads
        self.items = seqs * kv_heads
        longest = int(batch.seq_lens.max())
        seg_keys = triton.cdiv(triton.cdiv(longest, segs), tile) * tile
        self.seg_keys = seg_keys
        even = bool((batch.seq_lens.cpu() % seg_keys == 0).all()) and longest == segs * seg_keys
        dev = q.device
        self.part = torch.empty(self.items * segs * self.group, d, dtype=q.dtype, device=dev)
        self.rows = max(16, triton.next_power_of_2(self.group))
        self.lse = torch.empty(self.items * segs * self.rows, dtype=torch.float32, device=dev)
        self.lock = torch.zeros(self.items, dtype=torch.int32, device=dev)
        self.sums = torch.empty(self.items * segs, dtype=torch.float32, device=dev)
        opts = batch.options
        self.qk_scale = opts["scale"] * float(opts.get("k_scale", torch.ones(1)).item()) * math.log2(math.e)
        self.v_scale = float(opts.get("v_scale", torch.ones(1)).item())
        self.kw = dict(GROUP=self.group, ROWS=self.rows, MROWS=triton.next_power_of_2(self.group), D=d,
                       BLOCK=k.shape[1], TILE=tile, SEGS=segs, MODE=mode, STAGES=stages, EVEN=even, num_warps=warps)

    def __call__(self, out):
        b, k = self.batch, self.batch.k_cache
        dst = out if self.mode == 4 else self.sums
        split_decode[(self.items * self.segs,)](
            b.q, k, b.v_cache, b.block_table, b.seq_lens, dst, self.part, self.lse, self.lock,
            b.q.stride(0), b.q.stride(1), k.stride(0), k.stride(1), k.stride(2), b.block_table.stride(0),
            out.stride(0), out.stride(1), k.shape[2], self.items, self.seg_keys, self.qk_scale, self.v_scale,
            **self.kw)

    def merged(self, out):
        """Rung 3's parts merged by torch into out's shape (untimed: the check only)."""
        seqs, kv_heads = self.batch.block_table.shape[0], self.batch.k_cache.shape[2]
        part = self.part.float().view(seqs, kv_heads, self.segs, self.group, -1)
        lse = self.lse.view(seqs, kv_heads, self.segs, self.rows)[..., : self.group]
        w = torch.softmax(lse * math.log(2), dim=2).nan_to_num(0.0)
        return (part * w[..., None]).sum(2).reshape(out.shape).to(out.dtype)


def reference(batch):
    """fp32 attention of each sequence's one query over its dequantised keys."""
    q, k, v, bt, lens = batch.q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens
    opts = batch.options
    ks = float(opts.get("k_scale", torch.ones(1)).item())
    vs = float(opts.get("v_scale", torch.ones(1)).item())
    kv_heads, group = k.shape[2], q.shape[1] // k.shape[2]
    outs = []
    for s in range(bt.shape[0]):
        n = int(lens[s])
        blocks = bt[s, : triton.cdiv(n, k.shape[1])].long()
        kk = k[blocks].float().reshape(-1, kv_heads, k.shape[3])[:n] * ks
        vv = v[blocks].float().reshape(-1, kv_heads, k.shape[3])[:n] * vs
        qq = q[s].float().view(kv_heads, group, -1)
        a = torch.einsum("hgd,nhd->hgn", qq, kk) * opts["scale"]
        outs.append(torch.einsum("hgn,nhd->hgd", a.softmax(-1), vv).reshape(q.shape[1], -1))
    return torch.stack(outs)


def check(run, batch, ref):
    out = batch.new_output().fill_(float("nan"))
    run(out)
    got = out if run.mode == 4 else run.merged(out)
    err = (got.float() - ref).abs().max().item()
    assert err <= 0.02, f"max error {err}"
    if run.mode == 4:
        assert int(run.lock.sum()) == 0, "counters not zeroed"
    return err


def small_checks(device):
    from kernels.batch import BatchSpec, build_batch

    for group, lens, block, segs, tile in ((7, (300, 700), 16, 4, 32), (4, (256, 1024), 32, 2, 64),
                                           (7, (512, 512), 16, 2, 64)):
        spec = BatchSpec((1,) * len(lens), lens, num_q_heads=4 * group, num_kv_heads=4, head_size=128,
                         block_size=block, dtype="bfloat16", fp8_kv=True)
        batch = build_batch(spec, device)
        ref = reference(batch)
        for mode in (3, 4):
            err = check(Split(batch, segs, tile, 4, 2, mode), batch, ref)
            print(f"check group {group} lens {lens} block {block} segs {segs} tile {tile} mode {mode}: "
                  f"max error {err:.4f}", flush=True)


def main():
    from kernels import VARIANTS
    from kernels.batch import build_batch
    from perf import roofline, scenarios
    from perf.measure import timing
    from perf.measure.cases import host_hints

    out_dir = os.environ.get("OUT", "/tmp")
    names = os.environ.get("SCENARIOS", "qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16").split(",")
    segs_list = [int(x) for x in os.environ.get("SEGS", "4,8,16").split(",")]
    tiles = [int(x) for x in os.environ.get("TILES", "32,64").split(",")]
    warps_list = [int(x) for x in os.environ.get("WARPS", "2,4").split(",")]
    stage_list = [int(x) for x in os.environ.get("STAGES", "2,3").split(",")]
    modes = [int(x) for x in os.environ.get("MODES", "0,3,4").split(",")]
    rounds = int(os.environ.get("ROUNDS", "3"))
    if os.environ.get("SMALL_CHECKS", "1") == "1":
        small_checks("cuda")
    lim = roofline.measure_limits()
    doc = {"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": []}
    for name in names:
        spec = scenarios.Scenario.parse(name).spec()
        batch = build_batch(spec, "cuda")
        ref = reference(batch)
        limit = roofline.limit_ms(spec, lim)
        out = batch.new_output()
        hints = host_hints(VARIANTS["static_grid"], spec)
        tree = lambda: VARIANTS["static_grid"](*batch.args(), out=out, **batch.options, **hints)
        found = {"static_grid": tree}
        for segs, tile, warps, stages, mode in itertools.product(segs_list, tiles, warps_list, stage_list, modes):
            if segs * tile > max(spec.kv_lens):
                continue
            if (mode == 0 and stages != max(stage_list)) or (mode == 3 and stages != min(stage_list)):
                continue  # the read's and the unmerged decode's rungs once a shape: the bounds beside rung 4
            label = f"mode{mode} s{segs} t{tile} w{warps} st{stages}"
            try:
                run = Split(batch, segs, tile, warps, stages, mode)
                if mode >= 3:
                    err = check(run, batch, ref)
                run(out)
                torch.cuda.synchronize()
            except Exception as e:  # a configuration that does not compile or fails its check is reported
                print(f"{name} {label}: failed {repr(e)[:300]}", flush=True)
                continue
            found[label] = run
        calls = {label: (fn if label == "static_grid" else (lambda run=fn: run(out))) for label, fn in found.items()}
        graphs = {label: timing.capture_graph(fn) for label, fn in calls.items()}
        times = {label: [] for label in found}
        for r in range(rounds):
            order = list(found) if r % 2 == 0 else list(reversed(found))
            for label in order:
                times[label].append(timing.time_graph(calls[label], samples=25, graph=graphs[label]).median)
        for label, t in times.items():
            ms = sorted(t)[len(t) // 2]
            row = dict(scenario=name, label=label, ms=ms, pct=100 * limit / ms, rounds=t)
            if label != "static_grid" and found[label].mode >= 3:  # checked again after its graph replays
                graphs[label].replay()
                torch.cuda.synchronize()
                if found[label].mode == 4:
                    assert int(found[label].lock.sum()) == 0, f"{label}: counters not zeroed after replays"
                row["max_error_after"] = check(found[label], batch, ref)
            if label != "static_grid":
                kw = found[label].kw
                row.update(segs=kw["SEGS"], tile=kw["TILE"], warps=kw["num_warps"], stages=kw["STAGES"],
                           mode=kw["MODE"])
            doc["rows"].append(row)
            print(f"{name} {label}: {ms * 1e3:.1f} us, {row['pct']:.1f} %", flush=True)
        with open(os.path.join(out_dir, f"split-{os.environ.get('TAG', 'all')}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        del graphs, found
        torch.cuda.empty_cache()


if __name__ == "__main__":
    if "--check" in sys.argv:
        small_checks("cpu")
    else:
        main()
