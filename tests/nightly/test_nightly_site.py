"""The nightly report: pages and plots from a synthetic history, readable from a folder."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from perf.nightly import history, site

pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (pyproject extra `plots`)")

from tests.nightly.test_nightly import SCENARIOS, synthetic  # noqa: E402

PAPER = [f"llama3-8b/{k}/batch{b}-kv{s}/block16" for b in (1, 8, 32) for s in (512, 2048)
         for k in ("prefill", "mixed50", "decode")]


def test_sota_percent_is_the_fastest_library_over_the_variant(tmp_path):
    (h,) = history.load_data(str(synthetic(tmp_path, 3, cv=0.0)))
    s = SCENARIOS[1]
    peer, best = h.best_peer(s, "graph")
    assert peer == "peer:sdpa_cudnn"  # the synthetic libraries: sdpa_cudnn is the faster
    assert best == min(h.value("peer:sdpa_cudnn", s, "graph"), h.value("peer:sdpa_flash", s, "graph"))
    expected = 100 * best / h.value("naive", s, "graph")
    assert site.sota_percent(h, "naive", s, "graph") == pytest.approx(expected)
    assert math.isnan(site.sota_percent(h, "naive", "not-measured", "graph"))


def test_families_group_the_paper_axes():
    others = ["llama3-8b/mixed50/batch8-kv512-var/block16",
              "gemma2-9b/mixed50/batch16-kv2048/block16/softcap50",
              "llama3-8b_bs16_b16_s512_d100_var_fp8", "llama3-8b_bs16_b64_s4096_d50_var_fp8"]  # earlier names
    fams = site.families(PAPER + others)
    # the -var one has a single batch size, so has gemma; the two fp8 ones (named the old way) are a family
    assert list(fams) == ["llama3-8b/*/batch*-kv*/block16", "llama3-8b/*/batch*-kv*-var/block16/fp8"]
    assert len(fams["llama3-8b/*/batch*-kv*/block16"]) == len(PAPER)


def test_report_pages_work_offline_and_show_every_part(tmp_path):
    from perf.nightly import alert
    from perf.thresholds import load_thresholds

    res = synthetic(tmp_path, 4, cv=0.01, steps={("qblock", SCENARIOS[1], "graph"): 1.5})
    histories = history.load_data(str(res))
    th = load_thresholds(Path(__file__).resolve().parents[2] / "thresholds.yaml")
    findings, notes = alert.detect(histories[0], th)
    result = alert.machine_result(histories[0], findings, notes, alert.Settings())
    out = tmp_path / "html" / "nightly"
    index = Path(site.build(histories, str(out), {result["machine"]: result}))
    page = out / "runner-1-nvidia-h100" / "index.html"
    text, top = page.read_text(), index.read_text()
    assert "1 alert" in top and "runner-1-nvidia-h100/index.html" in top
    assert "FAIL" in text and SCENARIOS[1] in text  # the alert's row
    assert "% of vendor state of the art" in text and "sdpa_cudnn" in text
    assert "flashinfer_paged" in text and "not installed" in text  # an absent library is a note
    assert "does not support sliding_window" in text or "lacks sliding_window" in text  # skips listed
    # Offline: only relative links, no script, every image present and a real PNG.
    assert "<script" not in text and not re.search(r"(src|href)=['\"]https?:", text + top)
    images = re.findall(r"<img src='([^']+)'", text)
    assert "paper_llama3-8b-batch-kv-block16_graph.png" in images  # SCENARIOS: one family, three batch sizes
    assert {"sota_graph.png", "sota_eager.png", "history_qblock.png"} <= set(images)
    for name in images:
        assert (page.parent / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paper_figure_draws_variants_and_libraries(tmp_path):
    from perf.scenarios import Scenario
    from tests.nightly.test_nightly import write_night


    series = {(n, s, "graph"): [0.1 * (k + 1) * (1 + Scenario.parse(s).batch / 8)] * 5
              for k, n in enumerate(("naive", "static_grid", "peer:sdpa_cudnn")) for s in PAPER}
    write_night(tmp_path / "r", "m_gpu", "f" * 40, 1, series)
    (h,) = history.load_data(str(tmp_path / "r"))
    (fam, members), = site.families(h.scenarios()).items()
    path = site.plot_paper(h, fam, members, "graph", str(tmp_path / "paper.png"))
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 400 and img.shape[1] > 700  # 3 decode rows x 2 lengths
    page = Path(site.machine_page(h, str(tmp_path / "page"), None)).read_text()
    assert "paper_llama3-8b-batch-kv-block16_graph.png" in page


def _has_red(path: str) -> bool:
    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(path)[..., :3]
    red = np.array([0xD6, 0x27, 0x28]) / 255  # the alert colour of site.plot_history
    return bool((np.abs(img - red).max(axis=-1) < 0.08).any())


def test_history_marks_only_the_alerting_variant(tmp_path):
    from perf.nightly import alert
    from perf.thresholds import load_thresholds

    # qblock 2x slower on every scenario and metric at the newest commit, as in the H200 demo.
    steps = {("qblock", s, m): 2.0 for s in SCENARIOS for m in ("eager", "graph")}
    (h,) = history.load_data(str(synthetic(tmp_path, 3, cv=0.01, steps=steps)))
    th = load_thresholds(Path(__file__).resolve().parents[2] / "thresholds.yaml")
    findings, notes = alert.detect(h, th)
    result = alert.machine_result(h, findings, notes, alert.Settings())
    assert {a["variant"] for a in result["alerts"]} == {"qblock"}
    page = Path(site.machine_page(h, str(tmp_path / "page"), result)).parent
    assert _has_red(str(page / "history_qblock.png"))
    assert not _has_red(str(page / "history_naive.png"))


def test_the_page_shows_the_environment_and_what_changed_between_nights(tmp_path):
    from perf.nightly import store
    from tests.nightly.test_nightly_store import ENV, results_file

    data = tmp_path / "data"
    hot = {"start": {"sm_mhz": 1980, "mem_mhz": 2619, "throttle": []},
           "end": {"sm_mhz": 1410, "mem_mhz": 2619, "throttle": ["hw_slowdown"]}}
    nights = [("2026-11-20", "a", {}), ("2026-11-21", "b", {"driver": "580.200"}),
              ("2026-11-22", "c", {"driver": "580.200", "triton": "3.7.0", "clocks": hot})]
    for day, sha, change in nights:
        src = results_file(tmp_path / day / "r.jsonl", "runner-a_h100", sha * 40, day)
        store.write_night(str(data), "runner-a_h100", day, src, {**ENV, **change}, None)
    (h,) = history.load_data(str(data))
    page = Path(site.machine_page(h, str(tmp_path / "page"), None)).read_text()
    section = page[page.index("<h2>Environment</h2>"):]
    assert "throttled: hw_slowdown (end)" in section and "SM 1410 MHz" in section
    row = (r"<tr><td class=l>(\S+) &rarr; (\S+) <code>\w+</code></td><td class=l>(\w+)</td>"
           r"<td class=l>(\w+)</td><td class=l>([^<]+)</td><td class=l>([^<]+)</td></tr>")
    changes = re.findall(row, section)
    assert changes == [("2026-11-21", "2026-11-22", "triton", "toolchain", "3.6.0", "3.7.0"),
                       ("2026-11-20", "2026-11-21", "driver", "environment", "580.159.04", "580.200")]


def test_a_history_without_the_data_branch_compares_its_commits_environments(tmp_path):
    (h,) = history.load_data(str(synthetic(tmp_path, 3, cv=0.0)))
    text = "\n".join(site.environment_section(h))
    assert "Nothing changed in the environment over the 3 nights" in text
