"""The vendor and target records (perf/vendor.py) against the kernels' own facts and thresholds.yaml.

kernels/ never imports perf/, so the harness's records name the kernels' facts instead of
importing them: these tests keep the two in agreement. Every vendor of perf/vendor.py is one the
kernels' planners know (kernels.inputs.VENDORS) with an SM/CU default (heuristics.DEFAULT_NUM_SMS)
that is its default target's; every target's fp8 format is the one kernels.inputs.fp8_dtype_for
gives it; every target of thresholds.yaml has a record.
"""

from __future__ import annotations

import os

import pytest

from kernels import inputs
from kernels.paged_attention import heuristics
from perf import vendor
from perf.errors import ConfigError
from perf.thresholds import load_thresholds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_vendor_is_one_the_kernels_plan_for():
    assert set(vendor.VENDORS) <= set(inputs.VENDORS)
    assert vendor.INTERPRETER_VENDOR in vendor.VENDORS
    assert all(name == v.name for name, v in vendor.VENDORS.items())


@pytest.mark.parametrize("name", list(vendor.VENDORS))
def test_a_vendors_default_target_is_the_product_its_heuristics_assume(name):
    v = vendor.VENDORS[name]
    default = vendor.TARGETS[v.default_target]
    assert default.vendor == name and heuristics.DEFAULT_NUM_SMS[name] == default.num_sms


@pytest.mark.parametrize("name", list(vendor.TARGETS))
def test_every_targets_fp8_format_is_the_kernels_choice_for_it(name):
    target = vendor.TARGETS[name]
    assert target.name == name and target.vendor in vendor.VENDORS
    assert inputs.FP8_FORMATS[inputs.fp8_dtype_for(name)].name == target.fp8


def test_records_are_consistent():
    """Backends tell vendors apart (thresholds.yaml's target check, torch's build); a vendor's
    visible-devices variable is among its isolation variables; limits follow from the facts."""
    backends = [v.backend for v in vendor.VENDORS.values()]
    assert len(set(backends)) == len(backends)
    for v in vendor.VENDORS.values():
        assert v.targets and all(t.backend == v.backend for t in v.targets)
        assert v.visible_devices in v.isolation_env
        assert bool(v.container_needs) == bool(v.container_options)
        assert all(need in v.container_options for need in v.container_needs)
    for t in vendor.TARGETS.values():
        assert 0 < t.max_shared_memory_bytes <= t.shared_per_unit
        assert t.warp_size > 0 and t.num_sms > 0 and t.max_registers_per_thread > 0


def test_every_target_of_thresholds_yaml_has_a_record():
    th = load_thresholds(os.path.join(ROOT, "thresholds.yaml"))
    for name, vt in th.vendors.items():
        assert name in vendor.VENDORS
        for t in vt.targets:
            assert vendor.TARGETS[t.name].vendor == name, t.name


def test_the_torch_build_names_its_vendor(monkeypatch):
    import torch

    for cuda, hip, want in (("12.8", None, "nvidia"), (None, "7.0.1", "amd"), (None, None, None)):
        monkeypatch.setattr(torch.version, "cuda", cuda, raising=False)
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        assert vendor.built_for(torch) == want


def test_an_unknown_vendor_is_refused_naming_every_known_one():
    assert vendor.check_name("amd") == "amd"
    known = ", ".join(vendor.VENDORS)
    with pytest.raises(ConfigError, match=rf"^--vendor acme: unknown vendor; use one of {known}$"):
        vendor.check_name("acme")



def test_a_machine_without_gpu_device_nodes_is_decided_without_torch(monkeypatch, tmp_path):
    """No driver node: no GPU and the interpreter chosen, with torch unimportable here (its import
    costs seconds in every process that asks); TRITON_INTERPRET=1 means the interpreter whatever
    the nodes say."""
    import sys

    monkeypatch.setattr(vendor, "GPU_NODES", (str(tmp_path / "no-such-node"),))
    monkeypatch.setitem(sys.modules, "torch", None)  # any `import torch` now raises ImportError
    monkeypatch.delitem(sys.modules, "triton")  # not yet imported: the choice is still open
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not vendor.gpu_nodes() and vendor.on_gpu() is False
    vendor.interpreter_without_gpu()
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setattr(vendor, "GPU_NODES", (str(tmp_path),))  # a node exists: torch would decide
    assert vendor.gpu_nodes() and vendor.on_gpu() is False  # but the interpreter was asked for
