"""Launch identity: what of a planned call decides its device time and what it computes, and when
two sides' keys of one case are the same.

A case's device time is a function of what its call runs on the GPU: the compiled kernels, their
grids and launch options, their scalar arguments, the tensors they read and write (shape, strides,
dtype, which input) and the order of the launches, plus any torch operation the call itself runs.
`case_key` is all of that for one side: each side's own planner (`Variant.plan`) as if on the
runner's target (perf/static/plan.py `plan_as_if_on`, its vendor and SM/CU count), each launch
bound as Triton's launcher binds it (`bind`) and its compiled binary named by Triton's own compile
cache key (`cache_key`: the kernel's source and every `@triton.jit` function and global it uses,
the specialization, the options, the target and the Triton build; with the values it reads as
modules' attributes, which that key leaves out: `attribute_constants`). The call is planned twice
and the second call keyed (the steady state the latency gate times: planners keep plans per
layout), with every torch operation it runs recorded (a `TorchDispatchMode`): a host-side change
that adds device work outside the Triton launches is a difference too. `difference` says whether
two sides' keys are identical and, if not, what differs first. With a `Code` (the latency gate's
plan), two launches whose source keys differ but everything else is equal are compared by the
machine code they compile to for the runner's target, line and debug info stripped (`code_text`):
a comment or a moved function then costs no GPU time. docs/latency.md argues it and names what
the rule cannot see.

Run in a planning process without TRITON_INTERPRET (perf/change/side.py): binding needs Triton's
real `JITFunction`s.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import re
from typing import Any

STATUSES = ("ok", "skip", "missing", "error")  # a side's planning of one case (`case_key`)
INPUTS = ("q", "k_cache", "v_cache", "block_table", "cu_seqlens_q", "seq_lens")  # PagedBatch.args()


# --------------------------------------------------------------------------- launch keys



def _plain(value: Any) -> Any:
    """A JSON value that compares as the argument does (dtypes and other objects by name)."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class Roles:
    """Which tensor of the call an argument is: an input of the batch or the output by name
    (the gate hands both sides the same ones), anything else `scratch<N>` in order of first
    use (a buffer the planner allocates). Keyed by storage, so a view (the fp8 caches read as
    bytes) is still its tensor."""

    def __init__(self, named: dict[str, Any]):
        self.names: dict[tuple[int, int], str] = {}
        self.scratch = 0
        for name, tensor in named.items():
            self.names.setdefault(self._storage(tensor), name)
        self.named = frozenset(self.names)  # the storages of the call's own tensors

    @staticmethod
    def _storage(tensor) -> tuple[int, int]:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()

    def is_named(self, tensor) -> bool:
        return self._storage(tensor) in self.named

    def of(self, tensor) -> str:
        key = self._storage(tensor)
        if key not in self.names:
            self.names[key] = f"scratch{self.scratch}"
            self.scratch += 1
        return self.names[key]


def call_tensors(batch, out) -> dict:
    """The call's own tensors by role (`Roles`): the batch's inputs, its tensor options, the output."""
    import torch

    named = dict(zip(INPUTS, batch.args()))
    named.update({k: v for k, v in batch.options.items() if isinstance(v, torch.Tensor)}, out=out)
    return named


def describe_tensor(tensor, role: str | None = None) -> list:
    """[role, shape, strides, storage offset, dtype]: what a kernel sees of a tensor argument."""
    return [role, list(tensor.shape), list(tensor.stride()), tensor.storage_offset(), str(tensor.dtype)]


def storage_digest(tensor) -> str:
    """A digest of every byte of a CPU tensor's storage (all a kernel handed the tensor may read),
    read in place: no torch operation, so none is traced."""
    import ctypes
    import hashlib

    if tensor.device.type != "cpu":  # a planner that puts its own tensor on a device: read nothing there
        raise ValueError(f"a planner's tensor on {tensor.device}; planned on the CPU, its bytes are unknown")
    storage = tensor.untyped_storage()
    size = storage.nbytes()
    data = (ctypes.c_char * size).from_address(storage.data_ptr()) if size else b""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


_ATTRIBUTE_CONSTANTS: dict[int, tuple[Any, list]] = {}  # id(kernel) -> (kernel, its constants)


def attribute_constants(kernel) -> list:
    """[expression, value] of every value a kernel, or a `@triton.jit` function it calls, reads as a
    module's attribute (`consts.SCALE`, not a bare `SCALE`). Triton compiles the value it finds, but
    its compile key leaves such values out (3.6: `DependenciesFinder.visit_Attribute` records
    none), so a constant moved in another module would keep the binary's key. Once per kernel
    object in a process (a side's modules do not change while it plans)."""
    import ast
    import inspect
    import types

    from triton.language import constexpr
    from triton.runtime.jit import JITCallable

    kept = _ATTRIBUTE_CONSTANTS.get(id(kernel))
    if kept is not None and kept[0] is kernel:
        return kept[1]
    found: dict[str, str] = {}
    seen: set[int] = set()
    todo = [kernel]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        scope = {**fn.__globals__, **inspect.getclosurevars(fn.fn).nonlocals}
        for node in ast.walk(ast.parse(fn.src)):
            if isinstance(node, ast.Name) and isinstance(scope.get(node.id), JITCallable):
                todo.append(scope[node.id])
            if not isinstance(node, ast.Attribute):
                continue
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            value = scope.get(base.id) if isinstance(base, ast.Name) else None
            if not isinstance(value, types.ModuleType) or value.__name__.split(".")[0] == "triton":
                continue
            for name in chain:
                if not isinstance(value, types.ModuleType):
                    break  # an attribute of a value (a constexpr's .value): its value is recorded
                value = getattr(value, name, None)
            if isinstance(value, JITCallable):
                todo.append(value)
            elif isinstance(value, constexpr) or not (isinstance(value, types.ModuleType) or callable(value)):
                found[ast.unparse(node)] = repr(value)
    constants = sorted([k, v] for k, v in found.items())
    _ATTRIBUTE_CONSTANTS[id(kernel)] = (kernel, constants)
    return constants


def launch_key(launch, target, roles: Roles, contents: bool = False, code: Code | None = None) -> dict:
    """Everything of one planned launch that decides its device time (module docstring).
    `contents`: also the bytes of every tensor that is not one of the call's own (`Roles.named`):
    the planner's tables and buffers, whose values decide what a kernel computes (`case_key`).
    `code`: where the launch's compile is noted, should its machine code decide (`Code`)."""
    import torch

    from perf.static import plan

    signature, constexprs, attrs, options = plan.bind(launch, target)
    tensors, scalars = {}, {}
    for name, value in launch.args.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = describe_tensor(value, roles.of(value))
            if contents and not roles.is_named(value):
                tensors[name].append(storage_digest(value))
        elif isinstance(getattr(value, "base", None), torch.Tensor):  # a TMA descriptor: its tensor, as read
            tensors[name] = describe_tensor(value.base, roles.of(value.base)) + [
                _plain(value.shape), _plain(value.strides), _plain(value.block_shape)]
        else:
            scalars[name] = _plain(value)
    binary = plan.cache_key(launch, target, signature, constexprs, attrs, options)
    constants = attribute_constants(launch.kernel)
    if constants:  # read as modules' attributes: not in Triton's key
        binary = [binary, constants]
    if code is not None:
        code.note(binary, launch.kernel, signature, constexprs, attrs, options)
    return {"kernel": launch.name, "binary": binary, "grid": _plain(launch.grid),
            "config": _plain(launch.config()), "scalars": scalars, "tensors": tensors}


def _op_tracer(ops: list, contents: Roles | None = None):
    """A TorchDispatchMode appending each torch operation run under it (name, tensor shapes,
    strides and dtypes, other arguments) to `ops`; with `contents`, also the bytes of each tensor
    argument that is not one of its named tensors (`torch.tensor(data)` shows only as
    `lift_fresh` of a tensor of that shape: its data is in no argument)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def describe(x):
        if not isinstance(x, torch.Tensor):
            return _plain(x)
        if contents is not None and not contents.is_named(x):
            return [*describe_tensor(x), storage_digest(x)]
        return describe_tensor(x)

    class Tracer(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ to keep torch.compile out of it, which imports
            # torch._dynamo at the first operation: 1.35 CPU s (2-core CPU, torch 2.13, 2026-12-03)
            # in every planning process, for a compiler nothing here runs
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            leaves, _ = tree_flatten((args, kwargs or {}))
            ops.append([str(func), [describe(x) for x in leaves]])
            return func(*args, **(kwargs or {}))

    return Tracer()


def call_path(kernels, variant) -> str:
    """A hash of the code between a plan and the device: the variant's `__call__` (plan, then
    each launch) and kernels/launch.py (`KernelLaunch.__call__` through Triton's JIT, and
    `CompiledLaunches`, the compiled launcher the timed steady state takes on an H100). What
    they do is not planned, so a change there times every case."""
    import hashlib
    import inspect

    launch = getattr(kernels, "launch", None) or importlib.import_module("kernels.launch")
    source = inspect.getsource(launch) + inspect.getsource(type(variant).__call__)
    return hashlib.sha256(source.encode()).hexdigest()


def check_launches(kernels, launches: list) -> None:
    """TypeError for a launch that does not run as `kernels.launch.KernelLaunch` runs (a subclass,
    which may do more than its kernel, or another compiled launcher than `CompiledLaunches`):
    `call_path` hashes that module's code, not what another class runs."""
    module = getattr(kernels, "launch", None) or importlib.import_module("kernels.launch")
    plain, compiled = module.KernelLaunch, getattr(module, "CompiledLaunches", None)
    for launch in launches:
        if type(launch) is not plain:
            raise TypeError(f"a launch of type {type(launch).__qualname__}, not kernels.launch.KernelLaunch: "
                            f"what it runs is not planned")
        runner = getattr(launch, "compiled", None)
        if runner is not None and (compiled is None or type(runner) is not compiled):
            raise TypeError(f"a launch kept by {type(runner).__qualname__}, not "
                            f"kernels.launch.CompiledLaunches: what it runs is not planned")


def case_key(kernels, name: str, batch, target, num_sms: int, hints: dict, first_call: bool = False,
             target_hints: bool = True, contents: bool = False, code: Code | None = None) -> dict:
    """One side's launches for one case: {"status": "ok", "launches", "ops", "call"}, or "skip"
    (a feature the variant lacks), "missing" (not registered) or "error", with the reason.
    `first_call`: the first call's launches and torch operations too (`"first"`), for a caller
    that may run the case only once (the correctness grid), where a kept plan could differ from
    the first. `target_hints=False`: planned as called without the `vendor=`/`num_sms=` hints
    (the device's platform decides, which the caller has made `target`'s). `contents`: the bytes
    of every tensor the planner makes or keeps (not the call's own) that a launch or a traced
    operation reads, for a caller whose question is what the kernels compute (the correctness
    grid); its process must fill new memory with known values (`torch.utils.deterministic`),
    else those bytes are garbage. A launch that is not a plain `kernels.launch.KernelLaunch`
    (`check_launches`) is an error. Run with that side's `kernels` active (perf/checkout.py
    `Side.active`)."""
    import torch

    from perf.static import plan

    variant = getattr(kernels, "VARIANTS", {}).get(name)
    if variant is None:
        return {"status": "missing", "reason": f"variant {name!r} is not registered in this checkout"}
    step = "plan"
    try:
        out = torch.empty_like(batch.q)
        named = call_tensors(batch, out)

        def planned() -> list:
            if target_hints:
                return plan.plan_as_if_on(target, variant, batch, num_sms=num_sms, out=out, **hints)
            return variant.plan(*batch.args(), out=out, **batch.options, **hints)[1]

        own = Roles(named) if contents else None  # which tensors are the call's own
        first_ops: list = []
        with _op_tracer(first_ops, own) if first_call else contextlib.nullcontext():
            first = planned()
        ops: list = []
        with _op_tracer(ops, own):
            launches = planned()
        step = "check the launches of"
        check_launches(kernels, [*first, *launches] if first_call else launches)
        step = "bind"
        roles = Roles(named)
        keys = [launch_key(launch, target, roles, contents, code) for launch in launches]
        extra = {}
        if first_call:
            first_roles = Roles(named)
            extra["first"] = {"launches": [launch_key(launch, target, first_roles, contents, code)
                                           for launch in first], "ops": first_ops}
        step = "read the call path of"
        call = call_path(kernels, variant)
    except NotImplementedError as e:
        return {"status": "skip", "reason": str(e)}
    except Exception as e:  # a planner that breaks: the gate measures the case and reports it
        return {"status": "error", "reason": f"{step} failed: {type(e).__name__}: {e}".splitlines()[0][:300]}
    return {"status": "ok", "launches": keys, "ops": ops, "call": call, **extra}


# --------------------------------------------------------------------------- the compiled code

CODE_RULE = 2  # of `code_text` and `code_digest`: raise it when what they keep changes
# Metadata that names where the code came from, not what it is: Triton's source hash, and the
# libraries' paths in the Python environment that compiled it first (its cache serves others)
_NOT_CODE = ("hash", "extern_libs")
# A line that switches the assembler's section (PTX's `.section .debug_info {`, AMDGCN's
# `.section .debug_line,"",@progbits`, `.text`); the DWARF ones, whose lines are dropped.
_SECTION = re.compile(r"^\s*(\.section\b|\.pushsection\b|\.popsection\b|\.previous\b|\.text\b|\.data\b)")
_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\"?\.(debug|nv_debug)")
_LINE_INFO = re.compile(r"^\s*\.(loc|file)\s")  # `.loc 1 759 0`, `.file 1 "/checkout/kernels/..."`


def code_text(asm: str) -> str:
    """PTX or AMDGCN text without what only says where the source was: `.loc` and `.file`
    directives and the DWARF sections (`.debug_*`), which hold line and column numbers and the
    checkout's path. The rest is what ptxas (NVIDIA) or the assembler (AMD) turns into the binary."""
    kept, debug = [], False
    for line in asm.splitlines():
        if _SECTION.match(line):
            debug = bool(_DEBUG_SECTION.match(line))
        if not debug and not _LINE_INFO.match(line):
            kept.append(line)
    return "\n".join(kept)


def code_digest(compiled) -> str:
    """A digest of a compiled kernel's code for its target (`code_text` of its PTX or AMDGCN) and
    of its metadata (options, shared memory, scratch, warps: what its launch is given), without
    Triton's source-level hash and the environment's library paths (`_NOT_CODE`)."""
    asm = compiled.asm.get("ptx") or compiled.asm.get("amdgcn")
    if asm is None:
        raise ValueError(f"no PTX or AMDGCN among {sorted(compiled.asm)}")
    metadata = {k: v for k, v in compiled.metadata._asdict().items() if k not in _NOT_CODE}
    text = json.dumps([CODE_RULE, code_text(asm), metadata], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Code:
    """Planned launches' machine code for one target, compiled only where it decides a case: when
    two sides' keys differ in nothing but some launches' source keys (`wanted`). Each source key
    (Triton's compile key with `attribute_constants`) compiles once per process, in forked workers
    (`compile`); Triton's own cache keeps the result under that key across processes. The same
    source key is the same code, so an unchanged tree compiles nothing."""

    def __init__(self, target):
        self.target = target
        self.sources: dict[str, tuple] = {}  # source key -> (kernel, signature, constexprs, attrs, options)
        self.digests: dict[str, str] = {}  # source key -> `code_digest`, or why it did not compile

    @staticmethod
    def name(binary) -> str:
        return binary if isinstance(binary, str) else json.dumps(binary)

    def note(self, binary, kernel, signature, constexprs, attrs, options) -> None:
        self.sources.setdefault(self.name(binary), (kernel, signature, constexprs, attrs, options))

    def wanted(self, base: dict, head: dict) -> set[str]:
        """The source keys not compiled yet whose code decides this case (`_binary_pairs`)."""
        return {n for pair in _binary_pairs(base, head) for n in pair if n not in self.digests}

    def compile(self, names, processes: int = 0) -> None:
        """Compile each of `names` not compiled yet, in `processes` forked workers (0: one per CPU)."""
        from perf.change.side import forked

        todo = [n for n in dict.fromkeys(names) if n not in self.digests and n in self.sources]
        if todo:
            _COMPILING.update(code=self, todo=todo)
            self.digests.update(zip(todo, forked(_compile_one, range(len(todo)), processes)))

    def same(self, base: dict, head: dict) -> tuple[dict, dict]:
        """`base` and `head` with each launch whose source keys differ keyed by its code instead."""
        pairs = _binary_pairs(base, head)
        if not pairs:
            return base, head
        base, head = json.loads(json.dumps(base)), json.loads(json.dumps(head))
        for b, h in zip(_launch_lists(base), _launch_lists(head)):
            if self.name(b["binary"]) != self.name(h["binary"]):
                for launch in (b, h):
                    name = self.name(launch["binary"])
                    launch["binary"] = {"code": self.digests.get(name, f"not compiled ({name[:16]})")}
        return base, head


_COMPILING: dict = {}  # what the forked compile workers read: the `Code` and its names to compile


def _compile_one(index: int) -> str:
    """`code_digest` of one source key of `_COMPILING` (in a worker), or why it did not compile: a
    text that equals no other, so such a launch is never identical."""
    import triton

    from perf.static import plan

    code, name = _COMPILING["code"], _COMPILING["todo"][index]
    kernel, signature, constexprs, attrs, options = code.sources[name]
    try:
        compiled = triton.compile(plan.source(kernel, signature, constexprs, attrs),
                                  target=code.target.gpu_target(), options=dict(options.__dict__))
        return code_digest(compiled)
    except Exception as e:  # the GPU compiles it too and the gate reports what it meets
        reason = f"{type(e).__name__}: {e}".strip().splitlines()[0][:200]
        which = hashlib.sha256(name.encode()).hexdigest()[:12]
        return f"did not compile for {code.target.name} ({which}): {reason}"


def _launch_lists(side: dict) -> list[dict]:
    """A planned side's launches, the first call's after the kept plan's."""
    return [*side.get("launches", []), *(side.get("first") or {}).get("launches", [])]


def _binary_pairs(base: dict, head: dict) -> list[tuple[str, str]]:
    """The (base, head) source keys of the launches that differ in them, when nothing else of the
    two planned sides differs; none otherwise (the case differs whatever the code is)."""
    if base.get("status") != "ok" or head.get("status") != "ok" or base == head:
        return []

    def masked(side: dict) -> str:
        copy = json.loads(json.dumps(side))
        for launch in _launch_lists(copy):
            launch["binary"] = None
        return json.dumps(copy, sort_keys=True)

    if masked(base) != masked(head):
        return []
    return [(Code.name(b["binary"]), Code.name(h["binary"]))
            for b, h in zip(_launch_lists(base), _launch_lists(head)) if b["binary"] != h["binary"]]


# --------------------------------------------------------------------------- the decision


def difference(base: dict, head: dict, code: Code | None = None) -> str | None:
    """None when the two sides' plans of a case are identical launches (it cannot differ in
    device time); else why it must be timed, in a few words. Unchanged exactly when the two
    are equal and neither failed to plan: the same launches, or none on either side (skipped
    for the same reason). A planning error is always timed, so the gate reports it. With
    `code` (compiled first: `Code.wanted`, `Code.compile`), launches whose source keys differ are
    the same binary when their machine code is (`Code.same`)."""
    if code is not None:
        base, head = code.same(base, head)
    failed = [s for s, side in (("base", base), ("head", head)) if side.get("status") == "error"]
    if failed:
        where = "both sides" if len(failed) == 2 else f"the {failed[0]}"
        return f"planning failed on {where}: {(head if failed[-1] == 'head' else base).get('reason', '')}"
    if base.get("status") != head.get("status"):
        return (f"the base {_status_text(base)}, the head {_status_text(head)}")
    if base.get("status") != "ok":
        if base == head:
            return None
        return f"{head['status']} on both sides, for other reasons: {head.get('reason', '')}"
    bl, hl = base.get("launches", []), head.get("launches", [])
    if len(bl) != len(hl):
        return f"{len(bl)} launches on the base, {len(hl)} on the head"
    differ = [i for i, (b, h) in enumerate(zip(bl, hl)) if b != h]
    # a launch that differs in more than its kernel's source first: that one decides whatever the code is
    beyond = [i for i in differ if {**bl[i], "binary": None} != {**hl[i], "binary": None}]
    for i in (beyond or differ)[:1]:
        return f"launch {i} ({hl[i].get('kernel')}): {_launch_change(bl[i], hl[i])}"
    if base.get("call") != head.get("call"):
        return "the call path after planning changed (Variant.__call__ or kernels/launch.py)"
    if base.get("ops") != head.get("ops"):
        return "the torch operations the call runs besides its launches differ"
    if base.get("first") != head.get("first"):
        return "the first call's launches or torch operations differ (a plan kept per layout)"
    if base != head:
        return "the planned calls differ"
    return None


def _status_text(side: dict) -> str:
    return {"ok": "launches it", "skip": f"skips it ({side.get('reason', '')})",
            "missing": "lacks the variant"}.get(side.get("status"), str(side.get("status")))


def _launch_change(b: dict, h: dict) -> str:
    """What differs between two launch keys, the first thing a reader would look at first."""
    if b.get("kernel") != h.get("kernel"):
        return f"kernel {b.get('kernel')} -> {h.get('kernel')}"
    bc, hc = b.get("config") or {}, h.get("config") or {}
    changed = [k for k in sorted(set(bc) | set(hc)) if k != "grid" and bc.get(k) != hc.get(k)]
    if changed:
        k = changed[0]
        more = f" (+{len(changed) - 1} more)" if len(changed) > 1 else ""
        return f"{k} {bc.get(k)} -> {hc.get(k)}{more}"
    if b.get("grid") != h.get("grid"):
        return f"grid {b.get('grid')} -> {h.get('grid')}"
    for part in ("scalars", "tensors"):
        bp, hp = b.get(part) or {}, h.get(part) or {}
        diff = [k for k in sorted(set(bp) | set(hp)) if bp.get(k) != hp.get(k)]
        if diff:
            k = diff[0]
            return f"argument {k} {bp.get(k)} -> {hp.get(k)}"
    if b.get("binary") != h.get("binary"):
        bb, hb = b.get("binary"), h.get("binary")
        if isinstance(bb, dict) and isinstance(hb, dict):  # compared by code (`Code.same`)
            failed = [side["code"] for side in (hb, bb) if len(side["code"]) != 64]
            return ("compiled kernel differs (its machine code, line info stripped)" if not failed
                    else f"compiled kernel differs: {failed[0]}")
        return "compiled kernel differs (Triton compile key: its source or a function it calls)"
    return "launch differs"


