"""Scenarios: named, seeded batch compositions; suites of them in perf/suites.yaml.

A scenario's name encodes it completely and parses back (`Scenario.parse`):

    llama3-8b_bs16_b32_s1024_d50[_c512][_var][_w1024][_cap50][_sinks][_fp8][_bf16]
    model     block batch max    decode  chunk  variable window softcap ...    dtype
              size  size  seqlen share % (new   lengths
                                          tokens per prefill sequence)

The batch is derived from the name alone (seed = crc32 of the name), so it is identical on
every machine; `BatchSpec.digest()` is recorded with every measurement to prove it.
Composition: `batch * decode // 100` sequences decode one token, the rest prefill (their
whole length, or the last `chunk` tokens after a cached context: chunked prefill). With
`_var` the KV lengths are drawn uniformly from [max_seq / 8, max_seq] and one sequence has
max_seq; without it every sequence has max_seq. Sequences are shuffled so decode and
prefill interleave as in a serving engine's batch.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import random
import re
import zlib
from dataclasses import dataclass
from typing import Any

import yaml

from perf.errors import ConfigError

SUITES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suites.yaml")


@dataclass(frozen=True)
class Model:
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    note: str  # where the shape comes from, what it exercises


# Attention shapes from each model's published config.json (num_attention_heads,
# num_key_value_heads, head_dim). Axes of DESIGN 6: MHA, MQA, GQA 5:1 and 7:1, head sizes
# 64, 80, 96, 128, 256.
MODELS = {
    "llama3-8b": Model(32, 8, 128, "Llama-3-8B, GQA 4:1; the paper's model and the default"),
    "llama2-7b": Model(32, 32, 128, "Llama-2-7B, MHA"),
    "falcon-7b": Model(71, 1, 64, "Falcon-7B, MQA with 71 query heads (not a power of two)"),
    "qwen2.5-14b": Model(40, 8, 128, "Qwen2.5-14B, GQA 5:1"),
    "qwen2.5-7b": Model(28, 4, 128, "Qwen2.5-7B, GQA 7:1"),
    "phi-2": Model(32, 32, 80, "Phi-2, head size 80"),
    "phi-3-mini": Model(32, 32, 96, "Phi-3-mini, head size 96"),
    "gemma2-9b": Model(16, 8, 256, "Gemma-2-9B, head size 256; softcap 50, window 4096 in the model"),
    "gpt-oss-20b": Model(64, 8, 64, "gpt-oss-20b, head size 64; sinks and window 128 in the model"),
    "tiny": Model(4, 2, 32, "a toy GQA 2:1 shape small enough for Triton's interpreter (smoke suite)"),
}
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
DEFAULT_DTYPE = "fp16"

_NAME = re.compile(
    r"^(?P<model>[a-z0-9.\-]+)_bs(?P<block>\d+)_b(?P<batch>\d+)_s(?P<seq>\d+)_d(?P<decode>\d+)"
    r"(?:_c(?P<chunk>\d+))?(?P<var>_var)?(?:_w(?P<window>\d+))?(?:_cap(?P<cap>\d+))?"
    r"(?P<sinks>_sinks)?(?P<fp8>_fp8)?(?:_(?P<dtype>bf16|fp32|fp16))?$"
)


@dataclass(frozen=True)
class Scenario:
    model: str  # key of MODELS
    block_size: int  # KV-cache block size (tokens per block)
    batch: int  # sequences in the batch
    max_seq: int  # longest KV length (tokens, new ones included)
    decode: int  # share of decode sequences, percent (0, 50, 100, ...)
    chunk: int | None = None  # chunked prefill: new tokens per prefill sequence
    variable: bool = False  # KV lengths drawn from [max_seq / 8, max_seq]
    window: int | None = None  # sliding window
    softcap: int | None = None  # tanh soft-capping of scores
    sinks: bool = False  # attention sinks (one logit per query head)
    fp8: bool = False  # float8_e4m3fn KV cache
    dtype: str = DEFAULT_DTYPE  # fp16 | bf16 | fp32

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} (known: {', '.join(MODELS)})")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        if not (self.block_size > 0 and self.batch > 0 and self.max_seq > 0 and 0 <= self.decode <= 100):
            raise ValueError(f"block_size, batch and max_seq must be > 0 and decode in 0..100: {self}")
        if self.chunk is not None and self.chunk <= 0:
            raise ValueError("chunk must be > 0")

    @property
    def name(self) -> str:
        parts = [self.model, f"bs{self.block_size}", f"b{self.batch}", f"s{self.max_seq}", f"d{self.decode}"]
        if self.chunk is not None:
            parts.append(f"c{self.chunk}")
        if self.variable:
            parts.append("var")
        if self.window is not None:
            parts.append(f"w{self.window}")
        if self.softcap is not None:
            parts.append(f"cap{self.softcap}")
        if self.sinks:
            parts.append("sinks")
        if self.fp8:
            parts.append("fp8")
        if self.dtype != DEFAULT_DTYPE:
            parts.append(self.dtype)
        return "_".join(parts)

    @classmethod
    def parse(cls, name: str) -> Scenario:
        m = _NAME.match(name)
        if not m:
            raise ValueError(f"scenario name {name!r} does not match "
                             "<model>_bs<N>_b<N>_s<N>_d<pct>[_c<N>][_var][_w<N>][_cap<N>][_sinks][_fp8][_bf16]")
        g = m.groupdict()
        opt = lambda k: int(g[k]) if g[k] is not None else None  # noqa: E731
        return cls(model=g["model"], block_size=int(g["block"]), batch=int(g["batch"]),
                   max_seq=int(g["seq"]), decode=int(g["decode"]), chunk=opt("chunk"),
                   variable=bool(g["var"]), window=opt("window"), softcap=opt("cap"),
                   sinks=bool(g["sinks"]), fp8=bool(g["fp8"]), dtype=g["dtype"] or DEFAULT_DTYPE)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    def lengths(self) -> tuple[list[int], list[int]]:
        """(query_lens, kv_lens) per sequence, deterministic from the name."""
        rng = random.Random(self.seed)
        n_decode = self.batch * self.decode // 100
        kinds = ["decode"] * n_decode + ["prefill"] * (self.batch - n_decode)
        rng.shuffle(kinds)
        q_lens, kv_lens = [], []
        for i, kind in enumerate(kinds):
            kv = self.max_seq
            if self.variable and i > 0:  # sequence 0 keeps max_seq, so the name's max holds
                kv = rng.randint(max(1, self.max_seq // 8), self.max_seq)
            if kind == "decode":
                q = 1
            else:
                q = min(self.chunk, kv) if self.chunk is not None else kv
            q_lens.append(q)
            kv_lens.append(kv)
        return q_lens, kv_lens

    def spec(self):
        """The kernels.batch.BatchSpec this scenario describes."""
        from kernels.batch import BatchSpec

        q_lens, kv_lens = self.lengths()
        m = MODELS[self.model]
        return BatchSpec(
            query_lens=tuple(q_lens), kv_lens=tuple(kv_lens), num_q_heads=m.num_q_heads,
            num_kv_heads=m.num_kv_heads, head_size=m.head_size, block_size=self.block_size,
            dtype=DTYPES[self.dtype], fp8_kv=self.fp8, sliding_window=self.window,
            softcap=None if self.softcap is None else float(self.softcap), sinks=self.sinks,
            seed=self.seed,
        )

    def footprint_bytes(self) -> int:
        """Device memory of the batch (q, out, caches), for sizing suites."""
        q_lens, kv_lens = self.lengths()
        m = MODELS[self.model]
        elem = {"fp16": 2, "bf16": 2, "fp32": 4}[self.dtype]
        blocks = sum(-(-kv // self.block_size) for kv in kv_lens)
        cache = 2 * blocks * self.block_size * m.num_kv_heads * m.head_size * (1 if self.fp8 else elem)
        return cache + 2 * sum(q_lens) * m.num_q_heads * m.head_size * elem


# --- suites ------------------------------------------------------------------------------

_AXES = {  # grid key -> Scenario field
    "model": "model", "block_size": "block_size", "batch": "batch", "max_seq": "max_seq",
    "decode": "decode", "chunk": "chunk", "variable": "variable", "window": "window",
    "softcap": "softcap", "sinks": "sinks", "fp8": "fp8", "dtype": "dtype",
}


def _expand_grid(grid: dict, where: str) -> list[Scenario]:
    for key in grid:
        if key not in _AXES:
            raise ConfigError(f"{SUITES_PATH}: {where}.{key}: unknown axis (expected one of: "
                              f"{', '.join(_AXES)})")
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    out = []
    for values in itertools.product(*axes.values()):
        fields = {"block_size": 16, **{_AXES[k]: v for k, v in zip(axes, values)}}
        try:
            out.append(Scenario(**fields))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{SUITES_PATH}: {where}: {e}") from None
    return out


def load_suites(path: str = SUITES_PATH) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of suite names")
    return data


def suite_names(path: str = SUITES_PATH) -> list[str]:
    return list(load_suites(path))


def suite(name: str, path: str = SUITES_PATH) -> list[Scenario]:
    """The scenarios of a suite, in file order, without duplicates."""
    suites = load_suites(path)
    if name not in suites:
        raise ConfigError(f"{path}: no suite {name!r} (have: {', '.join(suites)}); pass --suite NAME")
    body = suites[name] or {}
    out: list[Scenario] = []
    for i, item in enumerate(body.get("scenarios") or []):
        try:
            out.append(Scenario.parse(item))
        except ValueError as e:
            raise ConfigError(f"{path}: {name}.scenarios[{i}]: {e}") from None
    for i, grid in enumerate(body.get("grids") or []):
        out.extend(_expand_grid(grid, f"{name}.grids[{i}]"))
    seen, unique = set(), []
    for s in out:
        if s.name not in seen:
            seen.add(s.name)
            unique.append(s)
    if not unique:
        raise ConfigError(f"{path}: suite {name!r} has no scenarios")
    return unique


def select(scenarios: list[Scenario], patterns: str | None) -> list[Scenario]:
    """Keep scenarios matching any comma-separated fnmatch glob (all when None)."""
    if not patterns:
        return scenarios
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    kept = [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, g) for g in globs)]
    if not kept:
        raise ConfigError(f"--scenarios {patterns!r} matches no scenario of the suite")
    return kept
