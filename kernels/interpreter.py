"""Triton's interpreter as the kernels run under it (TRITON_INTERPRET=1): the same results for
less work, in four places where Triton 3.6's interpreter computes what nothing uses or computes
the same thing again.

- Its language is patched once a launch, not once a device-function call. The interpreter
  patches triton.language for a launch (`GridExecutor`) and again on every device-function call
  inside it (`InterpretedFunction.__call__` -> `_patch_lang`), with the same interpreter builder:
  the repeats set the same attributes to equivalent wrappers again, thousands of times a launch,
  and scan the language modules each time (`inspect.getmembers`). Here each function is patched
  once per launch: the launch's patch is restored when it ends, a device function's first call in
  it does what the interpreter does, its repeats are skipped. Measured on a 2-core CPU
  (2026-12-02): `perf run --suite smoke --no-resume` 33-39 s before, 18-26 s after (four runs
  each); the naive kernel's 936 programs of that suite spent 17.5 of their 43 s in the repeats.
- Its integer-overflow checks are skipped, since it never asserts them. For every add, sub and
  mul of integers narrower than 64 bits Triton's language (`binary_op_sanitize_overflow_impl`)
  redoes the operation in int64 and compares it with the type's range, then hands the result to
  `device_assert`, which returns at once unless the builder's options say `debug`; the
  interpreter's builder is made with `InterpreterOptions()` (debug off) and nothing sets it. So an
  int32 overflow wraps unreported either way (tests/kernels/test_interpreter.py shows it, and
  fails the day an interpreter asserts). Measured on the same CPU (2026-12-02): the checks were 3.4
  of the static_grid kernel's 9.2 s on the smoke suite (cProfile), and the whole suite's run took
  21.8-24.1 s with them, 14.1-15.3 s without; the tests that run the kernels in their own process
  (the correctness grid's CPU subset, memory safety, fp8 products, multi-token decode, window
  poison; `pytest -n 2`) 310-317 user CPU s with them, 190-227 without (two runs each, alternated).
- A `tl.tuple`'s type is made when it is first read. Every tensor the interpreter makes keeps its
  shape as a `tl.tuple`, whose constructor builds its `tuple_type` at once, the type's name string
  included; almost no shape's type is ever read. Made on first read from the same values, the
  type is the one the constructor made: the only method that changes a tuple's values
  (`_setitem`) sets its type itself, nothing else in Triton writes `values`, and no value's own
  `type` is reassigned after it is made (Triton 3.6.0's language and interpreter, searched).
- The interpreter's table of Triton dtypes to NumPy dtypes is built once, not on every call of
  `_get_np_dtype` (once for every value it makes). Measured on a 2-core CPU (2026-12-03,
  cProfile, the 46 forced-config correctness cases of the static_grid kernel, 54 s): tuples'
  types 9.3 s and the table 3.6 s of it; unprofiled, those cases took 20.3 s before both and
  14.6 s after.

Installed by `kernels` on import when the interpreter is active (`install`), so every process
that runs the kernels on a CPU has it: the tests, `perf` commands and the workers they start.
Where the interpreter is not the one this knows, nothing is installed and Triton runs as it is.
"""

from __future__ import annotations

import dataclasses


def install() -> None:
    """The module docstring's savings, wherever this interpreter has what they change."""
    patch_lang_once_per_launch()
    skip_unasserted_overflow_checks()
    type_tuples_when_read()
    build_dtype_table_once()


def patch_lang_once_per_launch() -> bool:
    """Install the once-a-launch patching; False where nothing was installed (already there, or
    an interpreter without `_patch_lang` and `GridExecutor`)."""
    from triton.runtime import interpreter

    real = getattr(interpreter, "_patch_lang", None)
    if real is None or getattr(real, "once_per_launch", False) or not hasattr(interpreter, "GridExecutor"):
        return False
    launches: list[set] = []  # per running launch: the functions patched in it

    class _LaunchScope:
        def __init__(self, scope):
            self.scope = scope

        def restore(self):
            launches.pop()
            self.scope.restore()

    class _Nothing:
        def restore(self):
            pass

    def patch_lang(fn):
        if not launches:  # a launch starts: GridExecutor restores its scope when it ends
            scope = _LaunchScope(real(fn))
            launches.append({fn})
            return scope
        if fn not in launches[-1]:  # a device function's first call in this launch
            launches[-1].add(fn)
            real(fn)
        return _Nothing()

    patch_lang.once_per_launch = True
    patch_lang.__wrapped__ = real
    interpreter._patch_lang = patch_lang
    return True


def skip_unasserted_overflow_checks() -> bool:
    """Turn off the interpreter builder's `sanitize_overflow` while its `debug` is off (then the
    checks' `device_assert` asserts nothing); False where nothing changed (already off, debug on,
    or an interpreter without that builder and those options)."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if not (dataclasses.is_dataclass(options) and getattr(options, "sanitize_overflow", False) is True
            and getattr(options, "debug", True) is False):
        return False
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def type_tuples_when_read() -> bool:
    """Make a `tl.tuple`'s type on first read; False where nothing changed (already so, or a
    Triton whose tuple is not built the way this knows: `values`, `type`, `_type_for_tuple_values`)."""
    from triton.language import core

    tuple_cls, make_type = core.tuple, getattr(core, "_type_for_tuple_values", None)
    if isinstance(vars(tuple_cls).get("type"), property) or make_type is None:
        return False
    eager_init = tuple_cls.__init__

    def __init__(self, args, type=None):
        if type is None:  # the one case the constructor computes: left to the first read
            self.values = [i for i in args]
        else:
            eager_init(self, args, type)

    def read(self):
        made = self.__dict__.get("_made_type")  # not getattr: tl.tuple's __getattr__ reads fields
        if made is None:
            made = self.__dict__["_made_type"] = make_type(self.values)
        return made

    def write(self, value):
        self.__dict__["_made_type"] = value

    __init__.__wrapped__ = eager_init
    tuple_cls.__init__ = __init__
    tuple_cls.type = property(read, write)
    return True


def build_dtype_table_once() -> bool:
    """`_get_np_dtype` answering scalar dtypes from a table filled by the real function's own
    answers; False where nothing changed (already so, or no `_get_np_dtype` to wrap)."""
    import triton.language as tl
    from triton.runtime import interpreter

    real = getattr(interpreter, "_get_np_dtype", None)
    if real is None or getattr(real, "table", None) is not None:
        return False
    table: dict = {}

    def _get_np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if type(scalar) is not tl.dtype:  # pointers and any other kind of type: as Triton does
            return real(tt_dtype)
        found = table.get(scalar.name)
        if found is None:
            found = table[scalar.name] = real(scalar)
        return found

    _get_np_dtype.table = table
    _get_np_dtype.__wrapped__ = real
    interpreter._get_np_dtype = _get_np_dtype
    return True
