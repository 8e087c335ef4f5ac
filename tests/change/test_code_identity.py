"""Launch identity by compiled code (perf/change/keys.py `Code`): launches whose kernels' sources
differ but compile to the same machine code for the runner's target (line and debug info
stripped) are identical, and the correctness grid skips a kernel file that parses to the same
program (perf/ci/grid.py `same_program`).

The rule's parts are checked on their own (the text kept of PTX and AMDGCN, the decision with
digests given); then planted commits of a throwaway repository are planned as the changes job
plans them: a comment only, an unused `@triton.jit` helper, a constant of a kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from interpreter_support import NO_GPU

from perf.change import keys
from perf.ci import grid
from perf.latency import plant
from tests.throwaway_repo import git, harness_repo

pytestmark = pytest.mark.slow  # plans in processes, cross-compiles kernels (its first tests are quick)

# --- what of the assembly is kept ------------------------------------------------------------------

_PTX = """//
.version 8.7
.target sm_90a
.visible .entry k(
\t.param .u64 .ptr .global .align 1 k_param_0
)
.reqntid 128
{
\t.loc\t1 759 0                         // common.py:759:0
$L__func_begin0:
\t.loc\t1 804 38                        // common.py:804:38
\tld.param.b64 \t%rd1, [k_param_0];
\tret;
}
\t.file\t1 "/base/kernels/paged_attention/common.py"
\t.section\t.debug_abbrev
\t{
.b8 1
\t}
\t.section\t.debug_info
\t{
.b8 66                                  // DW_AT_call_line
\t}
"""
_AMDGCN = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
\t.text
k:
.Lfunc_begin0:
\t.file\t1 "/base/kernels/paged_attention" "common.py"
\t.loc\t1 759 0 prologue_end            ; common.py:759:0
\ts_load_dwordx2 s[0:1], s[0:1], 0x0
\ts_endpgm
\t.section\t.debug_line,"",@progbits
\t.short\t834                             ; DW_AT_call_line
\t.section\t".note.GNU-stack","",@progbits
\t.amdgpu_metadata
  .name: k
\t.end_amdgpu_metadata
\t.section\t.debug_str,"MS",@progbits,1
\t.asciz\t"common.py"
"""


def _moved(text: str) -> str:
    """`text` as a comment above the kernel leaves it: other lines, columns and checkout path."""
    return (text.replace(" 759 ", " 761 ").replace(" 804 ", " 806 ").replace(":804:", ":806:")
            .replace("66 ", "68 ").replace("834", "836").replace("/base/", "/head/"))


@pytest.mark.parametrize("asm", [_PTX, _AMDGCN], ids=["ptx", "amdgcn"])
def test_the_code_kept_is_the_assembly_without_line_and_debug_info(asm):
    kept = keys.code_text(asm)
    assert ".loc" not in kept and ".file" not in kept and "debug" not in kept and "common.py" not in kept
    assert keys.code_text(_moved(asm)) == kept  # line numbers and the checkout's path only
    for instruction in ("ld.param.b64", "s_load_dwordx2") if asm is _PTX else ("s_load_dwordx2",):
        if instruction in asm:
            assert instruction in kept
            assert keys.code_text(asm.replace(instruction, instruction + "x")) != kept
    if asm is _AMDGCN:
        assert ".name: k" in kept and "s_endpgm" in kept  # sections after a debug one are code again


def _side(binary: str, grid_: list | None = None) -> dict:
    launch = {"kernel": "k", "binary": binary, "grid": grid_ or [4, 1, 1], "config": {"num_warps": 4},
              "scalars": {}, "tensors": {}}
    return {"status": "ok", "launches": [launch], "ops": [], "call": "c"}


class _Digests(keys.Code):
    """A `Code` whose digests are given, never compiled."""

    def __init__(self, digests: dict):
        super().__init__(target=None)
        self.digests = digests


def test_source_keys_that_differ_decide_by_their_code_and_only_where_nothing_else_differs():
    code = _Digests({"a": "1" * 64, "b": "1" * 64, "c": "2" * 64})
    assert code.wanted(_side("a"), _side("x")) == {"x"}  # not compiled yet
    assert code.wanted(_side("a"), _side("x", [8, 1, 1])) == set()  # the grid decides: nothing to compile
    assert code.wanted(_side("a"), _side("a")) == set()  # one source key: one code
    assert keys.difference(_side("a"), _side("b"), code) is None  # same code
    assert keys.difference(_side("a"), _side("b")) is not None  # without the code: by source key
    why = keys.difference(_side("a"), _side("c"), code)
    assert why == "launch 0 (k): compiled kernel differs (its machine code, line info stripped)"
    assert keys.difference(_side("a"), _side("b", [8, 1, 1]), code).startswith("launch 0 (k): grid")
    code.digests["d"] = "did not compile for sm_90 (0123): CompilationError: x"
    assert "did not compile" in keys.difference(_side("a"), _side("d"), code)


# --- planted commits ---------------------------------------------------------------------------------

VARIANTS = "qblock,static_grid"  # one kernel each of the two families: the cheapest planning that shows it
COMMENT = "# a comment only: the program is the same\n"
HELPER = ('\n\n@triton.jit\ndef _unused_helper(x):\n    """Added, never called."""\n    return x * 2\n')


def _head(repo) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _commit(repo, edit, message: str) -> str:
    edit(str(repo))
    git(repo, "commit", "-qam", message)
    return _head(repo)


def _replace(root: str, file: str, old: str, new: str) -> None:
    """`old`'s first occurrence in `file` of the checkout at `root` replaced by `new`."""
    path = os.path.join(root, file)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    assert old in source, f"{file} changed: update the planted edit ({old.strip()[:40]!r})"
    with open(path, "w", encoding="utf-8") as f:
        f.write(source.replace(old, new, 1))


def _insert(root: str, text: str, before: str) -> None:
    _replace(root, plant.TARGET, before, text + before)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """c0; c1 a comment in common.py above every kernel; c2 an unused @triton.jit helper there (every
    kernel's lines move); c3 LOG2E, a literal every attention kernel reads, one float32 ulp lower (the
    plant's kernel-wide change: a float64 ulp was the same float32, the same code)."""
    repo = harness_repo(tmp_path_factory.mktemp("identity") / "repo")
    shas = [_head(repo)]
    shas.append(_commit(repo, lambda root: _insert(root, COMMENT, "@triton.jit"), "a comment"))
    shas.append(_commit(repo, lambda root: _insert(root, HELPER.lstrip("\n") + "\n\n", "@triton.jit"),
                        "an unused helper"))
    shas.append(_commit(repo, plant.plant_kernel_wide, "a kernel's constant"))
    return repo, shas


def _plan(repo, base: str, head: str, out, vendor: str = "nvidia", suite: str = "smoke",
          variants: str = VARIANTS, scenarios: str | None = None) -> tuple[dict, str]:
    # as on a machine without a GPU, on any machine: a GPU here would refuse the other vendor's plan
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-m", "perf", "gate", "--plan-only", "--suite", suite,
                           "--variants", variants, "--vendor", vendor, "--base-ref", base, "--head-ref", head,
                           *(["--scenarios", scenarios] if scenarios else []),
                           "--out", str(out)], cwd=repo, env=dict(env, **NO_GPU, PYTHONPATH=str(repo)),
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "plan.json").read_text()), done.stdout.strip()


def _grid(repo, base: str, head: str) -> grid.Decision:
    git(repo, "checkout", "-q", head)
    return grid.decision(str(repo), base)[1]


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_a_comment_only_plans_nothing_and_skips_the_grid(planted, tmp_path, vendor):
    repo, (c0, c1, _, _) = planted
    doc, line = _plan(repo, c0, c1, tmp_path, vendor)
    assert doc["counts"] == {"measure": 0, "unchanged": 6}, doc["measure"][:2]
    assert line == "0 of 6 cases to time; 6 unchanged (identical launches)"
    d = _grid(repo, c0, c1)
    assert not d.run and d.reason.startswith(f"unchanged inputs: {plant.TARGET.replace(os.sep, '/')} changed "
                                             f"only in comments")


def test_an_unused_helper_plans_nothing_but_runs_the_grid(planted, tmp_path):
    repo, (_, c1, c2, _) = planted
    doc, _ = _plan(repo, c1, c2, tmp_path)
    assert doc["counts"] == {"measure": 0, "unchanged": 6}, doc["measure"][:2]
    assert _grid(repo, c1, c2).run  # a new function is a new program: the grid does not prove it unused


def test_a_kernels_constant_plans_its_cases_and_runs_the_grid(planted, tmp_path):
    repo, (_, _, c2, c3) = planted
    doc, _ = _plan(repo, c2, c3, tmp_path)
    # every case launches an attention kernel that reads LOG2E, but naive lacks sliding windows
    assert doc["counts"] == {"measure": 6, "unchanged": 0}
    assert all("compiled kernel differs (its machine code, line info stripped)" in r["why"]
               for r in doc["measure"]), doc["measure"]
    d = _grid(repo, c2, c3)
    assert d.run and d.changed == (plant.TARGET.replace(os.sep, "/"),)


# --- the kernel the runner launches, planned from a CPU ------------------------------------------------

GLUON = os.path.join("kernels", "paged_attention", "warp_specialized.py")
EXPONENT = "p = gl.exp2(s * scale_log2 - "  # the online softmax's exponent, every 16-bit Gluon prefill's


def _scale_the_exponent(root: str) -> None:
    """The Gluon kernel's exponent scaled by one float32 ulp above 1: other code in that kernel alone."""
    _replace(root, GLUON, EXPONENT, "p = gl.exp2(s * (scale_log2 * 1.0000001) - ")


@pytest.fixture(scope="module")
def gluon_planted(tmp_path_factory):
    """c0; c1 the Gluon prefill kernel's exponent changed (no other file)."""
    pytest.importorskip("triton.experimental.gluon", reason="this Triton has no Gluon (3.6 and later)")
    repo = harness_repo(tmp_path_factory.mktemp("gluon") / "repo")
    return repo, (_head(repo), _commit(repo, _scale_the_exponent, "the Gluon kernel's exponent"))


PREFILL = "llama3-8b/prefill/batch1-kv2048/block16/bf16"  # the Gluon kernel's on sm_90
DECODE = "llama3-8b/decode/batch8-kv1024/block16/bf16"  # the Q-block kernel's


def test_a_change_to_the_gluon_kernel_is_timed_where_the_runner_launches_it(gluon_planted, tmp_path):
    """Planned from a CPU for an sm_90 runner, the prefill the runner sends through the Gluon kernel is
    timed (a plan made as from a CPU compared the Q-block kernel on both sides and called it identical);
    the decode, which never reaches that kernel, is not."""
    repo, (c0, c1) = gluon_planted
    doc, line = _plan(repo, c0, c1, tmp_path, suite="anchor", variants="static_grid",
                      scenarios=f"{PREFILL},{DECODE}")
    assert doc["target"] == "sm_90" and line.startswith("1 of 2 cases to time"), line
    [timed] = doc["measure"]
    assert timed["scenario"] == PREFILL
    assert timed["why"] == ("launch 0 (ws_prefill_kernel): compiled kernel differs "
                            "(its machine code, line info stripped)")
    assert [r["scenario"] for r in doc["unchanged"]] == [DECODE]


def test_an_amd_runner_never_launches_the_gluon_kernel(gluon_planted, tmp_path):
    repo, (c0, c1) = gluon_planted
    doc, _ = _plan(repo, c0, c1, tmp_path, vendor="amd", suite="anchor", variants="static_grid",
                   scenarios=PREFILL)
    assert doc["counts"] == {"measure": 0, "unchanged": 1}, doc["measure"]
