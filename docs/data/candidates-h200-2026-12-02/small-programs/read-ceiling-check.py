import os, sys
os.environ["TRITON_INTERPRET"]="1"
sys.path.insert(0, ".fi/split")
import torch, ceiling
from functools import reduce
nb, bs, heads, w, seqs, keys = 16, 16, 2, 32, 2, 128
k = torch.randint(-2**31, 2**31-1, (nb, bs, heads, w), dtype=torch.int32)
v = torch.randint(-2**31, 2**31-1, (nb, bs, heads, w), dtype=torch.int32)
table = torch.randperm(nb, dtype=torch.int32).view(seqs, -1).contiguous()
lens = torch.full((seqs,), keys, dtype=torch.int32)
items, segs = seqs*heads, 2
sums = torch.zeros(items*segs, dtype=torch.int32)
ceiling.read_kernel[(items*segs,)](k, v, table, lens, sums, k.stride(0), k.stride(1), k.stride(2), table.stride(0), heads, items, keys//segs, keys, W=w, BLOCK=bs, TILE=32, STAGES=2, DENSE=False)
got = reduce(lambda a,b: a^b, sums.tolist())
want = reduce(lambda a,b: a^b, (k.flatten()^v.flatten()).tolist())
print(got == want, got, want)
