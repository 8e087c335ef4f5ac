"""The environment a measurement ran in, read from the GPU's management library by device UUID.

    python -m perf.fingerprint [--device I] [--end]     # print this machine's fingerprint as JSON

`collect(device_index)` names everything outside the repository that can move a latency: the
GPU (model, UUID, VBIOS), the driver, the CUDA or ROCm runtime torch was built with, torch,
Triton (its version and, where the wheel records one, its git commit), the container image's
digest and the runner, and the GPU's clocks and throttle reasons when the measuring process
starts; `finish(fp)` adds them as it ends, and `throttled(fp)` says "throttled: <reasons>"
when either reading had the GPU slowed down (the nightly and the gate name such a process).

The device is found by UUID, never by index or by parsing a tool's text:
`torch.cuda.get_device_properties(i).uuid` is the UUID of torch's visible device i, whatever
CUDA_VISIBLE_DEVICES holds (indices in any order, or UUIDs), and NVML (`pynvml`, from the
package nvidia-ml-py) or amdsmi is asked for the handle of that UUID. On AMD the UUID HIP
reports and amdsmi's are formatted differently across ROCm releases: both are compared as hex
digits (one may be the other's tail), and the PCI bus address decides where no UUID matches.

Nothing here raises: a library that is missing or fails, a device it does not know, a CPU,
each leaves its fields None and says why in `why` (field -> reason), so a fingerprint is
always written and never wrong. `diff(old, new)` lists what changed between two nights
(the dashboard shows it; the nightly's attribution sorts it into TOOLCHAIN_FIELDS and
ENVIRONMENT_FIELDS). The image digest comes from the variable PERF_IMAGE_DIGEST, which the
GPU workflows set to the digest of the container image they run in (docs/nightly.md).

`limits(fp)` gives the GPU's copy bandwidth and matmul peak (perf/roofline.py), measured once
per GPU and driver and cached by device UUID (`limits_cache`), never on a CPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import socket
import sys

from perf import vendor as vendor_mod

SCHEMA = 1
TOOLCHAIN_FIELDS = ("triton", "triton_commit", "torch")
ENVIRONMENT_FIELDS = ("driver", "vbios", "runtime", "image_digest", "gpu_model", "gpu_uuid", "runner")
FIELDS = ("gpu_model", "gpu_uuid", "vbios", "driver", "runtime", "torch", "triton", "triton_commit",
          "image_digest", "runner", "vendor", "clocks")
IMAGE_DIGEST_ENV = "PERF_IMAGE_DIGEST"  # set by the GPU workflows (perf/ci/workflows.py, docs/nightly.md)
# Beside a results file, the fingerprint its measuring process left as it ended (`write_end`);
# not `.json`: asv reads those in its results folder as its own.
SIDECAR = ".fingerprint"

# NVML's clock event ("throttle") reasons, bit -> name (nvml.h, nvmlClocksEventReason*). The
# first three are settings or an idle GPU, not a slowdown: they never make a process throttled.
NVML_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x100: "display_clock_setting",
    0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x200: "board_limit",
    0x400: "reliability",
}
NOT_THROTTLING = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})


# --- the libraries, each behind one small reader that never raises ---------------------------------


class _Unavailable(Exception):
    """A library or a device could not answer: the message is the reason recorded in `why`."""


def _hex(text) -> str:
    return re.sub(r"[^0-9a-f]", "", str(text).lower())


def _torch_device(device_index: int | None):
    """(torch, index, properties) of the visible device, or _Unavailable on a CPU."""
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise _Unavailable("no GPU measured: Triton's interpreter (TRITON_INTERPRET=1) runs the kernels on "
                           "the CPU")
    if not torch.cuda.is_available():
        raise _Unavailable(f"no GPU visible to torch {torch.__version__} ({sys.executable})")
    index = torch.cuda.current_device() if device_index is None else device_index
    return torch, index, torch.cuda.get_device_properties(index)


def _uuid_of(props) -> str | None:
    """torch's UUID of a device as text (CUDA: 8-4-4-4-12 hex digits), None where torch has none."""
    uuid = getattr(props, "uuid", None)
    return str(uuid) if uuid is not None and str(uuid) else None


def _nvml(uuid: str) -> dict:
    """NVML's answers for the device of `uuid` (torch's form, without the GPU- prefix)."""
    try:
        import pynvml
    except ImportError:
        raise _Unavailable("pynvml is not installed (pip install nvidia-ml-py, the extra `gpu`)") from None
    try:
        pynvml.nvmlInit()
    except Exception as e:  # pynvml.NVMLError and its generated subclasses
        raise _Unavailable(f"NVML did not start: {e}") from None
    try:
        handle, errors = None, []
        for candidate in (uuid, f"GPU-{uuid}", f"MIG-{uuid}"):  # torch drops the prefix NVML wants
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(candidate)
                break
            except Exception as e:
                errors.append(str(e))
        if handle is None:
            raise _Unavailable(f"NVML knows no device of UUID {uuid} ({errors[-1]})")
        out = {"gpu_uuid": _ask(pynvml.nvmlDeviceGetUUID, handle), "gpu_model": _ask(pynvml.nvmlDeviceGetName,
                                                                                        handle),
               "vbios": _ask(pynvml.nvmlDeviceGetVbiosVersion, handle),
               "driver": _ask(pynvml.nvmlSystemGetDriverVersion)}
        out["clocks"] = _nvml_clocks(pynvml, handle)
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: S110 (nothing to do about a failed shutdown)
            pass


def _ask(fn, *args):
    """One library call: its answer (bytes decoded), or a _Failed holding why it failed."""
    try:
        value = fn(*args)
    except Exception as e:
        return _Failed(f"{getattr(fn, '__name__', 'call')}: {e}")
    return value.decode() if isinstance(value, bytes) else value


class _Failed(str):
    """A field whose call failed: the reason, told apart from an answer."""


def _nvml_clocks(pynvml, handle) -> dict:
    sm = _ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    mem = _ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons  # the older name (nvidia-ml-py < 12.535)
    mask = _ask(reasons_fn, handle)
    return _reading(sm, mem, None if isinstance(mask, _Failed) else
                    [name for bit, name in NVML_REASONS.items() if mask & bit]
                    + ([f"unknown_0x{mask & ~sum(NVML_REASONS):x}"] if mask & ~sum(NVML_REASONS) else []),
                    mask if isinstance(mask, _Failed) else None)


def _reading(sm, mem, throttle, throttle_failed=None) -> dict:
    """One clocks reading: {time, sm_mhz, mem_mhz, throttle: [names] | None, why: {...}}."""
    why = {k: str(v) for k, v in (("sm_mhz", sm), ("mem_mhz", mem), ("throttle", throttle_failed))
           if isinstance(v, _Failed)}
    return {"time": _now(), "sm_mhz": None if isinstance(sm, _Failed) else sm,
            "mem_mhz": None if isinstance(mem, _Failed) else mem, "throttle": throttle,
            **({"why": why} if why else {})}


def _amdsmi(uuid: str | None, pci: str | None) -> dict:
    """amdsmi's answers for the device of `uuid` (or, failing that, PCI address `pci`)."""
    try:
        import amdsmi
    except ImportError:
        raise _Unavailable("amdsmi is not importable (ROCm ships it: /opt/rocm/share/amd_smi)") from None
    try:
        amdsmi.amdsmi_init()
    except Exception as e:
        raise _Unavailable(f"amdsmi did not start: {e}") from None
    try:
        try:
            handles = amdsmi.amdsmi_get_processor_handles()
        except Exception as e:
            raise _Unavailable(f"amdsmi listed no devices: {e}") from None
        handle = _amd_match(amdsmi, handles, uuid, pci)
        asic = _ask(amdsmi.amdsmi_get_gpu_asic_info, handle)
        vbios = _ask(amdsmi.amdsmi_get_gpu_vbios_info, handle)
        driver = _ask(amdsmi.amdsmi_get_gpu_driver_info, handle)
        out = {"gpu_uuid": _ask(amdsmi.amdsmi_get_gpu_device_uuid, handle),
               "gpu_model": _field(asic, "market_name"), "vbios": _field(vbios, "version"),
               "driver": _field(driver, "driver_version")}
        gfx = _ask(amdsmi.amdsmi_get_clock_info, handle, amdsmi.AmdSmiClkType.GFX)
        mem = _ask(amdsmi.amdsmi_get_clock_info, handle, amdsmi.AmdSmiClkType.MEM)
        metrics = _ask(amdsmi.amdsmi_get_gpu_metrics_info, handle)
        status = _field(metrics, "throttle_status")
        throttle = None if isinstance(status, _Failed) else ([] if not status or status == "N/A"
                                                              else [f"throttle_status_{status}"])
        out["clocks"] = _reading(_field(gfx, "clk"), _field(mem, "clk"), throttle,
                                 status if isinstance(status, _Failed) else None)
        return out
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: S110
            pass


def _field(answer, key):
    if isinstance(answer, _Failed):
        return answer
    if not isinstance(answer, dict) or key not in answer:
        return _Failed(f"no {key} in the library's answer")
    return answer[key]


def _amd_match(amdsmi, handles, uuid: str | None, pci: str | None):
    """The handle whose UUID is torch's (hex digits; one the other's tail), else whose PCI
    address is torch's; _Unavailable when none is."""
    want = _hex(uuid or "")
    by_pci = None
    for h in handles:
        theirs = _ask(amdsmi.amdsmi_get_gpu_device_uuid, h)
        if want and not isinstance(theirs, _Failed):
            got = _hex(theirs)
            if got and (got == want or got.endswith(want) or want.endswith(got)):
                return h
        bdf = _ask(amdsmi.amdsmi_get_gpu_device_bdf, h)
        if pci and not isinstance(bdf, _Failed) and str(bdf).lower() == pci.lower():
            by_pci = h
    if by_pci is not None:
        return by_pci
    raise _Unavailable(f"amdsmi knows no device of UUID {uuid} (PCI {pci or 'unknown'})")


def _amd_ids(props) -> tuple[str | None, str | None]:
    """(UUID, PCI address) of a HIP device as torch has them. HIP's UUID is 16 bytes of ASCII
    (the device's unique id); where they are printable, that text is the UUID compared."""
    uuid = getattr(props, "uuid", None)
    text = None
    raw = getattr(uuid, "bytes", None)
    if isinstance(raw, bytes):
        decoded = raw.rstrip(b"\0").decode("ascii", "replace")
        text = decoded if decoded and all(c in "0123456789abcdefABCDEF-" for c in decoded) else raw.hex()
    elif uuid is not None:
        text = str(uuid)
    pci = None
    if all(hasattr(props, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        pci = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return text, pci


def _nvml_device(torch, props) -> dict:
    uuid = _uuid_of(props)
    if uuid is None:
        raise _Unavailable(f"torch {torch.__version__} gives no device UUID (torch >= 2.3 does)")
    return _nvml(uuid)


def _amdsmi_device(torch, props) -> dict:
    return _amdsmi(*_amd_ids(props))


# Each vendor's management library (perf/vendor.py Vendor.smi): its answers for torch's device
# (torch, properties), and for a UUID a fingerprint recorded.
_BY_DEVICE = {"nvml": _nvml_device, "amdsmi": _amdsmi_device}
_BY_UUID = {"nvml": _nvml, "amdsmi": lambda uuid: _amdsmi(uuid, None)}


# --- the fingerprint --------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _triton() -> tuple[str | None, str | None, str | None]:
    """(version, commit, why the commit is None): the commit from a `+git<sha>` version (PyTorch's
    triton builds) or pip's direct_url.json (a build from a git URL)."""
    try:
        import triton
    except ImportError as e:
        return None, None, f"triton is not importable ({e})"
    version = getattr(triton, "__version__", None)
    m = re.search(r"\+git([0-9a-f]{7,40})", version or "")
    if m:
        return version, m.group(1), None
    from importlib import metadata

    for dist in ("triton", "pytorch-triton", "pytorch-triton-rocm"):
        try:
            text = metadata.distribution(dist).read_text("direct_url.json")
        except metadata.PackageNotFoundError:
            continue
        commit = (json.loads(text).get("vcs_info") or {}).get("commit_id") if text else None
        if commit:
            return version, commit, None
        return version, None, (f"the installed {dist} {version} records no git commit (a release wheel: its "
                                f"version names it)")
    return version, None, f"no installed distribution of triton {version} records a git commit"


def _empty(why: str) -> dict:
    return {"gpu_model": None, "gpu_uuid": None, "vbios": None, "driver": None, "clocks": None, "_why": why}


def collect(device_index: int | None = None) -> dict:
    """This process's fingerprint for torch's visible device `device_index` (default: the current
    one); clocks["start"] read now, clocks["end"] None until `finish`. Never raises."""
    fp: dict = {"schema": SCHEMA, "time": _now(), "python": sys.executable}
    why: dict[str, str] = {}
    try:
        import torch

        fp["torch"] = torch.__version__
        hip = getattr(torch.version, "hip", None)
        cuda = torch.version.cuda
        fp["runtime"] = f"ROCm {hip}" if hip else (f"CUDA {cuda}" if cuda else None)
        if fp["runtime"] is None:
            why["runtime"] = f"torch {torch.__version__} is a CPU build"
    except ImportError as e:
        fp["torch"], fp["runtime"] = None, None
        why["torch"] = why["runtime"] = f"torch is not importable ({e})"
    fp["triton"], fp["triton_commit"], commit_why = _triton()
    if commit_why:
        why["triton_commit"] = commit_why
    if fp["triton"] is None:
        why["triton"] = commit_why
    fp["image_digest"] = os.environ.get(IMAGE_DIGEST_ENV) or None
    if fp["image_digest"] is None:
        why["image_digest"] = f"{IMAGE_DIGEST_ENV} is not set (the GPU workflows set it: docs/nightly.md)"
    fp["runner"] = os.environ.get("RUNNER_NAME") or socket.gethostname()
    device = _device(device_index)
    fp["vendor"] = device.pop("vendor")
    interpreter = device.pop("interpreter", None)
    if interpreter:
        fp["interpreter"] = interpreter
    device_why = device.pop("_why", None)
    for key in ("gpu_model", "gpu_uuid", "vbios", "driver"):
        value = device.get(key)
        fp[key] = None if value is None or isinstance(value, _Failed) else str(value)
        if fp[key] is None and (isinstance(value, _Failed) or device_why):
            why[key] = str(value) if isinstance(value, _Failed) else device_why
    start = device.get("clocks")
    fp["clocks"] = {"start": start, "end": None}
    if start is None and device_why:
        why["clocks"] = device_why
    fp["why"] = why
    return {k: fp.get(k) for k in FIELDS} | {k: v for k, v in fp.items() if k not in FIELDS}


def _device(device_index: int | None) -> dict:
    """The device part of a fingerprint: vendor, model, UUID, VBIOS, driver, a clocks reading."""
    try:
        torch, index, props = _torch_device(device_index)
    except _Unavailable as e:
        interpreter = f"Triton interpreter on the CPU ({sys.executable})"
        return {"vendor": "cpu", "interpreter": interpreter, **_empty(str(e))}
    except Exception as e:  # a driver that fails under torch: say so, measure nothing wrong
        return {"vendor": None, **_empty(f"torch could not describe device {device_index}: {e}")}
    vendor = vendor_mod.built_for(torch) or vendor_mod.INTERPRETER_VENDOR
    smi = vendor_mod.VENDORS[vendor].smi
    name = getattr(props, "name", None)
    try:
        found = _BY_DEVICE[smi](torch, props)
    except _Unavailable as e:
        uuid = _uuid_of(props)
        if smi == "nvml" and uuid and not uuid.startswith(("GPU-", "MIG-")):
            uuid = f"GPU-{uuid}"  # NVML's form, as when NVML answers
        return {"vendor": vendor, **_empty(str(e)), "gpu_model": name, "gpu_uuid": uuid}
    found["vendor"] = vendor
    if found.get("gpu_model") is None or isinstance(found.get("gpu_model"), _Failed):
        found["gpu_model"] = name or found.get("gpu_model")
    return found


# --- the GPU's measured limits, cached by device UUID -------------------------------------------

LIMITS_CACHE_ENV = "PERF_LIMITS_CACHE"  # the folder of the limits cache (default: ~/.cache/perf/limits)
LIMITS_SCHEMA = 1
LIMITS_WAIT_S = 300.0  # another process measuring the same GPU: seconds to wait for its entry (a few s)


def limits_cache() -> str:
    """The folder of the limits cache: one `<UUID>.json` per GPU, `$PERF_LIMITS_CACHE` if set."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get(LIMITS_CACHE_ENV) or os.path.join(base, "perf", "limits")


def _cached_limits(path: str, fp: dict) -> dict | None:
    """The cache entry at `path` when it is one for this GPU under this driver; None otherwise (a
    cache: an entry that is missing, unreadable or another driver's is measured again)."""
    from perf import files
    from perf.errors import ConfigError

    if not os.path.exists(path):
        return None
    try:
        doc = files.load_json(path, "a cached limits entry", "it is measured again")
    except ConfigError as e:
        print(f"note: {e}", file=sys.stderr, flush=True)
        return None
    from perf import roofline

    same = doc.get("schema") == LIMITS_SCHEMA and doc.get("gpu_uuid") == fp.get("gpu_uuid") \
        and doc.get("driver") == fp.get("driver")
    return doc if same and roofline.limits_from({"limits": doc}) is not None else None


def limits(fp: dict, device_index: int | None = None, measure=None) -> tuple[dict | None, str | None]:
    """(limits, None) of fingerprint `fp`'s GPU: its copy bandwidth and bf16 matmul peak
    (perf/roofline.py), read from the cache by device UUID where an entry of the same driver is
    there, else measured now (`measure`, default roofline.measure_limits) and cached; the record
    is {copy_tb_s, matmul_tflop_s, measured (time), cached (bool)}. (None, why) without a GPU
    (Triton's interpreter) or when measuring fails: never a number it did not measure. Never raises."""
    from perf import files, roofline

    if fp.get("vendor") not in vendor_mod.VENDORS or fp.get("interpreter"):
        return None, (fp.get("why") or {}).get("gpu_uuid") or "no GPU measured"
    uuid = fp.get("gpu_uuid")
    device = "cuda" if device_index is None else f"cuda:{device_index}"
    measure = measure or roofline.measure_limits
    name = re.sub(r"[^A-Za-z0-9._-]", "_", uuid or "")
    try:
        if not uuid:  # nothing to cache by: measured for this run alone
            return _limits_record(measure(device), _now(), False), None
        path = os.path.join(limits_cache(), name + ".json")
        # One process measures a GPU at a time (two copies at once would halve each one's bandwidth).
        with files.lock(os.path.join(files.LOCK_DIR, f"limits-{name}.lock"), timeout=LIMITS_WAIT_S,
                        what="measuring this GPU's limits"):
            entry = _cached_limits(path, fp)  # under the lock: another process may have just measured
            if entry is not None:
                return _limits_record(roofline.limits_from({"limits": entry}), entry["measured"], True), None
            found, when = measure(device), _now()
            try:
                files.write_json(path, {"schema": LIMITS_SCHEMA, "gpu_uuid": uuid,
                                        "gpu_model": fp.get("gpu_model"), "driver": fp.get("driver"),
                                        "measured": when,
                                        "copy_tb_s": found.copy_tb_s, "matmul_tflop_s": found.matmul_tflop_s})
            except Exception as e:  # a cache that cannot be written: measured again next time
                print(f"note: the GPU's limits are not cached ({e})", file=sys.stderr, flush=True)
            return _limits_record(found, when, False), None
    except Exception as e:  # out of memory, a driver that fails, another process measuring for long
        return None, f"the limits were not measured: {type(e).__name__}: {e}".splitlines()[0][:300]


def _limits_record(found, when: str, cached: bool) -> dict:
    """What a results environment holds of the limits (perf.roofline.Limits and when)."""
    return {"copy_tb_s": found.copy_tb_s, "matmul_tflop_s": found.matmul_tflop_s, "measured": str(when),
            "cached": cached}


def read_clocks(fp: dict) -> dict | None:
    """A clocks reading now, of the device of fingerprint `fp` (by its UUID); None without one."""
    uuid = fp.get("gpu_uuid")
    if not uuid or fp.get("vendor") not in vendor_mod.VENDORS:
        return None
    try:
        found = _BY_UUID[vendor_mod.VENDORS[fp["vendor"]].smi](uuid)
        return found.get("clocks")
    except _Unavailable as e:
        return {"time": _now(), "sm_mhz": None, "mem_mhz": None, "throttle": None, "why": {"clocks": str(e)}}


def finish(fp: dict) -> dict:
    """`fp` with clocks["end"] read now (the measuring process ends); a new dict."""
    clocks = dict(fp.get("clocks") or {"start": None})
    clocks["end"] = read_clocks(fp)
    return {**fp, "clocks": clocks}


def throttle_reasons(fp: dict) -> list[str]:
    """The slowdown reasons of `fp`'s clocks readings (idle and clock settings are none), each
    with the readings it was in: `hw_slowdown (start, end)`; of each of its `processes` (a
    night measured on several GPUs: `combine`) with the GPU's UUID."""
    if fp.get("processes"):
        return [f"{reason} on {p.get('gpu_uuid') or 'an unknown GPU'}" for p in fp["processes"]
                for reason in throttle_reasons({**p, "processes": None})]
    clocks = fp.get("clocks") if isinstance(fp.get("clocks"), dict) else {}
    seen: dict[str, list[str]] = {}
    for when in ("start", "end"):
        for reason in (clocks.get(when) or {}).get("throttle") or []:
            if reason not in NOT_THROTTLING:
                seen.setdefault(reason, []).append(when)
    return [f"{reason} ({', '.join(whens)})" for reason, whens in seen.items()]


def throttled(fp: dict) -> str | None:
    """"throttled: <reasons>" when the GPU was slowed down as the process started or ended."""
    reasons = throttle_reasons(fp)
    return f"throttled: {', '.join(reasons)}" if reasons else None


def sidecar(results_path: str) -> str:
    """Where the measuring process of `results_path` leaves its fingerprint as it ends."""
    return results_path + SIDECAR


def write_end(results_path: str, env: dict) -> dict:
    """As a measuring process ends: its fingerprint (the one its results header holds, `env`)
    with the clocks read again, written beside its results; says so when it was throttled."""
    from perf import files

    fp = finish(from_environment(env) | {"why": env.get("fingerprint_why") or {}})
    files.write_json(sidecar(results_path), fp)
    if throttled(fp):
        print(f"{results_path}: the GPU was {throttled(fp)}", flush=True)
    return fp


def read_end(results_path: str) -> dict | None:
    """The fingerprint `write_end` left beside `results_path`, None where there is none."""
    from perf import files

    path = sidecar(results_path)
    if not os.path.exists(path):
        return None
    return check(files.load_json(path, "a measuring process's fingerprint", "measure again"), path)


def combine(fps: list[dict]) -> dict:
    """The fingerprint of a night measured by several processes (one per GPU or runner): the
    first one's, with every process's UUID, clocks and throttling under `processes`."""
    first = dict(fps[0])
    first["processes"] = [{"gpu_uuid": fp.get("gpu_uuid"), "runner": fp.get("runner"),
                           "clocks": fp.get("clocks")} for fp in fps]
    return first


def from_environment(env: dict) -> dict:
    """The fingerprint a results file's environment holds (perf.results.environment), also of
    files written before fingerprints (their missing fields None; `gpu` is the model there)."""
    fp = {k: env.get(k) for k in FIELDS}
    if fp["gpu_model"] is None:
        fp["gpu_model"] = env.get("gpu")
    if not isinstance(fp["clocks"], dict) or "start" not in fp["clocks"]:
        fp["clocks"] = None  # nvidia-smi's text fields or amd-smi's text of older files
    return fp


def diff(old: dict | None, new: dict | None) -> dict[str, tuple]:
    """Field -> (old, new) of every field of FIELDS but the clocks that differs."""
    old, new = old or {}, new or {}
    return {k: (old.get(k), new.get(k)) for k in FIELDS if k != "clocks" and old.get(k) != new.get(k)}


def check(doc, path: str) -> dict:
    """A fingerprint read back (fingerprint.json of the data branch): a JSON object whose fields
    are text or null (clocks an object); ConfigError naming the file and field otherwise."""
    from perf.errors import ConfigError

    fix = "it is written by `python -m perf nightly save`; restore it from the data branch's history"
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a fingerprint must be a JSON object; {fix}")
    for key in FIELDS:
        value = doc.get(key)
        ok = isinstance(value, dict) if key == "clocks" else isinstance(value, str)
        if value is not None and not ok:
            what = "an object" if key == "clocks" else "text"
            raise ConfigError(f"{path}: {key} is {value!r}, expected {what} or null; {fix}")
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.fingerprint", description=__doc__.split("\n")[0])
    p.add_argument("--device", type=int, default=None, help="torch's visible device index (default: current)")
    p.add_argument("--end", action="store_true", help="also read the clocks again, as a process ends")
    args = p.parse_args(argv)
    fp = collect(args.device)
    if args.end:
        fp = finish(fp)
    print(json.dumps(fp, indent=1, sort_keys=True))
    print(throttled(fp) or "not throttled", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from perf.process import entry

    entry(main)
