"""Lab: from ncu source pages (csv, --print-source sass), each kernel's shared-memory wavefronts, the excess over
ideal, and the instructions that hold the excess; argv: label=csv pairs."""
import csv, sys

for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    lines = open(path).read().splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')]
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        name = lines[s].split(",")[1].strip('"')
        rows = list(csv.DictReader(lines[s + 1:end]))
        def f(r, k):
            try:
                return float(r.get(k) or 0)
            except ValueError:
                return 0.0
        tot = sum(f(r, "L1 Wavefronts Shared") for r in rows)
        exc = sum(f(r, "L1 Wavefronts Shared Excessive") for r in rows)
        samples = sum(f(r, "Warp Stall Sampling (All Samples)") for r in rows)
        print(f"== {label}: {name}: shared wavefronts {tot:.0f}, excessive {exc:.0f} ({100 * exc / max(tot, 1):.1f} %), "
              f"stall samples {samples:.0f}")
        top = sorted(rows, key=lambda r: -f(r, "L1 Wavefronts Shared Excessive"))[:12]
        for r in top:
            if f(r, "L1 Wavefronts Shared Excessive") > 0:
                print(f"   {r['Address'][-5:]} {r['Source'].strip()[:70]:70s} exec {f(r, 'Instructions Executed'):9.0f} "
                      f"wf {f(r, 'L1 Wavefronts Shared'):9.0f} ideal {f(r, 'L1 Wavefronts Shared Ideal'):9.0f} "
                      f"samples {f(r, 'Warp Stall Sampling (All Samples)'):6.0f}")
