"""kernels/interpreter.py: Triton's interpreter patches its language once a launch, computes what
it computed before, and leaves triton.language as it found it, a failed launch included."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from interpreter_support import needs_interpreter
from triton.runtime import interpreter

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


def _launch(x, fail=False):
    out = torch.full_like(x, float("nan"))
    _nested_kernel[(PROGRAMS,)](x, out, N=N, REPEATS=REPEATS, FAIL=fail)
    return out


def _language() -> list[dict]:
    """What a launch patches and restores: the names of triton.language, of its tensor and of its
    math. (Triton's own device functions, `tl.cdiv` and the like, leave `triton.language.core`'s
    names patched after a launch, once a launch or once a call alike: their scopes are dropped.)"""
    return [dict(vars(module)) for module in (tl, tl.tensor, tl.math)]


@pytest.fixture
def patches(monkeypatch):
    """How many times the interpreter's own patching ran (its `_patch_lang_core`, once a call)."""
    count = [0]
    real = interpreter._patch_lang_core

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(interpreter, "_patch_lang_core", counted)
    return count


def test_kernels_install_it_and_it_is_installed_once():
    # conftest.py imports the kernels with the interpreter on, as `perf` does (perf.vendor), and
    # nothing else installs it
    assert getattr(interpreter._patch_lang, "once_per_launch", False)
    from kernels.interpreter import patch_lang_once_per_launch

    assert patch_lang_once_per_launch() is False  # a second call wraps nothing again


def test_once_a_launch_computes_what_every_call_did(monkeypatch, patches):
    x = torch.randn(PROGRAMS * N)
    before = _language()
    once = _launch(x)
    assert patches[0] == 3 and _language() == before  # the launch and each device function's first call
    patches[0] = 0
    monkeypatch.setattr(interpreter, "_patch_lang", interpreter._patch_lang.__wrapped__)
    assert not getattr(interpreter._patch_lang, "once_per_launch", False)
    every = _launch(x)
    assert patches[0] == 1 + PROGRAMS * REPEATS * 2 and _language() == before  # Triton's own: every call
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
    patches[0] = 0
    assert torch.isfinite(_launch(x)).all() and patches[0] == 3 and _language() == before
