"""Load and validate thresholds.yaml; resolve the latency threshold of one measurement.

The whole file is checked on load, so a typo fails every gate at once with one line that
names the file and the field (`ConfigError`, exit 2), never later with a traceback.
Schema (see thresholds.yaml, commented for the people who edit it):

    version: 1
    <vendor>:                       # nvidia | amd
      latency: {warn, fail,         # ratios head/base, 1 < warn <= fail: cases without calibration
                floor: {warn, fail}, k: {warn, fail}}   # calibrated: max(floor, exp(k x noise))
      statistics: {alpha, processes, repeats, samples, sample_budget_ms, retries, bootstrap, confidence}
      compile: {targets: [{name, backend, arch, warp_size, max_shared_memory_bytes,
                           max_registers_per_thread, default_variants?: [name, ...]}],
                static: {<key of STATIC_DEFAULTS>: ...},
                compile_time?: {warn, fail, k: {warn, fail}}}   # max(warn/fail, exp(k x noise))
      runners: {labels: [...], container,       # container: IMAGE:TAG@sha256:<64 hex>, or "" (none)
                container_options, env: {NAME: value},
                lock_clocks: false | MHz, isolation_env: [NAME, ...], nightly_shards: M,
                nightly_runners?: [NAME, ...]}   # data-branch folders the heartbeat expects
    overrides: [{vendor?, variant?, scenario?, metric?, latency: {warn?, fail?}, reason}]

Cross-field rules, so that no file weakens a gate unseen: every warn ratio <= its fail
ratio (latency, floor, k, static registers); target names unique across vendors, each
target's backend its vendor's (cuda under nvidia, hip under amd); an override's vendor has a
section, and its variant, scenario and metric globs each match something that exists (a
registered variant, a scenario of perf/suites.yaml, a metric of perf.results.METRICS); no
NaN, inf or true/false where a number belongs. Duplicate keys (a second `fail:` or
`nvidia:`) are refused by the strict YAML reader (perf/files.py).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from perf import files
from perf.errors import ConfigError

VENDORS = ("nvidia", "amd")
SCHEMA_VERSION = 1
DEFAULT_PATH = "thresholds.yaml"
SEVERITIES = ("fail", "warn", "ignore")
_TOP_KEYS = ("version", *VENDORS, "overrides")
BACKENDS = {"nvidia": "cuda", "amd": "hip"}  # the compiler backend of each vendor's targets
# A GPU job's image, pinned: the tag for people, the digest for docker (which pulls by the digest
# and ignores the tag). A tag alone can be moved under the measurements (`latest` moves weekly),
# so the image is part of what a result records (perf/fingerprint.py image_digest).
_PATH_PART = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"  # of an image name (the OCI distribution spec's grammar)
PINNED_IMAGE = re.compile(rf"(?P<name>(?:[a-zA-Z0-9.-]+(?::\d+)?/)?{_PATH_PART}(?:/{_PATH_PART})*)"
                          r":(?P<tag>\w[\w.-]{0,127})@sha256:(?P<digest>[0-9a-f]{64})")
_STAT_DEFAULTS = {"alpha": 0.01, "processes": 3, "repeats": 10, "samples": 25, "sample_budget_ms": 100,
                  "retries": 1, "bootstrap": 2000, "confidence": 0.95}

# The static gate's rules (`<vendor>.compile.static`; applied by perf.verdicts.static_findings)
# and what a key the file leaves out means. Severities are fail | warn | ignore, ratios head/base:
#   new_spills: fail                more spill bytes/registers than the base (any, for a new kernel)
#   new_sgpr_spills: (new_spills)   AMD SGPR spills alone: they usually land in VGPR lanes, not memory
#   new_wgmma_serialization: fail   ptxas serializes a kernel's wgmma (info C7515) where the base's
#                                   were not (any, for a new kernel); NVIDIA Hopper only
#   registers_warn_ratio: 1.10      registers per thread up by more than 10 % warns
#   registers_fail_ratio: (none)    ... and beyond this ratio fails
#   shared_memory_over_limit: fail  shared memory / LDS above the target's max cannot launch
#   shared_memory_warn_ratio: (none) shared memory / LDS growth beyond this ratio warns
#   occupancy_drop: warn            fewer resident warps (waves) than the base
#   target_not_compilable: warn     the installed Triton cannot compile for a listed target at all
#                                   (nothing checked there; same Triton on both sides, so not the
#                                   change's doing: docs/static-gate.md)
# Unmeasured defaults (2026-11-21): registers and occupancy are deterministic for a given
# Triton, so any threshold is a policy choice, not a noise margin.
STATIC_DEFAULTS: dict[str, Any] = {
    "new_spills": "fail", "new_sgpr_spills": None, "new_wgmma_serialization": "fail",
    "registers_warn_ratio": 1.10,
    "registers_fail_ratio": None, "shared_memory_over_limit": "fail", "shared_memory_warn_ratio": None,
    "occupancy_drop": "warn", "target_not_compilable": "warn",
}


# The compile-time rule (`<vendor>.compile.compile_time`; applied by
# perf.verdicts.compile_time_finding) when the file leaves it out: cold compile CPU seconds of a
# variant on a target, head / base, warn beyond max(warn, exp(k.warn x noise)), fail beyond
# max(fail, exp(k.fail x noise)); noise from calibration/compile-time.yaml (`perf compile-calibrate`).
# Unmeasured defaults chosen by reasoning (2026-11-26): a variant compiling 2x longer is the Triton
# regression the gate must see, so it fails beyond 1.75 (a doubling fails with room for noise);
# 1.25 is above the noise calibrated on the CI's kind of 2-core VM (calibration/compile-time.yaml)
# yet below a change a developer notices; k as latency.k.
COMPILE_TIME_DEFAULTS = {"warn": 1.25, "fail": 1.75, "k": {"warn": 3.0, "fail": 4.0}}


@dataclass(frozen=True)
class LatencyThreshold:
    warn: float  # ratio head/base above which a scenario warns (if also significant)
    fail: float  # ratio above which it fails (if also significant)
    source: str = ""  # "nvidia.latency", "calibrated" or "overrides[0]": where the numbers came from
    noise: float | None = None  # calibrated standard deviation of the gate's log ratio, if any

    @property
    def calibrated(self) -> bool:
        return self.noise is not None

    def describe(self) -> str:
        return f"warn > {self.warn:.4g}, fail > {self.fail:.4g}"


@dataclass(frozen=True)
class NoiseRule:
    """Thresholds of a calibrated case: max(floor, exp(k x noise)), noise being the standard
    deviation of the gate's log ratio that `perf calibrate` measured for that case."""

    floor_warn: float
    floor_fail: float
    k_warn: float
    k_fail: float

    def apply(self, noise: float) -> tuple[float, float]:
        warn = max(self.floor_warn, math.exp(self.k_warn * noise))
        return warn, max(warn, self.floor_fail, math.exp(self.k_fail * noise))


@dataclass(frozen=True)
class Statistics:
    alpha: float  # significance level of the one-sided process-level test (perf/stats.py)
    processes: int  # fresh processes the A/B is repeated in (the unit of independence)
    repeats: int  # paired rounds per process
    samples: int  # timed samples per repeat (at most)
    sample_budget_ms: float  # fewer samples (>= 5) for calls so long that a repeat would exceed this
    retries: int  # re-measurements of a failing scenario before it fails
    bootstrap: int  # bootstrap resamples for the ratio's confidence interval
    confidence: float  # level of that interval


@dataclass(frozen=True)
class CompileTarget:
    name: str  # "sm_90", "gfx942"
    backend: str  # "cuda" | "hip"
    arch: int | str  # 90 | "gfx942" (what triton's GPUTarget takes)
    warp_size: int
    max_shared_memory_bytes: int
    max_registers_per_thread: int
    # The variants the static gate compiles for this target when `--variants` names none
    # (None: every registered one); checked against the registry by perf/static/plan.py.
    default_variants: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Runners:
    labels: tuple[str, ...]  # runs-on labels of the self-hosted GPU runners
    container: str  # image the GPU jobs run in ("" = the runner's own Python)
    container_options: str  # `docker run` options
    env: dict[str, str]  # job environment
    lock_clocks: int | None = None  # MHz to lock the GPU clock at (perf/ci/workflows.py); None: leave alone
    isolation_env: tuple[str, ...] | None = None  # GPU-isolation variables to forward (None: defaults)
    nightly_shards: int = 1  # runners the nightly is split over (perf/nightly/shard.py); 1: one job
    # The nightly's machines expected on the data branch (nights/<name>/): the heartbeat reports one
    # that never saved a night (perf/nightly/heartbeat.py). Empty: only those seen there are checked.
    nightly_runners: tuple[str, ...] = ()

    @property
    def image_digest(self) -> str:
        """The pinned image's digest, `sha256:<64 hex>` ("" without a container)."""
        m = PINNED_IMAGE.fullmatch(self.container.strip())
        return f"sha256:{m['digest']}" if m else ""


@dataclass(frozen=True)
class VendorThresholds:
    name: str
    latency: LatencyThreshold
    statistics: Statistics
    targets: tuple[CompileTarget, ...]
    static: dict[str, Any]  # every key of STATIC_DEFAULTS: severity, ratio or None (rule off)
    runners: Runners
    noise_rule: NoiseRule | None = None  # latency.floor / latency.k: thresholds of calibrated cases
    # compile.compile_time: warn/fail are the floors of cold compile time ratios, k the noise multiples
    compile_time: NoiseRule = NoiseRule(
        COMPILE_TIME_DEFAULTS["warn"], COMPILE_TIME_DEFAULTS["fail"],
        COMPILE_TIME_DEFAULTS["k"]["warn"], COMPILE_TIME_DEFAULTS["k"]["fail"])


@dataclass(frozen=True)
class Override:
    index: int
    reason: str
    vendor: str | None = None
    variant: str = "*"
    scenario: str = "*"
    metric: str = "*"
    warn: float | None = None
    fail: float | None = None

    def matches(self, vendor: str, variant: str, scenario: str, metric: str) -> bool:
        from perf.scenarios import glob_matches

        return ((self.vendor is None or self.vendor == vendor)
                and fnmatch.fnmatchcase(variant, self.variant)
                and glob_matches(scenario, self.scenario)  # current or earlier names, as --scenarios
                and fnmatch.fnmatchcase(metric, self.metric))


@dataclass(frozen=True)
class Thresholds:
    path: str
    vendors: dict[str, VendorThresholds]
    overrides: tuple[Override, ...] = ()
    raw: dict = field(default_factory=dict, repr=False)  # the parsed YAML, for other tools

    def vendor(self, name: str) -> VendorThresholds:
        if name not in self.vendors:
            have = ", ".join(self.vendors) or "none"
            if name not in VENDORS:  # a record's vendor: "cpu" for Triton's interpreter, "unknown"
                raise ConfigError(f"{self.path}: no thresholds for {name!r}, not a vendor measured here "
                                  f"({'|'.join(VENDORS)}): its times are judged by nothing (Triton's "
                                  f"interpreter records 'cpu'); judge a GPU's results, or pass --vendor "
                                  f"{'|'.join(VENDORS)} where offered")
            raise ConfigError(f"{self.path}: no section for vendor {name!r} (have: {have}); "
                              f"add a `{name}:` section or pass --vendor {'|'.join(VENDORS)}")
        return self.vendors[name]

    def nightly_runners(self) -> tuple[str, ...]:
        """Every vendor's expected nightly machines (runners.nightly_runners), each once, in order."""
        return tuple(dict.fromkeys(n for v in self.vendors.values() for n in v.runners.nightly_runners))

    def latency(self, vendor: str, variant: str, scenario: str, metric: str,
                noise: float | None = None) -> LatencyThreshold:
        """The latency threshold of one case, with every matching override applied in order.

        `noise`: the calibrated standard deviation of the gate's log ratio for this case
        (`Calibration.noise`); with it the vendor's noise rule sets the thresholds, without it
        the vendor's uncalibrated defaults (`latency.warn` / `latency.fail`) apply."""
        vt = self.vendor(vendor)
        t = vt.latency
        if noise is not None and vt.noise_rule is not None:
            warn, fail = vt.noise_rule.apply(noise)
            t = LatencyThreshold(warn, fail, f"calibrated ({vendor}.latency.k x noise {100 * noise:.2f} %, "
                                             f"floor {vt.noise_rule.floor_fail:g})", noise)
        for o in self.overrides:
            if o.matches(vendor, variant, scenario, metric):
                warn = o.warn if o.warn is not None else t.warn
                fail = o.fail if o.fail is not None else t.fail
                t = replace(t, warn=warn, fail=max(fail, warn), source=f"overrides[{o.index}]")
        return t


class _Checker:
    """Walks the parsed YAML; the first problem raises ConfigError naming file and field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, msg: str) -> None:
        raise ConfigError(f"{self.path}: {where}: {msg}")

    def mapping(self, value: Any, where: str, allowed: tuple[str, ...] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(where, f"key {key!r} is not a string")
            if allowed is not None and key not in allowed:
                self.fail(f"{where}.{key}" if where else key,
                          f"unknown key (expected one of: {', '.join(allowed)})")
        for key in required:
            if key not in value:
                self.fail(where, f"missing required key {key!r}")
        return value

    def number(self, value: Any, where: str, lo: float, hi: float, lo_open: bool = False) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            ok = (value > lo if lo_open else value >= lo) and value <= hi
        if not ok:
            bound = f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
            self.fail(where, f"must be a number {bound}, got {value!r}")
        return float(value)

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            self.fail(where, f"must be an integer from {lo} to {hi}, got {value!r}")
        return value

    def string(self, value: Any, where: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str) or (not value.strip() and not allow_empty):
            self.fail(where, f"must be a non-empty string, got {value!r}")
        return value

    def ratio_pair(self, m: dict, where: str, required: bool) -> tuple[float | None, float | None]:
        m = self.mapping(m, where, ("warn", "fail"), ("warn", "fail") if required else ())
        warn = self.number(m["warn"], f"{where}.warn", 1.0, 100.0, lo_open=True) if "warn" in m else None
        fail = self.number(m["fail"], f"{where}.fail", 1.0, 100.0, lo_open=True) if "fail" in m else None
        if warn is not None and fail is not None and fail < warn:
            self.fail(f"{where}.fail", f"must be >= warn ({warn:g}), got {fail:g}")
        return warn, fail


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _parse_vendor(c: _Checker, name: str, v: Any) -> VendorThresholds:
    v = c.mapping(v, name, ("latency", "statistics", "compile", "runners"),
                  ("latency", "statistics", "compile", "runners"))
    lat = c.mapping(v["latency"], f"{name}.latency", ("warn", "fail", "floor", "k"), ("warn", "fail"))
    warn, fail = c.ratio_pair({k: lat[k] for k in ("warn", "fail")}, f"{name}.latency", required=True)
    latency = LatencyThreshold(warn, fail, f"{name}.latency")
    noise_rule = _parse_noise_rule(c, name, lat)

    s = c.mapping(v["statistics"], f"{name}.statistics", tuple(_STAT_DEFAULTS))
    s = {**_STAT_DEFAULTS, **s}
    w = f"{name}.statistics"
    stats = Statistics(
        alpha=c.number(s["alpha"], f"{w}.alpha", 0.0, 0.5, lo_open=True),
        processes=c.integer(s["processes"], f"{w}.processes", 3, 100),  # a variance needs >= 3 units
        repeats=c.integer(s["repeats"], f"{w}.repeats", 4, 1000),
        samples=c.integer(s["samples"], f"{w}.samples", 3, 100000),
        sample_budget_ms=c.number(s["sample_budget_ms"], f"{w}.sample_budget_ms", 0.0, 1e6, lo_open=True),
        retries=c.integer(s["retries"], f"{w}.retries", 0, 10),
        bootstrap=c.integer(s["bootstrap"], f"{w}.bootstrap", 100, 1000000),
        confidence=c.number(s["confidence"], f"{w}.confidence", 0.5, 1.0, lo_open=True),
    )
    _check_statistics(c, w, stats)

    comp = c.mapping(v["compile"], f"{name}.compile", ("targets", "static", "compile_time"),
                     ("targets", "static"))
    if not isinstance(comp["targets"], list) or not comp["targets"]:
        c.fail(f"{name}.compile.targets", "must be a non-empty list of targets")
    targets = []
    keys = ("name", "backend", "arch", "warp_size", "max_shared_memory_bytes", "max_registers_per_thread")
    for i, t in enumerate(comp["targets"]):
        w = f"{name}.compile.targets[{i}]"
        t = c.mapping(t, w, (*keys, "default_variants"), keys)
        only = t.get("default_variants")
        if only is not None and (not isinstance(only, list) or not only
                                 or not all(isinstance(x, str) and x for x in only)):
            c.fail(f"{w}.default_variants", f"must be a non-empty list of variant names, got {only!r}")
        backend = c.string(t["backend"], f"{w}.backend")
        if backend not in ("cuda", "hip"):
            c.fail(f"{w}.backend", f"must be cuda or hip, got {backend!r}")
        if backend != BACKENDS[name]:
            home = next(v for v, b in BACKENDS.items() if b == backend)
            c.fail(f"{w}.backend", f"a {name} target compiles with {BACKENDS[name]}, got {backend!r}; move "
                                   f"the target under the {home}: section or fix its backend")
        arch = t["arch"]
        if backend == "cuda":
            c.integer(arch, f"{w}.arch", 50, 200)
        else:
            c.string(arch, f"{w}.arch")
            if not arch.startswith("gfx"):
                c.fail(f"{w}.arch", f"a hip target is a gfx name such as gfx942, got {arch!r}")
        targets.append(CompileTarget(
            name=c.string(t["name"], f"{w}.name"), backend=backend, arch=arch,
            warp_size=c.integer(t["warp_size"], f"{w}.warp_size", 1, 128),
            max_shared_memory_bytes=c.integer(t["max_shared_memory_bytes"],
                                              f"{w}.max_shared_memory_bytes", 1, 1 << 30),
            max_registers_per_thread=c.integer(t["max_registers_per_thread"],
                                               f"{w}.max_registers_per_thread", 1, 4096),
            default_variants=None if only is None else tuple(only),
        ))
    static = dict(c.mapping(comp["static"], f"{name}.compile.static", tuple(STATIC_DEFAULTS)))
    for key, value in static.items():
        w = f"{name}.compile.static.{key}"
        if key.endswith("_ratio"):
            static[key] = c.number(value, w, 1.0, 100.0)
        elif not isinstance(value, str) or value not in SEVERITIES:
            c.fail(w, f"must be one of {', '.join(SEVERITIES)}, got {value!r}")
    _check_static_pairs(c, f"{name}.compile.static", static)

    r = c.mapping(v["runners"], f"{name}.runners",
                  ("labels", "container", "container_options", "env", "lock_clocks", "isolation_env",
                   "nightly_shards", "nightly_runners"),
                  ("labels", "container"))
    labels = r["labels"]
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x for x in labels):
        c.fail(f"{name}.runners.labels", f"must be a non-empty list of strings, got {labels!r}")
    env = c.mapping(r.get("env") or {}, f"{name}.runners.env")
    for key, value in env.items():
        if not isinstance(value, str):
            c.fail(f"{name}.runners.env.{key}", f"must be a string (quote it), got {value!r}")
    lock = r.get("lock_clocks")
    if lock is not None and lock is not False:
        c.integer(lock, f"{name}.runners.lock_clocks", 100, 5000)
    iso = r.get("isolation_env")
    if iso is not None and (not isinstance(iso, list) or not all(
            isinstance(x, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", x) for x in iso)):
        c.fail(f"{name}.runners.isolation_env", f"must be a list of variable names, got {iso!r}")
    runners = Runners(
        lock_clocks=lock or None, isolation_env=None if iso is None else tuple(iso),
        nightly_shards=c.integer(r.get("nightly_shards", 1), f"{name}.runners.nightly_shards", 1, 64),
        labels=tuple(labels),
        container=_image(c, r["container"], f"{name}.runners.container"),
        container_options=c.string(r.get("container_options", ""), f"{name}.runners.container_options",
                                   allow_empty=True),
        env=dict(env),
        nightly_runners=_nightly_runners(c, r.get("nightly_runners"), f"{name}.runners.nightly_runners"),
    )
    vt = VendorThresholds(name, latency, stats, tuple(targets), {**STATIC_DEFAULTS, **static}, runners)
    compile_time = _parse_compile_time(c, f"{name}.compile.compile_time", comp.get("compile_time"))
    return replace(vt, noise_rule=noise_rule, compile_time=compile_time)


def _parse_compile_time(c: _Checker, where: str, value: Any) -> NoiseRule:
    """`compile.compile_time` (COMPILE_TIME_DEFAULTS for what it leaves out): the warn and fail
    ratios of cold compile time (floors of calibrated cases) and the noise multiples k."""
    given = c.mapping({} if value is None else value, where, ("warn", "fail", "k"))
    d = COMPILE_TIME_DEFAULTS
    warn = c.number(given.get("warn", d["warn"]), f"{where}.warn", 1.0, 100.0, lo_open=True)
    fail = c.number(given.get("fail", d["fail"]), f"{where}.fail", 1.0, 100.0, lo_open=True)
    if fail < warn:
        c.fail(f"{where}.fail" if "fail" in given else f"{where}.warn",
               f"fail {fail:g} is below warn {warn:g}" + ("" if {"warn", "fail"} <= given.keys() else
                                                           " (the other one is the default)")
               + "; the warn ratio must be <= the fail ratio")
    k = c.mapping(given.get("k", d["k"]), f"{where}.k", ("warn", "fail"))
    k_warn = c.number(k.get("warn", d["k"]["warn"]), f"{where}.k.warn", 0.0, 100.0, lo_open=True)
    k_fail = c.number(k.get("fail", d["k"]["fail"]), f"{where}.k.fail", 0.0, 100.0, lo_open=True)
    if k_fail < k_warn:
        c.fail(f"{where}.k.fail", f"must be >= k.warn ({k_warn:g}), got {k_fail:g}")
    return NoiseRule(warn, fail, k_warn, k_fail)


def _check_statistics(c: _Checker, where: str, s: Statistics) -> None:
    """Combinations the statistics cannot mean: an interval whose tails hold no resample."""
    tail = (1.0 - s.confidence) / 2.0
    if tail * s.bootstrap < 1.0:
        need = f"at least {math.ceil(1.0 / tail)} resamples or a lower confidence" if tail > 0 else \
            "a confidence below 1"
        c.fail(f"{where}.bootstrap", f"{s.bootstrap} resamples leave no resample in each tail of a "
                                     f"{s.confidence:g} interval; give {need}")


def _check_static_pairs(c: _Checker, where: str, static: dict) -> None:
    """Every `<metric>_warn_ratio` <= its `<metric>_fail_ratio`, a key left out taking its
    default (STATIC_DEFAULTS), so a warn above the fail cannot hide the warning band."""
    merged = {**STATIC_DEFAULTS, **static}
    for key in STATIC_DEFAULTS:
        if not key.endswith("_warn_ratio"):
            continue
        fail_key = key[: -len("_warn_ratio")] + "_fail_ratio"
        warn, fail = merged[key], merged.get(fail_key)
        if warn is not None and fail is not None and fail < warn:
            field = fail_key if fail_key in static else key
            given = "" if key in static and fail_key in static else " (the other one is the default)"
            c.fail(f"{where}.{field}", f"{fail_key} {fail:g} is below {key} {warn:g}{given}; "
                                       f"the warn ratio must be <= the fail ratio")


def _parse_noise_rule(c: _Checker, name: str, lat: dict) -> NoiseRule | None:
    """`latency.floor` and `latency.k` (both or neither): thresholds of calibrated cases."""
    if "floor" not in lat and "k" not in lat:
        return None
    for key in ("floor", "k"):
        if key not in lat:
            c.fail(f"{name}.latency", f"missing {key!r}: give floor and k together (or neither)")
    w_floor, f_floor = c.ratio_pair(lat["floor"], f"{name}.latency.floor", required=True)
    if f_floor > lat["fail"]:
        c.fail(f"{name}.latency.floor.fail", f"must be <= latency.fail ({lat['fail']:g}), got {f_floor:g}")
    k = c.mapping(lat["k"], f"{name}.latency.k", ("warn", "fail"), ("warn", "fail"))
    k_warn = c.number(k["warn"], f"{name}.latency.k.warn", 0.0, 100.0, lo_open=True)
    k_fail = c.number(k["fail"], f"{name}.latency.k.fail", 0.0, 100.0, lo_open=True)
    if k_fail < k_warn:
        c.fail(f"{name}.latency.k.fail", f"must be >= k.warn ({k_warn:g}), got {k_fail:g}")
    return NoiseRule(w_floor, f_floor, k_warn, k_fail)


def _parse_overrides(c: _Checker, items: Any) -> tuple[Override, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        c.fail("overrides", f"expected a list, got {_kind(items)}")
    out = []
    for i, o in enumerate(items):
        w = f"overrides[{i}]"
        o = c.mapping(o, w, ("vendor", "variant", "scenario", "metric", "latency", "reason"),
                      ("latency", "reason"))
        vendor = o.get("vendor")
        if vendor is not None and vendor not in VENDORS:
            c.fail(f"{w}.vendor", f"unknown vendor {vendor!r} (expected one of: {', '.join(VENDORS)})")
        globs = {k: c.string(o.get(k, "*"), f"{w}.{k}") for k in ("variant", "scenario", "metric")}
        warn, fail = c.ratio_pair(o["latency"], f"{w}.latency", required=False)
        if warn is None and fail is None:
            c.fail(f"{w}.latency", "give warn, fail or both")
        out.append(Override(index=i, reason=c.string(o["reason"], f"{w}.reason"), vendor=vendor,
                            warn=warn, fail=fail, **globs))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def registered_variants() -> tuple[str, ...] | None:
    """The names of kernels.VARIANTS, read from the dict literal in kernels/__init__.py
    without importing it (torch and Triton take seconds, and every command reads the
    thresholds); importing kernels if the literal is gone; None if neither works."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = os.path.join(root, "kernels", "__init__.py")
    try:
        with open(source, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        tree = None
    for node in tree.body if tree is not None else ():
        target = node.target if isinstance(node, ast.AnnAssign) else \
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if (isinstance(target, ast.Name) and target.id == "VARIANTS" and isinstance(node.value, ast.Dict)
                and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys)):
            return tuple(k.value for k in node.value.keys)
    try:
        import kernels
    except ImportError:
        return None
    return tuple(kernels.VARIANTS)


def _suite_scenario_names() -> list[str]:
    """Every scenario of every suite of perf/suites.yaml (current names)."""
    from perf.scenarios import load_suites

    return list(dict.fromkeys(s.name for scenarios in load_suites().values() for s in scenarios))


def _check_overrides(c: _Checker, overrides: tuple[Override, ...],
                     vendors: dict[str, VendorThresholds]) -> None:
    """An override must be able to apply: its vendor has a section, each glob matches an
    existing name, and the ratio it leaves to the vendor does not move the one it gives."""
    from perf.results import METRICS
    from perf.scenarios import glob_matches

    never = "so the override would never apply"
    for o in overrides:
        w = f"overrides[{o.index}]"
        if o.vendor is not None and o.vendor not in vendors:
            c.fail(f"{w}.vendor", f"this file has no {o.vendor!r} section, {never}; add the section or drop "
                                  f"the override")
        variants = registered_variants()
        if variants is not None and not any(fnmatch.fnmatchcase(v, o.variant) for v in variants):
            c.fail(f"{w}.variant", f"{o.variant!r} matches no registered variant ({', '.join(variants)}), "
                                   f"{never}")
        if not any(fnmatch.fnmatchcase(m, o.metric) for m in METRICS):
            c.fail(f"{w}.metric", f"{o.metric!r} matches no metric ({', '.join(METRICS)}), {never}")
        if o.scenario != "*" and not any(glob_matches(n, o.scenario) for n in _suite_scenario_names()):
            c.fail(f"{w}.scenario", f"{o.scenario!r} matches no scenario of any suite in perf/suites.yaml "
                                    f"(current or earlier names, e.g. llama3-8b/decode/*), {never}")
        for name in ([o.vendor] if o.vendor else list(vendors)):
            lat = vendors[name].latency
            if o.warn is None and o.fail < lat.warn:
                c.fail(f"{w}.latency.fail", f"{o.fail:g} is below the warn ratio it keeps "
                                            f"({name}.latency.warn {lat.warn:g}), so {name} cases would fail "
                                            f"only beyond {lat.warn:g}; give warn too, or a fail >= "
                                            f"{lat.warn:g}")
            if o.fail is None and o.warn > lat.fail:
                c.fail(f"{w}.latency.warn", f"{o.warn:g} is above the fail ratio it keeps "
                                            f"({name}.latency.fail {lat.fail:g}), so {name} cases would fail "
                                            f"only beyond {o.warn:g}; give fail too, or a warn <= "
                                            f"{lat.fail:g}")


def _image(c: _Checker, value: Any, where: str) -> str:
    """A container image pinned by digest (IMAGE:TAG@sha256:<64 hex>), or "" for none."""
    image = c.string(value, where, allow_empty=True).strip()
    if image and not PINNED_IMAGE.fullmatch(image):
        c.fail(where, f"{image!r} is not pinned by digest; write IMAGE:TAG@sha256:<64 hex> (`docker "
                      f"buildx imagetools inspect IMAGE:TAG` prints it), so every run uses the same image")
    return image


def _nightly_runners(c: _Checker, value: Any, where: str) -> tuple[str, ...]:
    """Data-branch folder names (perf/names.py RUNNER), each once."""
    from perf.names import RUNNER

    if value is None:
        return ()
    if not isinstance(value, list):
        c.fail(where, f"must be a list of the nightly's machine names, got {value!r}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not RUNNER.fullmatch(name):
            c.fail(f"{where}[{i}]", f"{name!r} is not a machine name (letters, digits, '.', '_', '-'; as "
                                    f"the data branch's nights/<name>/ folders are named)")
        if name in value[:i]:
            c.fail(f"{where}[{i}]", f"{name!r} is listed twice; list each machine once")
    return tuple(value)


def _check_targets(c: _Checker, vendors: dict[str, VendorThresholds]) -> None:
    """Target names are unique across the file (the static gate keys its results by them)."""
    seen: dict[str, str] = {}
    for name, vt in vendors.items():
        for i, t in enumerate(vt.targets):
            where = f"{name}.compile.targets[{i}]"
            if t.name in seen:
                c.fail(f"{where}.name", f"target {t.name!r} is already listed as {seen[t.name]}; each target "
                                        f"once")
            seen[t.name] = where


def parse_thresholds(data: Any, path: str = DEFAULT_PATH) -> Thresholds:
    """Validate parsed YAML; raises ConfigError naming `path` and the first bad field."""
    c = _Checker(path)
    if data is None:
        c.fail("(top level)", "the file is empty; copy thresholds.yaml from the repository")
    data = c.mapping(data, "(top level)")
    for key in data:
        if key not in _TOP_KEYS:
            hint = " (vendors are: " + ", ".join(VENDORS) + ")"
            c.fail(key, f"unknown key{hint}; expected one of: {', '.join(_TOP_KEYS)}")
    version = data.get("version", SCHEMA_VERSION)
    if type(version) is not int or version != SCHEMA_VERSION:
        c.fail("version", f"this harness reads version {SCHEMA_VERSION}, got {version!r}")
    vendors = {name: _parse_vendor(c, name, data[name]) for name in VENDORS if name in data}
    if not vendors:
        c.fail("(top level)", f"no vendor section; add at least one of: {', '.join(VENDORS)}")
    _check_targets(c, vendors)
    overrides = _parse_overrides(c, data.get("overrides"))
    _check_overrides(c, overrides, vendors)
    return Thresholds(path, vendors, overrides, data)


def load_thresholds(path: str | os.PathLike = DEFAULT_PATH) -> Thresholds:
    """Read and validate the thresholds file (ConfigError on the first problem)."""
    path = os.fspath(path)
    fix = "pass --thresholds PATH of a UTF-8 YAML file (or run from the repository root: thresholds.yaml)"
    text = files.read_text(path, "thresholds file", fix)
    return parse_thresholds(files.parse_yaml(text, path, "fix the file (thresholds.yaml of the repository "
                                                         "shows the layout)"), path)


# --- calibration: measured noise per case --------------------------------------------------

CALIBRATION_DIR = "calibration"  # beside the thresholds file: calibration/<vendor>.yaml
CALIBRATION_VERSION = 1


@dataclass(frozen=True)
class CaseNoise:
    """A/A noise of one (variant, scenario, metric), as `perf calibrate` measured it."""

    sigma_round: float  # standard deviation of a round's paired log ratio within a process
    tau: float  # standard deviation of process means beyond sigma_round (per-process offsets)
    processes: int  # A/A processes it was measured in
    rounds: int  # paired rounds in all
    median_ms: float  # the case's latency, for people reading the file

    def variance(self, rounds: int) -> float:
        """Variance of one process's mean log ratio over `rounds` rounds."""
        return self.tau ** 2 + self.sigma_round ** 2 / max(1, rounds)


@dataclass(frozen=True)
class Calibration:
    path: str
    vendor: str
    gpu: str
    meta: dict  # date, driver, commit, settings...
    cases: dict[tuple[str, str, str], CaseNoise]
    launch_cost: dict | None = None  # {fail_percent, ...}: the launch-cost suite's threshold

    def case(self, variant: str, scenario: str, metric: str) -> CaseNoise | None:
        return self.cases.get((variant, scenario, metric))

    def noise(self, variant: str, scenario: str, metric: str, processes: int, rounds: int) -> float | None:
        """Standard deviation of the gate's log ratio for this case with `processes` x `rounds`."""
        c = self.case(variant, scenario, metric)
        return None if c is None else math.sqrt(c.variance(rounds) / max(1, processes))

    def describe(self) -> str:
        m = self.meta
        return (f"{self.path}: {len(self.cases)} cases calibrated on {m.get('date', '?')} ({self.gpu}, "
                f"driver {m.get('driver', '?')}, commit {str(m.get('commit', '?'))[:10]}, "
                f"{m.get('processes', '?')} A/A processes x {m.get('repeats', '?')} rounds)")


def render_calibration_text(header: str, doc: dict) -> str:
    """A calibration file's text (latency or compile time): the comment header, the fields,
    then `cases:` with one flow mapping per line, so a diff shows which cases changed."""
    import yaml

    doc = dict(doc)
    cases = doc.pop("cases")
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    flow = {"default_flow_style": True, "sort_keys": False, "width": 10000}
    lines = "\n".join("  - " + yaml.safe_dump(c, **flow).strip() for c in cases)
    return header + body + "cases:\n" + lines + "\n"


def calibration_path(thresholds_path: str, vendor: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(thresholds_path)), CALIBRATION_DIR, f"{vendor}.yaml")


CALIBRATION_FIX = "rerun `python -m perf calibrate` on the GPU"
_LAUNCH_COST_KEYS = ("fail_percent", "runs", "sigma_process", "rule")


def parse_calibration(data: Any, path: str) -> Calibration:
    """Validate a parsed calibration file whole; ConfigError naming `path` and the first bad field."""
    from perf.results import METRICS

    c = _Checker(path)
    if data is None:
        c.fail("(top level)", f"the file is empty; {CALIBRATION_FIX}")
    data = c.mapping(data, "(top level)", ("version", "vendor", "gpu", "meta", "cases", "launch_cost"),
                     ("version", "vendor", "gpu", "cases"))
    if type(data["version"]) is not int or data["version"] != CALIBRATION_VERSION:
        c.fail("version", f"this harness reads version {CALIBRATION_VERSION}, got {data['version']!r}; "
                          f"{CALIBRATION_FIX}")
    vendor = c.string(data["vendor"], "vendor")
    if vendor not in VENDORS:
        c.fail("vendor", f"unknown vendor {vendor!r} (expected one of: {', '.join(VENDORS)})")
    gpu = c.string(data["gpu"], "gpu")
    if not isinstance(data["cases"], list) or not data["cases"]:
        c.fail("cases", f"expected a non-empty list of cases, got {data['cases']!r:.40}; {CALIBRATION_FIX}")
    cases: dict[tuple[str, str, str], CaseNoise] = {}
    first: dict[tuple[str, str, str], int] = {}
    keys = ("variant", "scenario", "metric", "sigma_round", "tau", "processes", "rounds", "median_ms")
    for i, e in enumerate(data["cases"]):
        w = f"cases[{i}]"
        e = c.mapping(e, w, keys, keys)
        variant, scenario, metric = (c.string(e[k], f"{w}.{k}") for k in ("variant", "scenario", "metric"))
        if metric not in METRICS:
            c.fail(f"{w}.metric", f"unknown metric {metric!r} (expected one of: {', '.join(METRICS)})")
        key = (variant, _scenario_name(scenario), metric)
        if key in first:
            c.fail(w, f"{variant} {key[1]} {metric} is calibrated twice (also cases[{first[key]}]); "
                      f"{CALIBRATION_FIX}")
        first[key] = i
        processes = c.integer(e["processes"], f"{w}.processes", 2, 100000)
        cases[key] = CaseNoise(
            sigma_round=c.number(e["sigma_round"], f"{w}.sigma_round", 0.0, 10.0),
            tau=c.number(e["tau"], f"{w}.tau", 0.0, 10.0),
            processes=processes,
            rounds=c.integer(e["rounds"], f"{w}.rounds", max(2, processes), 10000000),
            median_ms=c.number(e["median_ms"], f"{w}.median_ms", 0.0, 1e9, lo_open=True))
    launch = data.get("launch_cost")
    if launch is not None:
        launch = c.mapping(launch, "launch_cost", _LAUNCH_COST_KEYS, ("fail_percent",))
        c.number(launch["fail_percent"], "launch_cost.fail_percent", 0.0, 1000.0, lo_open=True)
        if "runs" in launch:
            c.integer(launch["runs"], "launch_cost.runs", 2, 100000)
        sigmas = c.mapping(launch.get("sigma_process", {}), "launch_cost.sigma_process")
        for variant, sigma in sigmas.items():
            c.number(sigma, f"launch_cost.sigma_process.{variant}", 0.0, 100.0)
        if "rule" in launch:
            c.string(launch["rule"], "launch_cost.rule")
    meta = c.mapping(data.get("meta") or {}, "meta")
    if "interpreter" in meta and not isinstance(meta["interpreter"], bool):
        c.fail("meta.interpreter", f"must be true or false, got {meta['interpreter']!r}")
    return Calibration(path, vendor, gpu, dict(meta), cases, launch)


def _scenario_name(name: str) -> str:
    """The current name of a scenario a calibration file names either way (perf/scenarios.py
    reads the earlier names as the same batches), so older files keep applying."""
    from perf.scenarios import canonical_name

    return canonical_name(name)


def load_calibration(path: str) -> Calibration:
    """Read and validate one calibration file (ConfigError on a problem, naming the file)."""
    return parse_calibration(files.load_yaml(path, "calibration file", CALIBRATION_FIX), path)


def measured_environment(cal: Calibration) -> dict:
    """What a calibration was measured on, in perf.files.guard_measured's terms (files written
    before `meta.interpreter` existed were measured on GPUs)."""
    return {"vendor": cal.vendor, "gpu": cal.gpu, "interpreter": bool(cal.meta.get("interpreter", False))}


def calibration_for(thresholds: Thresholds, vendor: str, gpu: str | None) -> tuple[Calibration | None, str]:
    """The calibration that applies to `gpu` (None if there is none) and a note saying which."""
    path = calibration_path(thresholds.path, vendor)
    if not os.path.exists(path):
        return None, (f"no calibration ({os.path.relpath(path)} missing): every case uses the uncalibrated "
                      f"{vendor}.latency defaults; run `python -m perf calibrate` on this GPU")
    cal = load_calibration(path)
    if cal.vendor != vendor:
        raise ConfigError(f"{path}: vendor is {cal.vendor!r} but the file is named for {vendor!r}; rerun "
                          f"`python -m perf calibrate`")
    if gpu is not None and cal.gpu != gpu:
        return None, (f"{os.path.relpath(path)} was measured on {cal.gpu}, this GPU is {gpu}: every case "
                      f"uses the uncalibrated {vendor}.latency defaults")
    return cal, cal.describe()


# --- compile-time calibration: measured noise of cold compiles on a CPU ------------------------

COMPILE_CALIBRATION = "compile-time.yaml"  # calibration/compile-time.yaml beside the thresholds
COMPILE_CALIBRATION_FIX = "rerun `python -m perf compile-calibrate`"


@dataclass(frozen=True)
class CompileCalibration:
    """A/A noise of the static gate's compile-time ratio per (variant, target), measured by
    `perf compile-calibrate` on one machine (perf/static/calibrate.py)."""

    path: str
    machine: str  # CPU model and count it was measured on
    meta: dict  # date, triton, commit, suite, repeats, ...
    cases: dict[tuple[str, str], dict]  # (variant, target) -> {noise, repeats, cpu_s, specializations}

    def noise(self, variant: str, target: str) -> float | None:
        """Standard deviation of log(head / base) of one gate run's cold compile time, A/A."""
        case = self.cases.get((variant, target))
        return None if case is None else case["noise"]

    def describe(self) -> str:
        m = self.meta
        return (f"{os.path.relpath(self.path)}: {len(self.cases)} variant x target noises from "
                f"{m.get('repeats', '?')} A/A pairs of cold compiles on {self.machine} "
                f"({m.get('date', '?')}, Triton {m.get('triton', '?')})")


def compile_calibration_path(thresholds_path: str) -> str:
    folder = os.path.dirname(os.path.abspath(thresholds_path))
    return os.path.join(folder, CALIBRATION_DIR, COMPILE_CALIBRATION)


def parse_compile_calibration(data: Any, path: str) -> CompileCalibration:
    """Validate a parsed compile-time calibration whole; ConfigError naming `path` and the field."""
    c = _Checker(path)
    if data is None:
        c.fail("(top level)", f"the file is empty; {COMPILE_CALIBRATION_FIX}")
    data = c.mapping(data, "(top level)", ("version", "machine", "meta", "cases"),
                     ("version", "machine", "cases"))
    if type(data["version"]) is not int or data["version"] != CALIBRATION_VERSION:
        c.fail("version", f"this harness reads version {CALIBRATION_VERSION}, got {data['version']!r}; "
                          f"{COMPILE_CALIBRATION_FIX}")
    machine = c.string(data["machine"], "machine")
    if not isinstance(data["cases"], list) or not data["cases"]:
        c.fail("cases", f"expected a non-empty list of cases, got {data['cases']!r:.40}; "
                        f"{COMPILE_CALIBRATION_FIX}")
    keys = ("variant", "target", "noise", "repeats", "cpu_s", "specializations")
    cases: dict[tuple[str, str], dict] = {}
    for i, e in enumerate(data["cases"]):
        w = f"cases[{i}]"
        e = c.mapping(e, w, keys, keys)
        key = (c.string(e["variant"], f"{w}.variant"), c.string(e["target"], f"{w}.target"))
        if key in cases:
            c.fail(w, f"{key[0]} on {key[1]} is calibrated twice; {COMPILE_CALIBRATION_FIX}")
        cases[key] = {"noise": c.number(e["noise"], f"{w}.noise", 0.0, 10.0),
                      "repeats": c.integer(e["repeats"], f"{w}.repeats", 2, 100000),
                      "cpu_s": c.number(e["cpu_s"], f"{w}.cpu_s", 0.0, 1e7, lo_open=True),
                      "specializations": c.integer(e["specializations"], f"{w}.specializations", 1, 1000000)}
    return CompileCalibration(path, machine, dict(c.mapping(data.get("meta") or {}, "meta")), cases)


def load_compile_calibration(path: str) -> CompileCalibration:
    data = files.load_yaml(path, "compile-time calibration", COMPILE_CALIBRATION_FIX)
    return parse_compile_calibration(data, path)


def compile_calibration_for(thresholds: Thresholds) -> tuple[CompileCalibration | None, str]:
    """The compile-time calibration beside the thresholds (None if there is none) and a note.
    It applies on any machine: the noise is of a ratio of two sides compiled side by side on
    one machine, so the machine's speed cancels; the note names where it was measured."""
    path = compile_calibration_path(thresholds.path)
    if not os.path.exists(path):
        return None, (f"compile time: no calibration ({os.path.relpath(path)} missing): the "
                      f"compile.compile_time warn/fail ratios apply as they are; run `python -m perf "
                      f"compile-calibrate`")
    cal = load_compile_calibration(path)
    return cal, "compile time: noise from " + cal.describe()
