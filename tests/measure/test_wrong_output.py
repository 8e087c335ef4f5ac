"""Every timed result checked: the comparison, the chunked reference, the verdict, and a
planted wrong kernel caught by the gate's worker in Triton's interpreter.

The worker test takes base = this checkout and head = a copy whose naive kernel stores its
output times 1.1 (perf/latency/plant.py `plant_wrong`): head must be recorded wrong with its
max error, never timed, and the gate's findings must say `wrong` and exit 1, while the A/A
side (base) stays right. The same plant in a throwaway repository's working tree makes
`perf gate --suite smoke` itself exit 1 with `wrong` (about 45 s on a CPU).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreter_support import CPU_ONLY, needs_interpreter

from perf import results
from perf.checkout import ROOT
from perf.errors import EXIT_FAIL
from perf.latency import analysis, plant
from perf.latency.worker import PROTOCOL
from perf.measure import check
from perf.thresholds import load_thresholds
from perf.verdicts import Finding, Verdict, exit_code, wrong_output

pytestmark = pytest.mark.slow  # starts processes

values = st.floats(-4, 4, allow_nan=False, width=32) | st.just(float("nan"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(values, values), min_size=1, max_size=16),
       st.sampled_from(sorted(check.TOLERANCES)))
def test_compare_is_torch_testings_rule(pairs, dtype):
    """`compare` passes exactly what torch.testing.assert_close passes, and its max error is
    the largest absolute difference (inf where either holds a NaN)."""
    out = torch.tensor([a for a, _ in pairs])
    expected = torch.tensor([e for _, e in pairs])
    atol, rtol = check.tolerance(dtype)
    found = check.compare(out, expected, atol, rtol)
    try:
        torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
        closes = True
    except AssertionError:
        closes = False
    assert found.ok == closes
    diffs = [abs(a - e) for a, e in pairs]
    if any(math.isnan(d) for d in diffs):  # a NaN on either side is never close
        assert found.max_error == math.inf and not found.ok
    else:
        assert found.max_error == pytest.approx(max(diffs), abs=1e-6)


@given(st.floats(1e-4, 1e-1), st.floats(0, 1e-1), st.floats(1.5, 100))
def test_an_error_beyond_the_tolerance_is_never_ok(atol, rtol, times):
    expected = torch.ones(8)
    out = expected.clone()
    out[3] += times * (atol + rtol)  # beyond atol + rtol * |1|
    found = check.compare(out, expected, atol, rtol)
    assert not found.ok and found.max_error == pytest.approx(times * (atol + rtol), rel=1e-3, abs=1e-6)
    assert check.compare(expected.clone(), expected, atol, rtol).ok


def test_a_poisoned_output_the_call_leaves_unwritten_is_wrong():
    expected = torch.ones(4, dtype=torch.float16)
    out = torch.ones(4, dtype=torch.float16)
    found = check.check_call(lambda: None, out, expected)  # writes nothing: the NaN stays
    assert not found.ok and found.max_error == math.inf
    assert check.check_call(lambda: out.copy_(expected), out, expected).ok


def test_reasons_name_the_metric_they_hold_for():
    found = check.Check(False, 0.25, 3e-3, 3e-3)
    assert check.is_wrong(check.wrong_reason(found, "before timing"), "graph")  # no metric: every one
    graph = check.wrong_reason(found, "after timing", "graph")
    assert graph.startswith("graph: wrong output after timing: max error 0.25")
    assert check.is_wrong(graph, "graph") and not check.is_wrong(graph, "eager")
    assert not check.is_wrong("graph: RuntimeError: capture failed")


@pytest.mark.parametrize("scenario", ["tiny/prefill/batch2-kv24-var-chunk4/block16/window8",
                                      "tiny/mixed50/batch2-kv16/block16"])
def test_the_chunked_reference_is_the_reference(scenario, monkeypatch):
    from kernels.batch import build_batch
    from kernels.reference import paged_attention_reference
    from perf.scenarios import Scenario

    batch = build_batch(Scenario.parse(scenario).spec(), "cpu")
    whole = paged_attention_reference(*batch.args(), **batch.options)
    monkeypatch.setattr(check, "REFERENCE_CHUNK_VALUES", 1)  # one query row per chunk
    # the same values; a chunk under a sliding window sums over fewer masked keys: an fp16 ulp at most
    chunked = check.reference_output(paged_attention_reference, batch)
    torch.testing.assert_close(chunked, whole, atol=1e-3, rtol=1e-3)


def test_a_plan_that_rounds_q_to_e4m3_is_held_to_the_reference_of_q_so_rounded():
    """`check.references`: over an fp8 cache the reference of q itself and of q rounded to the cache's
    e4m3 (`check.e4m3_rounded`), each what a plan calls for (`Reference.of`); over a 16-bit cache only
    the first, and a plan that rounds q there is refused."""
    from kernels.batch import build_batch
    from kernels.reference import paged_attention_reference
    from perf.scenarios import Scenario

    rounds_q = [{"kernel": "q_block_kernel", "constexprs": {"FP8_PRODUCTS": True, "PV_FP16": True}}]
    two_parts = [{"kernel": "ws_prefill_kernel", "constexprs": {"FP8_PRODUCTS": True, "Q_PARTS": 2}}]
    batch = build_batch(Scenario.parse("tiny/prefill/batch2-kv24-var/block16/fp8").spec(), "cpu")
    refs = check.references(paged_attention_reference, batch)
    rounded = check.e4m3_rounded(batch.q, batch.k_cache.dtype)
    assert not torch.equal(rounded, batch.q)
    q, *rest = batch.args()
    assert torch.equal(refs.of(rounds_q), paged_attention_reference(rounded, *rest, **batch.options))
    assert torch.equal(refs.of([]), paged_attention_reference(q, *rest, **batch.options))
    assert refs.of(two_parts) is refs.exact and not torch.equal(refs.exact, refs.q_rounded)
    # the tolerances: P V in fp16 bf16's at least; P on e4m3 too (no PV_FP16, the Q-block kernels) wider
    assert check.tolerance("float16", rounds_q) == check.tolerance("float16", two_parts) == (1.5e-2, 1e-2)
    p_too = [{"kernel": "q_block_kernel", "constexprs": {"FP8_PRODUCTS": True, "PV_FP16": False}}]
    assert check.tolerance("float16", p_too) == check.FP8_PRODUCTS_TOLERANCE
    assert refs.of(p_too) is refs.q_rounded
    sixteen = check.references(paged_attention_reference, build_batch(
        Scenario.parse("tiny/prefill/batch2-kv24-var/block16").spec(), "cpu"))
    assert sixteen.q_rounded is None
    with pytest.raises(ValueError, match="not fp8"):
        sixteen.of(rounds_q)


def _finding(verdict=Verdict.IMPROVED, ratio=0.5) -> Finding:
    return Finding("latency", "nvidia", "H100", "naive", "s", "eager", 1.0, 0.5, ratio, 0.4, 0.6, 1e-3,
                   "warn > 1.03, fail > 1.05", verdict, "faster beyond the fail threshold, significant")


def test_a_wrong_output_is_wrong_whatever_its_speed():
    fast = _finding()
    assert wrong_output(fast, {"base": [], "head": []}) is fast
    wrong = wrong_output(fast, {"base": [], "head": ["wrong output after timing: max error 0.1 against x"]})
    assert wrong.verdict is Verdict.WRONG
    assert wrong.note.startswith("head wrong output after timing: max error 0.1")
    assert "timing alone: improved" in wrong.note
    assert exit_code([wrong]) == EXIT_FAIL and exit_code([fast]) == 0


def test_the_report_and_the_comment_render_wrong():
    from perf.ci import comment
    from perf.report import render_markdown

    wrong = wrong_output(_finding(), {"head": ["wrong output before timing: max error 0.5"]})
    md = render_markdown([wrong, _finding(Verdict.OK, 1.0)], "t")
    assert "**FAIL**: 1 wrong" in md and "| **WRONG** |" in md
    fields = {k: v for k, v in wrong.__dict__.items() if k in comment.Row.__dataclass_fields__}
    row = comment.Row(**fields)
    body = comment.render([row], "nvidia")
    assert "**FAIL**" in body and "**wrong**" in body and "1 wrong" in body


def _head_copy(tmp_path):
    """A copy of this checkout's kernels/ to plant a change in: the head of `_worker`."""
    head = tmp_path / "head"
    shutil.copytree(os.path.join(ROOT, "kernels"), head / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return head


def _worker(tmp_path, head, variants: str, *options: str):
    """The gate's worker in the interpreter, base = this checkout, head = `head`, on one tiny
    decode: (base's results, head's results)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perf.latency.worker", "--base-from", ROOT, "--head-from", str(head),
           "--out-dir", str(out), "--suite", "smoke", "--scenarios", "tiny/decode/batch1-kv16/block16",
           "--variants", variants, "--metrics", "eager", "--repeats", "2", *options]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **CPU_ONLY, PYTHONPATH=ROOT))
    assert run.returncode == 0, run.stderr[-2000:]
    assert any(line.startswith(PROTOCOL) and json.loads(line[len(PROTOCOL):])["event"] == "done"
               for line in run.stdout.splitlines())
    return tuple(results.load(str(out / f"{s}.jsonl")) for s in ("base", "head"))


@needs_interpreter
def test_the_worker_catches_a_planted_wrong_kernel(tmp_path):
    head = _head_copy(tmp_path)
    plant.plant_wrong(str(head))
    base, head_res = _worker(tmp_path, head, "naive,flex_tile", "--samples", "1")
    (why,) = [r for r in head_res.skips() if r["variant"] == "naive"]
    assert why["kind"] == "error" and why["reason"].startswith("wrong output before timing: max error")
    assert not base.skips()  # base is right
    assert {r["variant"] for r in head_res.measurements()} == {"flex_tile"}  # the wrong side is not timed
    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    findings = {f.variant: f for f in analysis.paired_findings(base, head_res, th, "nvidia", None)}
    assert findings["naive"].verdict is Verdict.WRONG and "head wrong output" in findings["naive"].note
    assert findings["flex_tile"].verdict is not Verdict.WRONG
    assert exit_code(list(findings.values())) == EXIT_FAIL


@needs_interpreter
def test_the_worker_finds_a_planted_skip_wrong_and_never_faster(tmp_path):
    """Head = a copy whose every variant's call returns at once on every third call (`out` holds the
    last answer): head's naive is timed, then recorded wrong after timing (tests/measure/
    test_cheating.py plants the other exploits), and the gate's finding says `wrong`; base is right."""
    head = _head_copy(tmp_path)
    variant_py = head / "kernels" / "variant.py"
    call = "        out, launches = self.plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,\n"
    text = variant_py.read_text()
    assert text.count(call) == 1
    variant_py.write_text(text.replace(call, "        _SKIPS.append(1)\n        if out is not None and "
                                             "len(_SKIPS) % 3 == 0:\n            return out\n" + call)
                          + "\n_SKIPS: list = []  # planted: every third call skips its work\n")
    base, head_res = _worker(tmp_path, head, "naive", "--samples", "2", "--warmup", "1")
    assert not base.skips() and head_res.measurements()  # base right; head timed (and looked fast)
    reasons = [r["reason"] for r in head_res.skips()]
    assert any(r.startswith("eager: wrong output after timing: ") and "calls while timed" in r
               for r in reasons), reasons
    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    (finding,) = analysis.paired_findings(base, head_res, th, "nvidia", None)  # the wrong-output rule applied
    assert finding.verdict is Verdict.WRONG and "calls while timed" in finding.note
    assert exit_code([finding]) == EXIT_FAIL


class _Writer:
    def __init__(self):
        self.skips = []

    def skip(self, **kw):
        self.skips.append(kw)

    def record(self, **kw):
        pass


def test_an_output_that_turns_wrong_while_timed_is_caught_after_timing():
    """A variant right on its first calls and wrong from the third on: prepared and timed, then
    `recheck` records the metric's wrong output with its max error."""
    import types

    from kernels.reference import paged_attention_reference
    from perf.measure.rounds import Side
    from perf.scenarios import Scenario

    calls = []

    def variant(*args, out, **options):
        calls.append(1)
        paged_attention_reference(*args, out=out, **options)
        if len(calls) > 2:  # the validating call and the check before timing are right
            out.mul_(2.0)

    scenario = Scenario.parse("tiny/decode/batch1-kv16/block16")
    writer = _Writer()
    kernels = types.SimpleNamespace(VARIANTS={"drifts": variant})
    side = Side(kernels, ["drifts"], [scenario], ["eager"], 1, writer)
    side.device = "cpu"
    (case,) = side.prepare(scenario)
    assert case.fn is not None and not writer.skips
    side.measure = lambda case, metric, repeat: None  # the loop's business is tested elsewhere
    side.round(0, seed=0)
    (wrong,) = side.recheck(scenario)
    assert wrong[1] == "eager" and not wrong[2].ok
    (skip,) = writer.skips
    assert skip["kind"] == "error"
    assert skip["reason"].startswith("eager: wrong output after timing: max error")


def test_head_is_compared_with_base():
    """Both sides within reach of the reference can still differ from each other beyond the
    tolerances: head's side records it, naming base's output."""
    import types

    from perf.latency import worker

    base_out = torch.zeros(4, dtype=torch.float16)
    near, far = base_out + 1e-3, base_out + 0.5

    def cases(head_out, head_config=(), base_config=()):
        case = lambda out, config=(): types.SimpleNamespace(out=out, fn=lambda: None, config=list(config))  # noqa: E731
        return {"base": {"v": case(base_out, base_config)}, "head": {"v": case(head_out, head_config)}}
    me = types.SimpleNamespace(measured=("base", "head"), writers={"head": _Writer()})
    worker.Pairs._head_against_base(me, cases(near), "s", "before timing")
    assert me.writers["head"].skips == []
    # sides whose plans round q and P to e4m3 (`Config.fp8_products`) are held to FP8_PRODUCTS_TOLERANCE:
    # 0.1 passes it, 0.5 does not
    e4m3 = [{"kernel": "q_block_kernel", "constexprs": {"FP8_PRODUCTS": True}}]
    worker.Pairs._head_against_base(me, cases(base_out + 0.1, e4m3, e4m3), "s", "before timing")
    assert me.writers["head"].skips == []
    worker.Pairs._head_against_base(me, cases(base_out + 0.1), "s", "before timing")
    assert len(me.writers["head"].skips) == 1
    worker.Pairs._head_against_base(me, cases(far, e4m3, e4m3), "s", "after timing", "graph")
    assert len(me.writers["head"].skips) == 2
    # q rounded to e4m3 on one side only: they differ by that rounding, and each was held to its own
    # reference, so they are not compared
    worker.Pairs._head_against_base(me, cases(far, e4m3), "s", "after timing", "graph")
    assert len(me.writers["head"].skips) == 2
    me.writers["head"].skips.clear()
    worker.Pairs._head_against_base(me, cases(far), "s", "after timing", "graph")
    (skip,) = me.writers["head"].skips
    assert skip["reason"].startswith("graph: wrong output after timing: max error 0.5 against base's output")


@needs_interpreter
def test_the_interpreter_gate_fails_a_planted_wrong_kernel(tmp_path):
    """`perf gate` end to end in Triton's interpreter: base = the commit, head = the working tree
    with the naive kernel's output x 1.1. Exit 1, findings `wrong` naming head and its max error."""
    from throwaway_repo import harness_repo

    repo = harness_repo(tmp_path / "repo")
    plant.plant_wrong(str(repo))
    out = tmp_path / "gate"
    cmd = [sys.executable, "-m", "perf", "gate", "--suite", "smoke", "--scenarios", "tiny/decode/*",
           "--variants", "naive,flex_tile", "--metrics", "eager", "--base-ref", "HEAD", "--allow-dirty",
           "--out", str(out), "--lock-timeout", "600"]  # other interpreter gates of this machine
    run = subprocess.run(cmd, cwd=str(repo), capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, **CPU_ONLY, PYTHONPATH=str(repo)))
    assert run.returncode == 1, (run.stdout[-2000:], run.stderr[-2000:])
    doc = json.loads((out / "findings.json").read_text())
    verdicts = {f["variant"]: f for f in doc["findings"]}
    assert verdicts["naive"]["verdict"] == "wrong"
    assert verdicts["naive"]["note"].startswith("head wrong output before timing: max error")
    assert verdicts["flex_tile"]["verdict"] != "wrong"
    assert "| **WRONG** |" in (out / "report.md").read_text()
