"""Compile the register decode's forms (W:PV_FP8:DEPTH:KEYS[:ASYNC[:FENCE]]) for sm_90 on the CPU: registers, spills,
PTX instruction counts. Ran as `.fi/reg/compile.py` beside the probe as `probe.py` (runs from this folder too); output: compile-sm90.txt."""
import contextlib, importlib.util, io, os, re, sys
from types import SimpleNamespace
import torch, triton
sys.path.insert(0, os.getcwd())
os.environ.update(TRITON_ALWAYS_COMPILE="1", TRITON_DUMP_PTXAS_LOG="1")
from perf.static import plan
from perf.thresholds import load_thresholds
here = os.path.dirname(os.path.abspath(__file__))
_path = next(os.path.join(here, f) for f in ("probe.py", "register-decode-probe.py")
             if os.path.exists(os.path.join(here, f)))  # the scratch copy's name, or this folder's
_spec = importlib.util.spec_from_file_location("probe", _path)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
SM90 = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
forms = [tuple(int(x) for x in f.split(":")) for f in (sys.argv[1:] or ["4:0:2:16", "8:0:2:16"])]
for W, pv8, depth, keys, *rest in forms:
    asyn = (rest or [0])[0]
    fence = rest[1] if len(rest) > 1 else 0
    for group, block in ((7, 16),):
        k = torch.zeros(64, block, 4, 128, dtype=torch.float8_e4m3fn)
        q = torch.zeros(4, 28, 128, dtype=torch.bfloat16)
        launch = SimpleNamespace(kernel=probe.reg_decode_async if asyn else probe.reg_decode, num_warps=W, num_stages=1, vendor_options={},
            args=dict(q_ptr=q, k_ptr=k, v_ptr=k, table_ptr=torch.zeros(4, 8, dtype=torch.int32),
                      lens_ptr=torch.zeros(4, dtype=torch.int32), out_ptr=q, s_qt=28 * 128, s_qh=128,
                      s_kb=block * 512, s_kp=512, s_kh=128, s_bt=8, s_ot=28 * 128, s_oh=128, kv_heads=4,
                      qk_scale=0.1, v_scale=1.0),
            constexprs=dict(GROUP=group, BLOCK=block, W=W, PV_FP8=pv8, DEPTH=depth, KEYS=keys, **({'FENCE': True} if fence else {})))
        sig, cx, attrs, options = plan.bind(launch, SM90)
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                c = triton.compile(plan.source(launch.kernel, sig, cx, attrs), target=SM90.gpu_target(), options=options.__dict__)
        except Exception:
            import traceback; traceback.print_exc()
            continue
        ptxlog = log.getvalue()
        regs = re.findall(r"Used (\d+) registers", ptxlog)
        spills = re.findall(r"(\d+) bytes spill stores", ptxlog)
        ptx = c.asm["ptx"]
        name = f"W{W}-pv{pv8}-d{depth}-k{keys}-a{asyn}-f{fence}"
        open(f"/tmp/reg-{name}.ptx", "w").write(ptx)
        open(f"/tmp/reg-{name}.ttgir", "w").write(c.asm["ttgir"]); open(f"/tmp/reg-{name}.cubin", "wb").write(c.asm["cubin"])
        print(f"{name}: regs {regs} spills {spills} shared {c.metadata.shared} "
              f"ld.global {ptx.count('ld.global')} mma {ptx.count('mma.sync')} cvt.e4m3 {len(re.findall('cvt.rn.f16x2.e4m3x2', ptx))} "
              f"prmt {ptx.count('prmt')} shfl {ptx.count('shfl')} st.shared {ptx.count('st.shared')} ld.shared {ptx.count('ld.shared')} bar {ptx.count('bar.sync')}", flush=True)
