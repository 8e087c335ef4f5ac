"""One launch of a register-decode form for ncu (run under ncu with -k regex:reg_decode). PROBE names another probe
file with the same `Reg` and `FORMS` (the P V transposed one, ../register-decode-pv-transposed)."""
import importlib.util, os, sys
import torch
sys.path.insert(0, os.getcwd())
here = os.path.dirname(os.path.abspath(__file__))
_path = os.environ.get("PROBE") or next(os.path.join(here, f) for f in ("probe.py", "register-decode-probe.py")
                                        if os.path.exists(os.path.join(here, f)))  # the scratch copy's name, or this folder's
_spec = importlib.util.spec_from_file_location("probe", _path)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
from kernels.batch import build_batch
from perf import scenarios
spec = scenarios.Scenario.parse(os.environ.get("SCENARIO", "qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16")).spec()
batch = build_batch(spec, "cuda")
out = batch.new_output()
for form in probe.FORMS:
    run = probe.Reg(batch, *form)
    run(out); torch.cuda.synchronize()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        flush.zero_(); run(out)
    torch.cuda.synchronize()
