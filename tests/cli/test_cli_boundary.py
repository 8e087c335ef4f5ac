"""One registry and one error boundary for every command (perf/cli.py).

Every command is listed, parsed (one-line errors, numbers range-checked) and dispatched the
same way; whatever a command raises ends in one exit code and at most one line on stderr:
bad input 2, a wrong result 1, an interrupt 130 (SIGTERM too, nothing left running), a bug
in the harness 3, with the traceback only under --debug / PERF_DEBUG=1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from perf import cli, process
from perf.errors import ConfigError, ContextLost, NothingMeasured

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code: str, *args: str, timeout: float = 60, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PERF_DEBUG", None)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- the registry ------------------------------------------------------------------------------

def test_help_lists_every_registered_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, command in cli.COMMANDS.items():
        assert f"    {name}" in out and command.help.split()[0] in out, name
    assert "3 a bug in the harness" in out


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_parses_the_same_way(name):
    """Each command's parser is built from the registry, raises one line for argparse
    errors and range-checks every number it takes."""
    parser = cli.command_parser(name)
    assert isinstance(parser, cli.Parser) and parser.prog == f"python -m perf {name}"
    numbers = [a for a in parser._actions if a.type is not None and getattr(a.type, "__name__", "") in
               ("int", "float")]
    assert all(a.type not in (int, float) for a in numbers), name
    usage = f"see `python -m perf {name} --help`"
    with pytest.raises(ConfigError, match=rf"^python -m perf {name}: .*; {usage}$"):
        parser.parse_args(["--no-such-flag"])
    thresholds = [a for a in parser._actions if a.dest == "thresholds"]
    assert all(a.default == cli.DEFAULT_PATH for a in thresholds)
    assert thresholds or not cli.COMMANDS[name].thresholds


def test_default_thresholds_path_is_the_thresholds_modules():
    from perf import thresholds

    assert cli.DEFAULT_PATH == thresholds.DEFAULT_PATH


@pytest.mark.parametrize("dest, text, why", [
    ("repeats", "0", "too small: it must be at least 1"), ("samples", "-3", "too small"),
    ("samples", "abc", "'abc' is not an integer"), ("lock_timeout", "nan", "not a finite number"),
    ("lock_timeout", "-1", "at least 0"), ("budget_ms", "0", "must be above 0"),
    ("seed", "1.5", "not an integer"), ("seed", "-7", None),
])
def test_numbers_are_range_checked(dest, text, why):
    kind = float if dest in ("lock_timeout", "budget_ms") else int
    p = cli._apply_ranges(cli.Parser(prog="python -m perf x"))
    p.add_argument("--" + dest.replace("_", "-"), dest=dest, type=kind)
    cli._apply_ranges(p)
    if why is None:
        assert getattr(p.parse_args([f"--{dest.replace('_', '-')}={text}"]), dest) == kind(text)
        return
    with pytest.raises(ConfigError, match=why):
        p.parse_args([f"--{dest.replace('_', '-')}={text}"])


def test_an_unknown_command_names_the_closest_one(capsys):
    assert cli.main(["comapre", "a", "b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'comapre': did you mean compare?" in err
    assert cli.main(["--thresholds", "x.yaml", "run"]) == 2
    assert "options go after the command" in capsys.readouterr().err
    assert cli.main([]) == 2  # the list of commands, and not a pass


# --- the boundary ------------------------------------------------------------------------------

def _raise(e: BaseException):
    def fn():
        raise e
    return fn


@pytest.mark.parametrize("raised, code, line", [
    (ConfigError("--suite bogus: no such suite"), 2, "error: --suite bogus: no such suite"),
    (ConfigError("two\nlines"), 2, "error: two lines"),
    (NothingMeasured("no case matched"), 2, "error: nothing was measured: no case matched"),
    (ContextLost("a kernel faulted the GPU"), 1, "error: a kernel faulted the GPU"),
    (KeyboardInterrupt(), 130, "interrupted: stopped; what finished is kept"),
    (RuntimeError("boom"), 3, "internal error: RuntimeError: boom (rerun with --debug for the traceback)"),
    (ModuleNotFoundError("No module named 'yaml'", name="yaml"), 2, "lacks the package pyyaml"),
    (ModuleNotFoundError("No module named 'perf.gone'", name="perf.gone"), 3, "internal error"),
    (SystemExit(None), 0, None), (SystemExit(4), 4, None),
])
def test_whatever_is_raised_ends_in_one_code_and_at_most_one_line(raised, code, line, capsys, monkeypatch):
    monkeypatch.delenv(process.DEBUG_ENV, raising=False)
    assert process.boundary(_raise(raised)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if line is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and line in err, err


def test_an_error_raised_while_handling_an_interrupt_is_the_interrupt(capsys):
    def fn():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("a module whose import Ctrl-C cut short") from None
    assert process.boundary(fn) == 130  # `from None` hides the cause, the context stays
    assert capsys.readouterr().err.startswith("interrupted:")


def test_debug_shows_the_traceback_before_or_after_the_command(monkeypatch, capsys):
    monkeypatch.delenv(process.DEBUG_ENV, raising=False)
    monkeypatch.setitem(cli.COMMANDS, "boom", cli.Command("tests.cli.test_cli_boundary", "test double",
                                                          main="_boom", add=None, parser="_boom_parser"))
    assert cli.main(["boom"]) == 3
    assert "Traceback" not in capsys.readouterr().err
    for argv in (["--debug", "boom"], ["boom", "--debug"]):
        assert cli.main(argv) == 3
        err = capsys.readouterr().err
        assert "Traceback" in err and "RuntimeError: a bug" in err and err.strip().endswith("traceback)")
    monkeypatch.setenv(process.DEBUG_ENV, "1")
    assert cli.main(["boom"]) == 3 and "Traceback" in capsys.readouterr().err


def _boom_parser():
    return argparse.ArgumentParser(add_help=False)


def _boom(args):
    raise RuntimeError("a bug")


def test_a_missing_package_names_it_and_the_interpreter_to_use():
    """The README's `python -m perf ...` under a Python without the project's packages."""
    p = _python("""
        import sys
        sys.modules["yaml"] = None  # `import yaml` fails as where PyYAML is not installed
        sys.argv = ["perf", "run", "--suite", "smoke"]
        from perf.cli import main
        from perf.process import entry
        entry(main)
    """)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, err
    assert err.count("\n") == 1 and "lacks the package pyyaml" in err and "nox -s cli -- " in err, err


# --- interrupts and the processes a command started ---------------------------------------------

_SLEEPER = """
    import os, subprocess, sys, time
    from perf import cli, process
    def main(argv):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        if argv == ["bug"]:
            time.sleep(0.5)
            raise RuntimeError("a bug after starting a child")
        time.sleep(60)
    process.entry(main, internal=%s)
"""


@pytest.mark.parametrize("how, internal, code, said", [
    (signal.SIGINT, False, 130, "interrupted: stopped; what finished is kept"),
    (signal.SIGTERM, False, 130, "interrupted: stopped; what finished is kept"),
    (signal.SIGTERM, True, 130, ""),  # a worker: its parent reports the interrupt
    ("bug", False, 3, "internal error: RuntimeError: a bug after starting a child"),
])
def test_an_interrupt_or_a_bug_stops_every_process_the_command_started(how, internal, code, said):
    p = _python(_SLEEPER % internal, *(["bug"] if how == "bug" else []))
    child = int(p.stdout.readline())
    if how != "bug":
        time.sleep(0.3)
        p.send_signal(how)
    _, err = p.communicate(timeout=30)
    assert p.returncode == code, err
    assert err.strip() == said or (said and err.strip().startswith(said)), err
    assert "Traceback" not in err
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_an_interrupt_inside_exec_of_a_string_still_exits_130(tmp_path):
    """CPython marks a KeyboardInterrupt raised in exec() of a string (dataclasses does that)
    as unhandled and, under `python -m`, kills itself by SIGINT at exit (exit -2)."""
    (tmp_path / "exec_entry.py").write_text(
        "from perf import process\nprocess.entry(lambda argv: exec('raise KeyboardInterrupt'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
    done = subprocess.run([sys.executable, "-m", "exec_entry"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.startswith("interrupted:"), (done.returncode, done.stderr)


def test_an_interrupt_that_a_library_swallowed_is_still_exit_130():
    """torch's start-up clears whatever its numpy import raises, a Ctrl-C included; the work
    then goes on, but it must not end as a pass."""
    p = _python("""
        import os, signal, time
        from perf import cli, process
        def main(argv):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass  # what a C extension's PyErr_Clear does
            return 0
        process.entry(main)
    """)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.startswith("interrupted:"), (p.returncode, err)


def test_run_child_stops_the_childs_whole_group_when_interrupted():
    """A side process and the workers it started go when the command is interrupted, also
    when they ignore SIGINT and SIGTERM (compile's sides: spawn workers, a resource tracker);
    run_child alone, without entry's last sweep."""
    p = _python("""
        import os, signal, subprocess, sys, threading
        from perf import cli, process
        code = ("import subprocess, sys, time; "
                "g = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
                "signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(60)']); print(g.pid, flush=True); time.sleep(60)")
        threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            process.run_child([sys.executable, "-c", code], grace=1)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    out, err = p.communicate(timeout=60)
    grandchild = int(out.split()[0])
    try:
        assert out.split()[1:] == ["interrupted"], (out, err)
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild), "a grandchild that ignores SIGINT and SIGTERM outlived the command"
    finally:
        with contextlib.suppress(OSError):
            os.kill(grandchild, signal.SIGKILL)


@pytest.mark.parametrize("starting", ["the_child", "its_workers"])
def test_stop_group_says_nothing_when_it_meets_a_python_still_starting_up(starting, tmp_path):
    """A Python process stopped before its start-up ends (a spawn worker of a compile side, or
    the side itself) must not print "Fatal Python error: init_import_site" and a traceback,
    which SIGINT to the side's group did (2-core CI, 2026-11-27). Start-up is held open here by
    a sitecustomize that sleeps; `stop_group` comes while it sleeps, and all must go."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(20)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(slow)]))
    env.pop("PERF_DEBUG", None)
    if starting == "the_child":
        code, env_child = "import time; time.sleep(60)", env
    else:  # an `entry` process whose workers are starting up
        code = textwrap.dedent(f"""
            import os, subprocess, sys, time
            from perf import cli, process
            def main(argv):
                for _ in range(2):
                    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                     env=dict(os.environ, PYTHONPATH={str(slow)!r}))
                print("started", flush=True)
                time.sleep(60)
            process.entry(main, internal=True)
        """)
        env_child = dict(env, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env_child, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if starting == "its_workers":
            assert proc.stdout.readline() == "started\n"
        time.sleep(1.0)  # well inside the 20 s start-up
        seen = [proc.pid, *process.descendants(proc.pid)]
        assert len(seen) == (1 if starting == "the_child" else 3), seen
        process.stop_group(proc, grace=10)
        err = proc.stderr.read()
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert err == "", err  # not "Fatal Python error: init_import_site" and a traceback
    deadline = time.monotonic() + 3
    while any(map(_alive, seen)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in seen if _alive(p)]


def test_an_interrupt_during_an_import_is_raised_once_the_import_is_over(tmp_path):
    """Raised inside an import it can land in C++ that called back into Python (torch's
    start-up: std::terminate, exit -6) or in C code that clears it."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.5)\nDONE = True\n")
    p = _python(f"""
        import sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        from perf import cli, process
        def main(argv):
            import slow_module
            print("imported", slow_module.DONE, flush=True)
            time.sleep(10)
        process.entry(main)
    """)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and out == "imported True\n", (p.returncode, out, err)
    assert err == "interrupted: stopped; what finished is kept\n"


_TORN = """
    import os, signal, threading, time, weakref
    from perf import process

    class Torn:  # multiprocessing.util.Finalize's order: a weak reference whose callback is
        def __init__(self, obj):  # the object itself, then the key that callback reads
            self._ref = weakref.ref(obj, self)
            os.kill(os.getpid(), signal.SIGINT)  # the interrupt lands between the two
            time.sleep(5)
            self._key = 1

        def __call__(self, ref):
            del self._key

    class Obj:
        pass

    def main(argv):
        try:
            Torn(Obj())
        finally:  # a thread that fails after the interrupt
            t = threading.Thread(target=lambda: 1 / 0)
            t.start()
            t.join()
    process.entry(main)
"""


@pytest.mark.parametrize("debug", [False, True])
def test_what_an_interrupt_cut_half_way_says_nothing_unless_debugging(debug):
    """A compile side stopped while multiprocessing built a Finalize printed "Exception ignored in:
    <Finalize object, dead>" and its traceback beside the interrupt's one line."""
    p = _python(_TORN, *(["--debug"] if debug else []))
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    if debug:  # the torn finalizer and the thread did fail: only their reports were held back
        failed = ("Exception ignored in", "no attribute '_key'", "ZeroDivisionError")
        assert all(said in err for said in failed), err
    else:
        assert err == "interrupted: stopped; what finished is kept\n", err


ENTRY_POINTS = [  # `python -m MODULE ARGS` -> what its one line says
    ("perf.latency.bisect --make-demo-range FILE/x", "--make-demo-range FILE/x: FILE is a file, not a"),
    ("perf.static.probe", "usage: python -m perf.static.probe SPEC"),
    ("perf.latency.calibrate --suite bogus", "no suite 'bogus'"),
    ("perf.latency.selftest --out FILE", "--out FILE: is a file, not a directory"),
    ("perf.ci.workflows --root FILE", "--root FILE: is a file, not a directory"),
    ("perf.nightly alert --config DIR", "DIR: --config file is a directory"),
    ("perf.nightly.issues post --results FILE", "--results FILE: is a file, not a directory"),
    ("perf.static.gate --emit-json FILE/x", "--emit-json FILE/x: FILE is a file, not a directory"),
    ("perf.ci.comment --vendor nvidia DIR/none.json", "none.json: findings file not found"),
    ("perf.ci.gpu_job", "--vendor: which GPU job?"),
]


def test_every_python_m_entry_point_refuses_in_one_line(tmp_path):
    """The entry points beside `python -m perf` run inside the same boundary."""
    (tmp_path / "file").write_text("x")
    env = dict(os.environ, PYTHONPATH=ROOT, TRITON_INTERPRET="1")
    env.pop("PERF_DEBUG", None)
    started = []
    for line, needle in ENTRY_POINTS:
        args = [a.replace("FILE", str(tmp_path / "file")).replace("DIR", str(tmp_path)) for a in line.split()]
        p = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started.append((line, needle, p))
    for line, needle, p in started:
        _, err = p.communicate(timeout=120)
        needle = needle.replace("FILE", str(tmp_path / "file")).replace("DIR", str(tmp_path))
        assert p.returncode == 2 and err.count("\n") == 1 and needle in err, (line, p.returncode, err)
