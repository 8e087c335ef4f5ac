"""Every timed record carries its case's work (bytes, flops of its batch: perf/roofline.py), so a
report can set its time against the GPU's limits; a case made ready knows its batch's work."""

from __future__ import annotations

from perf import results, roofline
from perf.measure.cases import Case, make_case
from perf.measure.rounds import Side
from perf.scenarios import Scenario

TINY = "tiny/decode/batch1-kv16/block16"


def test_a_ready_case_knows_its_batchs_work(device):
    import kernels

    scenario = Scenario.parse(TINY)
    case = make_case(kernels, "static_grid", scenario, device)
    assert case.skip is None, case.skip
    assert case.work == roofline.work(case.keep[0].spec) == roofline.work(scenario.spec())
    assert case.work["bytes"] > 0 and case.work["flops"] > 0


def test_side_writes_bytes_and_flops_into_each_record(tmp_path):
    spec = Scenario.parse(TINY).spec()
    work = roofline.work(spec)
    path = str(tmp_path / "r.jsonl")
    header = {"environment": {"vendor": "cpu", "gpu": None, "commit": None, "interpreter": True},
              "suite": "smoke", "metrics": ["eager"], "repeats": 1, "samples": 2}
    with results.ResultsWriter(path, header, resume=False) as writer:
        side = Side(None, [], [], ["eager"], 2, writer, warmup=0)
        side.measure(Case("static_grid", TINY, spec.digest(), lambda: None, work=work), "eager", 0)
        side.measure(Case("naive", TINY, spec.digest(), lambda: None), "eager", 0)  # a case without work
    by_variant = {r["variant"]: r for r in results.load(path).measurements()}
    assert (by_variant["static_grid"]["bytes"], by_variant["static_grid"]["flops"]) == \
        (work["bytes"], work["flops"])
    assert "bytes" not in by_variant["naive"] and "flops" not in by_variant["naive"]
