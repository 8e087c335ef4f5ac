"""thresholds.yaml: the shipped file validates, resolution and overrides, every kind of mistake.

Each invalid file must end in a ConfigError whose single line names the file and the
field (the CLI prints it and exits 2); the last test runs the CLI to prove the exit code
and that no traceback is printed.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys

import pytest
import yaml

from perf.errors import ConfigError
from perf.thresholds import calibration_for, calibration_path, load_thresholds, parse_thresholds
from perf.vendor import VENDORS

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "thresholds.yaml")


@pytest.fixture(scope="module")
def raw() -> dict:
    """The shipped file plus one valid override, the starting point of every broken copy."""
    with open(SHIPPED, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    data["overrides"] = [{"variant": "naive", "metric": "eager", "latency": {"fail": 1.1}, "reason": "r"}]
    parse_thresholds(data, "t.yaml")
    return data


def test_shipped_file_is_valid():
    th = load_thresholds(SHIPPED)
    assert set(th.vendors) == set(VENDORS)
    for v in th.vendors.values():
        assert 1.0 < v.latency.warn <= v.latency.fail
        assert v.statistics.processes >= 3 and v.statistics.repeats >= 4
        assert v.noise_rule is not None and v.noise_rule.floor_fail <= v.latency.fail
        assert v.targets and v.runners.labels
    assert {t.name for v in th.vendors.values() for t in v.targets} >= {"sm_90", "gfx942"}


def test_overrides_apply_in_order_and_by_glob(raw):
    data = copy.deepcopy(raw)
    data["overrides"] = [
        {"variant": "q*", "latency": {"warn": 1.10, "fail": 1.20}, "reason": "a"},
        {"variant": "qblock", "scenario": "*_d100", "metric": "graph", "latency": {"fail": 1.30},
         "reason": "b"},
        {"vendor": "amd", "latency": {"warn": 1.5, "fail": 1.6}, "reason": "c"},
    ]
    th = parse_thresholds(data, "t.yaml")
    base = th.latency("nvidia", "naive", "x_d100", "graph")
    assert (base.warn, base.fail, base.source) == (raw["nvidia"]["latency"]["warn"],
                                                  raw["nvidia"]["latency"]["fail"], "nvidia.latency")
    t = th.latency("nvidia", "qblock", "x_d50", "graph")
    assert (t.warn, t.fail, t.source) == (1.10, 1.20, "overrides[0]")
    t = th.latency("nvidia", "qblock", "x_d100", "graph")
    assert (t.warn, t.fail, t.source) == (1.10, 1.30, "overrides[1]")
    assert th.latency("nvidia", "qblock", "x_d100", "eager").fail == 1.20
    assert th.latency("amd", "naive", "x", "eager").fail == 1.6
    assert "warn > 1.1, fail > 1.3" == th.latency("nvidia", "qblock", "x_d100", "graph").describe()


def test_unknown_vendor_lookup_names_file_and_fix(raw):
    th = parse_thresholds(raw, "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml: no thresholds for 'intel', not a vendor measured here"):
        th.vendor("intel")
    del th.vendors["amd"]
    with pytest.raises(ConfigError, match=r"^t\.yaml: no section for vendor 'amd'.*add a `amd:` section"):
        th.vendor("amd")


def _set(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is _DELETE:
        del node[keys[-1]]
    elif isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return data


_DELETE = object()
INVALID = [  # (path to change, new value, field the message must name)
    ("nvidia.latency.fail", "abc", "nvidia.latency.fail"),
    ("nvidia.latency.fail", 0.9, "nvidia.latency.fail"),
    ("nvidia.latency.fail", 1.01, "nvidia.latency.fail"),  # below warn
    ("nvidia.latency.warn", True, "nvidia.latency.warn"),
    ("nvidia.latency", _DELETE, "nvidia"),
    ("nvidia.latency.typo", 1.2, "nvidia.latency.typo"),
    ("nvidia.statistics.alpha", 0.0, "nvidia.statistics.alpha"),
    ("nvidia.statistics.repeats", 3, "nvidia.statistics.repeats"),
    ("nvidia.statistics.processes", 2, "nvidia.statistics.processes"),
    ("nvidia.latency.floor.fail", 1.2, "nvidia.latency.floor.fail"),  # above the default fail
    ("nvidia.latency.floor.warn", 0.99, "nvidia.latency.floor.warn"),
    ("nvidia.latency.k.fail", 1.0, "nvidia.latency.k.fail"),  # below k.warn
    ("nvidia.latency.k", _DELETE, "nvidia.latency"),  # floor without k
    ("nvidia.statistics.samples", 2.5, "nvidia.statistics.samples"),
    ("nvidia.statistics.confidence", 1.5, "nvidia.statistics.confidence"),
    ("amd.compile.targets", [], "amd.compile.targets"),
    ("amd.compile.targets.0.backend", "metal", "amd.compile.targets[0].backend"),
    ("amd.compile.targets.0.arch", "sm_90", "amd.compile.targets[0].arch"),
    ("nvidia.compile.targets.0.arch", "90", "nvidia.compile.targets[0].arch"),
    ("nvidia.compile.static.new_spills", "explode", "nvidia.compile.static.new_spills"),
    ("nvidia.compile.static.registers_warn_ratio", 0.5, "nvidia.compile.static.registers_warn_ratio"),
    ("nvidia.runners.labels", [], "nvidia.runners.labels"),
    ("nvidia.runners.env", {"X": 1}, "nvidia.runners.env.X"),
    ("nvidia.runners.lock_clocks", "fast", "nvidia.runners.lock_clocks"),
    ("amd.runners.isolation_env", ["lower"], "amd.runners.isolation_env"),
    ("nvidia.runners.nightly_runners", "gpu-1_h100", "nvidia.runners.nightly_runners"),
    ("nvidia.runners.nightly_runners", ["gpu-1_h100", "nights/x"], "nvidia.runners.nightly_runners[1]"),
    ("nvidia.runners.nightly_runners", ["a_h100", "a_h100"], "nvidia.runners.nightly_runners[1]"),
    ("amd.runners.nightly_runners", [""], "amd.runners.nightly_runners[0]"),
    ("amd.runners.nightly_runners", [7], "amd.runners.nightly_runners[0]"),
    ("version", 2, "version"),
    ("overrides", {"a": 1}, "overrides"),
    ("overrides.0.reason", _DELETE, "overrides[0]"),
    ("overrides.0.vendor", "intel", "overrides[0].vendor"),
    ("overrides.0.latency", {}, "overrides[0].latency"),
    # numbers: never NaN, inf or true/false
    ("nvidia.latency.fail", float("nan"), "nvidia.latency.fail"),
    ("nvidia.latency.fail", float("inf"), "nvidia.latency.fail"),
    ("nvidia.latency.floor.warn", float("nan"), "nvidia.latency.floor.warn"),
    ("nvidia.latency.k.fail", float("inf"), "nvidia.latency.k.fail"),
    ("nvidia.statistics.alpha", float("nan"), "nvidia.statistics.alpha"),
    ("nvidia.statistics.processes", True, "nvidia.statistics.processes"),
    ("nvidia.compile.static.registers_fail_ratio", float("nan"),
     "nvidia.compile.static.registers_fail_ratio"),
    ("overrides.0.latency.fail", float("inf"), "overrides[0].latency.fail"),
    ("version", True, "version"),
    ("version", 1.0, "version"),
    # cross-field rules
    ("nvidia.compile.static.registers_fail_ratio", 1.05, "nvidia.compile.static.registers_fail_ratio"),
    ("amd.compile.static.registers_warn_ratio", 1.5, "amd.compile.static.registers_fail_ratio"),
    ("nvidia.compile.targets.1.name", "sm_90", "nvidia.compile.targets[1].name"),
    ("amd.compile.targets.1.name", "sm_90", "amd.compile.targets[1].name"),
    ("nvidia.compile.targets.0.backend", "hip", "nvidia.compile.targets[0].backend"),
    ("nvidia.compile.targets.0.name", "sm_77", "nvidia.compile.targets[0].name"),  # no record, no facts
    ("amd.compile.targets.1.name", "sm_80", "amd.compile.targets[1].name"),  # a record of nvidia's
    ("nvidia.statistics.bootstrap", 100, "nvidia.statistics.bootstrap"),  # with confidence 0.99 below
    ("nvidia.statistics.confidence", 1.0, "nvidia.statistics.bootstrap"),
    # overrides that could never apply, or would move the ratio they leave to the vendor
    ("overrides.0.variant", "statc_grid", "overrides[0].variant"),
    ("overrides.0.metric", "graf", "overrides[0].metric"),
    ("overrides.0.scenario", "llama3-8b/decoded/*", "overrides[0].scenario"),
    ("overrides.0.latency", {"fail": 1.02}, "overrides[0].latency.fail"),
    ("overrides.0.latency", {"warn": 1.2}, "overrides[0].latency.warn"),
]


def _invalid_id(path, value):
    return (f"{path}=<deleted>" if value is _DELETE else f"{path}={value!r}")[:60]  # stable for xdist


@pytest.mark.parametrize("path,value,field", INVALID, ids=[_invalid_id(p, v) for p, v, _ in INVALID])
def test_every_invalid_field_is_named(raw, path, value, field):
    data = _set(raw, path, value)
    if path == "nvidia.statistics.bootstrap":
        data["nvidia"]["statistics"]["confidence"] = 0.99  # 0.5 % tails of 100 resamples: none in a tail
    with pytest.raises(ConfigError) as err:
        parse_thresholds(data, "t.yaml")
    msg = str(err.value)
    assert msg.startswith(f"t.yaml: {field}"), msg
    assert "\n" not in msg


def test_a_target_named_takes_its_records_facts_and_a_key_given_replaces_one(raw):
    """thresholds.yaml names the targets the gate compiles; their hardware facts are perf/vendor.py's."""
    from perf.vendor import TARGETS

    keys = ("backend", "arch", "warp_size", "max_shared_memory_bytes", "max_registers_per_thread")
    th = parse_thresholds(raw, "t.yaml")
    for vt in th.vendors.values():
        for t in vt.targets:
            assert [getattr(t, k) for k in keys] == [getattr(TARGETS[t.name], k) for k in keys]
    own = _set(raw, "nvidia.compile.targets.0.max_shared_memory_bytes", 100 * 1024)
    assert parse_thresholds(own, "t.yaml").vendors["nvidia"].targets[0].max_shared_memory_bytes == 100 * 1024
    with pytest.raises(ConfigError, match=r"^t\.yaml: nvidia\.compile\.targets\[0\]\.name: no hardware "
                                          r"facts for 'sm_77' \(known: sm_80, sm_90, .*\); add it to "
                                          r"perf/vendor\.py TARGETS or use a known name$"):
        parse_thresholds(_set(raw, "nvidia.compile.targets.0.name", "sm_77"), "t.yaml")


def test_expected_nightly_runners_are_optional_and_gathered_over_vendors(raw):
    from perf.nightly import store

    unlisted = _set(_set(raw, "nvidia.runners.nightly_runners", _DELETE), "amd.runners.nightly_runners", [])
    assert parse_thresholds(unlisted, "t.yaml").nightly_runners() == ()
    data = _set(_set(raw, "nvidia.runners.nightly_runners", ["gpu-2_nvidia-h100", "gpu-1_nvidia-h100"]),
                "amd.runners.nightly_runners", ["gpu-1_nvidia-h100", "mi-1_amd-instinct-mi300x"])
    th = parse_thresholds(data, "t.yaml")
    assert th.vendors["nvidia"].runners.nightly_runners == ("gpu-2_nvidia-h100", "gpu-1_nvidia-h100")
    assert th.nightly_runners() == ("gpu-2_nvidia-h100", "gpu-1_nvidia-h100", "mi-1_amd-instinct-mi300x")
    for name in th.nightly_runners():  # every accepted name is a data-branch folder name
        assert store.check_name(name) == name


def test_the_image_digest_is_the_pinned_images(raw):
    th = parse_thresholds(raw, "t.yaml")
    for v in th.vendors.values():
        image, _, digest = v.runners.container.rpartition("@")
        assert v.runners.image_digest == digest and digest.startswith("sha256:") and len(digest) == 71
    none = parse_thresholds(_set(raw, "amd.runners.container", ""), "t.yaml")
    assert none.vendors["amd"].runners.image_digest == ""


def test_an_override_needs_its_vendors_section(raw):
    data = copy.deepcopy(raw)
    del data["amd"]
    data["overrides"][0]["vendor"] = "amd"
    with pytest.raises(ConfigError, match=r"^t\.yaml: overrides\[0\]\.vendor: this file has no 'amd'"):
        parse_thresholds(data, "t.yaml")


def test_variant_names_are_read_without_importing_kernels(tmp_path):
    """Every command reads the thresholds, some on machines without torch (workflows, CI)."""
    import kernels
    from perf.thresholds import registered_variants

    assert registered_variants() == tuple(kernels.VARIANTS)
    p = tmp_path / "th.yaml"
    p.write_text(open(SHIPPED, encoding="utf-8").read().replace(
        "overrides: []", "overrides:\n  - {variant: 'q*', scenario: '*/decode/*', metric: graph, "
                         "latency: {fail: 1.1}, reason: r}"))
    code = ("import sys; from perf.thresholds import load_thresholds; load_thresholds(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'triton', 'kernels') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(p)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_an_override_over_earlier_scenario_names_applies(raw):
    """A scenario glob written over the earlier names (as --scenarios takes them) is accepted
    on load, so it must match the current names the gate looks thresholds up by."""
    data = copy.deepcopy(raw)
    data["overrides"] = [{"scenario": "llama3-8b_bs16_b*_d100", "latency": {"warn": 1.2, "fail": 1.3},
                          "reason": "r"}]
    th = parse_thresholds(data, "t.yaml")
    assert th.latency("nvidia", "naive", "llama3-8b/decode/batch32-kv1024/block16", "graph").fail == 1.3
    assert th.latency("nvidia", "naive", "llama3-8b/prefill/batch8-kv16/block16", "graph").fail == 1.05


def test_unknown_top_level_vendor(raw):
    data = dict(raw, intel={"latency": {"warn": 1.1, "fail": 1.2}})
    with pytest.raises(ConfigError, match=r"^t\.yaml: intel: unknown key"):
        parse_thresholds(data, "t.yaml")


@pytest.mark.parametrize("text,where", [
    ("", "(top level)"),
    ("- a\n- b\n", "(top level)"),
    ("nvidia: [\n", "line"),
    ("version: 1\n", "(top level)"),
])
def test_malformed_files(tmp_path, text, where):
    p = tmp_path / "th.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_thresholds(p)
    assert str(err.value).startswith(f"{p}: {where}")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="thresholds file not found.*--thresholds"):
        load_thresholds(tmp_path / "nope.yaml")


SHIPPED_TEXT = open(SHIPPED, encoding="utf-8").read()


def _second_nvidia_section() -> str:
    """The shipped text with its nvidia section appended again, made lax (the last one won)."""
    start, end = SHIPPED_TEXT.index("\nnvidia:\n"), SHIPPED_TEXT.index("\namd:\n")
    return SHIPPED_TEXT + SHIPPED_TEXT[start:end].replace("fail: 1.05", "fail: 50.0")


@pytest.mark.parametrize("name,text,says", [
    ("duplicate-fail", SHIPPED_TEXT.replace("    fail: 1.05\n", "    fail: 1.05\n    fail: 50.0\n", 1),
     "key 'fail' is given twice"),
    ("second-nvidia", _second_nvidia_section(), "key 'nvidia' is given twice"),
    ("invalid-utf8", SHIPPED_TEXT.replace("# H100", "# H\udcff100", 1), "not UTF-8"),
    ("empty", "", "(top level): the file is empty"),
    ("list", "- nvidia\n", "(top level): expected a mapping"),
    ("scalar", "1.05\n", "(top level): expected a mapping"),
])
def test_strict_text_level_mistakes(tmp_path, name, text, says):
    p = tmp_path / "th.yaml"
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError) as err:
        load_thresholds(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: ") and says in msg and "\n" not in msg


def test_a_directory_as_thresholds(tmp_path):
    with pytest.raises(ConfigError, match=r"is a directory"):
        load_thresholds(tmp_path)


def test_cli_exits_2_with_one_line(tmp_path):
    p = tmp_path / "th.yaml"
    p.write_text("nvidia:\n  latency: {warn: 1.03, fail: oops}\n")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"  # inputs exist: the thresholds file is what is wrong
    a.write_text("{}\n")
    b.write_text("{}\n")
    cmd = [sys.executable, "-m", "perf", "compare", str(a), str(b), "--thresholds", str(p)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"error: {p}: nvidia")


# --- calibrated thresholds -----------------------------------------------------------------

def test_calibrated_threshold_is_the_larger_of_floor_and_k_noise(raw):
    th = parse_thresholds(raw, "t.yaml")
    rule = th.vendor("nvidia").noise_rule
    quiet = th.latency("nvidia", "v", "s", "graph", noise=1e-5)
    assert (quiet.warn, quiet.fail) == (rule.floor_warn, rule.floor_fail) and quiet.calibrated
    loud = th.latency("nvidia", "v", "s", "graph", noise=0.01)
    assert loud.fail == pytest.approx(math.exp(rule.k_fail * 0.01))
    assert loud.warn == pytest.approx(math.exp(rule.k_warn * 0.01)) and loud.source.startswith("calibrated")
    default = th.latency("nvidia", "v", "s", "graph")
    assert not default.calibrated and default.source == "nvidia.latency"


def test_overrides_win_over_calibration(raw):
    data = copy.deepcopy(raw)
    data["overrides"] = [{"scenario": "phi-2/*", "latency": {"fail": 1.5}, "reason": "r"}]
    th = parse_thresholds(data, "t.yaml")
    t = th.latency("nvidia", "v", "phi-2/decode/batch16-kv1024/block16", "graph", noise=0.001)
    assert t.fail == 1.5 and t.source == "overrides[0]"


CAL = """version: 1
vendor: nvidia
gpu: NVIDIA H100 80GB HBM3
meta: {date: 2026-11-22, driver: '580', commit: abc}
cases:
  - {variant: static_grid, scenario: s1, metric: graph, sigma_round: 0.002, tau: 0.001, processes: 6,
     rounds: 60, median_ms: 0.05}
"""


def _calibrated_repo(tmp_path, text=CAL):
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "nvidia.yaml").write_text(text)
    th_path = tmp_path / "thresholds.yaml"
    th_path.write_text(open(SHIPPED, encoding="utf-8").read())
    return load_thresholds(th_path)


def test_calibration_applies_only_to_its_gpu(tmp_path):
    th = _calibrated_repo(tmp_path)
    cal, note = calibration_for(th, "nvidia", "NVIDIA H100 80GB HBM3")
    assert cal is not None and "1 cases calibrated on 2026-11-22" in note
    c = cal.case("static_grid", "s1", "graph")
    assert c.variance(10) == pytest.approx(0.001 ** 2 + 0.002 ** 2 / 10)
    assert cal.noise("static_grid", "s1", "graph", 3, 10) == pytest.approx(math.sqrt(c.variance(10) / 3))
    assert cal.noise("static_grid", "other", "graph", 3, 10) is None
    other, why = calibration_for(th, "nvidia", "NVIDIA H200")
    assert other is None and "calibration/nvidia-h200.yaml missing" in why and "uncalibrated" in why
    # one file per GPU model: the H200's beside the H100's, each gate reading its own GPU's
    h200_text = CAL.replace("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    (tmp_path / "calibration" / "nvidia-h200.yaml").write_text(h200_text)
    h200, note = calibration_for(th, "nvidia", "NVIDIA H200")
    assert h200.gpu == "NVIDIA H200" and "nvidia-h200.yaml" in note
    assert calibration_for(th, "nvidia", "NVIDIA H100 80GB HBM3")[0].gpu == "NVIDIA H100 80GB HBM3"
    assert calibration_path(th.path, "nvidia", "NVIDIA B200").endswith("calibration/nvidia-b200.yaml")
    none, why = calibration_for(th, "amd", "AMD Instinct MI300X")
    assert none is None and "missing" in why


@pytest.mark.parametrize("text,field", [
    (CAL.replace("version: 1", "version: 9"), "version"),
    (CAL.replace("tau: 0.001", "tau: -1"), "cases[0].tau"),
    (CAL.replace("processes: 6,", "processes: x,"), "cases[0].processes"),
    (CAL.replace("vendor: nvidia", "vendor: intel"), "vendor"),
    (CAL + "launch_cost: {runs: 3}\n", "launch_cost"),
    ("cases: [\n", "line"),
    (CAL.replace("version: 1", "version: true"), "version"),
    (CAL.replace("tau: 0.001", "tau: .nan"), "cases[0].tau"),
    (CAL.replace("sigma_round: 0.002", "sigma_round: .inf"), "cases[0].sigma_round"),
    (CAL.replace("metric: graph", "metric: graf"), "cases[0].metric"),
    (CAL.replace("gpu: NVIDIA H100 80GB HBM3", "gpu: ''"), "gpu"),
    (CAL.replace("rounds: 60", "rounds: 3"), "cases[0].rounds"),  # fewer rounds than processes
    (CAL.replace("median_ms: 0.05", "median_ms: 0"), "cases[0].median_ms"),
    (CAL.split("cases:")[0] + "cases: []\n", "cases"),
    (CAL + CAL[CAL.index("  - "):], "cases[1]"),  # the same case twice
    (CAL.replace("metric: graph", "metric: graph, colour: red"), "cases[0].colour"),
    (CAL.replace("commit: abc}", "commit: abc, interpreter: 'no'}"), "meta.interpreter"),
    (CAL + "launch_cost: {fail_percent: .nan}\n", "launch_cost.fail_percent"),
    (CAL + "launch_cost: {fail_percent: 5, typo: 1}\n", "launch_cost.typo"),
    (CAL + "gpu: NVIDIA H200\n", "line"),  # a key given twice
    ("- 1\n", "(top level)"),
])
def test_bad_calibration_files_name_the_field(tmp_path, text, field):
    th = _calibrated_repo(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        calibration_for(th, "nvidia", "NVIDIA H100 80GB HBM3")
    msg = str(err.value)
    assert "calibration/nvidia.yaml: " + field in msg and "\n" not in msg


def test_a_side_bias_beyond_chance_widens_the_case_thresholds(tmp_path):
    """A calibrated A/A mean beyond twice its standard error (`CaseNoise.side_bias`: one side's own
    copy of the same code moved the case) widens that case's warn and fail by it; a mean within
    chance, or none recorded (files written before `aa_log`), changes nothing."""
    biased = CAL.replace("median_ms: 0.05}", "median_ms: 0.05, aa_log: 0.018}")
    th = _calibrated_repo(tmp_path, biased)
    cal, _ = calibration_for(th, "nvidia", "NVIDIA H100 80GB HBM3")
    case = cal.case("static_grid", "s1", "graph")
    se = math.sqrt(case.variance(10) / 6)
    assert case.side_bias() == pytest.approx(0.018 - 2 * se)
    noise = cal.noise("static_grid", "s1", "graph", 3, 10)
    plain = th.latency("nvidia", "static_grid", "s1", "graph", noise=noise)
    bias = cal.bias("static_grid", "s1", "graph")
    wide = th.latency("nvidia", "static_grid", "s1", "graph", noise=noise, bias=bias)
    assert wide.fail == pytest.approx(plain.fail * math.exp(case.side_bias()))
    assert wide.warn == pytest.approx(plain.warn * math.exp(case.side_bias())) and "side bias" in wide.source
    for text in (CAL, CAL.replace("median_ms: 0.05}", "median_ms: 0.05, aa_log: -0.0003}")):
        (tmp_path / "calibration" / "nvidia.yaml").write_text(text)
        cal, _ = calibration_for(load_thresholds(th.path), "nvidia", "NVIDIA H100 80GB HBM3")
        assert cal.bias("static_grid", "s1", "graph") == 0.0
    assert cal.bias("static_grid", "other", "graph") == 0.0


def test_the_h200_calibration_widens_only_the_cases_whose_sides_differed():
    """The committed NVIDIA H200 calibration (2026-11-29): falcon-7b's graph replay, whose A/A sides
    differed by 1.8 %, gets thresholds about that much wider; no case is widened by more, and most
    by nothing."""
    from perf.thresholds import load_calibration

    cal = load_calibration(os.path.join(os.path.dirname(SHIPPED), "calibration", "nvidia-h200.yaml"))
    assert cal.gpu == "NVIDIA H200" and len(cal.cases) == 54
    biases = {k: c.side_bias() for k, c in cal.cases.items()}
    top = max(biases, key=biases.get)
    assert top == ("static_grid", "falcon-7b/decode/batch16-kv1024/block16", "graph")
    assert 0.015 < biases[top] < 0.02
    assert sum(b == 0.0 for b in biases.values()) >= 40
