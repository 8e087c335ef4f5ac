"""Load and validate thresholds.yaml; resolve the latency threshold of one measurement.

The whole file is checked on load, so a typo fails every gate at once with one line that
names the file and the field (`ConfigError`, exit 2), never later with a traceback.
Schema (see thresholds.yaml, commented for the people who edit it; one vendor's section is
read by perf/vendor_thresholds.py):

    version: 1
    <vendor>:                       # a vendor of perf/vendor.py VENDORS: nvidia | amd
      latency: {warn, fail,         # ratios head/base, 1 < warn <= fail: cases without calibration
                floor: {warn, fail}, k: {warn, fail}}   # calibrated: max(floor, exp(k x noise))
      statistics: {alpha, processes, repeats, samples, sample_budget_ms, retries, bootstrap, confidence}
      compile: {targets: [{name, default_variants?: [name, ...],   # name: a target of perf/vendor.py
                           backend?, arch?, warp_size?,            # ... whose facts a key given
                           max_shared_memory_bytes?, max_registers_per_thread?}],  # here replaces
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

import fnmatch
import functools
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

from perf import files, names
from perf.errors import ConfigError
from perf.vendor import VENDORS
from perf.vendor_thresholds import (
    Checker,
    LatencyThreshold,
    VendorThresholds,
    check_targets,
    kind,
    parse_vendor,
)

SCHEMA_VERSION = 1
DEFAULT_PATH = "thresholds.yaml"
_TOP_KEYS = ("version", *VENDORS, "overrides")


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
                noise: float | None = None, bias: float = 0.0) -> LatencyThreshold:
        """The latency threshold of one case, with every matching override applied in order.

        `noise`: the calibrated standard deviation of the gate's log ratio for this case
        (`Calibration.noise`); with it the vendor's noise rule sets the thresholds, widened by
        the case's calibrated side bias (`CaseNoise.side_bias`, log units), without it the
        vendor's uncalibrated defaults (`latency.warn` / `latency.fail`) apply."""
        vt = self.vendor(vendor)
        t = vt.latency
        if noise is not None and vt.noise_rule is not None:
            warn, fail = vt.noise_rule.apply(noise)
            widened = f", x side bias {100 * math.expm1(bias):.2f} %" if bias > 0 else ""
            t = LatencyThreshold(warn * math.exp(bias), fail * math.exp(bias),
                                 f"calibrated ({vendor}.latency.k x noise {100 * noise:.2f} %, "
                                 f"floor {vt.noise_rule.floor_fail:g}{widened})", noise)
        for o in self.overrides:
            if o.matches(vendor, variant, scenario, metric):
                warn = o.warn if o.warn is not None else t.warn
                fail = o.fail if o.fail is not None else t.fail
                t = replace(t, warn=warn, fail=max(fail, warn), source=f"overrides[{o.index}]")
        return t


def _parse_overrides(c: Checker, items: Any) -> tuple[Override, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        c.fail("overrides", f"expected a list, got {kind(items)}")
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
    """The names of kernels.VARIANTS, read without importing it (perf.checkout.variant_names:
    torch and Triton take seconds, and every command reads the thresholds); importing kernels
    if the literal is gone; None if neither works."""
    from perf import checkout

    names = checkout.variant_names(imported=False)
    if names is not None:
        return names
    try:
        import kernels
    except ImportError:
        return None
    return tuple(kernels.VARIANTS)


def _suite_scenario_names() -> list[str]:
    """Every scenario of every suite of perf/suites.yaml (current names)."""
    from perf.scenarios import load_suites

    return list(dict.fromkeys(s.name for scenarios in load_suites().values() for s in scenarios))


def _check_overrides(c: Checker, overrides: tuple[Override, ...],
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


def parse_thresholds(data: Any, path: str = DEFAULT_PATH) -> Thresholds:
    """Validate parsed YAML; raises ConfigError naming `path` and the first bad field."""
    c = Checker(path)
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
    vendors = {name: parse_vendor(c, name, data[name]) for name in VENDORS if name in data}
    if not vendors:
        c.fail("(top level)", f"no vendor section; add at least one of: {', '.join(VENDORS)}")
    check_targets(c, vendors)
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
    aa_log: float = 0.0  # mean paired log(head/base) of the A/A: 0 but for a side's own effect

    def variance(self, rounds: int) -> float:
        """Variance of one process's mean log ratio over `rounds` rounds."""
        return self.tau ** 2 + self.sigma_round ** 2 / max(1, rounds)

    def side_bias(self) -> float:
        """How far one side's own copy of the same code moved this case, in log units: the A/A
        mean beyond twice its standard error, else 0. Where a case's two sides differ by more
        than chance although their code is the same (NVIDIA H200, 2026-11-29: falcon-7b's 13 us
        graph replay 1.8 % in the calibration and -1.3 to -2.0 % in five A/A gates, the sign
        differing between runs, every other case within 0.6 %), a gate cannot tell a change of
        that size from where each side's kernels and buffers landed: its thresholds widen by it."""
        se = math.sqrt(self.variance(max(1, self.rounds // max(1, self.processes))) / max(1, self.processes))
        return max(0.0, abs(self.aa_log) - 2.0 * se)


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

    def bias(self, variant: str, scenario: str, metric: str) -> float:
        """`CaseNoise.side_bias` of a calibrated case, else 0."""
        c = self.case(variant, scenario, metric)
        return 0.0 if c is None else c.side_bias()

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


def calibration_path(thresholds_path: str, vendor: str, gpu: str | None = None) -> str:
    """The calibration file of `vendor`'s GPU model `gpu`, one file per model: calibration/<vendor>.yaml,
    or, where that one holds another model's, calibration/<vendor>-<model>.yaml beside it (an H200
    runner's `perf calibrate` writes calibration/nvidia-h200.yaml next to the H100's nvidia.yaml,
    and each gate reads the one measured on its GPU). Without `gpu`: <vendor>.yaml."""
    folder = os.path.join(os.path.dirname(os.path.abspath(thresholds_path)), CALIBRATION_DIR)
    plain = os.path.join(folder, f"{vendor}.yaml")
    if gpu is None:
        return plain
    model = names.slug(gpu)
    keyed = os.path.join(folder, f"{vendor}-{model.removeprefix(vendor + '-')}.yaml")
    if os.path.exists(keyed) or (os.path.exists(plain) and load_calibration(plain).gpu != gpu):
        return keyed
    return plain


CALIBRATION_FIX = "rerun `python -m perf calibrate` on the GPU"
_LAUNCH_COST_KEYS = ("fail_percent", "runs", "sigma_process", "rule")


def parse_calibration(data: Any, path: str) -> Calibration:
    """Validate a parsed calibration file whole; ConfigError naming `path` and the first bad field."""
    from perf.results import METRICS

    c = Checker(path)
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
        e = c.mapping(e, w, (*keys, "aa_log"), keys)  # aa_log: files written before it have none
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
            median_ms=c.number(e["median_ms"], f"{w}.median_ms", 0.0, 1e9, lo_open=True),
            aa_log=c.number(e.get("aa_log", 0.0), f"{w}.aa_log", -1.0, 1.0))
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
    path = calibration_path(thresholds.path, vendor, gpu)
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
    c = Checker(path)
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
