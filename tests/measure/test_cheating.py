"""Planted cheats: variants that would look faster without doing the work, each caught.

Every cheat is a wrapper around a real variant (its plan and hints, its own call), registered
for one test only as the measuring stage's `Side` sees a checkout's `kernels.VARIANTS`; it is
prepared, timed in rounds and rechecked exactly as `perf run`, the nightly and the gate's
worker do (perf/measure/rounds.py, cases.py, check.py), in Triton's interpreter on a tiny
decode. Each must end refused before timing or `wrong` (the wrong-output rule of
perf/verdicts.py turns a finding that timing alone called improved into `wrong`), never as a
speed-up; an honest wrapper must pass every check, so the checks can pass at all.

A call made on another stream exists only on a GPU: on the CPU the stream a launch is
recorded on is what `check.current_stream` says, and a cheat there switches what it says
(the check is the same comparison); the GPU test runs a real side stream.
"""

from __future__ import annotations

import types

import pytest
import torch
from interpreter_support import needs_interpreter

import kernels
from perf.measure import check
from perf.measure.rounds import Side
from perf.scenarios import Scenario
from perf.vendor import on_gpu
from perf.verdicts import Finding, Verdict, wrong_output

pytestmark = pytest.mark.slow  # each prepares, times and rechecks a case in the interpreter (seconds)

SCENARIO = "tiny/decode/batch1-kv64/block16"  # 4 query heads, 64 keys: a few interpreter launches
WARM = 2  # calls make_case makes before timing: the validating call and the check


class Honest:
    """A variant registered for the test: the real one's plan and hints; `call` is the cheat."""

    def __init__(self, name: str = "naive", config=None):
        self.real = kernels.VARIANTS[name]
        self.hints = self.real.hints
        self.extra = {"config": config} if config is not None else {}
        self.calls = 0

    def plan(self, *args, **options):
        return self.real.plan(*args, **options, **self.extra)

    def __call__(self, *args, out, **options):
        self.calls += 1
        return self.call(args, out, options)

    def real_call(self, args, out, options):
        return self.real(*args, out=out, **options, **self.extra)

    call = real_call


class _Writer:
    def __init__(self):
        self.skips, self.records = [], []

    def skip(self, **kw):
        self.skips.append(kw)

    def record(self, **kw):
        self.records.append(kw)


def measured(variant, metrics=("eager",), device="cpu", repeats=2, samples=3):
    """The variant prepared, timed (`repeats` rounds) and rechecked by the measuring stage."""
    scenario = Scenario.parse(SCENARIO)
    writer = _Writer()
    side = Side(types.SimpleNamespace(VARIANTS={"cheat": variant}), ["cheat"], [scenario], list(metrics),
                samples, writer, warmup=1)
    side.device = device
    (case,) = side.prepare(scenario)
    if case.fn is not None:
        side.rounds(range(repeats), seed=lambda r: r)
        side.recheck(scenario)
    return case, writer


def verdict(writer, metric="eager") -> Verdict:
    """What the gate's wrong-output rule makes of a finding timing alone called improved."""
    fast = Finding("latency", "nvidia", "H100", "cheat", SCENARIO, metric, 1.0, 0.5, 0.5, 0.4, 0.6, 1e-3,
                   "warn > 1.03, fail > 1.05", Verdict.IMPROVED, "faster beyond the fail threshold")
    wrong = [s["reason"] for s in writer.skips if check.is_wrong(s["reason"], metric)]
    return wrong_output(fast, {"head": wrong}).verdict


def refused(case, writer, says: str) -> None:
    (skip,) = writer.skips
    assert case.fn is None and not writer.records  # never timed
    assert skip["reason"].startswith("wrong output before timing: ") and says in skip["reason"], skip
    assert verdict(writer) is Verdict.WRONG


def wrong_after_timing(writer, says: str, metric="eager") -> None:
    assert writer.records  # it was timed, and looked fast...
    reasons = [s["reason"] for s in writer.skips]
    assert any(r.startswith(f"{metric}: wrong output after timing: ") and says in r for r in reasons), reasons
    assert verdict(writer, metric) is Verdict.WRONG  # ...and is wrong


@needs_interpreter
def test_an_honest_wrapper_passes_every_check():
    variant = Honest()
    case, writer = measured(variant)
    assert case.fn is not None and not writer.skips
    assert len(writer.records) == 2 and verdict(writer) is Verdict.IMPROVED
    assert case.logs["eager"].seen > 2 and case.logs["eager"].bad == 0  # its timed calls were seen


@needs_interpreter
def test_other_values_and_their_reference_are_made_once_per_batch():
    scenario = Scenario.parse(SCENARIO)
    kernels_ = types.SimpleNamespace(VARIANTS={"a": Honest(), "b": Honest("qblock")})
    side = Side(kernels_, ["a", "b"], [scenario], ["eager"], 1, _Writer(), warmup=1)
    side.device = "cpu"
    a, b = side.prepare(scenario)
    side.rounds(range(1), seed=lambda r: r)
    assert not side.recheck(scenario) and not side.writer.skips
    assert a.other is not None and a.other is b.other  # the second case reused the first's


class PointerCache(Honest):
    """The result kept by input pointer: a repeat copies it instead of computing."""

    def __init__(self):
        super().__init__()
        self.kept = {}

    def key(self, args, out) -> tuple:
        return tuple(t.data_ptr() for t in args[:3])

    def call(self, args, out, options):
        key = self.key(args, out)
        if key in self.kept:
            return self.hit(args, out, options, self.kept[key])
        self.real_call(args, out, options)  # a kernel's write does not bump out's version
        self.kept[key] = out.clone()
        return out

    def hit(self, args, out, options, kept):
        return out.copy_(kept)


@needs_interpreter
def test_a_result_cached_by_pointer_is_refused():
    case, writer = measured(PointerCache())
    refused(case, writer, "launched [] where its plan launches [_naive_kernel]")


class VersionedCache(PointerCache):
    """A cache that knows when the harness touched the tensors (torch's version counters, bumped
    by every in-place write from Python): it computes for the checks and copies while timed."""

    def key(self, args, out) -> tuple:
        return (*(t.data_ptr() for t in (*args[:3], out)), *(t._version for t in (*args[:3], out)))


@needs_interpreter
def test_a_cache_that_recomputes_for_every_check_is_caught_by_its_timed_launches():
    wrong_after_timing(measured(VersionedCache())[1], "calls while timed: the first launched [] where")


class CacheStillLaunching(PointerCache):
    """What a graph captured on a cache hit replays: the planned launches (here into a scratch
    buffer) and a copy of the kept output: every launch is there, the answer is stale."""

    def hit(self, args, out, options, kept):
        self.real_call(args, torch.empty_like(out), options)
        return out.copy_(kept)


@needs_interpreter
def test_a_kept_answer_is_wrong_once_the_same_buffers_hold_other_values():
    wrong_after_timing(measured(CacheStillLaunching())[1], "with other values in the same input buffers: "
                                                           "max error")


class WrongOnOtherValues(Honest):
    """Right on the values it first saw; on any others its output doubled."""

    def call(self, args, out, options):
        if self.calls == 1:
            self.first_q = args[0].clone()
        self.real_call(args, out, options)
        return out if torch.equal(args[0], self.first_q) else out.mul_(2.0)


@needs_interpreter
def test_after_a_failure_on_other_values_the_output_left_is_the_timed_inputs():
    """The gate compares head's output with base's after timing: the output left in the buffer
    must be the one of the inputs both were timed on, never the other values' (a difference of
    inputs reported as head's error)."""
    case, writer = measured(WrongOnOtherValues())
    wrong_after_timing(writer, "with other values in the same input buffers: max error")
    assert check.compare(case.out, case.reference, *case.tolerance).ok


class PrescalesQ(Honest):
    """Scales q in place once and passes scale 1 from then on (a multiply saved per call)."""

    def call(self, args, out, options):
        if self.calls == 1:
            args[0].mul_(options["scale"])
        return self.real_call(args, out, {**options, "scale": 1.0})


@needs_interpreter
def test_a_call_that_writes_into_q_is_refused():
    case, writer = measured(PrescalesQ())
    refused(case, writer, "the call wrote into its inputs (q)")


class ScratchInTheCache(Honest):
    """Once warmed up, uses the cache blocks no sequence owns as scratch: its output stays
    right, a serving engine's other sequences' memory does not."""

    def call(self, args, out, options):
        self.real_call(args, out, options)
        if self.calls > WARM:
            k_cache, block_table = args[1], args[3]
            spare = sorted(set(range(k_cache.shape[0])) - set(block_table.flatten().tolist()))
            k_cache[spare[0]].zero_()
        return out


@needs_interpreter
def test_scratch_written_into_the_cache_while_timed_is_wrong():
    wrong_after_timing(measured(ScratchInTheCache())[1], "the call wrote into its inputs (k_cache)")


class SkipsRepeats(Honest):
    """Every third call returns at once: `out` still holds the last call's (right) answer."""

    def call(self, args, out, options):
        return out if self.calls % 3 == 0 else self.real_call(args, out, options)


@needs_interpreter
def test_work_skipped_on_a_repeated_call_is_wrong():
    wrong_after_timing(measured(SkipsRepeats())[1], "calls while timed: the first launched [] where its plan "
                                                    "launches [_naive_kernel]")


def _split():
    from kernels.paged_attention.heuristics import Config

    # two launches a call: the attention of 2 KV segments, then their reduction
    return Config(block_m=16, tile_size=16, num_segments=2, num_warps=4, num_stages=1)


class EarlyReturn(Honest):
    """Once warmed up, launches only the first of its planned kernels (the reduction that writes
    `out` is skipped: `out` keeps the warm-up's answer)."""

    def call(self, args, out, options):
        if self.calls <= WARM:
            return self.real_call(args, out, options)
        _, launches = self.plan(*args, out=torch.empty_like(out), **options)
        launches[0]()
        return out


@needs_interpreter
def test_an_early_return_after_warm_up_is_wrong():
    variant = EarlyReturn("parallel", _split())
    batch = _batch()
    _, launches = variant.plan(*batch.args(), **batch.options)
    assert [launch.name for launch in launches] == ["q_block_kernel", "reduce_segments_kernel"]
    wrong_after_timing(measured(variant)[1], "launched [q_block_kernel] where its plan launches "
                                             "[q_block_kernel, reduce_segments_kernel]")


def _batch():
    from kernels.batch import build_batch

    return build_batch(Scenario.parse(SCENARIO).spec(), "cpu")


class SideStream(Honest):
    """Once warmed up, makes its launches on a stream of its own, so the timed stream's events
    see nothing of them. `enter` makes that stream current for the launches."""

    def __init__(self, enter):
        super().__init__()
        self.enter = enter

    def call(self, args, out, options):
        if self.calls <= WARM:
            return self.real_call(args, out, options)
        with self.enter():
            return self.real_call(args, out, options)


@needs_interpreter
def test_launches_on_another_stream_are_wrong(monkeypatch):
    """The interpreter has no streams: the one a launch is recorded on is `check.current_stream`'s,
    which the cheat switches around its launches as `torch.cuda.stream` would on a GPU."""
    import contextlib

    current = ["timed"]
    monkeypatch.setattr(check, "current_stream", lambda: current[0])

    @contextlib.contextmanager
    def side():
        current[0] = "side"
        try:
            yield
        finally:
            current[0] = "timed"

    wrong_after_timing(measured(SideStream(side))[1], "the first launched _naive_kernel on another stream")


@pytest.mark.skipif(not on_gpu(), reason="a second CUDA/HIP stream exists only on a GPU; on the CPU, test_"
                    "launches_on_another_stream_are_wrong proves the same comparison on recorded streams")
def test_launches_on_a_real_side_stream_are_wrong_on_a_gpu():
    stream = torch.cuda.Stream()
    case, writer = measured(SideStream(lambda: torch.cuda.stream(stream)), metrics=("eager", "graph"),
                            device="cuda")
    torch.cuda.synchronize()
    wrong_after_timing(writer, "on another stream", "eager")
    graph = [s["reason"] for s in writer.skips if s["reason"].startswith("graph: ")]
    # captured on the side stream: the launches are seen at capture, or the replay writes nothing,
    # or the capture itself fails; never a measurement that stands
    assert graph and (verdict(writer, "graph") is Verdict.WRONG or "graph" in case.broken), graph


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_other_values_are_other_and_leave_every_byte_as_it_was(dtype):
    """`check.other_values` changes every value (fp8: every byte but the zeros and NaNs) and puts
    back the exact bytes, NaN payloads and the FNUZ NaN (0x80) included."""
    from kernels.batch import PagedBatch

    q = torch.randn(3, 2, 8).to(torch.float16)
    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(2)
    cache = raw.view(dtype) if dtype.itemsize == 1 else torch.randn(32).to(dtype)
    metadata = (torch.zeros(1, dtype=torch.int32),) * 3
    batch = PagedBatch(Scenario.parse(SCENARIO).spec(), q.clone(), cache.clone().view(2, -1, 1, 1),
                       cache.clone(), *metadata)
    before = check.fingerprint(check.input_tensors(batch))
    with check.other_values(batch, check.other_q(batch)):
        assert not torch.equal(batch.q, q)
        k = batch.k_cache.view(-1)
        if dtype.itemsize == 1:
            moved = (k.view(torch.uint8) != raw).sum()
            assert moved == 2 * (256 - 2)  # all but 0x00 and 0x80
            assert torch.equal(k.float().nan_to_num(), -cache.float().nan_to_num())  # the same magnitudes
        else:
            assert torch.equal(k, -cache)
    assert check.fingerprint(check.input_tensors(batch)) == before


def test_a_fingerprint_sees_one_changed_byte():
    t = {"k_cache": torch.zeros(3, 5, dtype=torch.uint8)}
    before = check.fingerprint(t)
    t["k_cache"][2, 4] = 1
    assert check.changed_inputs(before, t).why == "the call wrote into its inputs (k_cache)"
    t["k_cache"][2, 4] = 0
    assert check.changed_inputs(before, t) is None


def test_launches_are_hooked_beside_other_hooks_on_either_triton_api(monkeypatch):
    """triton 3.6's hook chain, and the single `CompiledKernel.launch_enter_hook` of a Triton before
    `knobs` (a toolchain A/B's old one), whose own hook keeps being called; a Triton without either
    records no launch, and then nothing is judged (never a cheat found in what could not be seen)."""
    import triton
    from triton import knobs
    from triton.compiler import CompiledKernel

    launch = types.SimpleNamespace(data={"name": "k", "stream": 7})
    seen, theirs = [], []
    remove = check._hook_launches(seen.append)
    knobs.runtime.launch_enter_hook(launch)
    remove()
    knobs.runtime.launch_enter_hook(launch)
    assert seen == [launch]

    monkeypatch.delattr(triton, "knobs")
    monkeypatch.setitem(__import__("sys").modules, "triton.knobs", None)  # a Triton before knobs
    monkeypatch.setattr(CompiledKernel, "launch_enter_hook", theirs.append, raising=False)
    remove = check._hook_launches(seen.append)
    CompiledKernel.launch_enter_hook(launch)
    remove()
    assert seen == [launch, launch] and theirs == [launch]
    assert CompiledKernel.launch_enter_hook == theirs.append  # theirs put back
    monkeypatch.delattr(CompiledKernel, "launch_enter_hook")
    assert check._hook_launches(seen.append) is None

    blind = check.LaunchLog(("k",), blind=True)
    blind.wrap(lambda: None)()
    assert blind.verdict("while timed") is None and blind.seen == 0

