"""Static resource metrics of a compiled kernel: what ptxas and the AMDGCN metadata report.

NVIDIA: `ptxas -v` (the one inside the triton wheel, run on the PTX triton produced, with
the flags triton uses) prints registers per thread, stack frame and spill bytes, and info
C7515 when it serializes the kernel's wgmma (Hopper's asynchronous matrix instructions):
then every wgmma waits for the previous one, which no spill count shows. AMD: the
AMDGCN text carries a YAML metadata block (`.vgpr_count`, `.sgpr_count`,
`.vgpr_spill_count`, `.sgpr_spill_count`, `.private_segment_fixed_size`) and comment
lines (`; NumVgprs:`, `; NumAgprs:`, `; Occupancy:`). Shared memory (LDS on AMD) is
`metadata.shared`: triton allocates it dynamically at launch, so the binaries' static
sizes read 0.

Occupancy is computed here from the hardware facts of perf/vendor.py TARGETS, because
neither compiler knows the dynamic shared memory: resident warps per SM on NVIDIA (the rules
of the CUDA occupancy calculator), waves per SIMD on AMD (the compiler's register-limited
`; Occupancy:` capped by what the LDS allows).
"""

from __future__ import annotations

import re
import subprocess
import tempfile

from perf.vendor import TARGETS, VENDORS, Target

# Bump when a parser or formula changes: cached metrics of older versions are recomputed.
METRICS_VERSION = 6  # 4: compile_cpu_s; 5: instruction counts; 6: one target per process (build.TargetPools)


# The hardware facts of each compile target, for planning "as if on" it and for occupancy: the
# records of perf/vendor.py TARGETS (each cites its sources there).
TargetFacts = Target
TARGET_FACTS: dict[str, Target] = TARGETS

# Instruction counts by kind (`count_instructions`, below)
INSTRUCTION_COUNTS = ("global_loads", "global_stores", "shared_loads", "shared_stores", "tensor_ops")
# What the report calls each metric, its unit, and which are gated (the rest are recorded).
NVIDIA_METRICS = ("registers", "spill_stores", "spill_loads", "stack_frame", "wgmma_serialized",
                  "shared_memory", "occupancy", "compile_time_s", "compile_cpu_s")
AMD_METRICS = ("registers", "arch_vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch",
               "shared_memory", "occupancy", "compile_time_s", "compile_cpu_s")
UNITS = {
    "registers": "regs/thread", "arch_vgprs": "VGPRs", "agprs": "AGPRs", "sgprs": "SGPRs",
    "spill_stores": "B", "spill_loads": "B", "stack_frame": "B", "vgpr_spills": "VGPRs",
    "sgpr_spills": "SGPRs", "scratch": "B/lane", "shared_memory": "B", "compile_time_s": "s",
    "compile_cpu_s": "CPU s", **dict.fromkeys(INSTRUCTION_COUNTS, "instructions"),
    "wgmma_serialized": "0/1",
}


# Static instruction counts of a kernel's code by kind (`count_instructions`): what the "why"
# section compares between base and head (perf/why.py). NVIDIA counts the PTX Triton emits
# (before ptxas: its `ld.global` / `cp.async` are the loads a kernel issues per its code path,
# not per execution), AMD the AMDGCN. Global loads include asynchronous copies into shared
# memory (cp.async, TMA's cp.async.bulk.tensor; AMD's buffer loads); tensor-core ops are mma /
# wgmma (NVIDIA) and v_mfma (AMD).
# Qualifiers may come before an opcode's state space: ld.volatile.global, st.relaxed.gpu.global.
_PTX_KINDS = {
    "global_loads": r"ld(?:\.\w+)*?\.global|cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global"
                    r"|cp\.async\.bulk\.tensor",
    "global_stores": r"st(?:\.\w+)*?\.global|red(?:\.\w+)*?\.global|atom(?:\.\w+)*?\.global",
    "shared_loads": r"ld(?:\.\w+)*?\.shared|ldmatrix",
    "shared_stores": r"st(?:\.\w+)*?\.shared|stmatrix",
    "tensor_ops": r"mma\.sync|wgmma\.mma_async",
}
_AMDGCN_KINDS = {
    "global_loads": r"global_load|buffer_load",
    "global_stores": r"global_store|buffer_store|global_atomic|buffer_atomic",
    "shared_loads": r"ds_read|ds_load",
    "shared_stores": r"ds_write|ds_store",
    "tensor_ops": r"v_mfma|v_smfmac",
}


def count_instructions(text: str, vendor: str) -> dict[str, int]:
    """How many instructions of each kind of INSTRUCTION_COUNTS the PTX (NVIDIA) or AMDGCN
    (AMD) text holds; a predicate (`@%p1`) before the opcode is skipped."""
    kinds = _PTX_KINDS if vendor == "nvidia" else _AMDGCN_KINDS
    patterns = {k: re.compile(rf"^\s*(?:@!?%\w+\s+)?(?:{p})") for k, p in kinds.items()}
    out = dict.fromkeys(INSTRUCTION_COUNTS, 0)
    for line in text.splitlines():
        for kind, pattern in patterns.items():
            if pattern.match(line):
                out[kind] += 1
                break
    return out


def occupancy_unit(vendor: str) -> str:
    return VENDORS[vendor].occupancy_unit


# ---------------------------------------------------------------------------- NVIDIA

_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
# ptxas info C7515 (the ptxas of the triton 3.6 wheel, CUDA 12.8): "Potential Performance
# Loss: wgmma.mma_async instructions are serialized due to <reason>". Seen on a prefill
# configuration of ours near 255 registers (sm_90, 2026-11-24): a wait after each of the 16
# wgmma of a KV tile, and no spill at all.
_PTXAS_WGMMA_SERIAL = re.compile(r"wgmma\.mma_async instructions are serialized")


def parse_ptxas(text: str) -> dict[str, int]:
    """Registers, stack frame, spill bytes and wgmma serialization (1 if ptxas reported it)
    from `ptxas -v` output (one entry function)."""
    frame = _PTXAS_FRAME.search(text)
    regs = _PTXAS_REGS.search(text)
    if not frame or not regs:
        raise ValueError(f"ptxas -v output without register/spill lines:\n{text.strip()[:500]}")
    return {"registers": int(regs.group(1)), "stack_frame": int(frame.group(1)),
            "spill_stores": int(frame.group(2)), "spill_loads": int(frame.group(3)),
            "wgmma_serialized": int(bool(_PTXAS_WGMMA_SERIAL.search(text)))}


def run_ptxas(ptx: str, capability: int, enable_fp_fusion: bool = True) -> str:
    """`ptxas -v` from the triton wheel with the flags triton's own cubin step uses."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as src, \
            tempfile.NamedTemporaryFile(suffix=".cubin") as out:
        src.write(ptx)
        src.flush()
        cmd = [get_ptxas(capability).path, "-lineinfo", "-v", *([] if enable_fp_fusion else ["--fmad=false"]),
               f"--gpu-name={sm_arch_from_capability(capability)}", src.name, "-o", out.name]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ptxas failed ({done.returncode}): {done.stderr.strip()[:500]}")
    return done.stdout + done.stderr


def nvidia_occupancy(registers: int, shared: int, num_warps: int, facts: TargetFacts) -> int:
    """Resident warps per SM: the CUDA occupancy calculator's register/shared/warp limits."""
    regs_per_warp = -(-registers * facts.warp_size // facts.register_granule) * facts.register_granule
    by_regs = facts.registers_per_unit // max(regs_per_warp * num_warps, 1)
    by_shared = facts.shared_per_unit // (shared + facts.shared_reserved_per_block)
    by_warps = facts.max_warps_per_unit // num_warps
    return min(by_regs, by_shared, by_warps, facts.max_blocks_per_unit) * num_warps


# ---------------------------------------------------------------------------- AMD

_AMD_COMMENTS = {"arch_vgprs": r"; NumVgprs: (\d+)", "agprs": r"; NumAgprs: (\d+)",
                 "compiler_occupancy": r"; Occupancy: (\d+)"}


def parse_amdgcn(text: str) -> dict[str, int]:
    """VGPR/AGPR/SGPR counts, spills, scratch and the compiler's occupancy from AMDGCN text."""
    lines = text.splitlines()
    directives = (".amdgpu_metadata", ".end_amdgpu_metadata")
    marks = [i for i, line in enumerate(lines) if line.strip() in directives]
    if len(marks) != 2:
        raise ValueError("AMDGCN without one .amdgpu_metadata block")
    import yaml  # here: perf/why.py reads this module's names on a bare python3 (the PR comment)

    meta = yaml.safe_load("\n".join(lines[marks[0] + 1:marks[1]]))
    kernels = meta.get("amdhsa.kernels") or []
    if len(kernels) != 1:
        raise ValueError(f"expected one kernel in the AMDGCN metadata, found {len(kernels)}")
    k = kernels[0]
    out = {
        "registers": int(k[".vgpr_count"]),  # arch VGPRs + AGPRs as allocated: what limits waves
        "sgprs": int(k[".sgpr_count"]),
        "vgpr_spills": int(k.get(".vgpr_spill_count", 0)),
        "sgpr_spills": int(k.get(".sgpr_spill_count", 0)),
        "scratch": int(k.get(".private_segment_fixed_size", 0)),
        "static_lds": int(k.get(".group_segment_fixed_size", 0)),
    }
    for name, pattern in _AMD_COMMENTS.items():
        m = re.search(pattern, text)
        if not m:
            raise ValueError(f"AMDGCN without a '{pattern.split(':')[0][2:]}:' line")
        out[name] = int(m.group(1))
    if ".agpr_count" in k:
        out["agprs"] = int(k[".agpr_count"])
    return out


def amd_occupancy(compiler_occupancy: int, lds: int, num_warps: int, facts: TargetFacts) -> int:
    """Waves per SIMD: the compiler's register-limited figure, capped by the dynamic LDS."""
    if lds:
        workgroups = facts.shared_per_unit // lds
        by_lds = workgroups * num_warps // facts.simds_per_unit
        return min(compiler_occupancy, by_lds)
    return compiler_occupancy


# ---------------------------------------------------------------------------- both


def metrics_of(compiled, target_name: str, compile_time_s: float, ptxas_log: str = "",
               compile_cpu_s: float | None = None) -> dict[str, float]:
    """All metrics of one `triton.compile` result for `target_name` (a TARGET_FACTS key).

    `compile_time_s`: wall seconds of the compile; `compile_cpu_s`: CPU seconds of the
    compiling process and the tools it ran (ptxas), what the gate judges (perf/static/build.py).

    `ptxas_log`: what triton's own cubin step printed with TRITON_DUMP_PTXAS_LOG=1; without
    it (or if its format changed) ptxas runs again on the PTX with the same flags.
    """
    facts = TARGET_FACTS[target_name]
    md = compiled.metadata
    shared = int(md.shared)
    if facts.vendor == "nvidia":
        try:
            m = parse_ptxas(ptxas_log)
        except ValueError:
            capability = int(target_name.removeprefix("sm_"))
            m = parse_ptxas(run_ptxas(compiled.asm["ptx"], capability, md.enable_fp_fusion))
        m["occupancy"] = nvidia_occupancy(m["registers"], shared, md.num_warps, facts)
        m.update(count_instructions(compiled.asm["ptx"], "nvidia"))
    else:
        m = parse_amdgcn(compiled.asm["amdgcn"])
        m["occupancy"] = amd_occupancy(m.pop("compiler_occupancy"), shared + m.pop("static_lds"),
                                       md.num_warps, facts)
        m.update(count_instructions(compiled.asm["amdgcn"], "amd"))
    m["shared_memory"] = shared
    m["compile_time_s"] = round(compile_time_s, 3)
    if compile_cpu_s is not None:
        m["compile_cpu_s"] = round(compile_cpu_s, 3)
    return m
