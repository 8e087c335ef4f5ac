"""Lab: token-kernel module copies for the converter's questions (argv[1] the module, argv[2] the output,
argv[3] the form):
  rows64 / rows128: the converter in passes of 64 / 128 rows (TOKEN_CONVERT_ROWS; 32 now);
  zeros: the converter stores zeros, no loads and no conversion (its shared-memory writes alone);
  loads: it loads and converts, and stores only under a condition that never holds (its reads and
         conversions alone; check the SASS keeps the conversions on the path);
  idle: it does nothing but its barriers (the ablation of docs/lab/2026-12-01.md)."""
import sys

src = open(sys.argv[1]).read()
out, form = sys.argv[2], sys.argv[3]


def rep(old, new):
    global src
    assert src.count(old) == 1, old
    src = src.replace(old, new)


STORE = "                v_bufs.index(stage).slice(c * ROWS, ROWS).store(values)\n"
if form in ("rows64", "rows128"):
    rep("TOKEN_CONVERT_ROWS = gl.constexpr(32)", f"TOKEN_CONVERT_ROWS = gl.constexpr({form[4:]})")
elif form == "zeros":
    rep("                values = rows.load(layout).to(v_bufs.dtype)\n",
        "                values = gl.zeros([ROWS, v_bufs.type.shape[2]], v_bufs.dtype, layout)\n")
elif form == "loads":
    rep(STORE, "                if kv_len < -7:\n    " + STORE)
elif form == "idle":
    a = src.index("            for c in gl.static_range(TILE_ // ROWS):\n                rows = v8_bufs")
    b = src.index("            fence_async_shared()  # the stores, before the products read them", a)
    src = src[:a] + src[b:]
else:
    raise SystemExit(f"unknown form {form}")
open(out, "w").write(src)
