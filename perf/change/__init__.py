"""The change plan: which cases of a check can differ between base and head, found on a CPU.

Identical launches (the same compiled code, grid, options, scalar arguments, tensors and order)
cannot differ in device time nor in what they compute, so the latency gate does not time such a
case and the GPU correctness grid does not run it; both say so. Modules:

- keys.py: launch identity (`launch_key`, `case_key`, `Roles`, `attribute_constants`; `Code`, the
  machine code of kernels whose sources differ, line info stripped) and `difference`, the first
  thing two sides' keys of one case differ in;
- plan.py: the one plan document (kind "latency" or "grid"): written, read, summed up;
- side.py: the planning process (`python -m perf.change --kind ...`, __main__.py): the runner's
  target, its one parser, what it writes, its forked workers (`forked`), and its start from the
  parent;
- latency.py: the latency gate's cases (`perf gate --plan-only`, `--plan FILE`);
- grid.py: the correctness grid's keyed cases (`perf grid --cases`); grid_plan.py: when a grid
  plan may select, and pytest applying it (`--grid-plan FILE`); grid_cache.py: the keyed cases'
  kernels compiled on CPUs into a Triton cache (`perf grid --compile-cache`).

docs/latency.md argues the rule and names what it cannot see.
"""
