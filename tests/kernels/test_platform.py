"""Platform detection works under the interpreter (no GPU driver is touched)."""

from __future__ import annotations

from kernels import platform


def test_interpreter_platform(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    platform.current.cache_clear()
    try:
        p = platform.current()
        assert p.vendor == "cpu" and p.arch == "interpreter" and p.torch_device == "cpu"
        assert not platform.is_hip()
    finally:
        platform.current.cache_clear()


def test_vendor_is_known():
    assert platform.current().vendor in platform.VENDORS
