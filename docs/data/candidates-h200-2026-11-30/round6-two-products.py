"""Two wgmma products sharing A, their B operands made in registers from one int16 tile (its low
and high bytes as e4m3 -> fp16): is the second product wrong on sm_90 (triton 3.6.0)?"""
import sys
import torch
import triton
import triton.language as tl


@triton.jit
def two_products(p_ptr, v_ptr, out_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, SPLIT: tl.constexpr):
    rows = tl.arange(0, M)
    keys = tl.arange(0, K)
    cols = tl.arange(0, N)
    p = tl.load(p_ptr + rows[:, None] * K + keys[None, :])                    # [M, K] fp16
    pairs = tl.load(v_ptr + keys[:, None] * N + cols[None, :])                # [K, N] int16
    if SPLIT == 0:  # Triton's integer ops
        lo = pairs.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
        hi = (pairs >> 8).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
    else:  # the product's operands through one fp16 tensor each, no fp8 at all
        lo = (pairs & 0xFF).to(tl.float16)
        hi = ((pairs >> 8) & 0xFF).to(tl.float16)
    even = tl.dot(p, lo)
    odd = tl.dot(p, hi)
    tl.store(out_ptr + rows[:, None] * (2 * N) + 2 * cols[None, :], even)
    tl.store(out_ptr + rows[:, None] * (2 * N) + 2 * cols[None, :] + 1, odd)


def check(M, K, N, warps, split):
    g = torch.Generator().manual_seed(0)
    p = (torch.rand(M, K, generator=g) / K).half().cuda()
    raw = torch.randint(0, 0x7E, (K, 2 * N), generator=g, dtype=torch.uint8)  # finite e4m3 bytes
    v_bytes = raw.cuda()
    pairs = v_bytes.view(torch.int16)                                          # [K, N]
    out = torch.full((M, 2 * N), float("nan"), device="cuda")
    two_products[(1,)](p, pairs, out, M, K, N, split, num_warps=warps)
    if split == 0:
        v = v_bytes.view(torch.float8_e4m3fn).float()
    else:
        v = v_bytes.float()
    ref = p.float() @ v
    err = (out - ref).abs() / (ref.abs() + 1e-3)
    even, odd = err[:, 0::2].max().item(), err[:, 1::2].max().item()
    print(f"M {M} K {K} N {N} warps {warps} split {split}: rel err even {even:.2e} odd {odd:.2e}", flush=True)


if __name__ == "__main__":
    for M, K, N, warps in [(64, 128, 32, 4), (64, 64, 32, 4), (64, 32, 32, 4), (64, 128, 32, 8), (64, 128, 64, 4),
                           (128, 128, 32, 8), (32, 128, 32, 4)]:
        for split in (0, 1):
            check(M, K, N, warps, split)
