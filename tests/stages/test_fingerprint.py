"""The environment fingerprint: the device found by UUID whatever CUDA_VISIBLE_DEVICES holds,
every failure of NVML or amdsmi a None field with its reason, a CPU named as such.

NVML and amdsmi are replaced by fakes (sys.modules) that know physical devices by UUID only
(no lookup by index exists in them), and torch's device properties by a fake that maps the
visible index through CUDA_VISIBLE_DEVICES as the CUDA runtime does."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from perf import fingerprint
from perf.errors import ConfigError

PHYSICAL = [  # NVML's order (PCI order): uuid (as torch prints it), name, vbios
    ("11111111-aaaa-bbbb-cccc-000000000000", "NVIDIA H100 80GB HBM3", "96.00.99.00.01"),
    ("22222222-aaaa-bbbb-cccc-000000000000", "NVIDIA H100 80GB HBM3", "96.00.99.00.02"),
    ("33333333-aaaa-bbbb-cccc-000000000000", "NVIDIA H100 80GB HBM3", "96.00.99.00.03"),
]


class NVMLError(Exception):
    pass


def fake_pynvml(devices=PHYSICAL, fail=(), reasons=0, init_error=None):
    """A pynvml module: devices by "GPU-<uuid>" only; `fail` names calls that raise NVMLError."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.calls = []
    by_uuid = {f"GPU-{u}": (u, name, vbios, i) for i, (u, name, vbios) in enumerate(devices)}

    def call(name, fn):
        def wrapped(*args):
            m.calls.append(name)
            if name in fail:
                raise NVMLError(f"{name} failed (NVML_ERROR_UNKNOWN)")
            return fn(*args)
        wrapped.__name__ = name
        setattr(m, name, wrapped)

    def init():
        if init_error:
            raise NVMLError(init_error)

    def by_uuid_fn(uuid):
        key = uuid.decode() if isinstance(uuid, bytes) else uuid
        if key not in by_uuid:
            raise NVMLError("Not Found")
        return by_uuid[key]

    call("nvmlInit", init)
    call("nvmlShutdown", lambda: None)
    call("nvmlDeviceGetHandleByUUID", by_uuid_fn)
    call("nvmlDeviceGetUUID", lambda h: f"GPU-{h[0]}".encode())
    call("nvmlDeviceGetName", lambda h: h[1])
    call("nvmlDeviceGetVbiosVersion", lambda h: h[2])
    call("nvmlSystemGetDriverVersion", lambda: "580.159.04")
    call("nvmlDeviceGetClockInfo", lambda h, kind: 1980 if kind == 1 else 2619)
    call("nvmlDeviceGetCurrentClocksEventReasons", lambda h: reasons)
    return m


def visible(env: str | None, devices=PHYSICAL) -> list[int]:
    """CUDA's CUDA_VISIBLE_DEVICES: indices or UUIDs (GPU-...), in the order given."""
    if env is None:
        return list(range(len(devices)))
    out = []
    for item in env.split(","):
        if item.startswith("GPU-"):
            out.append(next(i for i, d in enumerate(devices) if f"GPU-{d[0]}".startswith(item)))
        else:
            out.append(int(item))
    return out


def fake_cuda(monkeypatch, env: str | None, devices=PHYSICAL, hip: str | None = None, props=None):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    order = visible(env, devices)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def properties(i):
        if props is not None:
            return props(i)
        uuid, name, _ = devices[order[i]]
        return types.SimpleNamespace(name=name, uuid=uuid)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    monkeypatch.setattr(torch.version, "cuda", None if hip else "13.0", raising=False)


@pytest.mark.parametrize("env, index, physical", [
    (None, 0, 0), (None, 2, 2),
    ("2,0", 0, 2), ("2,0", 1, 0),  # reordered indices
    ("GPU-33333333-aaaa-bbbb-cccc-000000000000,GPU-11111111-aaaa-bbbb-cccc-000000000000", 0, 2),
    ("GPU-22222222", 0, 1),  # a UUID prefix, as CUDA allows
])
def test_the_device_is_found_by_uuid_whatever_visible_devices_holds(monkeypatch, env, index, physical):
    nvml = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    fake_cuda(monkeypatch, env)
    fp = fingerprint.collect(index)
    uuid, name, vbios = PHYSICAL[physical]
    assert fp["gpu_uuid"] == f"GPU-{uuid}" and fp["vbios"] == vbios and fp["gpu_model"] == name
    assert fp["driver"] == "580.159.04" and fp["runtime"] == "CUDA 13.0" and fp["vendor"] == "nvidia"
    assert fp["clocks"]["start"]["sm_mhz"] == 1980 and fp["clocks"]["end"] is None
    assert not any("Index" in c for c in nvml.calls)  # never by index
    assert nvml.calls[-1] == "nvmlShutdown"
    assert set(fingerprint.FIELDS) <= set(fp)


def test_missing_nvml_leaves_clear_nones_with_torch_s_name_and_uuid(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    fake_cuda(monkeypatch, "1")
    fp = fingerprint.collect()
    assert fp["gpu_model"] == PHYSICAL[1][1] and fp["gpu_uuid"] == f"GPU-{PHYSICAL[1][0]}"
    assert fp["vbios"] is None and fp["driver"] is None and fp["clocks"] == {"start": None, "end": None}
    assert "nvidia-ml-py" in fp["why"]["vbios"] and "nvidia-ml-py" in fp["why"]["driver"]


def test_nvml_that_does_not_start_or_know_the_device_is_said(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error="Driver Not Loaded"))
    fake_cuda(monkeypatch, None)
    fp = fingerprint.collect()
    assert fp["driver"] is None and "Driver Not Loaded" in fp["why"]["driver"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(devices=PHYSICAL[1:]))  # NVML lacks device 0
    fp = fingerprint.collect(0)
    assert fp["vbios"] is None and "knows no device of UUID" in fp["why"]["vbios"]


def test_one_failing_call_leaves_only_its_field_none(monkeypatch):
    failing = ("nvmlDeviceGetVbiosVersion", "nvmlDeviceGetCurrentClocksEventReasons")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail=failing))
    fake_cuda(monkeypatch, None)
    fp = fingerprint.collect()
    assert fp["vbios"] is None and "nvmlDeviceGetVbiosVersion" in fp["why"]["vbios"]
    assert fp["driver"] == "580.159.04"
    start = fp["clocks"]["start"]
    assert start["sm_mhz"] == 1980 and start["throttle"] is None and "throttle" in start["why"]


def test_throttle_reasons_name_slowdowns_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(reasons=0x1 | 0x2))  # idle, app clocks
    fake_cuda(monkeypatch, None)
    fp = fingerprint.finish(fingerprint.collect())
    assert fp["clocks"]["start"]["throttle"] == ["gpu_idle", "applications_clocks_setting"]
    assert fingerprint.throttled(fp) is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(reasons=0x4 | 0x40))
    fp = fingerprint.finish(fp)  # the process ended with the GPU power-capped and hot
    assert fp["clocks"]["end"]["throttle"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert fingerprint.throttled(fp) == "throttled: sw_power_cap (end), hw_thermal_slowdown (end)"
    both = {"clocks": {"start": {"throttle": ["hw_slowdown"]}, "end": {"throttle": ["hw_slowdown"]}}}
    assert fingerprint.throttled(both) == "throttled: hw_slowdown (start, end)"


def test_the_older_throttle_call_is_used_where_the_newer_is_missing(monkeypatch):
    nvml = fake_pynvml(reasons=0x8)
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = nvml.nvmlDeviceGetCurrentClocksEventReasons
    del nvml.nvmlDeviceGetCurrentClocksEventReasons
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    fake_cuda(monkeypatch, None)
    assert fingerprint.throttled(fingerprint.collect()) == "throttled: hw_slowdown (start)"


def test_a_cpu_names_the_interpreter_and_leaves_the_gpu_fields_none(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(fingerprint.IMAGE_DIGEST_ENV, raising=False)
    fp = fingerprint.collect()
    assert fp["vendor"] == "cpu" and "interpreter" in fp["interpreter"].lower()
    for key in ("gpu_model", "gpu_uuid", "vbios", "driver"):
        assert fp[key] is None and "interpreter" in fp["why"][key]
    assert fp["image_digest"] is None and fingerprint.IMAGE_DIGEST_ENV in fp["why"]["image_digest"]
    assert fingerprint.throttled(fingerprint.finish(fp)) is None
    monkeypatch.setenv(fingerprint.IMAGE_DIGEST_ENV, "sha256:abc")
    monkeypatch.setenv("RUNNER_NAME", "h100-a")
    fp = fingerprint.collect()
    assert fp["image_digest"] == "sha256:abc" and fp["runner"] == "h100-a"


@pytest.mark.parametrize("version, direct_url, commit", [
    ("3.6.0+git5a3f2e1b", None, "5a3f2e1b"),
    ("3.6.0", '{"url": "https://github.com/triton-lang/triton", "vcs_info": {"vcs": "git", '
              '"commit_id": "0123456789abcdef"}}', "0123456789abcdef"),
    ("3.6.0", None, None),
])
def test_triton_s_commit_is_read_where_the_install_records_it(monkeypatch, version, direct_url, commit):
    import importlib.metadata as md

    import triton

    monkeypatch.setattr(triton, "__version__", version)

    class Dist:
        def read_text(self, name):
            return direct_url if name == "direct_url.json" else None

    monkeypatch.setattr(md, "distribution", lambda name: Dist())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fp = fingerprint.collect()
    assert fp["triton"] == version and fp["triton_commit"] == commit
    assert (fp["why"].get("triton_commit") is None) == (commit is not None)


# --- AMD ---------------------------------------------------------------------------------------

AMD = [  # amdsmi's order: uuid (amdsmi's form), HIP's 16 ASCII bytes, bdf, vbios
    ("1aff74a1-0000-1000-8012-34567890abcd", b"801234567890abcd", "0000:11:00.0", "113-M3000100-001"),
    ("2aff74a1-0000-1000-80fe-dcba09876543", b"80fedcba09876543", "0000:22:00.0", "113-M3000100-002"),
]


class AmdSmiException(Exception):
    pass


def fake_amdsmi(devices=AMD, uuids=True, fail=()):
    m = types.ModuleType("amdsmi")
    m.AmdSmiException = AmdSmiException
    m.AmdSmiClkType = types.SimpleNamespace(GFX="gfx", MEM="mem")

    def call(name, fn):
        def wrapped(*args):
            if name in fail:
                raise AmdSmiException(f"{name}: AMDSMI_STATUS_NOT_SUPPORTED")
            return fn(*args)
        wrapped.__name__ = name
        setattr(m, name, wrapped)

    call("amdsmi_init", lambda *a: None)
    call("amdsmi_shut_down", lambda: None)
    call("amdsmi_get_processor_handles", lambda: list(range(len(devices))))
    call("amdsmi_get_gpu_device_uuid", lambda h: devices[h][0] if uuids else "N/A")
    call("amdsmi_get_gpu_device_bdf", lambda h: devices[h][2])
    call("amdsmi_get_gpu_asic_info", lambda h: {"market_name": "AMD Instinct MI300X"})
    call("amdsmi_get_gpu_vbios_info", lambda h: {"version": devices[h][3]})
    call("amdsmi_get_gpu_driver_info", lambda h: {"driver_version": "6.10.5"})
    call("amdsmi_get_clock_info", lambda h, kind: {"clk": 2100 if kind == "gfx" else 1300})
    call("amdsmi_get_gpu_metrics_info", lambda h: {"throttle_status": 0})
    return m


def _hip_props(order, bdf_ok=True):
    def props(i):
        uuid, raw, bdf, _ = AMD[order[i]]
        domain, bus, dev = bdf.split(":")[0], bdf.split(":")[1], bdf.split(":")[2].split(".")[0]
        extra = {"pci_domain_id": int(domain, 16), "pci_bus_id": int(bus, 16),
                 "pci_device_id": int(dev, 16)} if bdf_ok else {}
        uuid = types.SimpleNamespace(bytes=raw)
        return types.SimpleNamespace(name="AMD Instinct MI300X", uuid=uuid, **extra)
    return props


@pytest.mark.parametrize("uuids", [True, False])  # False: amdsmi gives no UUID, the PCI address decides
def test_amd_devices_are_found_by_uuid_or_pci_address_in_any_order(monkeypatch, uuids):
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(uuids=uuids))
    # HIP_VISIBLE_DEVICES=1,0; with amdsmi's UUIDs torch's PCI address is withheld, so the UUID decides
    fake_cuda(monkeypatch, None, hip="7.0.1", props=_hip_props([1, 0], bdf_ok=not uuids))
    fp = fingerprint.collect(0)
    assert fp["vendor"] == "amd" and fp["runtime"] == "ROCm 7.0.1"
    assert fp["vbios"] == AMD[1][3] and fp["driver"] == "6.10.5" and fp["gpu_model"] == "AMD Instinct MI300X"
    assert fp["clocks"]["start"] == {**fp["clocks"]["start"], "sm_mhz": 2100, "mem_mhz": 1300, "throttle": []}


def test_every_vendors_library_is_read_by_device_and_by_uuid(monkeypatch):
    """The fingerprint asks the management library of the vendor's record (perf/vendor.py
    Vendor.smi) for torch's device and, as a process ends, for the UUID it recorded."""
    from perf.vendor import VENDORS

    assert {v.smi for v in VENDORS.values()} <= fingerprint._BY_DEVICE.keys() & fingerprint._BY_UUID.keys()
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi())
    fake_cuda(monkeypatch, None, hip="7.0.1", props=_hip_props([1]))
    fp = fingerprint.collect(0)
    assert fp["vendor"] == "amd" and fp["gpu_uuid"] == AMD[1][0]
    assert fingerprint.finish(fp)["clocks"]["end"]["sm_mhz"] == 2100  # amdsmi again, by that UUID
    assert fingerprint.read_clocks({**fp, "vendor": "cpu"}) is None


def test_amd_without_a_match_or_the_library_is_said(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(uuids=False))
    fake_cuda(monkeypatch, None, hip="7.0.1", props=_hip_props([0], bdf_ok=False))
    fp = fingerprint.collect(0)
    assert fp["vbios"] is None and "knows no device" in fp["why"]["vbios"]
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    fp = fingerprint.collect(0)
    assert fp["driver"] is None and "amdsmi" in fp["why"]["driver"]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(fail=("amdsmi_get_gpu_vbios_info",)))
    fp = fingerprint.collect(0)  # found by UUID (HIP's unique id is the tail of amdsmi's UUID)
    assert fp["vbios"] is None and "NOT_SUPPORTED" in fp["why"]["vbios"] and fp["driver"] == "6.10.5"


# --- reading back and comparing -----------------------------------------------------------------


def test_diff_names_what_changed_but_the_clocks():
    old = {"driver": "580.1", "triton": "3.6.0", "clocks": {"start": {"sm_mhz": 1}}, "vbios": "a"}
    new = {"driver": "580.2", "triton": "3.6.0", "clocks": {"start": {"sm_mhz": 2}}, "vbios": "a"}
    assert fingerprint.diff(old, new) == {"driver": ("580.1", "580.2")}
    assert fingerprint.diff(None, {"torch": "2.11"}) == {"torch": (None, "2.11")}
    assert set(fingerprint.TOOLCHAIN_FIELDS) | set(fingerprint.ENVIRONMENT_FIELDS) < set(fingerprint.FIELDS)


def test_older_results_environments_read_as_fingerprints():
    smi = {"gpu": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", "driver": "580.1",
           "clocks": {"clocks.sm": "1980"}, "gpu_uuid": "GPU-1"}
    fp = fingerprint.from_environment(smi)
    assert fp["gpu_model"] == "NVIDIA H100 80GB HBM3" and fp["driver"] == "580.1" and fp["clocks"] is None
    assert fingerprint.from_environment({"clocks": "GFX 2100 MHz"})["clocks"] is None  # amd-smi's text


def test_check_refuses_a_fingerprint_of_the_wrong_shape():
    assert fingerprint.check({"driver": "580", "clocks": None}, "f.json")
    with pytest.raises(ConfigError, match="f.json: driver is 580"):
        fingerprint.check({"driver": 580}, "f.json")
    with pytest.raises(ConfigError, match="JSON object"):
        fingerprint.check([], "f.json")


# --- the end of a measuring process ---------------------------------------------------------------


def test_a_process_leaves_its_end_fingerprint_beside_its_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(reasons=0x20))
    fake_cuda(monkeypatch, "1")
    env = {**fingerprint.collect(), "gpu": "NVIDIA H100 80GB HBM3"}  # as perf.results.environment has it
    env["fingerprint_why"] = env.pop("why")
    out = str(tmp_path / "night.jsonl")
    fp = fingerprint.write_end(out, env)
    assert fingerprint.read_end(out) == fp and fp["gpu_uuid"] == f"GPU-{PHYSICAL[1][0]}"
    assert fp["clocks"]["end"]["throttle"] == ["sw_thermal_slowdown"]
    assert "throttled: sw_thermal_slowdown (start, end)" in capsys.readouterr().out
    assert fingerprint.read_end(str(tmp_path / "other.jsonl")) is None


def test_a_night_of_several_processes_names_each_throttled_gpu():
    calm = {"gpu_uuid": "GPU-1", "clocks": {"start": {"throttle": []}, "end": {"throttle": ["gpu_idle"]}}}
    hot = {"gpu_uuid": "GPU-2", "clocks": {"start": {"throttle": []}, "end": {"throttle": ["hw_slowdown"]}}}
    fp = fingerprint.combine([calm, hot])
    assert fp["gpu_uuid"] == "GPU-1" and [p["gpu_uuid"] for p in fp["processes"]] == ["GPU-1", "GPU-2"]
    assert fingerprint.throttled(fp) == "throttled: hw_slowdown (end) on GPU-2"
    assert fingerprint.throttled(fingerprint.combine([calm])) is None


# --- property: any visible-device list finds each device's own UUID --------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MANY = [(f"{k:08x}-aaaa-bbbb-cccc-{k:012x}", "NVIDIA H100 80GB HBM3", f"96.00.{k:02d}") for k in range(8)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, len(MANY) - 1), min_size=1, max_size=len(MANY), unique=True),
       st.lists(st.booleans(), min_size=len(MANY), max_size=len(MANY)), st.data())
def test_every_visible_device_is_its_own_physical_device(order, as_uuid, data):
    env = ",".join(f"GPU-{MANY[p][0]}" if as_uuid[k] else str(p) for k, p in enumerate(order))
    index = data.draw(st.integers(0, len(order) - 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake_pynvml(devices=MANY))
        fake_cuda(mp, env, devices=MANY)
        fp = fingerprint.collect(index)
    assert fp["gpu_uuid"] == f"GPU-{MANY[order[index]][0]}" and fp["vbios"] == MANY[order[index]][2]
