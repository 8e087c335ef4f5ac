"""Scenarios: named, seeded batch compositions; suites of them in perf/suites.yaml.

A scenario's name says what the batch is, segment by segment, and parses back
(`Scenario.parse`):

    llama3-8b/mixed50/batch16-kv1024-var-chunk256/block16/window1024/softcap50/sinks/fp8/bf16
    model    /kind   /shape                      /cache  /features, each optional, in this order

- model: a key of MODELS (attention heads and head size from the model's config.json);
- kind: `prefill` (every sequence prefills), `decode` (every sequence decodes one token)
  or `mixed<P>` (P % of the sequences decode, the rest prefill; 0 < P < 100);
- shape: `batch<B>` sequences, `kv<L>` KV tokens per sequence (new ones included);
  `-var`: KV lengths drawn uniformly from [L / 8, L], one sequence keeping L;
  `-chunk<C>`: chunked prefill, each prefill sequence computes its last C tokens after a
  cached context (without it a prefill computes its whole length);
- cache: `block<S>`, tokens per KV-cache block;
- features: `window<W>` (sliding window), `softcap<C>` (tanh soft-capping of scores),
  `sinks` (one learned logit per query head), `fp8` (e4m3 KV cache in the target's native
  format: FNUZ on gfx942, OCP elsewhere), and the dtype of q/k/v/out when it is not fp16
  (`bf16`, `fp32`).

Sequences are shuffled so decode and prefill interleave as in a serving engine's batch.
The batch follows from the scenario alone (seeded, see `Scenario.seed`), so it is
identical on every machine; `BatchSpec.digest()` is recorded with every measurement.

Earlier names (`llama3-8b_bs16_b8_s16_d0`: block size, batch, max KV, decode %) still
parse, to the same scenario and the same batch: the seed is the CRC-32 of that compact
form (`Scenario.seed_key`), so renaming changed no batch. Results files written under the
old names are read under the new ones (`canonical_name`, used by perf.results.load).
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
# num_key_value_heads, head_dim). The axes they cover: MHA, MQA, GQA 5:1 and 7:1, head sizes
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

_SHAPE = re.compile(r"^batch(?P<batch>\d+)-kv(?P<kv>\d+)(?P<var>-var)?(?:-chunk(?P<chunk>\d+))?$")
_FEATURE = re.compile(r"^(?:window(?P<window>\d+)|softcap(?P<softcap>\d+)|(?P<flag>sinks|fp8)|"
                      r"(?P<dtype>fp16|bf16|fp32))$")
GRAMMAR = ("<model>/{prefill|decode|mixed<P>}/batch<B>-kv<L>[-var][-chunk<C>]/block<S>"
           "[/window<W>][/softcap<C>][/sinks][/fp8][/bf16|/fp32]")
_LEGACY = re.compile(  # the names used before the rename; parsed to the same scenarios
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
    fp8: bool = False  # fp8 e4m3 KV cache (kernels.batch.build_batch picks the format)
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
    def kind(self) -> str:
        """prefill, decode or mixed<P> (P % of the sequences decode)."""
        return {0: "prefill", 100: "decode"}.get(self.decode, f"mixed{self.decode}")

    @property
    def name(self) -> str:
        shape = f"batch{self.batch}-kv{self.max_seq}" + ("-var" if self.variable else "") \
            + (f"-chunk{self.chunk}" if self.chunk is not None else "")
        return "/".join([self.model, self.kind, shape, f"block{self.block_size}",
                         *self._features("window", "softcap")])

    @property
    def seed_key(self) -> str:
        """The compact form the seed is drawn from (the scenario's name before the rename)."""
        parts = [self.model, f"bs{self.block_size}", f"b{self.batch}", f"s{self.max_seq}", f"d{self.decode}"]
        if self.chunk is not None:
            parts.append(f"c{self.chunk}")
        if self.variable:
            parts.append("var")
        return "_".join(parts + self._features("w", "cap"))

    def _features(self, window: str, softcap: str) -> list[str]:
        """Feature segments, in the order both name forms use."""
        return [*([f"{window}{self.window}"] if self.window is not None else []),
                *([f"{softcap}{self.softcap}"] if self.softcap is not None else []),
                *(flag for flag, on in (("sinks", self.sinks), ("fp8", self.fp8)) if on),
                *([self.dtype] if self.dtype != DEFAULT_DTYPE else [])]

    @classmethod
    def parse(cls, name: str) -> Scenario:
        """The scenario of a name (the module docstring's grammar, or an earlier name)."""
        if "/" not in name and _LEGACY.match(name):
            return cls._parse_legacy(name)
        parts = name.split("/")
        if len(parts) < 4:
            raise ValueError(f"scenario name {name!r} does not match {GRAMMAR}")
        model, kind, shape, block, *features = parts
        decode = {"prefill": 0, "decode": 100}.get(kind)
        if decode is None:
            m = re.fullmatch(r"mixed(\d+)", kind)
            if not m or not 0 < int(m.group(1)) < 100:
                raise ValueError(f"scenario {name!r}: kind {kind!r} is not prefill, decode or mixed<P> "
                                 f"with 0 < P < 100 (P: percent of sequences that decode)")
            decode = int(m.group(1))
        m = _SHAPE.match(shape)
        if not m:
            raise ValueError(f"scenario {name!r}: shape {shape!r} does not match "
                             "batch<B>-kv<L>[-var][-chunk<C>]")
        if not re.fullmatch(r"block\d+", block):
            raise ValueError(f"scenario {name!r}: {block!r} is not block<S> (tokens per KV-cache block)")
        fields: dict[str, Any] = {}
        for feature in features:
            f = _FEATURE.match(feature)
            if not f:
                raise ValueError(f"scenario {name!r}: unknown feature {feature!r} (known: window<W>, "
                                 f"softcap<C>, sinks, fp8, fp16, bf16, fp32)")
            key, value = next((k, v) for k, v in f.groupdict().items() if v is not None)
            key = value if key == "flag" else key
            if key in fields:
                raise ValueError(f"scenario {name!r}: {feature!r} given twice")
            fields[key] = {"sinks": True, "fp8": True, "dtype": value}.get(key) or int(value)
        return cls(model=model, block_size=int(block[5:]), batch=int(m["batch"]), max_seq=int(m["kv"]),
                   decode=decode, chunk=int(m["chunk"]) if m["chunk"] else None, variable=bool(m["var"]),
                   **fields)

    @classmethod
    def _parse_legacy(cls, name: str) -> Scenario:
        g = _LEGACY.match(name).groupdict()
        opt = lambda k: int(g[k]) if g[k] is not None else None  # noqa: E731
        return cls(model=g["model"], block_size=int(g["block"]), batch=int(g["batch"]),
                   max_seq=int(g["seq"]), decode=int(g["decode"]), chunk=opt("chunk"),
                   variable=bool(g["var"]), window=opt("window"), softcap=opt("cap"),
                   sinks=bool(g["sinks"]), fp8=bool(g["fp8"]), dtype=g["dtype"] or DEFAULT_DTYPE)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.seed_key.encode())

    def lengths(self) -> tuple[list[int], list[int]]:
        """(query_lens, kv_lens) per sequence, deterministic from the scenario."""
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


def canonical_name(name: str) -> str:
    """The current name of a scenario named either way; any other string unchanged."""
    try:
        return Scenario.parse(name).name
    except ValueError:
        return name


def select(scenarios: list[Scenario], patterns: str | None) -> list[Scenario]:
    """Keep scenarios matching any comma-separated fnmatch glob (all when None); a glob
    may be written over the earlier names too (`llama3-8b_bs16_b*_d100`)."""
    if not patterns:
        return scenarios
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    kept = [s for s in scenarios
            if any(fnmatch.fnmatchcase(s.name, g) or fnmatch.fnmatchcase(s.seed_key, g) for g in globs)]
    if not kept:
        raise ConfigError(f"--scenarios {patterns!r} matches no scenario of the suite")
    return kept
