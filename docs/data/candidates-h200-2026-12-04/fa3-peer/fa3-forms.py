"""Lab forms of the FlashAttention-3 peer, registered beside it before `perf.lab.candidates` runs: its kernels
alone, q rounded to e4m3 once before the timed calls (`fa3_kernel`), and so with its split count forced
(`fa3_kernel_splitN`; 0, its own heuristic's, otherwise). Every form goes through perf/peers.py's
`flash_attn_3_call` and is checked against the fp32 reference before and after timing, as every peer is.

    python fa3-forms.py PLAN.yaml --peers flash_attn_3,fa3_kernel,fa3_kernel_split1 --out DIR
"""
import sys

from perf import peers
from perf.lab import candidates

SPLITS = (0, 1, 2, 3, 4, 8)


def kernel_alone(num_splits: int):
    def setup(batch, device):
        call, round_q = peers.flash_attn_3_call(batch, device, num_splits)
        q = round_q(batch.q)

        def run():
            return call(q)
        peers._refused("FlashAttention-3", run)
        return run, f"its kernels alone: q rounded to e4m3 before timing, num_splits {num_splits or 'its own'}"
    return setup


for n in SPLITS:
    name = "fa3_kernel" + (f"_split{n}" if n else "")
    peers.register(name, f"FlashAttention-3, kernels alone, splits {n or 'its own'}", "flash_attn_interface",
                   e4m3_products=True)(kernel_alone(n))

if __name__ == "__main__":
    sys.exit(candidates.main(sys.argv[1:]))
