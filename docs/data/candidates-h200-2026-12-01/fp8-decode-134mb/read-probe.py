"""What a streaming read of 134 and 268 MB reaches, NVIDIA H200, 2026-12-01: torch.sum against a Triton kernel that
reads contiguous chunks (1-16 programs per SM, 2-8k words a load, 4 or 8 warps) and stores one word a program; graph
replay, L2 flushed (perf.measure.timing). Run from the repository root; writes $OUT/readprobe.json (read-probe.json)."""
import json, os, torch, triton, triton.language as tl
from perf.measure import timing
from perf import roofline

@triton.jit
def read_kernel(src, out, words_per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * words_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(0, words_per_prog, BLOCK):
        acc ^= tl.load(src + base + i + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, 0))

lim = roofline.measure_limits()
sms = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for mb in (134, 268):
    n = mb * 10**6
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    words = src.view(torch.int32)
    nw = words.numel()
    out = torch.empty(1 << 16, dtype=torch.int32, device="cuda")
    cands = {"torch.sum": (n, lambda: torch.sum(src.view(torch.bfloat16), dtype=torch.float32))}
    for progs in (sms, 2 * sms, 3 * sms, 4 * sms, 8 * sms, 16 * sms):
        for block, warps in ((2048, 4), (4096, 8), (8192, 8)):
            per = -(-(nw // progs) // block) * block  # words a program reads, whole blocks
            g = nw // per  # whole chunks only: the bytes read are g * per * 4 (<= n)
            cands[f"triton progs={g} block={block} warps={warps}"] = (
                g * per * 4, lambda g=g, per=per, block=block, warps=warps:
                read_kernel[(g,)](words, out, per, BLOCK=block, num_warps=warps))
    for name, (nbytes, fn) in cands.items():
        try:
            ms = timing.time_graph(fn, samples=25).median
        except Exception as e:
            print(name, "failed", e); continue
        rows.append(dict(mb=mb, name=name, bytes=nbytes, ms=ms,
                         pct_of_copy_limit=100 * nbytes / (lim.copy_tb_s * 1e12) / (ms * 1e-3)))
        print(rows[-1], flush=True)
    del src
json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": rows},
          open(os.path.join(os.environ.get("OUT", "/tmp"), "readprobe.json"), "w"), indent=1)
