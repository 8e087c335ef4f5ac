"""`python -m perf.change --kind latency|grid|compile ...`: the planning process (internal).

Its parent is perf/change/side.py `plan`; its arguments and what it writes are that module's.
"""

from __future__ import annotations

from perf.change import side


def main(argv: list[str] | None = None) -> int:
    args = side.parse(argv)
    if args.kind == "latency":
        from perf.change import latency

        side.refuse_interpreter("the change plan binds real Triton kernels")
        side.write(args, rows=latency.plan_cases(args))
    elif args.kind == "grid":
        from perf.change import grid

        side.refuse_interpreter("the grid plan binds real Triton kernels")
        side.write(args, rows=grid.plan_cases(args))
    else:
        from perf.change import grid_cache

        side.refuse_interpreter("compiling for a GPU target needs real Triton")
        side.write(args, **grid_cache.compile_cases(args))
    return 0


if __name__ == "__main__":  # the planning process: its parent reports an interrupt
    from perf.process import entry

    entry(main, internal=True)
