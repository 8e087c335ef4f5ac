"""perf.lab.source_ab with a stand-in timer (on a CPU in Triton's interpreter): a candidate module is refused
in one line when it cannot run, only the kernels it defines are swapped into the planned launches, a
candidate that computes the same writes the same bits, a wrong one is reported and never timed, and
the rounds alternate the calls' order."""

from __future__ import annotations

import pytest
from conftest import DEVICE, HAS_GPU

from kernels.paged_attention import common
from perf.errors import ConfigError
from perf.lab import source_ab
from perf.scenarios import Scenario

SCENARIO = "tiny/mixed50/batch2-kv16/block16"


def _module(tmp_path, text: str, name: str = "candidate.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _same_kernel(tmp_path):
    """A candidate as the tool's users make one, a copy of the tree's module, unedited: its q_block_kernel
    is a kernel of its own (so a launch shows which one it runs) that must compute the same bits."""
    with open(common.__file__) as f:
        return source_ab.load_candidate(_module(tmp_path, f.read(), "common_copy.py"))


@pytest.mark.parametrize("text, name, message", [
    (None, "missing.py", "no such Python file"),
    ("x = 1\n", "candidate.txt", "no such Python file"),
    ("raise RuntimeError('half an edit')\n", "candidate.py", "does not import: RuntimeError: half an edit"),
])
def test_a_candidate_that_cannot_run_is_refused_in_one_line(tmp_path, text, name, message):
    path = str(tmp_path / name) if text is None else _module(tmp_path, text, name)
    with pytest.raises(ConfigError, match=message):
        source_ab.load_candidate(path)


def test_only_the_kernels_the_candidate_defines_are_swapped(tmp_path):
    candidate = _same_kernel(tmp_path)
    planned = source_ab._Planned(Scenario.parse(SCENARIO).spec(), DEVICE)
    launches, kernels = source_ab.swapped(planned.launches, candidate)
    assert kernels == ["q_block_kernel"] and candidate.q_block_kernel is not common.q_block_kernel
    assert all(x.kernel is candidate.q_block_kernel for x in launches)
    assert all(x.kernel is common.q_block_kernel for x in planned.launches)
    assert [x.args for x in launches] == [x.args for x in planned.launches]
    # copies: the planner's cached launches are never edited through them
    assert all(a.args is not b.args for a, b in zip(launches, planned.launches))
    unrelated = source_ab.load_candidate(_module(tmp_path, "def q_block_kernel():\n    pass\n", "plain.py"))
    with pytest.raises(ConfigError, match=r"defines none of the planned kernels \(q_block_kernel\)"):
        source_ab.swapped(planned.launches, unrelated)


def test_the_twin_has_the_same_lengths_over_a_16_bit_cache():
    spec = Scenario.parse("llama3-8b/mixed50/batch16-kv4096-var/block16/fp8/bf16").spec()
    twin = source_ab.twin_spec(spec)
    assert not twin.fp8_kv and (twin.query_lens, twin.kv_lens) == (spec.query_lens, spec.kv_lens)
    # the 16-bit scenario of the same name draws another batch: no twin
    named = Scenario.parse("llama3-8b/mixed50/batch16-kv4096-var/block16/bf16").spec()
    assert named.kv_lens != spec.kv_lens
    with pytest.raises(ConfigError, match="not e4m3"):
        source_ab.twin_spec(named)


def test_ratios_are_taken_round_for_round():
    """Rounds 1.0, 1.5 and 1.1: their median 1.1, where the ratio of the medians (3.0 / 2.0) would be 1.5."""
    found = source_ab.ratio_summary([2.0, 3.0, 4.4], [2.0, 2.0, 4.0])
    assert found == pytest.approx({"median": 1.1, "min": 1.0, "max": 1.5})


def _timer(order: list):
    """A stand-in for the graph timer: the tree 1.0 ms, the candidate 1.1, the twin 0.9, the candidate's
    twin 1.0."""
    def timer(call, samples):
        order.append(call.label)
        return {"tree": 1.0, "candidate": 1.1, "twin": 0.9, "candidate twin": 1.0}[call.label]
    return timer


def test_a_candidate_of_the_same_kernel_writes_the_same_bits_and_rounds_alternate(tmp_path):
    order = []
    row = source_ab.measure_scenario(SCENARIO, _same_kernel(tmp_path), False, 3, 5, DEVICE, _timer(order))
    assert row["same_bits"] is True and row["refused"] == {}
    assert order == ["tree", "candidate", "candidate", "tree", "tree", "candidate"]
    assert row["ms"] == {"tree": 1.0, "candidate": 1.1}
    assert row["candidate_over_tree"]["median"] == pytest.approx(1.1)
    assert row["kernels"] == ["q_block_kernel"] and set(row["max_error"]) == {"tree", "candidate"}


def test_a_wrong_candidate_is_reported_and_never_timed(tmp_path, monkeypatch):
    """The candidate's launches with twice the softmax scale: another output, refused before timing."""
    real = source_ab.swapped

    def doubled(launches, candidate):
        out, names = real(launches, candidate)
        for launch in out:
            launch.args["scale"] = 2 * launch.args["scale"]
        return out, names
    monkeypatch.setattr(source_ab, "swapped", doubled)
    order = []
    row = source_ab.measure_scenario(SCENARIO, _same_kernel(tmp_path), False, 2, 5, DEVICE, _timer(order))
    assert row["refused"]["candidate"].startswith("wrong output before timing")
    assert "same_bits" not in row and "candidate_over_tree" not in row
    assert set(order) == {"tree"} and list(row["ms"]) == ["tree"]


def test_the_twins_are_timed_beside_the_tree_on_an_e4m3_scenario(tmp_path):
    """The tree and the candidate each over the 16-bit cache too: a candidate's e4m3 / 16-bit ratio is its
    own."""
    order = []
    name = "tiny/decode/batch1-kv16/block16/fp8"
    row = source_ab.measure_scenario(name, _same_kernel(tmp_path), True, 2, 5, DEVICE, _timer(order))
    calls = ["tree", "candidate", "twin", "candidate twin"]
    assert order == calls + calls[::-1]
    assert row["tree_over_twin"]["median"] == pytest.approx(1.0 / 0.9)
    assert row["candidate_over_its_twin"]["median"] == pytest.approx(1.1)
    assert row["same_bits"] is True and row["twin_same_bits"] is True and set(row["max_error"]) == set(calls)
    text = source_ab.render({"candidate": {"path": "c.py", "sha256": "0" * 16}, "gpu": "cpu", "rounds": 2,
                             "rows": {name: row}})
    assert (f"| {name} | q_block_kernel | 1.0000 | 1.1000 | 1.1000 [1.1000, 1.1000] | True | 0.9000 | "
            "1.1111 [1.1111, 1.1111] | 1.0000 | 1.1000 [1.1000, 1.1000] |") in text


def test_the_candidates_twin_is_left_out_where_the_16_bit_plan_runs_none_of_its_kernels(tmp_path,
                                                                                         monkeypatch):
    real = source_ab.swapped
    planned_twins = []

    def only_e4m3(launches, candidate):
        if launches and launches[0].args["k_cache_ptr"].element_size() == 2:
            planned_twins.append(launches)
            raise ConfigError("defines none of the planned kernels")
        return real(launches, candidate)
    monkeypatch.setattr(source_ab, "swapped", only_e4m3)
    order = []
    row = source_ab.measure_scenario("tiny/decode/batch1-kv16/block16/fp8", _same_kernel(tmp_path), True, 2,
                                     5, DEVICE, _timer(order))
    assert planned_twins and "candidate twin" not in order and "candidate_over_its_twin" not in row
    assert row["tree_over_twin"]["median"] == pytest.approx(1.0 / 0.9) and "twin_same_bits" not in row


def test_the_tree_kernel_the_candidates_copy_is_common_q_block_kernel():
    """What the candidate modules above re-export is the kernel the planner launches here."""
    planned = source_ab._Planned(Scenario.parse(SCENARIO).spec(), DEVICE)
    assert {x.kernel for x in planned.launches} == {common.q_block_kernel}


def test_the_command_checks_its_arguments_before_it_looks_for_a_gpu(tmp_path):
    candidate = _module(tmp_path, "from kernels.paged_attention.common import q_block_kernel\n")
    with pytest.raises(ConfigError, match="not e4m3"):
        source_ab.main([candidate, "tiny/decode/batch1-kv16/block16", "--twin"])
    with pytest.raises(ConfigError, match="does not match|unknown"):
        source_ab.main([candidate, "tiny/decode/batch1-kv16"])
    with pytest.raises(ConfigError, match="--rounds and --samples"):
        source_ab.main([candidate, "tiny/decode/batch1-kv16/block16", "--rounds", "0"])
    if not HAS_GPU:
        with pytest.raises(ConfigError, match="no GPU visible"):
            source_ab.main([candidate, "tiny/decode/batch1-kv16/block16", "--out", str(tmp_path / "out")])


def test_a_scenario_whose_plan_runs_none_of_the_candidates_kernels_is_reported_and_the_run_goes_on(tmp_path):
    """A Gluon candidate beside a scenario the planner gives the Triton kernel: the row says so, the tree is
    still timed, and the other scenarios of the run are not lost."""
    unrelated = source_ab.load_candidate(_module(tmp_path, "def q_block_kernel():\n    pass\n", "plain.py"))
    order = []
    row = source_ab.measure_scenario(SCENARIO, unrelated, False, 2, 5, DEVICE, _timer(order))
    assert row["refused"]["candidate"].endswith("defines none of the planned kernels (q_block_kernel)")
    assert set(order) == {"tree"} and row["kernels"] == [] and "candidate_over_tree" not in row
