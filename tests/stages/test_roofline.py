"""% of the hardware limit: the formula, the limits a run records (cached by device UUID), the
fields a results record carries, and `perf table`'s columns; synthetic numbers, no GPU.

Every expected value is computed here by hand from the definition: memory share = bytes /
(copy bandwidth x time), compute share = flops / (matmul peak x time), the larger names the bound.
"""

from __future__ import annotations

import json

import pytest

from perf import fingerprint, report, results, roofline
from perf.errors import ConfigError
from perf.measure.timing import Samples
from perf.scenarios import Scenario

LIMITS = roofline.Limits(copy_tb_s=4.0, matmul_tflop_s=800.0)  # synthetic: round numbers
DECODE = "llama3-8b/decode/batch128-kv8192/block16"
PREFILL = "llama3-8b/prefill/batch1-kv8192/block16"


def test_share_is_bytes_over_bandwidth_time_and_flops_over_peak_time():
    # 2e9 bytes in 1 ms at 4 TB/s: 4e9 would be the limit, so 50 %; 1e11 flops at 800 TFLOP/s: 8e11, 12.5 %
    found = roofline.share(2_000_000_000, 100_000_000_000, 1.0, LIMITS)
    assert found.memory == pytest.approx(0.5) and found.compute == pytest.approx(0.125)
    assert found.bound == "memory" and found.fraction == pytest.approx(0.5)
    assert roofline.cell(found) == "50 % memory"
    compute = roofline.share(1_000_000, 400_000_000_000, 2.0, LIMITS)  # 4e11 / (8e14 x 2e-3) = 25 %
    assert compute.bound == "compute" and roofline.cell(compute) == "25 % compute"


@pytest.mark.parametrize("args", [(1, 1, 1.0, None), (1, 1, 0.0, LIMITS), (1, 1, -1.0, LIMITS),
                                  (1, 1, float("nan"), LIMITS), (None, 1, 1.0, LIMITS), (1, -5, 1.0, LIMITS)])
def test_no_limit_no_time_or_no_work_is_a_dash_never_a_number(args):
    assert roofline.share(*args) is None and roofline.cell(roofline.share(*args)) == "–"


def test_a_case_timed_at_its_floor_is_at_100_percent_of_its_bound():
    """limit_ms (the floor of perf/lab/candidates.py) and the share agree: at the floor, 100 %."""
    for name, bound in ((DECODE, "memory"), (PREFILL, "compute")):
        spec = Scenario.parse(name).spec()
        w = roofline.work(spec)
        assert w == {"bytes": roofline.hbm_bytes(spec), "flops": roofline.attention_flops(spec)}
        at = roofline.share(w["bytes"], w["flops"], roofline.limit_ms(spec, LIMITS), LIMITS)
        assert at.bound == bound and at.fraction == pytest.approx(1.0)
        assert roofline.cell(roofline.share(w["bytes"], w["flops"], 2 * roofline.limit_ms(spec, LIMITS),
                                            LIMITS)) == f"50 % {bound}"


def test_a_sliding_window_reads_only_the_keys_its_queries_see():
    """A windowed decode reads each sequence's last `window` keys, not all of them (counted whole,
    the H200's windowed decode read as 188 % of the copy bandwidth, 2026-11-29); a prefill of q
    queries under a window of w reads the last q + w - 1 keys, or all where there are fewer."""
    full = Scenario.parse("llama3-8b/decode/batch16-kv4096/block16").spec()
    windowed = Scenario.parse("llama3-8b/decode/batch16-kv4096/block16/window1024").spec()
    per_key = 2 * full.num_kv_heads * full.head_size * full.torch_dtype.itemsize
    assert roofline.kv_read_bytes(full) == 16 * 4096 * per_key
    assert roofline.kv_read_bytes(windowed) == 16 * 1024 * per_key
    prefill = Scenario.parse("llama3-8b/prefill/batch1-kv8192/block16/window1024").spec()
    assert roofline.kv_read_bytes(prefill) == 8192 * per_key  # q + w - 1 > kv: every key
    chunk = Scenario.parse("llama3-8b/prefill/batch4-kv4096-chunk512/block16/window1024").spec()
    assert roofline.kv_read_bytes(chunk) == sum(min(kv, q + 1023) for q, kv in
                                                zip(chunk.query_lens, chunk.kv_lens)) * per_key


@pytest.mark.parametrize("doc", [None, {}, {"copy_tb_s": 4.0}, {"copy_tb_s": 0, "matmul_tflop_s": 1},
                                 {"copy_tb_s": "4", "matmul_tflop_s": 1},
                                 {"copy_tb_s": True, "matmul_tflop_s": 1},
                                 {"copy_tb_s": float("inf"), "matmul_tflop_s": 1}])
def test_limits_are_two_positive_numbers_or_none(doc):
    assert roofline.limits_from({"limits": doc}) is None
    assert roofline.describe_env({"limits": doc}).startswith("% of the hardware limit: – (")


# --- the limits of a run: measured once per GPU and driver, cached by UUID, never on a CPU ----------

GPU = {"vendor": "nvidia", "gpu_uuid": "GPU-1234-abcd", "gpu_model": "NVIDIA H200", "driver": "580.1",
       "why": {}}


class FakeMeasure:
    """Stands for roofline.measure_limits: counts its calls, returns synthetic limits."""

    def __init__(self, fail: Exception | None = None):
        self.calls, self.fail = [], fail

    def __call__(self, device):
        self.calls.append(device)
        if self.fail is not None:
            raise self.fail
        return LIMITS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(fingerprint.LIMITS_CACHE_ENV, str(tmp_path / "limits"))
    return tmp_path / "limits"


def test_limits_are_measured_once_then_read_from_the_cache_by_uuid(cache):
    measure = FakeMeasure()
    first, why = fingerprint.limits(GPU, 1, measure)
    assert why is None and measure.calls == ["cuda:1"]
    assert (first["copy_tb_s"], first["matmul_tflop_s"], first["cached"]) == (4.0, 800.0, False)
    entry = json.loads((cache / "GPU-1234-abcd.json").read_text())
    assert entry["gpu_uuid"] == GPU["gpu_uuid"] and entry["driver"] == "580.1"
    again, _ = fingerprint.limits(GPU, 1, measure)
    assert measure.calls == ["cuda:1"] and again["cached"] is True  # not measured a second time
    assert again["measured"] == first["measured"] and roofline.limits_from({"limits": again}) == LIMITS
    other = fingerprint.limits({**GPU, "gpu_uuid": "GPU-9"}, None, measure)[0]
    assert other["cached"] is False and measure.calls == ["cuda:1", "cuda"]  # another GPU: its own entry


def test_a_new_driver_or_a_broken_entry_is_measured_again(cache):
    measure = FakeMeasure()
    fingerprint.limits(GPU, None, measure)
    assert fingerprint.limits({**GPU, "driver": "590.0"}, None, measure)[0]["cached"] is False
    (cache / "GPU-1234-abcd.json").write_text("{not json")
    assert fingerprint.limits(GPU, None, measure)[0]["cached"] is False
    assert len(measure.calls) == 3


def test_no_gpu_no_limit_and_a_failed_measurement_says_why(cache):
    cpu = {"vendor": "cpu", "interpreter": "Triton interpreter", "gpu_uuid": None,
           "why": {"gpu_uuid": "no GPU measured: Triton's interpreter"}}
    measure = FakeMeasure()
    assert fingerprint.limits(cpu, None, measure) == (None, "no GPU measured: Triton's interpreter")
    assert measure.calls == []  # nothing is measured on a CPU
    broken = FakeMeasure(RuntimeError("CUDA out of memory"))
    limits, why = fingerprint.limits(GPU, None, broken)
    assert limits is None and "CUDA out of memory" in why and not cache.exists()
    no_uuid, _ = fingerprint.limits({**GPU, "gpu_uuid": None}, None, measure)
    assert no_uuid["cached"] is False and not cache.exists()  # measured for the run, nothing to key it by


@pytest.mark.no_gpu
def test_a_results_environment_in_the_interpreter_holds_no_limits_and_why():
    env = results.environment()
    assert env["limits"] is None and env["fingerprint_why"]["limits"]
    assert roofline.limits_from(env) is None
    assert roofline.describe_env(env) == f"% of the hardware limit: – ({env['fingerprint_why']['limits']})"


# --- records carry bytes and flops; old records without them still read -------------------------------

ENV = {"vendor": "nvidia", "gpu": "NVIDIA H200", "commit": "a" * 40, "time": "2026-11-28T00:00:00+00:00",
       "limits": {"copy_tb_s": 4.0, "matmul_tflop_s": 800.0, "measured": "2026-11-28T00:00:00+00:00",
                  "cached": False}}


def _write(path, records, env=ENV) -> str:
    header = {"environment": env, "suite": "pr", "variants": ["static_grid"], "peers": ["sdpa_cudnn"],
              "repeats": 1, "samples": 3}
    with results.ResultsWriter(str(path), header, resume=False) as w:
        for variant, scenario, ms, extra in records:
            w.record(variant=variant, scenario=scenario, metric="graph", repeat=0, samples=Samples((ms,) * 3),
                     config=[], digest="d", **extra)
    return str(path)


def test_records_carry_their_work_and_older_records_without_it_read(tmp_path):
    w = roofline.work(Scenario.parse(DECODE).spec())
    res = results.load(_write(tmp_path / "r.jsonl", [("static_grid", DECODE, 1.0, w),
                                                     ("static_grid", PREFILL, 1.0, {})]))
    assert roofline.record_work(res.measurements()) == {DECODE: (w["bytes"], w["flops"])}
    bad = tmp_path / "bad.jsonl"
    _write(bad, [("static_grid", DECODE, 1.0, {"bytes": -1, "flops": 2})])
    with pytest.raises(ConfigError, match=r"line 2: bytes is -1, expected an integer >= 0"):
        results.load(str(bad))


def _versus_row(md: str) -> str:
    """The decode row of the table against the fastest peer (9 columns)."""
    return next(line for line in md.splitlines()
                if line.startswith(f"| {DECODE} |") and line.count("|") == 10)


def test_perf_table_shows_each_time_against_the_limits(tmp_path):
    spec = Scenario.parse(DECODE).spec()
    w = roofline.work(spec)
    floor = roofline.limit_ms(spec, LIMITS)
    res = results.load(_write(tmp_path / "r.jsonl", [("static_grid", DECODE, 2 * floor, w),
                                                     ("peer:sdpa_cudnn", DECODE, floor, w)]))
    md = report.render_table(res)
    cells = _versus_row(md).split(" | ")
    assert cells[3] == "50 % memory" and cells[7] == "100 % memory"  # ours at twice the floor, the peer at it
    assert "| % of HW limit |" in md and "| its % of HW limit |" in md
    assert "this GPU's copy 4 TB/s and bf16 matmul 800 TFLOP/s, measured 2026-11-28" in md
    none = results.load(_write(tmp_path / "old.jsonl", [("static_grid", DECODE, 1.0, {}),
                                                        ("peer:sdpa_cudnn", DECODE, 1.0, {})],
                               {k: v for k, v in ENV.items() if k != "limits"}))
    cells = _versus_row(report.render_table(none)).split(" | ")
    assert cells[3] == "–" and cells[7] == "–"


def test_a_findings_section_reads_back_and_a_malformed_one_is_refused(tmp_path):
    w = roofline.work(Scenario.parse(DECODE).spec())
    res = results.load(_write(tmp_path / "r.jsonl", [("static_grid", DECODE, 1.0, w)]))
    sheet = roofline.read_section(json.loads(json.dumps(roofline.section(res))), "findings.json")
    assert sheet.limits == LIMITS and sheet.work == {DECODE: (w["bytes"], w["flops"])}
    expected = roofline.cell(roofline.share(w["bytes"], w["flops"], 3.0, LIMITS))
    assert sheet.cell(DECODE, 3.0) == expected != "–" and sheet.cell("other", 3.0) == "–"
    assert sheet.cell(DECODE, None) == "–"
    assert roofline.read_section(None, "f") is None
    for bad, field in (({"limits": {"copy_tb_s": -1}}, "roofline.limits"),
                       ({"limits": None, "work": {DECODE: [1.5, 2]}}, "roofline.work"), ([], "roofline is")):
        with pytest.raises(ConfigError, match=field):
            roofline.read_section(bad, "findings.json")
