"""Every timed output checked: against the fp32 reference, and head's against base's.

A case is checked outside the timed region but on the very tensors it is timed on: its
output buffer is poisoned with NaN (an element the call leaves unwritten cannot pass), the
timed call (or the captured graph's replay) runs once, and the output is compared with
`kernels.reference.paged_attention_reference` on the same batch, with the correctness
grid's tolerances (`TOLERANCES`; tests/kernels/test_correctness.py reads them from here); where
the call's plan rounds q to e4m3, with the reference of q so rounded (`Reference`). The
measuring stage checks before timing (a wrong case is never timed: it is recorded as an
error whose reason starts with `WRONG`) and after timing (the output of the last call,
recorded the same way); the latency gate also compares head's output with base's.
perf/verdicts.py turns such a record into the verdict `wrong`.

Right values on a repeat do not prove the timed calls did the work, so three checks more
(docs/latency.md, "What the output check catches"): every call, checked or timed, must make
the launches its variant plans and on the stream it was called on (`LaunchLog`: a call that
returns early, answers from a cache or hands its work to another stream launches less or
elsewhere); the inputs must be what they were (`fingerprint`: a call that writes into q or
the caches); and after timing the call must still be right once its inputs hold other values
in the very same buffers (`other_values`: an answer kept by pointer is stale then).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# dtype of q/out -> (atol, rtol) of |out - expected| <= atol + rtol * |expected| (torch.testing's
# rule). float16 and bfloat16: the correctness grid's since it was written (tests/kernels/test_correctness.py,
# met by every variant on H100 and in the interpreter). float32 has no grid entry: float16's, a
# default chosen by reasoning (Triton's fp32 dot runs as tf32 on NVIDIA: 10 mantissa bits, as fp16).
TOLERANCES = {"float16": (3e-3, 3e-3), "bfloat16": (1.5e-2, 1e-2), "float32": (3e-3, 3e-3)}
# q rounded to e4m3 for Q K^T (a launch's FP8_PRODUCTS with q in one part: `Config.qk_e4m3`,
# `Config.fp8_products`) belongs to the call's contract as the cache's own rounding of K does: such a
# call is checked against the reference of q so rounded (`Reference`, `e4m3_rounded`). Against q
# itself that rounding alone moved outputs by up to 0.139-0.154 on 3 of 46 scenario-sized batches, and
# the largest of more outputs grows with the batch: no fixed tolerance holds it (NVIDIA H200,
# 2026-11-30, docs/lab/2026-11-30.md).
# P rounded to e4m3 too (`Config.fp8_products`: FP8_PRODUCTS without PV_FP16 in the Q-block kernels;
# the warp-specialized kernel, whose constants name Q_PARTS, multiplies P V in fp16 always): 3 mantissa
# bits rounded to nearest, a relative error up to 2^-4 of each weight; an output is a P-weighted mean
# of V, so it moves by up to 2^-4 of the |V| it averages: with the grid's unit-variance data (|V| < 4.5)
# an atol of 2^-3 and a rtol of 2^-4. Measured in the interpreter against q itself
# (tests/kernels/test_fp8_products.py, 2026-11-28): the largest error 0.10, the largest past rtol 0.052.
FP8_PRODUCTS_TOLERANCE = (2.0 ** -3, 2.0 ** -4)
# q through e4m3 with P V in fp16: in one part against the reference of q so rounded, in two parts
# (the warp-specialized kernel's Q_PARTS 2: together 8 significant bits of q, bf16's) against q itself;
# bf16's tolerance whatever the output's dtype. Two parts' fp16 outputs miss fp16's (3e-3) at
# 0.0044-0.0059 and meet bf16's with a margin of 2.5 (NVIDIA H200, 2026-11-30, fp16 prefills of 1-8
# sequences of 1k-8k and mixed batches over e4m3).
E4M3_Q_TOLERANCE = TOLERANCES["bfloat16"]
WRONG = "wrong output"  # the start of every reason recorded for a wrong output
# Scores of one chunk of the reference: heads x queries x keys fp32 values (a causal prefill of
# 8192 tokens at once would need 8.6 GB per tensor for 32 heads). Unmeasured default: 2**28
# values (1 GiB per tensor; the reference holds a few at a time).
REFERENCE_CHUNK_VALUES = 2 ** 28
# Elements of a tensor read at a time by `fingerprint` and `_negate_` (unmeasured default: 2**24
# 16-bit words make a 128 MiB int64 temporary on the device, small beside a GPU-sized cache).
CHUNK_ELEMENTS = 2 ** 24
# Seed offset of the other q values `other_values` writes (any value but 0 differs from the batch's).
OTHER_SEED = 1_000_003


@dataclass(frozen=True)
class Check:
    """One comparison: whether `out` is close to `expected`, and by how much it is not."""

    ok: bool
    max_error: float  # max |out - expected|; inf where either holds a NaN, or an Inf the other lacks
    atol: float
    rtol: float
    why: str | None = None  # what was wrong when it was not the values (inputs written, launches)

    def describe(self, against: str = "the fp32 reference") -> str:
        if self.why is not None:
            return self.why
        return (f"max error {self.max_error:.3g} against {against} (atol {self.atol:g}, "
                f"rtol {self.rtol:g})")


def failed(why: str) -> Check:
    """A check failed for `why` rather than by the output's values."""
    return Check(False, math.inf, 0.0, 0.0, why)


def tolerance(dtype, launches=()) -> tuple[float, float]:
    """(atol, rtol) for an output of `dtype` (a torch dtype or its name, e.g. "float16") where the
    call's planned `launches` (`KernelLaunch.config()` dicts) multiply only their dtype's operands; at
    least E4M3_Q_TOLERANCE where one takes q through e4m3, FP8_PRODUCTS_TOLERANCE where one rounds P to
    e4m3 too. The heuristics may choose either (`Config.qk_e4m3`), so the check follows the plan, not
    the scenario; `Reference.of` the output it is held to."""
    name = str(dtype).removeprefix("torch.")
    if name not in TOLERANCES:
        raise ValueError(f"no tolerance for outputs of {name}; known: {', '.join(TOLERANCES)}")
    constants = [launch.get("constexprs", {}) for launch in launches]
    if any(c.get("FP8_PRODUCTS") and not c.get("PV_FP16") and "Q_PARTS" not in c for c in constants):
        return FP8_PRODUCTS_TOLERANCE
    if any(c.get("FP8_PRODUCTS") for c in constants):
        return tuple(max(a, b) for a, b in zip(TOLERANCES[name], E4M3_Q_TOLERANCE))
    return TOLERANCES[name]


def rounds_q_to_e4m3(launches) -> bool:
    """Whether a planned launch (a `KernelLaunch.config()` dict) rounds q to one e4m3 part for Q K^T
    (FP8_PRODUCTS: `Config.fp8_products`, `Config.qk_e4m3`; the warp-specialized kernel's Q_PARTS 2
    keeps q's 8 bits in two): its output is checked against the reference of q so rounded."""
    return any(bool(c.get("FP8_PRODUCTS")) and c.get("Q_PARTS", 1) == 1
               for c in (launch.get("constexprs", {}) for launch in launches))


def e4m3_rounded(q, fp8_dtype):
    """q as a kernel rounds it to one part of `fp8_dtype` (an e4m3 cache's dtype) for Q K^T: each row
    of a head brought by a power of two to its largest magnitude in (2^(top - 1), 2^top], top the
    format's largest power of two (`common.e4m3_top`: 8 for OCP, 7 for FNUZ), rounded to nearest even,
    brought back, in q's dtype. The kernels scale a Q-block (or 64 rows of a head) together; e4m3 rounds
    alike under any power of two that keeps a value out of its subnormals, so this is their q but for
    elements 2^-13 of their block's largest and below, whose products are as small. Here, not in
    `kernels`: both sides of a gate are checked with it, whichever commit's kernels are active."""
    import torch

    top = math.floor(math.log2(torch.finfo(fp8_dtype).max))
    x = q.float()
    big = x.abs().amax(dim=-1, keepdim=True)
    usable = (big > 0) & torch.isfinite(big)
    shift = torch.where(usable, torch.ceil(torch.log2(torch.where(usable, big, 1.0))) - top, 0.0)
    return ((x * torch.exp2(-shift)).to(fp8_dtype).float() * torch.exp2(shift)).to(q.dtype)


def compare(out, expected, atol: float, rtol: float) -> Check:
    """`out` against `expected` with torch.testing.assert_close's rule (equal, or
    |out - expected| <= atol + rtol * |expected|; NaN never close), both read as float32."""
    import torch

    a, e = out.float(), expected.float()
    if a.shape != e.shape:
        return Check(False, math.inf, atol, rtol)
    diff = (a - e).abs()
    close = (a == e) | (diff <= atol + rtol * e.abs())
    ok = bool(close.all())
    if not diff.numel():
        return Check(ok, 0.0, atol, rtol)
    finite = torch.isfinite(diff)
    if bool(finite.all()):
        return Check(ok, float(diff.max()), atol, rtol)
    beyond = ~finite & ~(a == e)  # NaN, or an Inf the reference does not have
    worst = math.inf if bool(beyond.any()) else (float(diff[finite].max()) if bool(finite.any()) else 0.0)
    return Check(ok, worst, atol, rtol)


def check_call(call: Callable[[], object], out, expected, sync: Callable[[], object] | None = None,
               tolerance_: tuple[float, float] | None = None) -> Check:
    """Poison `out` with NaN, run `call` (which writes `out`) once, compare with `expected` (within
    `tolerance_`, else the output dtype's)."""
    out.fill_(float("nan"))
    call()
    if sync is not None:
        sync()
    return compare(out, expected, *(tolerance_ or tolerance(out.dtype)))


def wrong_reason(check: Check, when: str, metric: str | None = None,
                 against: str = "the fp32 reference") -> str:
    """The reason recorded for a wrong output ("graph: wrong output after timing: max error ...")."""
    text = f"{WRONG} {when}: {check.describe(against)}"
    return f"{metric}: {text}" if metric else text


def is_wrong(reason: str, metric: str | None = None) -> bool:
    """Whether a recorded reason says an output was wrong (for `metric`: one naming no metric,
    or naming that one)."""
    head, _, rest = reason.partition(": ")
    if head in ("eager", "graph"):
        return rest.startswith(WRONG) and (metric is None or head == metric)
    return reason.startswith(WRONG)


@dataclass(frozen=True)
class Reference:
    """A batch's fp32 reference outputs (`references`): of q itself, and over an fp8 cache of q rounded
    to e4m3 (`e4m3_rounded`; None over a 16-bit cache). Made together, while the batch's buffers hold
    the values checked (`other_values` changes them)."""

    exact: object
    q_rounded: object = None

    def of(self, launches):
        """The output a call planned as `launches` (`KernelLaunch.config()` dicts) is held to."""
        if not rounds_q_to_e4m3(launches):
            return self.exact
        if self.q_rounded is None:
            raise ValueError("the plan rounds q to e4m3, but the batch's cache is not fp8")
        return self.q_rounded


def references(reference: Callable, batch) -> Reference:
    """`Reference` of `batch` by `reference` (`kernels.reference.paged_attention_reference` of the
    kernels active now): the q-rounded one only where the cache is fp8, where a plan may round q."""
    rounded = batch.k_cache.dtype.is_floating_point and batch.k_cache.element_size() == 1
    return Reference(reference_output(reference, batch),
                     reference_output(reference, batch, round_q=True) if rounded else None)


def reference_output(reference: Callable, batch, round_q: bool = False):
    """The fp32 reference's output for `batch` (of q rounded to the cache's e4m3 with `round_q`,
    `e4m3_rounded`), computed in chunks of queries so that no
    chunk's scores exceed REFERENCE_CHUNK_VALUES: a chunk of the last queries of a sequence is
    a sequence of its own (the queries of a sequence are its last positions, so cutting it at
    query b gives a sequence of kv_len - q_len + b keys whose last queries are those)."""
    import torch

    q = batch.q
    args, options = batch.args(), dict(batch.options)
    _, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens = args
    if round_q:
        q = e4m3_rounded(q, k_cache.dtype)
    heads = q.shape[1]
    out = torch.empty_like(q)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for s, kv_len in enumerate(lens):
        start, end = cu[s], cu[s + 1]
        q_len = end - start
        rows = max(1, REFERENCE_CHUNK_VALUES // max(1, heads * kv_len))
        for a in range(0, q_len, rows):
            b = min(q_len, a + rows)
            sub_len = torch.tensor([kv_len - q_len + b], dtype=seq_lens.dtype, device=seq_lens.device)
            sub_cu = torch.tensor([0, b - a], dtype=cu_seqlens_q.dtype, device=cu_seqlens_q.device)
            rows_q = q[start + a:start + b]
            table = block_table[s:s + 1]
            out[start + a:start + b] = reference(rows_q, k_cache, v_cache, table, sub_cu, sub_len, **options)
    return out


def input_tensors(batch) -> dict:
    """Every tensor a call reads, by name: the contract's six and the tensor options."""
    names = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")
    found = dict(zip(names, batch.args()))
    found.update({k: v for k, v in batch.options.items() if hasattr(v, "data_ptr")})
    return found


def fingerprint(tensors: dict) -> dict[str, tuple[int, int]]:
    """Per tensor, two sums of its bytes read as 16-bit words (the words, and each word times
    its position mod 65521 plus one): any write changes one of them but by a contrived
    cancellation. Computed on the tensor's device in chunks, with no copy of it kept."""
    import torch

    sums = {}
    for name, t in tensors.items():
        raw = t.detach().contiguous().view(-1).view(torch.uint8)
        words = raw.view(torch.int16) if raw.numel() % 2 == 0 else raw
        parts = []
        for a in range(0, words.numel(), CHUNK_ELEMENTS):
            w = words[a:a + CHUNK_ELEMENTS].to(torch.int64)
            at = torch.arange(a, a + w.numel(), device=w.device, dtype=torch.int64) % 65521 + 1
            parts.append(torch.stack([w.sum(), (w * at).sum()]))  # < 2**55 per chunk: no overflow
        total = torch.stack(parts).tolist() if parts else []
        sums[name] = (sum(p[0] for p in total), sum(p[1] for p in total))
    return sums


def changed_inputs(before: dict, tensors: dict) -> Check | None:
    """A failed check naming the inputs whose fingerprint is not `before`'s; None if none."""
    now = fingerprint(tensors)
    written = [name for name in before if now.get(name) != before[name]]
    return failed(f"the call wrote into its inputs ({', '.join(written)})") if written else None


def _negate_(t) -> None:
    """Negate `t` in place, exactly and reversibly: a float's sign, or an fp8 byte's sign bit
    where its magnitude bits are not zero (an FNUZ 0x80 is NaN, its 0x00 the only zero)."""
    import torch

    if t.element_size() > 1:
        t.neg_()
        return
    raw = t.view(torch.uint8).view(-1)
    for a in range(0, raw.numel(), CHUNK_ELEMENTS):
        part = raw[a:a + CHUNK_ELEMENTS]
        part.bitwise_xor_(((part & 0x7F) != 0).to(torch.uint8) * 0x80)


@contextlib.contextmanager
def other_values(batch, q_other) -> Iterator[None]:
    """Inside: the batch's very buffers hold other values (q holds `q_other`, the caches
    negated: a serving engine's buffers change value, never address, from step to step);
    on leaving, exactly the values they held (q copied back, the caches negated again)."""
    saved = batch.q.clone()
    batch.q.copy_(q_other)
    _negate_(batch.k_cache)
    _negate_(batch.v_cache)
    try:
        yield
    finally:
        _negate_(batch.v_cache)
        _negate_(batch.k_cache)
        batch.q.copy_(saved)


def other_q(batch):
    """Other q values for `other_values`: the batch's shape and dtype, another seed, built on the CPU."""
    import torch

    gen = torch.Generator().manual_seed(batch.spec.seed + OTHER_SEED)
    return torch.randn(batch.q.shape, generator=gen).to(batch.q.dtype).to(batch.q.device)


def current_stream():
    """The stream a launch is made on now, as Triton's launch hook names it (the driver's raw
    handle on a GPU), None in Triton's interpreter (one stream)."""
    from perf.vendor import on_gpu

    if not on_gpu():
        return None
    from triton.runtime import driver

    return driver.active.get_current_stream(driver.active.get_current_device())


@dataclass
class LaunchLog:
    """The Triton launches of the calls it wraps, judged against what one call must launch:
    `expected`, the kernel names its variant plans, each on the stream the call was made on.
    `recording` installs the hook (Triton's launch_enter_hook on a GPU, the interpreter's
    launch in Triton's interpreter); calls made outside it are not seen."""

    expected: tuple[str, ...] | None = None  # None: the first call's launches (a variant without `plan`)
    calls: list = field(default_factory=list)  # [(the call's stream, [(kernel, stream), ...])] not judged yet
    seen: int = 0  # calls judged
    bad: int = 0  # of them, calls that launched other kernels or on another stream
    first: str | None = None  # what the first bad call did
    blind: bool = False  # this Triton has no launch hook: nothing is judged

    stream: Callable[[], object] = current_stream  # set by `recording` to this device's reader

    def wrap(self, fn: Callable[[], object]) -> Callable[[], object]:
        """`fn`, each call of it recorded with the stream it is made on (a raw-handle read and an
        append of host time per call: nothing the device times)."""
        calls = self.calls

        def call():
            calls.append((self.stream(), []))
            return fn()
        return call

    def launched(self, name, stream) -> None:
        if self.calls:
            self.calls[-1][1].append((name, stream))

    def hook(self, metadata) -> None:
        """Triton's launch_enter_hook: `metadata` is its LazyDict (name, function, stream)."""
        data = getattr(metadata, "data", None) or {}
        self.launched(data.get("name"), data.get("stream"))

    @contextlib.contextmanager
    def recording(self) -> Iterator[LaunchLog]:
        from perf.vendor import on_gpu

        if on_gpu():
            from triton.runtime import driver

            device, read = driver.active.get_current_device(), driver.active.get_current_stream
            self.stream = lambda: read(device)
            remove = _hook_launches(self.hook)
        else:
            from triton.runtime.interpreter import InterpretedFunction

            self.stream = current_stream  # looked up now: a test may stand in for the streams
            run = InterpretedFunction.run

            def counted(kernel, *args, **kwargs):
                if not kwargs.get("warmup"):
                    self.launched(kernel.fn.__name__, self.stream())
                return run(kernel, *args, **kwargs)
            InterpretedFunction.run = counted

            def remove():
                InterpretedFunction.run = run
        self.blind = remove is None
        try:
            yield self
        finally:
            if remove is not None:
                remove()
            self.judge()

    def judge(self) -> None:
        """Judge the calls recorded since the last judgement (then forget them); none where the
        launches could not be seen (`blind`)."""
        for stream, launches in [] if self.blind else self.calls:
            names = tuple(sorted(name for name, _ in launches))
            if self.expected is None:
                self.expected = names
            self.seen += 1
            other = [name for name, s in launches if s != stream]
            if names == self.expected and not other:
                continue
            self.bad += 1
            if self.first is None:
                self.first = (f"launched {', '.join(other)} on another stream than the call's" if other
                              else f"launched [{', '.join(names)}] where its plan launches "
                                   f"[{', '.join(self.expected)}]")
        self.calls.clear()

    def verdict(self, when: str) -> Check | None:
        """A failed check if any judged call launched other than it must; None if none did."""
        self.judge()
        if not self.bad:
            return None
        return failed(f"{self.bad} of {self.seen} calls {when}: the first {self.first}")


def _hook_launches(hook: Callable[[object], None]) -> Callable[[], None] | None:
    """Install `hook` as Triton's launch-enter hook beside any other; its remover, None where this
    Triton has none. triton >= 3.4 keeps a chain in `knobs.runtime`; older ones one callable on
    `CompiledKernel` (a toolchain A/B may run one), which is wrapped."""
    try:
        from triton import knobs

        chain = knobs.runtime.launch_enter_hook
    except (ImportError, AttributeError):
        chain = None
    if hasattr(chain, "add"):
        chain.add(hook)
        return lambda: chain.remove(hook)
    from triton.compiler import CompiledKernel

    if chain is not None or not hasattr(CompiledKernel, "launch_enter_hook"):
        return None
    before = CompiledKernel.launch_enter_hook

    def both(metadata):
        hook(metadata)
        if before is not None:
            before(metadata)
    CompiledKernel.launch_enter_hook = both
    return lambda: setattr(CompiledKernel, "launch_enter_hook", before)
