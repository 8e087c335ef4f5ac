"""kernels/interpreter.py: Triton's interpreter patches its language once a launch, computes what
it computed before, and leaves triton.language as it found it, a failed launch included; its
integer-overflow checks, which it computes and never asserts, are skipped, with the same results;
a `tl.tuple`'s type made on first read is the type its constructor made, and the dtype table built
once answers what the table built per call answers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreter_support import needs_interpreter
from triton.language.semantic import TritonSemantic
from triton.runtime import interpreter
from triton.runtime.errors import InterpreterError

pytestmark = [pytest.mark.no_gpu, needs_interpreter]  # the interpreter runs in this process


@triton.jit
def _scaled(x, k):
    return x * k + 1.0


@triton.jit
def _add_one(x):
    return x + 1.0


@triton.jit
def _nested_kernel(x_ptr, o_ptr, N: tl.constexpr, REPEATS: tl.constexpr, FAIL: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    for i in tl.static_range(REPEATS):
        x = _add_one(_scaled(x, 0.5 + i))
    tl.static_assert(not FAIL, "a planted failure inside a launch")
    tl.store(o_ptr + offs, x)


PROGRAMS, N, REPEATS = 3, 16, 4
CORE = "_patch_lang_core"  # the interpreter's own patching, once a call (counted by `patches`)


def _launch(x, fail=False):
    out = torch.full_like(x, float("nan"))
    _nested_kernel[(PROGRAMS,)](x, out, N=N, REPEATS=REPEATS, FAIL=fail)
    return out


def _language() -> list[dict]:
    """What a launch patches and restores: the names of triton.language, of its tensor and of its
    math. (Triton's own device functions, `tl.cdiv` and the like, leave `triton.language.core`'s
    names patched after a launch, once a launch or once a call alike: their scopes are dropped.)"""
    return [dict(vars(module)) for module in (tl, tl.tensor, tl.math)]


@pytest.fixture(scope="module", autouse=True)
def first_launch():
    """A process's first launch leaves two names in tl.tensor's own namespace that were inherited
    before (`__repr__`, which Triton restores by setting it; `__annotations__`, which Python makes
    when read): made here, so that what the tests compare does not depend on which test ran first."""
    _launch(torch.randn(PROGRAMS * N))


def _count_calls(monkeypatch, owner, name: str, count: dict) -> None:
    """Count in `count[name]` the calls of `owner.name` (monkeypatched for one test)."""
    real = getattr(owner, name)
    count[name] = 0

    def counted(*args, **kwargs):
        count[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


@pytest.fixture
def patches(monkeypatch):
    """How many times the interpreter's own patching ran (its `_patch_lang_core`, once a call)."""
    count: dict = {}
    _count_calls(monkeypatch, interpreter, CORE, count)
    return count


def test_kernels_install_both_and_each_is_installed_once():
    # conftest.py imports the kernels with the interpreter on, as `perf` does (perf.vendor), and
    # nothing else installs it
    assert getattr(interpreter._patch_lang, "once_per_launch", False)
    from kernels.interpreter import patch_lang_once_per_launch

    assert patch_lang_once_per_launch() is False  # a second call wraps nothing again
    from kernels.interpreter import skip_unasserted_overflow_checks

    options = interpreter.interpreter_builder.options
    assert options.sanitize_overflow is False and options.debug is False
    assert skip_unasserted_overflow_checks() is False  # already off


def test_kernels_install_the_lazy_tuple_types_and_the_dtype_table_once():
    from kernels.interpreter import build_dtype_table_once, type_tuples_when_read

    tuple_cls = tl.core.tuple
    assert isinstance(vars(tuple_cls)["type"], property) and hasattr(tuple_cls.__init__, "__wrapped__")
    assert interpreter._get_np_dtype.table is not None and hasattr(interpreter._get_np_dtype, "__wrapped__")
    assert type_tuples_when_read() is False and build_dtype_table_once() is False  # nothing wrapped twice


def test_once_a_launch_computes_what_every_call_did(monkeypatch, patches):
    x = torch.randn(PROGRAMS * N)
    before = _language()
    once = _launch(x)
    assert patches[CORE] == 3 and _language() == before  # the launch and each device function's first call
    patches[CORE] = 0
    monkeypatch.setattr(interpreter, "_patch_lang", interpreter._patch_lang.__wrapped__)
    assert not getattr(interpreter._patch_lang, "once_per_launch", False)
    every = _launch(x)
    assert patches[CORE] == 1 + PROGRAMS * REPEATS * 2 and _language() == before  # Triton's own: every call
    expected = x.clone()
    for i in range(REPEATS):
        expected = expected * (0.5 + i) + 1.0 + 1.0
    assert torch.equal(once, every) and torch.allclose(once, expected)


def test_a_failed_launch_restores_the_language_and_the_next_patches_again(patches):
    x = torch.randn(PROGRAMS * N)
    before = _language()
    with pytest.raises(Exception, match="planted failure"):
        _launch(x, fail=True)
    assert _language() == before
    patches[CORE] = 0
    assert torch.isfinite(_launch(x)).all() and patches[CORE] == 3 and _language() == before


@triton.jit
def _overflowing_kernel(x_ptr, o_ptr, n, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)  # int32
    tl.store(o_ptr + offs, x * n + x)  # 2**20 * 2**14 wraps in int32


OVERFLOW_X, OVERFLOW_N = [1 << 20, 3, -5, 7], 1 << 14


def _overflow_launch() -> torch.Tensor:
    x = torch.tensor(OVERFLOW_X, dtype=torch.int32)
    out = torch.full_like(x, -1)
    _overflowing_kernel[(1,)](x, out, OVERFLOW_N, N=len(OVERFLOW_X))
    return out


@pytest.fixture
def asserts(monkeypatch):
    """Calls of the language's `device_assert` (where the overflow checks end) and of the builder's
    `create_assert` (what it calls when it asserts)."""
    count: dict = {}
    _count_calls(monkeypatch, TritonSemantic, "device_assert", count)
    _count_calls(monkeypatch, type(interpreter.interpreter_builder), "create_assert", count)
    return count


def _options(monkeypatch, **changes):
    builder = interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, **changes))


def test_the_interpreter_computes_the_overflow_checks_and_asserts_none(monkeypatch, asserts):
    # NumPy's int32 wrap of the int64 result (the next test shows the kernel does overflow)
    wrapped = (np.array(OVERFLOW_X, dtype=np.int64) * OVERFLOW_N + OVERFLOW_X).astype(np.int32)
    skipped = _overflow_launch()
    assert asserts == {"device_assert": 0, "create_assert": 0}
    _options(monkeypatch, sanitize_overflow=True)  # Triton's own options: the checks computed
    checked = _overflow_launch()
    # If this fails, the interpreter asserts its overflow checks now: skipping them would hide an
    # overflow, and kernels/interpreter.py must leave them on.
    assert asserts["device_assert"] == 2 and asserts["create_assert"] == 0, asserts  # the mul and the add
    assert checked.tolist() == skipped.tolist() == wrapped.tolist()


def test_with_debug_on_the_checks_assert_and_are_not_skipped(monkeypatch, asserts):
    from kernels.interpreter import skip_unasserted_overflow_checks

    _options(monkeypatch, sanitize_overflow=True, debug=True)
    assert skip_unasserted_overflow_checks() is False
    assert interpreter.interpreter_builder.options.sanitize_overflow is True
    with pytest.raises(InterpreterError, match="int32 overflow detected for operation mul"):
        _overflow_launch()
    assert asserts["create_assert"] == 1


# --- tuples typed when read, the dtype table built once ------------------------------------------

# (`tl.core`, not an import of it: the interpreter patches each language module a kernel's module holds)
_NAMES = [*tl.dtype.SINT_TYPES, *tl.dtype.UINT_TYPES, *tl.dtype.FP_TYPES, "void"]
SCALARS = [tl.dtype(name) for name in _NAMES]
_shapes = st.lists(st.sampled_from([1, 2, 16, 64, 128]), min_size=1, max_size=2)
_types = st.one_of(st.sampled_from(SCALARS), st.builds(tl.pointer_type, st.sampled_from(SCALARS[:-1])),
                   st.builds(tl.block_type, st.sampled_from(SCALARS[:-1]), _shapes))
# what a tuple holds in a kernel: Python numbers, dtypes, constexprs, tensors and tuples of them
_leaves = st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=False), st.sampled_from(SCALARS),
                    st.builds(tl.core.constexpr, st.integers(0, 1024)),
                    st.builds(lambda ty: tl.tensor(None, ty), _types))
_values = st.recursive(_leaves, lambda inner: st.builds(tl.core.tuple, st.lists(inner, max_size=3)),
                       max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_values, max_size=5), fields=st.none() | st.just("named"))
def test_a_tuple_typed_on_first_read_has_the_type_its_constructor_made(values, fields):
    eager = tl.core._type_for_tuple_values(values)
    lazy = tl.core.tuple(values)
    assert "_made_type" not in vars(lazy)  # nothing made until read
    assert lazy.type == eager and str(lazy.type) == str(eager) and lazy.type is lazy.type
    names = [f"f{i}" for i in range(len(values))]
    given_type = tl.core._type_for_tuple_values(values, names if fields else None)
    typed = tl.core.tuple(values, given_type)  # a type given: the constructor's own path, kept as given
    assert typed.type is given_type
    if values:  # the one method that changes the values types the tuple again, as it did
        typed._setitem(0, 7)
        assert typed.type == tl.core._type_for_tuple_values([7, *values[1:]], given_type.fields)
        assert typed.type.fields == given_type.fields


@settings(max_examples=200, deadline=None)
@given(tt=_types)
def test_the_dtype_table_built_once_answers_as_the_one_built_per_call(tt):
    real = interpreter._get_np_dtype.__wrapped__

    def answer(get):
        try:
            return get(tt)
        except Exception as e:  # void, and what else the real table lacks: the same error
            return type(e)

    assert answer(interpreter._get_np_dtype) == answer(real)
