"""Scenarios: named, seeded batch compositions; suites of them in perf/suites.yaml.

A scenario's name says what the batch is, segment by segment, and parses back
(`Scenario.parse`):

    llama3-8b/mixed50/batch16-kv1024-var-q4-chunk256/block16/window1024/softcap50/sinks/fp8/bf16
    model    /kind   /shape                         /cache  /features, each optional, in this order

- model: a key of MODELS (attention heads and head size from the model's config.json);
- kind: `prefill` (every sequence prefills), `decode` (every sequence decodes one token)
  or `mixed<P>` (P % of the sequences decode, the rest prefill; 0 < P < 100);
- shape: `batch<B>` sequences, `kv<L>` KV tokens per sequence (new ones included);
  `-var`: KV lengths drawn uniformly from [L / 8, L], one sequence keeping L;
  `-q<Q>`: every decode sequence computes Q query tokens instead of one (multi-token decode:
  the verify step of speculative decoding, Q - 1 draft tokens and the last accepted one;
  Q <= its KV length), so `llama3-8b/decode/batch32-kv8192-q4/block16` is 32 sequences of
  8192 keys with 4 queries each;
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
import functools
import itertools
import math
import os
import random
import re
import zlib
from dataclasses import dataclass
from typing import Any

from perf import files
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

_SHAPE = re.compile(r"^batch(?P<batch>\d+)-kv(?P<kv>\d+)(?P<var>-var)?(?:-q(?P<q>\d+))?"
                    r"(?:-chunk(?P<chunk>\d+))?$")
_FEATURE = re.compile(r"^(?:window(?P<window>\d+)|softcap(?P<softcap>\d+)|(?P<flag>sinks|fp8)|"
                      r"(?P<dtype>fp16|bf16|fp32))$")
GRAMMAR = ("<model>/{prefill|decode|mixed<P>}/batch<B>-kv<L>[-var][-q<Q>][-chunk<C>]/block<S>"
           "[/window<W>][/softcap<C>][/sinks][/fp8][/bf16|/fp32]")
_LEGACY = re.compile(  # the names used before the rename; parsed to the same scenarios
    r"^(?P<model>[a-z0-9.\-]+)_bs(?P<block>\d+)_b(?P<batch>\d+)_s(?P<seq>\d+)_d(?P<decode>\d+)"
    r"(?:_q(?P<q>\d+))?(?:_c(?P<chunk>\d+))?(?P<var>_var)?(?:_w(?P<window>\d+))?(?:_cap(?P<cap>\d+))?"
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
    decode_len: int = 1  # query tokens per decode sequence (the name's -q<Q>; 1: a decode step)

    def __post_init__(self) -> None:
        """Every field of a meaningful type and range, so a suites.yaml grid value such as
        `batch: true` or `window: 0` is refused instead of becoming another batch."""
        for name in ("model", "dtype"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a name, got {getattr(self, name)!r}")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} (known: {', '.join(MODELS)})")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        for name in ("block_size", "batch", "max_seq", "decode", "chunk", "window", "softcap", "decode_len"):
            value = getattr(self, name)
            optional = name in ("chunk", "window", "softcap")
            if (value is None and optional) or (type(value) is int and (value > 0 or name == "decode")):
                continue
            raise ValueError(f"{name} must be {'null or ' if optional else ''}an integer > 0, got {value!r}")
        if not 0 <= self.decode <= 100:
            raise ValueError(f"decode is a percentage of the sequences (0 to 100), got {self.decode!r}")
        if self.decode_len > 1 and self.decode == 0:
            raise ValueError(f"decode_len (q{self.decode_len}) is the query length of decode sequences; "
                             f"a prefill scenario has none")
        if self.decode_len > self.max_seq:
            raise ValueError(f"decode_len {self.decode_len} exceeds the KV length {self.max_seq}: a "
                             f"sequence's queries are among its keys")
        for name in ("variable", "sinks", "fp8"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def kind(self) -> str:
        """prefill, decode or mixed<P> (P % of the sequences decode)."""
        return {0: "prefill", 100: "decode"}.get(self.decode, f"mixed{self.decode}")

    @property
    def name(self) -> str:
        shape = f"batch{self.batch}-kv{self.max_seq}" + ("-var" if self.variable else "") \
            + (f"-q{self.decode_len}" if self.decode_len != 1 else "") \
            + (f"-chunk{self.chunk}" if self.chunk is not None else "")
        return "/".join([self.model, self.kind, shape, f"block{self.block_size}",
                         *self._features("window", "softcap")])

    @property
    def seed_key(self) -> str:
        """The compact form the seed is drawn from (the scenario's name before the rename)."""
        parts = [self.model, f"bs{self.block_size}", f"b{self.batch}", f"s{self.max_seq}", f"d{self.decode}"]
        if self.decode_len != 1:
            parts.append(f"q{self.decode_len}")
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
                             "batch<B>-kv<L>[-var][-q<Q>][-chunk<C>]")
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
                   decode_len=int(m["q"]) if m["q"] else 1, **fields)

    @classmethod
    def _parse_legacy(cls, name: str) -> Scenario:
        g = _LEGACY.match(name).groupdict()
        opt = lambda k: int(g[k]) if g[k] is not None else None  # noqa: E731
        return cls(model=g["model"], block_size=int(g["block"]), batch=int(g["batch"]),
                   max_seq=int(g["seq"]), decode=int(g["decode"]), chunk=opt("chunk"),
                   variable=bool(g["var"]), window=opt("window"), softcap=opt("cap"),
                   sinks=bool(g["sinks"]), fp8=bool(g["fp8"]), dtype=g["dtype"] or DEFAULT_DTYPE,
                   decode_len=int(g["q"]) if g["q"] else 1)

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
                q = min(self.decode_len, kv)
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
    "softcap": "softcap", "sinks": "sinks", "fp8": "fp8", "dtype": "dtype", "decode_len": "decode_len",
}
_GRID_REQUIRED = ("model", "batch", "max_seq", "decode")  # the others have defaults (module docstring)
_GRID_MAX = 10000  # scenarios one grid may expand to: more is a typo, not a suite
_SUITE_KEYS = ("description", "scenarios", "grids")
_SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FIX = "fix perf/suites.yaml (its header explains suites, scenarios and grids)"


def _expand_grid(grid: Any, where: str, path: str) -> list[Scenario]:
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"{path}: {where}: a grid is a mapping of axes to values, got {grid!r}; {_FIX}")
    for key in grid:
        if key not in _AXES:
            raise ConfigError(f"{path}: {where}.{key}: unknown axis (expected one of: {', '.join(_AXES)})")
    for key in _GRID_REQUIRED:
        if key not in grid:
            raise ConfigError(f"{path}: {where}: missing axis {key!r} (every grid names "
                              f"{', '.join(_GRID_REQUIRED)})")
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    for key, values in axes.items():
        if not values:
            raise ConfigError(f"{path}: {where}.{key}: an empty list of values expands to no scenario; "
                              f"give at least one value")
    if math.prod(len(v) for v in axes.values()) > _GRID_MAX:
        raise ConfigError(f"{path}: {where}: expands to more than {_GRID_MAX} scenarios; split it")
    out = []
    for values in itertools.product(*axes.values()):
        fields = {"block_size": 16, **{_AXES[k]: v for k, v in zip(axes, values)}}
        try:
            out.append(Scenario(**fields))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{path}: {where}: {e}") from None
    return out


def _parse_suite(name: Any, body: Any, path: str) -> tuple[Scenario, ...]:
    """One suite's scenarios, in file order, without duplicates; ConfigError naming the field."""
    if not isinstance(name, str) or not _SUITE_NAME.fullmatch(name):
        raise ConfigError(f"{path}: suite name {name!r} is not a name (letters, digits, '-', '_', '.'); "
                          f"{_FIX}")
    if not isinstance(body, dict):
        raise ConfigError(f"{path}: {name}: a suite is a mapping with scenarios: and/or grids:, got "
                          f"{'nothing' if body is None else type(body).__name__}; {_FIX}")
    for key in body:
        if key not in _SUITE_KEYS:
            raise ConfigError(f"{path}: {name}.{key}: unknown key (expected one of: "
                              f"{', '.join(_SUITE_KEYS)})")
    if not isinstance(body.get("description", ""), str):
        raise ConfigError(f"{path}: {name}.description: must be text")
    out: list[Scenario] = []
    for field in ("scenarios", "grids"):
        if field in body and not isinstance(body[field], list):
            raise ConfigError(f"{path}: {name}.{field}: expected a list, got "
                              f"{'nothing' if body[field] is None else type(body[field]).__name__}; {_FIX}")
    for i, item in enumerate(body.get("scenarios", ())):
        if not isinstance(item, str):
            raise ConfigError(f"{path}: {name}.scenarios[{i}]: a scenario is a name ({GRAMMAR}), "
                              f"got {item!r}")
        try:
            out.append(Scenario.parse(item))
        except ValueError as e:
            raise ConfigError(f"{path}: {name}.scenarios[{i}]: {e}") from None
    for i, grid in enumerate(body.get("grids", ())):
        out.extend(_expand_grid(grid, f"{name}.grids[{i}]", path))
    unique = tuple({s.name: s for s in out}.values())  # file order, a scenario listed twice once
    if not unique:
        raise ConfigError(f"{path}: {name}: the suite has no scenarios; add scenarios: or grids:")
    return unique


_CACHE: dict[str, tuple[str, dict[str, tuple[Scenario, ...]]]] = {}


def load_suites(path: str = SUITES_PATH) -> dict[str, tuple[Scenario, ...]]:
    """Every suite of a suites file, validated whole (ConfigError naming file and field).
    Parsed once per content of the file (commands ask for suites often; expanding the grids
    is what costs), read every time so an edit is never missed."""
    path = os.fspath(path)
    text = files.read_text(path, "suites file", _FIX)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == text:
        return cached[1]
    data = files.parse_yaml(text, path, _FIX)
    if not isinstance(data, dict) or not data:
        got = "nothing" if data is None else "an empty mapping" if data == {} else type(data).__name__
        raise ConfigError(f"{path}: expected a mapping of suite names to suites, got {got}; {_FIX}")
    suites = {name: _parse_suite(name, body, path) for name, body in data.items()}
    _CACHE[path] = (text, suites)
    return suites


def suite_names(path: str = SUITES_PATH) -> list[str]:
    return list(load_suites(path))


def suite(name: str, path: str = SUITES_PATH) -> list[Scenario]:
    """The scenarios of a suite, in file order, without duplicates."""
    suites = load_suites(path)
    if name not in suites:
        raise ConfigError(f"{path}: no suite {name!r} (have: {', '.join(suites)}); pass --suite NAME")
    return list(suites[name])


def canonical_name(name: str) -> str:
    """The current name of a scenario named either way; any other string unchanged."""
    try:
        return Scenario.parse(name).name
    except ValueError:
        return name


@functools.lru_cache(maxsize=8192)
def names_of(name: str) -> tuple[str, ...]:
    """The names a scenario answers to in a glob: the one given, its current name and its
    earlier compact form (`Scenario.seed_key`); just `name` when it is no scenario name."""
    try:
        s = Scenario.parse(name)
    except ValueError:
        return (name,)
    return tuple(dict.fromkeys((name, s.name, s.seed_key)))


def glob_matches(name: str, glob: str) -> bool:
    """Whether an fnmatch glob, written over the current or the earlier names, matches the
    scenario `name` (how --scenarios and thresholds.yaml's overrides select scenarios)."""
    return any(fnmatch.fnmatchcase(n, glob) for n in names_of(name))


def select(scenarios: list[Scenario], patterns: str | None) -> list[Scenario]:
    """Keep scenarios matching any comma-separated fnmatch glob (all when None); a glob
    may be written over the earlier names too (`llama3-8b_bs16_b*_d100`)."""
    if not patterns:
        return scenarios
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    kept = [s for s in scenarios if any(glob_matches(s.name, g) for g in globs)]
    if not kept:
        raise ConfigError(f"--scenarios {patterns!r} matches no scenario of the suite")
    return kept
