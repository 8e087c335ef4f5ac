"""Scratch: compile split_decode for sm_90 on the CPU; registers, spills, shared memory per configuration."""
import contextlib, io, os, re, sys, tempfile, itertools
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(__file__))
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import probe
ptrs = dict(q_ptr="*bf16", k_ptr="*fp8e4nv", v_ptr="*fp8e4nv", table_ptr="*i32", lens_ptr="*i32",
            part_ptr="*bf16", lse_ptr="*fp32", lock_ptr="*i32")
ints = ["s_qt", "s_qh", "s_kb", "s_kp", "s_kh", "s_bt", "s_ot", "s_oh", "kv_heads", "items", "seg_keys"]
for tile, warps, stages, mode, group in itertools.product([32, 64, 128], [2, 4, 8], [2, 3, 4], [0, 3, 4], [7]):
    if group == 4 and mode != 4: continue
    sig = dict(ptrs); sig["out_ptr"] = "*bf16" if mode == 4 else "*fp32"
    sig.update({i: "i32" for i in ints}); sig.update(qk_scale="fp32", v_scale="fp32")
    const = dict(GROUP=group, ROWS=16, MROWS=triton.next_power_of_2(group), D=128, BLOCK=16, TILE=tile, SEGS=8, MODE=mode, STAGES=stages, EVEN=True)
    sig.update(dict.fromkeys(const, "constexpr"))
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(8 + 1)}
    names = list(probe.split_decode.arg_names)
    sig = {n: sig[n] for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in list(ptrs) + ["out_ptr", "s_qt", "s_qh", "s_kh", "s_kb", "s_kp", "s_bt", "s_ot", "s_oh", "seg_keys"]}
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        c = triton.compile(ASTSource(probe.split_decode, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=warps))
    text = log.getvalue()
    used = [l for l in text.splitlines() if "Used" in l or "spill" in l]
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores", text)
    per_sm = min(228 * 1024 // max(c.metadata.shared + 1024, 1), 65536 // (int(regs.group(1)) * 32 * warps) if regs else 99, 32)
    print(f"tile {tile} warps {warps} stages {stages} mode {mode} group {group}: regs {regs.group(1) if regs else '?'} "
          f"spill {spill.group(1) if spill else '?'} shared {c.metadata.shared} -> {per_sm} per SM", flush=True)
