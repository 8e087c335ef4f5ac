"""One vendor's section of thresholds.yaml: what it holds, its defaults and its parser.

perf/thresholds.py reads the whole file (its schema is there) and hands each vendor's
section to `parse_vendor`; `Checker` walks parsed YAML for both, and for the calibration
files, raising a ConfigError that names the file and the first bad field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from perf.errors import ConfigError
from perf.names import RUNNER
from perf.vendor import TARGETS, VENDORS, unknown_target

SEVERITIES = ("fail", "warn", "ignore")
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


class Checker:
    """Walks the parsed YAML; the first problem raises ConfigError naming file and field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, msg: str) -> None:
        raise ConfigError(f"{self.path}: {where}: {msg}")

    def mapping(self, value: Any, where: str, allowed: tuple[str, ...] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping, got {kind(value)}")
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


def kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def parse_vendor(c: Checker, name: str, v: Any) -> VendorThresholds:
    """`name`'s section, validated whole: latency, statistics, compile (targets, static rules,
    compile time) and runners."""
    v = c.mapping(v, name, ("latency", "statistics", "compile", "runners"),
                  ("latency", "statistics", "compile", "runners"))
    lat = c.mapping(v["latency"], f"{name}.latency", ("warn", "fail", "floor", "k"), ("warn", "fail"))
    warn, fail = c.ratio_pair({k: lat[k] for k in ("warn", "fail")}, f"{name}.latency", required=True)
    noise_rule = _parse_noise_rule(c, name, lat)
    stats = _parse_statistics(c, f"{name}.statistics", v["statistics"])
    comp = c.mapping(v["compile"], f"{name}.compile", ("targets", "static", "compile_time"),
                     ("targets", "static"))
    targets = _parse_targets(c, name, comp["targets"])
    static = _parse_static(c, f"{name}.compile.static", comp["static"])
    runners = _parse_runners(c, f"{name}.runners", v["runners"])
    compile_time = _parse_compile_time(c, f"{name}.compile.compile_time", comp.get("compile_time"))
    return VendorThresholds(name, LatencyThreshold(warn, fail, f"{name}.latency"), stats, targets,
                            {**STATIC_DEFAULTS, **static}, runners, noise_rule, compile_time)


def _parse_statistics(c: Checker, w: str, given: Any) -> Statistics:
    s = {**_STAT_DEFAULTS, **c.mapping(given, w, tuple(_STAT_DEFAULTS))}
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
    return stats


# A target's hardware keys: perf/vendor.py TARGETS gives what an entry leaves out
_TARGET_KEYS = ("backend", "arch", "warp_size", "max_shared_memory_bytes", "max_registers_per_thread")


def _parse_targets(c: Checker, name: str, given: Any) -> tuple[CompileTarget, ...]:
    if not isinstance(given, list) or not given:
        c.fail(f"{name}.compile.targets", "must be a non-empty list of targets")
    return tuple(_parse_target(c, name, f"{name}.compile.targets[{i}]", t) for i, t in enumerate(given))


def _parse_target(c: Checker, name: str, w: str, t: Any) -> CompileTarget:
    """One entry of `compile.targets`: a target of perf/vendor.py TARGETS by name, each hardware
    key it gives replacing the record's (a limit of one's own); a name TARGETS lacks gives them all."""
    t = c.mapping(t, w, ("name", *_TARGET_KEYS, "default_variants"), ("name",))
    only = t.get("default_variants")
    if only is not None and (not isinstance(only, list) or not only
                             or not all(isinstance(x, str) and x for x in only)):
        c.fail(f"{w}.default_variants", f"must be a non-empty list of variant names, got {only!r}")
    own_backend = "backend" in t  # else the record's: check_targets says where such a target belongs
    if any(k not in t for k in _TARGET_KEYS):
        known = TARGETS.get(c.string(t["name"], f"{w}.name"))
        if known is None:
            c.fail(f"{w}.name", unknown_target(t["name"]))
        t = {**{k: getattr(known, k) for k in _TARGET_KEYS}, **t}
    backends = tuple(v.backend for v in VENDORS.values())
    backend = c.string(t["backend"], f"{w}.backend")
    if backend not in backends:
        c.fail(f"{w}.backend", f"must be {' or '.join(backends)}, got {backend!r}")
    if own_backend and backend != VENDORS[name].backend:
        home = next(v.name for v in VENDORS.values() if v.backend == backend)
        c.fail(f"{w}.backend", f"a {name} target compiles with {VENDORS[name].backend}, got {backend!r}; "
                               f"move the target under the {home}: section or fix its backend")
    arch = t["arch"]
    if backend == "cuda":
        c.integer(arch, f"{w}.arch", 50, 200)
    else:
        c.string(arch, f"{w}.arch")
        if backend == "hip" and not arch.startswith("gfx"):
            c.fail(f"{w}.arch", f"a hip target is a gfx name such as gfx942, got {arch!r}")
    return CompileTarget(
        name=c.string(t["name"], f"{w}.name"), backend=backend, arch=arch,
        warp_size=c.integer(t["warp_size"], f"{w}.warp_size", 1, 128),
        max_shared_memory_bytes=c.integer(t["max_shared_memory_bytes"], f"{w}.max_shared_memory_bytes", 1,
                                          1 << 30),
        max_registers_per_thread=c.integer(t["max_registers_per_thread"], f"{w}.max_registers_per_thread", 1,
                                           4096),
        default_variants=None if only is None else tuple(only),
    )


def _parse_static(c: Checker, where: str, given: Any) -> dict:
    static = dict(c.mapping(given, where, tuple(STATIC_DEFAULTS)))
    for key, value in static.items():
        w = f"{where}.{key}"
        if key.endswith("_ratio"):
            static[key] = c.number(value, w, 1.0, 100.0)
        elif not isinstance(value, str) or value not in SEVERITIES:
            c.fail(w, f"must be one of {', '.join(SEVERITIES)}, got {value!r}")
    _check_static_pairs(c, where, static)
    return static


def _parse_runners(c: Checker, w: str, given: Any) -> Runners:
    r = c.mapping(given, w, ("labels", "container", "container_options", "env", "lock_clocks",
                             "isolation_env", "nightly_shards", "nightly_runners"), ("labels", "container"))
    labels = r["labels"]
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x for x in labels):
        c.fail(f"{w}.labels", f"must be a non-empty list of strings, got {labels!r}")
    env = c.mapping(r.get("env") or {}, f"{w}.env")
    for key, value in env.items():
        if not isinstance(value, str):
            c.fail(f"{w}.env.{key}", f"must be a string (quote it), got {value!r}")
    lock = r.get("lock_clocks")
    if lock is not None and lock is not False:
        c.integer(lock, f"{w}.lock_clocks", 100, 5000)
    iso = r.get("isolation_env")
    if iso is not None and (not isinstance(iso, list) or not all(
            isinstance(x, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", x) for x in iso)):
        c.fail(f"{w}.isolation_env", f"must be a list of variable names, got {iso!r}")
    return Runners(
        lock_clocks=lock or None, isolation_env=None if iso is None else tuple(iso),
        nightly_shards=c.integer(r.get("nightly_shards", 1), f"{w}.nightly_shards", 1, 64),
        labels=tuple(labels),
        container=_image(c, r["container"], f"{w}.container"),
        container_options=c.string(r.get("container_options", ""), f"{w}.container_options",
                                   allow_empty=True),
        env=dict(env),
        nightly_runners=_nightly_runners(c, r.get("nightly_runners"), f"{w}.nightly_runners"),
    )


def _parse_compile_time(c: Checker, where: str, value: Any) -> NoiseRule:
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


def _check_statistics(c: Checker, where: str, s: Statistics) -> None:
    """Combinations the statistics cannot mean: an interval whose tails hold no resample."""
    tail = (1.0 - s.confidence) / 2.0
    if tail * s.bootstrap < 1.0:
        need = f"at least {math.ceil(1.0 / tail)} resamples or a lower confidence" if tail > 0 else \
            "a confidence below 1"
        c.fail(f"{where}.bootstrap", f"{s.bootstrap} resamples leave no resample in each tail of a "
                                     f"{s.confidence:g} interval; give {need}")


def _check_static_pairs(c: Checker, where: str, static: dict) -> None:
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


def _parse_noise_rule(c: Checker, name: str, lat: dict) -> NoiseRule | None:
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


def _image(c: Checker, value: Any, where: str) -> str:
    """A container image pinned by digest (IMAGE:TAG@sha256:<64 hex>), or "" for none."""
    image = c.string(value, where, allow_empty=True).strip()
    if image and not PINNED_IMAGE.fullmatch(image):
        c.fail(where, f"{image!r} is not pinned by digest; write IMAGE:TAG@sha256:<64 hex> (`docker "
                      f"buildx imagetools inspect IMAGE:TAG` prints it), so every run uses the same image")
    return image


def _nightly_runners(c: Checker, value: Any, where: str) -> tuple[str, ...]:
    """Data-branch folder names (perf/names.py RUNNER), each once."""
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


def check_targets(c: Checker, vendors: dict[str, VendorThresholds]) -> None:
    """Target names are unique across the file (the static gate keys its results by them), and
    each is listed under its own vendor (a backend given is checked with its entry)."""
    seen: dict[str, str] = {}
    for name, vt in vendors.items():
        for i, t in enumerate(vt.targets):
            where = f"{name}.compile.targets[{i}]"
            if t.name in seen:
                c.fail(f"{where}.name", f"target {t.name!r} is already listed as {seen[t.name]}; each target "
                                        f"once")
            seen[t.name] = where
            if t.backend != VENDORS[name].backend:
                home = TARGETS[t.name].vendor
                c.fail(f"{where}.name", f"{t.name!r} is a {home} target (perf/vendor.py TARGETS); move it "
                                        f"under the {home}: section")
