"""What a vendor is, and the vendor a command works for: nvidia | amd, checked against this GPU.

`VENDORS` is the one registry of vendors (`Vendor`: Triton backend, runtime, management
library, visible-devices variable, what its containers need) and `TARGETS` the one registry of
compile targets (`Target`: what Triton compiles for, the limits a kernel is held to there, the
hardware facts of the product it stands for). Everything in perf/ that names a vendor or a
target reads them here; thresholds.yaml chooses which targets the static gate compiles and
keeps the thresholds, runners and images. The kernels keep their own facts (kernels/inputs.py:
the fp8 formats and the vendors the planners know; kernels/paged_attention/heuristics.py: the
SM/CU counts they assume), referred to here by name; tests/stages/test_vendor.py keeps the two
in agreement. Stdlib only: the PR comment reads it on a bare runner.

Every command resolves `--vendor` here: an unknown name, or a vendor other than the GPU
this machine has, is a `ConfigError` (one line, exit 2) instead of thresholds of the wrong
vendor applied silently. Without a GPU (Triton's interpreter) the kernels run NVIDIA's
heuristics, so that is the vendor whose thresholds a CPU self-test uses unless told.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A compile target: what Triton compiles for (its vendor's backend, `arch`, `warp_size`),
    the limits the static gate holds a kernel to there, and the hardware facts of the product
    it stands for, for planning "as if on" it and for occupancy (perf/static/metrics.py)."""

    name: str  # sm_90, gfx942: how thresholds.yaml, findings and reports name it
    vendor: str  # a key of VENDORS
    arch: int | str  # what Triton's GPUTarget takes: 90 | "gfx942"
    device_name: str  # the product the target stands for (planning only)
    num_sms: int  # SMs / CUs of that product (heuristics size grids with it)
    warp_size: int
    max_warps_per_unit: int  # resident warps per SM (NVIDIA) / waves per SIMD (AMD)
    registers_per_unit: int  # 32-bit registers per SM (NVIDIA) / VGPRs per lane per SIMD (AMD)
    register_granule: int  # allocation unit: registers per warp (NVIDIA) / VGPRs per lane (AMD)
    shared_per_unit: int  # shared memory per SM (NVIDIA) / LDS per CU (AMD), bytes
    shared_reserved_per_block: int  # bytes the driver reserves per block (NVIDIA: 1 KiB)
    max_blocks_per_unit: int  # resident blocks per SM (NVIDIA); 0 = no separate limit
    simds_per_unit: int  # SIMDs per CU (AMD); 1 on NVIDIA
    max_registers_per_thread: int  # more cannot be allocated to one thread
    fp8: str  # its native fp8 KV-cache format: a name of kernels.inputs.FP8_FORMATS (fp8_dtype_for)
    source: str

    @property
    def backend(self) -> str:
        return VENDORS[self.vendor].backend

    @property
    def max_shared_memory_bytes(self) -> int:
        """Shared memory (LDS) one block (workgroup) may use: the SM's (CU's) less what the driver
        reserves per block; more cannot launch."""
        return self.shared_per_unit - self.shared_reserved_per_block


OCP, FNUZ = "OCP e4m3", "FNUZ e4m3"  # kernels.inputs.FP8_FORMATS' names of the two fp8 formats
# Sources: NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability" (compute capabilities 8.0, 9.0, 10.0) and the CUDA Occupancy Calculator's
# allocation rules (registers in units of 256 per warp, 1 KiB reserved shared memory per
# block, 255 registers per thread on every compute capability); SM counts from the A100/H100
# SXM5 datasheets. sm_90 and sm_100: 227 KiB of shared memory per block (228 KiB per SM less
# the 1 KiB reserved). sm_100: NVIDIA Blackwell Tuning Guide ("Unified Shared Memory/L1/Texture
# Cache": 228 KB of shared memory per SM, 1 KB reserved per block, "the B200 GPU enables a single
# thread block to address up to 227 KB") and NVIDIA CCCL libcudacxx cuda/__device/arch_traits.h
# traits<sm_100> (the same, 32 blocks and 2048 threads per SM, 64 K registers per SM, 255 per
# thread); Triton 3.6 compiles it as sm_100a with the ptxas-blackwell of its wheel; B200's 148
# SMs (2 dies x 74) from Chips and Cheese's "Nvidia's B200" (2025), NVIDIA's B200 pages giving
# no SM count. AMD: "AMD Instinct MI300 CDNA3 ISA" and ROCm's "GPU hardware specifications"
# table (8 waves per SIMD, 512 VGPRs per lane in wave64 with the unified AGPR file: 256 arch
# VGPRs + 256 AGPRs, granule 8, LDS 64 KiB per CU on CDNA2/3, all of it addressable by one
# workgroup, and 160 KiB on CDNA4, MI355X/MI350X: 256 CUs, wavefront 64, VGPR file 512 KiB per
# CU); LLVM's AMDGPU backend rejects more than 163840 bytes of LDS per workgroup on gfx950 (test
# "local memory exceeds limit (163840)"); CU counts of MI250X (per GCD), MI300X and MI355X.
# gfx950's 8 waves per SIMD, 4 SIMDs per CU and 512 registers per thread are CDNA3's, not
# confirmed from a CDNA4 ISA guide here (the AMD occupancy reads the compiler's own
# `; Occupancy:`, which knows gfx950). fp8: kernels/inputs.py FNUZ_ARCHS (FNUZ on CDNA3).
_TARGETS = (
    # name, vendor, arch, product, SMs/CUs, warp, warps/unit, registers/unit, granule, shared/unit,
    # reserved/block, blocks/unit, SIMDs/unit, registers/thread, fp8, source
    Target("sm_80", "nvidia", 80, "NVIDIA A100-SXM4-80GB", 108, 32, 64, 65536, 256, 167936, 1024, 32, 1, 255,
           OCP, "CUDA C++ Programming Guide, compute capability 8.0"),
    Target("sm_90", "nvidia", 90, "NVIDIA H100 80GB HBM3", 132, 32, 64, 65536, 256, 233472, 1024, 32, 1, 255,
           OCP, "CUDA C++ Programming Guide, compute capability 9.0"),
    Target("sm_100", "nvidia", 100, "NVIDIA B200", 148, 32, 64, 65536, 256, 233472, 1024, 32, 1, 255,
           OCP, "Blackwell Tuning Guide; CCCL arch_traits.h sm_100; B200: 148 SMs"),
    Target("gfx90a", "amd", "gfx90a", "AMD Instinct MI250X", 110, 64, 8, 512, 8, 65536, 0, 0, 4, 512,
           OCP, "AMD CDNA2 ISA; ROCm GPU hardware specifications"),
    Target("gfx942", "amd", "gfx942", "AMD Instinct MI300X", 304, 64, 8, 512, 8, 65536, 0, 0, 4, 512,
           FNUZ, "AMD CDNA3 ISA; ROCm GPU hardware specifications"),
    Target("gfx950", "amd", "gfx950", "AMD Instinct MI355X", 256, 64, 8, 512, 8, 163840, 0, 0, 4, 512,
           OCP, "ROCm GPU hardware specifications (MI355X: 256 CUs, LDS 160 KiB)"),
)
TARGETS: dict[str, Target] = {t.name: t for t in _TARGETS}


@dataclass(frozen=True)
class Vendor:
    """Everything the harness must know of a GPU vendor besides its targets and its kernels."""

    name: str  # nvidia | amd: thresholds.yaml's section, --vendor, a result's `vendor`
    backend: str  # Triton's backend of its targets, and what torch.version names a build for it by
    runtime: str  # that runtime as people name it (CUDA, ROCm)
    # The target whose product the kernels' heuristics assume when neither a device nor a hint
    # gives the SM/CU count (kernels/paged_attention/heuristics.py DEFAULT_NUM_SMS)
    default_target: str
    smi: str  # the management library the fingerprint reads by device UUID (perf/fingerprint.py)
    smi_packages: tuple[str, ...]  # what a GPU job pip-installs for it (perf/ci/jobs.py); () = none
    visible_devices: str  # the variable that confines a process to some GPUs (perf/devices.py)
    # A runner's GPU-isolation variables, forwarded into the job's container when
    # thresholds.yaml's runners.isolation_env does not list them (docs/workflows.md, "Containers")
    isolation_env: tuple[str, ...]
    occupancy_unit: str  # what its compiler's occupancy counts (perf/static/metrics.py reads it so)
    spill_metrics: tuple[str, ...]  # its compile metrics that count spills (the static gate's "new spills")
    # What `docker run` options must name for the runtime to work in a container, and the
    # options that do (the fix a refused runners.container_options names)
    container_needs: tuple[str, ...] = ()
    container_options: str = ""

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(t for t in TARGETS.values() if t.vendor == self.name)


# nvidia-ml-py (`import pynvml`, the extra `gpu` of pyproject.toml) declares no dependencies, so
# it moves nothing of the image; 12.535 has NVML's current clock-event names. amdsmi is no package
# of an index: ROCm ships it (perf/ci/jobs.py AMDSMI_FROM_ROCM installs it from the image's ROCm).
# The ROCm runtime needs /dev/kfd and /dev/dri and the video group (AMD's ROCm container docs).
VENDORS: dict[str, Vendor] = {v.name: v for v in (
    Vendor("nvidia", "cuda", "CUDA", default_target="sm_90",
           smi="nvml", smi_packages=("nvidia-ml-py>=12.535",),
           visible_devices="CUDA_VISIBLE_DEVICES", isolation_env=("CUDA_VISIBLE_DEVICES",),
           occupancy_unit="warps/SM", spill_metrics=("spill_stores", "spill_loads")),
    Vendor("amd", "hip", "ROCm", default_target="gfx942", smi="amdsmi", smi_packages=(),
           visible_devices="HIP_VISIBLE_DEVICES",
           isolation_env=("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"),
           occupancy_unit="waves/SIMD", spill_metrics=("vgpr_spills", "sgpr_spills"),
           container_needs=("/dev/kfd", "/dev/dri", "video"),
           container_options="--device=/dev/kfd --device=/dev/dri --group-add video"),
)}
# Every vendor's spill metrics, in VENDORS order (the static report's "spilling" column)
SPILL_METRICS = tuple(m for v in VENDORS.values() for m in v.spill_metrics)
INTERPRETER_VENDOR = "nvidia"  # the interpreter runs NVIDIA's decision trees (kernels' current_vendor)
CPU_SUITES = ("smoke",)  # the only suites sized for Triton's interpreter (seconds, not hours)


def unknown_target(name: str) -> str:
    """Why a target name cannot be planned or compiled for, and the fix."""
    return (f"no hardware facts for {name!r} (known: {', '.join(TARGETS)}); add it to perf/vendor.py TARGETS "
            f"or use a known name")


def built_for(torch) -> str | None:
    """The vendor whose runtime this torch was built with (torch.version.cuda, torch.version.hip:
    its backend), None for a CPU build."""
    return next((v.name for v in VENDORS.values() if getattr(torch.version, v.backend, None)), None)


# The device nodes without which neither runtime finds a GPU: NVIDIA's driver (Linux; WSL's is
# /dev/dxg) and ROCm's kernel driver (AMD's ROCm install guide); noxfile.py's _gpu_present asks for
# the same ones (it runs before the env that holds perf exists).
GPU_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def gpu_nodes() -> bool:
    """Whether a GPU driver's device node exists here (torch could see a GPU only then)."""
    return any(os.path.exists(p) for p in GPU_NODES)


def on_gpu() -> bool:
    """A CUDA/HIP device runs the kernels (not Triton's interpreter). The interpreter asked for,
    or a machine without a GPU's device nodes, is decided without torch (its import costs seconds
    in every process that asks)."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or not gpu_nodes():
        return False
    import torch

    return torch.cuda.is_available()


def detect() -> str | None:
    """nvidia | amd for this machine's GPU, None without one (or under the interpreter)."""
    if not on_gpu():
        return None
    import torch

    return built_for(torch) or INTERPRETER_VENDOR


def gpu_arch(vendor: str) -> tuple[str, int, str]:
    """(architecture, SM/CU count, device name) of this process's GPU, the architecture as the
    compile targets of thresholds.yaml write it: "90" for sm_90 on NVIDIA, "gfx942" on AMD."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if VENDORS[vendor].backend == "hip":
        arch = str(getattr(props, "gcnArchName", "")).split(":")[0]
    else:
        arch = f"{props.major}{props.minor}"
    return arch, props.multi_processor_count, props.name


def check_name(vendor: str, what: str = "--vendor") -> str:
    from perf.errors import ConfigError

    if vendor not in VENDORS:
        raise ConfigError(f"{what} {vendor}: unknown vendor; use one of {', '.join(VENDORS)}")
    return vendor


def resolve(given: str | None, *, cpu_default: str | None = INTERPRETER_VENDOR) -> str | None:
    """`given` (validated) or this machine's vendor; refuses a vendor the GPU here is not.

    Without a GPU: `given`, else `cpu_default` (None where the caller must be told).
    """
    from perf.errors import ConfigError

    if given is not None:
        check_name(given)
    found = detect()
    if found is not None and given is not None and given != found:
        import torch

        raise ConfigError(f"--vendor {given}: this machine's GPU is {found} "
                          f"({torch.cuda.get_device_name()}); drop --vendor or run on an {given} GPU")
    return given or found or cpu_default


def require_gpu(what: str, suite: str | None = None, *, cpu_ok: bool = False,
                allow: str | None = None) -> bool:
    """The one rule of every command that measures: a GPU-sized run never starts on a CPU.

    Returns whether a GPU is here. Without one, a run of a CPU-sized suite (`suite` in
    CPU_SUITES) or one the caller allows (`cpu_ok`: e.g. `--allow-cpu` given) goes on in
    Triton's interpreter; anything else is a ConfigError naming the fix: `--suite smoke`
    where `suite` is given, and `allow` (the flag that would allow it) where there is one.
    perf/cli.py applies it to every measuring command after their names are checked.
    """
    from perf.errors import ConfigError

    if on_gpu():
        return True
    if cpu_ok or (suite is not None and suite in CPU_SUITES):
        return False
    if suite is None:
        raise ConfigError(f"no GPU here: {what} measures on a CUDA or ROCm GPU, which Triton's interpreter "
                          f"cannot stand in for; run it on a GPU machine")
    small = CPU_SUITES[0]
    also = f", or pass {allow} to run it anyway" if allow else ""
    raise ConfigError(f"no GPU here: {what} --suite {suite} is sized for a GPU (Triton's interpreter would "
                      f"take hours); run it on a GPU machine, or use the {small} suite (--suite {small})"
                      f"{also}")


def interpreter_without_gpu() -> None:
    """Run kernels in Triton's interpreter when there is no GPU (to be called before triton
    is first imported: it reads TRITON_INTERPRET once)."""
    import sys

    if "TRITON_INTERPRET" in os.environ or "triton" in sys.modules:  # decided already
        return
    if gpu_nodes():
        import torch

        if torch.cuda.is_available():
            return
    os.environ["TRITON_INTERPRET"] = "1"
