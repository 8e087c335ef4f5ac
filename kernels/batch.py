"""PagedBatch: every tensor and option one paged-attention call needs.

A batch is described by a `BatchSpec` (per-sequence query and KV lengths, model heads,
cache layout, dtype, features, seed) and built by `build_batch`, deterministically from the
seed on any machine; an fp8 cache comes in the format native to the device (FNUZ on an
MI300, OCP elsewhere) or the one asked for. Physical cache blocks are handed out in
shuffled order, so block tables are never contiguous and a kernel that ignores the table
cannot pass. The cache is sized from the batch (the blocks the sequences need plus a few
unused ones).

`poison=True` (the correctness grid) fills every cache slot no sequence owns with NaN, as
recycled or uninitialized memory of a serving engine may hold anything: the slots of a
sequence's last block past its seq_len, and every block no sequence uses (the spare ones;
block-table entries past a sequence's last block name one of them, as vLLM's padding
entries name its never-written null block). A kernel that lets any of them into a
sequence's arithmetic (0 * NaN is NaN) turns that sequence's output into NaN.

With a sliding window W, `poison=True` also releases what a serving engine releases: the
leading blocks of a sequence that lie wholly before the window of every one of its queries
(each of their keys more than W - 1 positions before the first query; `released_blocks`).
vLLM frees them and points their block-table entries at its null block; here their entries
name the spare NaN block and the blocks themselves, owned by no one now, are NaN too. The
block that holds the first key some query sees keeps every slot, including the ones before
that key. A kernel must not read a released block: not load a tile wholly before the window,
and mask the K and V loads (not only the scores) of a tile that reaches into one.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

import torch

from kernels import inputs, platform

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
SPARE_BLOCKS = 3  # unused blocks in every cache, so "block 0" or "last block" bugs show


@dataclass(frozen=True)
class BatchSpec:
    """What a batch looks like; hashable, JSON-friendly, the same on every machine."""

    query_lens: tuple[int, ...]  # new tokens per sequence (1 = decode)
    kv_lens: tuple[int, ...]  # total KV length per sequence, new tokens included
    num_q_heads: int = 32
    num_kv_heads: int = 8
    head_size: int = 128
    block_size: int = 16
    dtype: str = "float16"  # q, k, v and output dtype
    fp8_kv: bool = False  # store K/V in fp8 (the target's format, see build_batch) with per-tensor scales
    sliding_window: int | None = None  # keys with pos - key_pos >= window are masked
    softcap: float | None = None  # scores -> softcap * tanh(scores / softcap)
    sinks: bool = False  # one learned logit per query head joins the softmax denominator
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "query_lens", tuple(int(x) for x in self.query_lens))
        object.__setattr__(self, "kv_lens", tuple(int(x) for x in self.kv_lens))
        if len(self.query_lens) != len(self.kv_lens) or not self.query_lens:
            raise ValueError("query_lens and kv_lens must be non-empty and of equal length")
        for q, kv in zip(self.query_lens, self.kv_lens):
            if q < 1 or kv < q:
                raise ValueError(f"need 1 <= query_len <= kv_len, got ({q}, {kv})")
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    def blocks_per_seq(self) -> list[int]:
        return [math.ceil(kv / self.block_size) for kv in self.kv_lens]

    def digest(self) -> str:
        """Stable hash of the description: equal digests mean identical batches."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class PagedBatch:
    """The tensors of one call, in the layout of the kernel contract (`kernels.reference`)."""

    spec: BatchSpec
    q: torch.Tensor  # [num_tokens, num_q_heads, head_size]
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_size]
    v_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_size]
    block_table: torch.Tensor  # [num_seqs, max_blocks] int32: logical block -> physical block
    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32: start of each sequence's queries in q
    seq_lens: torch.Tensor  # [num_seqs] int32: KV length including the new tokens
    options: dict = field(default_factory=dict)  # scale, sliding_window, softcap, sinks, k/v_scale

    def args(self) -> tuple:
        return (self.q, self.k_cache, self.v_cache, self.block_table, self.cu_seqlens_q,
                self.seq_lens)

    def to(self, device: str | torch.device) -> PagedBatch:
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v)
                 for k, v in self.options.items()}
        return PagedBatch(self.spec, *(t.to(device) for t in self.args()), options=moved)

    def new_output(self) -> torch.Tensor:
        """An output buffer poisoned with NaN, so unwritten elements fail any comparison."""
        return torch.full_like(self.q, float("nan"))

    def owned_slots(self) -> torch.Tensor:
        """[num_blocks, block_size] bool: the cache slots some sequence owns (`owned_slots`;
        under a sliding window, not those of the blocks it released, `released_blocks`)."""
        block_size = self.k_cache.shape[1]
        released = None
        if self.options.get("sliding_window"):
            cu = self.cu_seqlens_q.cpu().tolist()
            query_lens = [b - a for a, b in zip(cu, cu[1:])]
            released = released_blocks(query_lens, self.seq_lens.cpu().tolist(), block_size,
                                       self.options["sliding_window"])
        return owned_slots(self.block_table, self.seq_lens, self.k_cache.shape[0], block_size, released)


def released_blocks(query_lens, kv_lens, block_size: int, sliding_window: int | None) -> list[int]:
    """Per sequence, how many of its leading blocks lie wholly before the sliding window of
    every one of its queries: each key of them is more than window - 1 positions before the
    first query (at kv_len - query_len), so no query sees it. A serving engine frees them
    (`poison=True` does, see the module's docstring). 0 for each without a window."""
    if not sliding_window or sliding_window <= 0:
        return [0] * len(kv_lens)
    return [max(kv - q - sliding_window + 1, 0) // block_size for q, kv in zip(query_lens, kv_lens)]


def owned_slots(block_table: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int,
                block_size: int, released: list[int] | None = None) -> torch.Tensor:
    """[num_blocks, block_size] bool: True where a sequence owns the slot (one of its first
    seq_len positions, through its block table, past the `released` leading blocks of each
    sequence: `released_blocks`); everything else is nobody's."""
    table = block_table.cpu().long()
    lens = seq_lens.cpu().long()
    positions = torch.arange(table.shape[1] * block_size)
    used = positions[None, :] < lens[:, None]  # [num_seqs, width * block_size]
    if released is not None:
        used &= positions[None, :] >= torch.tensor(released, dtype=torch.long)[:, None] * block_size
    slots = table[:, positions // block_size] * block_size + positions % block_size
    owned = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    owned[slots[used]] = True
    return owned.view(num_blocks, block_size)


def poison_unowned(cache: torch.Tensor, owned: torch.Tensor) -> None:
    """Write NaN into every slot of `cache` ([num_blocks, block_size, ...]) that `owned` (from
    `owned_slots`) leaves False: float NaN, or for an fp8 cache its format's NaN byte
    (`inputs.Fp8Format.nan_byte`)."""
    unowned = ~owned.to(cache.device)
    if inputs.is_fp8(cache.dtype):
        cache.view(torch.uint8)[unowned] = inputs.FP8_FORMATS[cache.dtype].nan_byte
    else:
        cache[unowned] = float("nan")


def build_batch(spec: BatchSpec, device: str | torch.device = "cpu", fill: bool = True,
                fp8_dtype: torch.dtype | None = None, poison: bool = False) -> PagedBatch:
    """Make the batch `spec` describes; the same seed gives the same tensors everywhere.

    `fill=False` leaves q and the caches unwritten (`torch.empty`): shapes, dtypes, strides,
    block table, sequence metadata and option keys are the same, the fp8 scales are 1. For
    planning and compiling, where a multi-GB cache then costs no memory (the pages of an
    untouched allocation are never mapped).

    `fp8_dtype`: the format of an fp8 cache (`spec.fp8_kv`), one of `inputs.FP8_FORMATS`;
    None: the one native to this process's device (`inputs.fp8_dtype_for`: FNUZ on an
    MI300, OCP elsewhere, the interpreter included). The same seed gives the same values
    in either format (scaled to each format's range), not the same bytes.

    `poison`: NaN in every cache slot no sequence owns, and block-table entries past a
    sequence's last block pointing at a spare (NaN) block (see the module's docstring); with
    a sliding window, the entries of the blocks wholly before every query's window
    (`released_blocks`) point at that spare block too, and the blocks they named are NaN.
    The owned slots, the scales and everything else are what `poison=False` gives.
    """
    if fp8_dtype is None:
        fp8_dtype = inputs.fp8_dtype_for(platform.current().arch)
    if not inputs.is_fp8(fp8_dtype):
        raise ValueError(f"fp8_dtype must be one of {', '.join(map(str, inputs.FP8_FORMATS))}, "
                         f"got {fp8_dtype}")
    gen = torch.Generator().manual_seed(spec.seed)
    dtype = spec.torch_dtype

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    blocks = spec.blocks_per_seq()
    num_blocks = sum(blocks) + SPARE_BLOCKS
    physical = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    block_table = torch.zeros(spec.num_seqs, max(blocks), dtype=torch.int32)
    start = 0
    for i, n in enumerate(blocks):
        block_table[i, :n] = physical[start:start + n]
        start += n
    released = released_blocks(spec.query_lens, spec.kv_lens, spec.block_size, spec.sliding_window)
    if poison:  # entries past each sequence's last block and released ones: a spare, all NaN below
        for i, n in enumerate(blocks):
            block_table[i, n:] = physical[-1]
            block_table[i, :released[i]] = physical[-1]

    cache_shape = (num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size)
    q_shape = (spec.num_tokens, spec.num_q_heads, spec.head_size)
    options: dict = {"scale": 1.0 / math.sqrt(spec.head_size)}
    if not fill:
        cache_dtype = fp8_dtype if spec.fp8_kv else dtype
        q = torch.empty(q_shape, dtype=dtype, device=device)
        k_cache, v_cache = (torch.empty(cache_shape, dtype=cache_dtype, device=device) for _ in range(2))
        if spec.fp8_kv:
            options["k_scale"], options["v_scale"] = torch.ones(1), torch.ones(1)
    else:
        q = randn(*q_shape).to(dtype)
        k_cache, v_cache = randn(*cache_shape), randn(*cache_shape)
        if spec.fp8_kv:
            # Per-tensor scales as vLLM computes them: amax / the format's largest finite value;
            # values clamped to +-max before rounding, as vLLM's fp8 quantization does (a value
            # rounding past FNUZ's 240 would become NaN, not saturate).
            fp8_max = inputs.FP8_FORMATS[fp8_dtype].max
            k_scale, v_scale = k_cache.abs().max() / fp8_max, v_cache.abs().max() / fp8_max
            k_cache = (k_cache / k_scale).clamp(-fp8_max, fp8_max).to(fp8_dtype)
            v_cache = (v_cache / v_scale).clamp(-fp8_max, fp8_max).to(fp8_dtype)
            options["k_scale"], options["v_scale"] = k_scale.reshape(1), v_scale.reshape(1)
        else:
            k_cache, v_cache = k_cache.to(dtype), v_cache.to(dtype)
    if poison:
        owned = owned_slots(block_table, torch.tensor(spec.kv_lens), num_blocks, spec.block_size, released)
        for cache in (k_cache, v_cache):
            poison_unowned(cache, owned)
    if spec.sliding_window is not None:
        options["sliding_window"] = spec.sliding_window
    if spec.softcap is not None:
        options["softcap"] = spec.softcap
    if spec.sinks:
        options["sinks"] = randn(spec.num_q_heads) * 2.0  # float32 logits, like gpt-oss

    cu = [0]
    for n in spec.query_lens:
        cu.append(cu[-1] + n)
    batch = PagedBatch(
        spec=spec,
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        block_table=block_table,
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(spec.kv_lens, dtype=torch.int32),
        options=options,
    )
    return batch.to(device)
