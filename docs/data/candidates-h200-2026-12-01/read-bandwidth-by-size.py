"""What a read of N bytes reaches by size: torch.sum over them (graph replay, L2 flushed, perf.measure.timing), NVIDIA H200, 2026-12-01. Each run writes
$OUT/bwprobe.json; read-bandwidth-by-size.json holds the two runs' files."""
import json, os, torch
from perf.measure import timing
from perf import roofline
lim = roofline.measure_limits()
rows = []
for mb in (67, 134, 268, 537, 1074, 2147):
    n = mb * 10**6
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    cp = timing.time_graph(lambda: dst.copy_(src), samples=25).median
    rd = timing.time_graph(lambda: torch.sum(src.view(torch.bfloat16), dtype=torch.float32), samples=25).median
    rows.append(dict(mb=mb, copy_ms=cp, copy_tb_s=2 * n / cp / 1e9, read_ms=rd, read_tb_s=n / rd / 1e9,
                     read_pct_of_copy_limit=100 * n / (lim.copy_tb_s * 1e12) / (rd * 1e-3)))
    print(rows[-1], flush=True)
    del src, dst
json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": rows},
          open(os.path.join(os.environ["OUT"], "bwprobe.json"), "w"), indent=1)
