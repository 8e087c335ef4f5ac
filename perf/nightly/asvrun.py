"""asv around our measurement: machine setup, `asv run` for HEAD, `asv publish`.

asv cannot build other commits into an existing environment (the vendor's torch is never
rebuilt), so each nightly records the commit checked out, by `--set-commit-hash`, in the
interpreter that runs this (`-E existing:<python>`). Paths in asv.conf.json are relative
to its folder, where asv is started.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from perf.errors import ConfigError
from perf.process import child_env

CONFIG = "asv.conf.json"
REQUIRED = {  # asv.conf.json keys the nightly relies on, and the value it must have (None: any)
    "version": 1, "environment_type": "existing", "branches": ["HEAD"], "launch_method": "spawn",
    "repo": ".", "benchmark_dir": None, "results_dir": None, "html_dir": None,
}


def read_config(path: str = CONFIG) -> dict:
    """asv.conf.json, checked for what the nightly needs (ConfigError naming the key)."""
    try:
        with open(path, encoding="utf-8") as f:
            conf = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; run from the repository root or pass --config PATH") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno}: invalid JSON ({e.msg}); fix the syntax") from None
    for key, want in REQUIRED.items():
        if key not in conf:
            raise ConfigError(f"{path}: missing key {key!r}; restore it from the repository")
        if want is not None and conf[key] != want:
            raise ConfigError(f"{path}: {key} is {conf[key]!r}, the nightly needs {want!r}")
    base = os.path.dirname(os.path.abspath(path))
    conf["_root"] = base
    for key in ("benchmark_dir", "results_dir", "html_dir"):
        conf[f"_{key}"] = os.path.normpath(os.path.join(base, conf[key]))
    return conf


def require_asv() -> None:
    if importlib.util.find_spec("asv") is None:
        raise ConfigError("asv is not installed in this interpreter; `pip install 'asv>=0.6'` next to the "
                          "vendor's torch (never in a virtualenv of its own: asv runs the benchmarks here)")


def asv(conf: dict, *args: str, env: dict | None = None) -> int:
    """Run `python -m asv ARGS --config CONF` in the config's folder; output goes to ours."""
    cmd = [sys.executable, "-m", "asv", *args, "--config", os.path.join(conf["_root"], CONFIG)]
    print("+ " + " ".join(cmd), flush=True)
    root = conf["_root"]
    return subprocess.call(cmd, cwd=root, env=child_env(root, **(env or {})))


def machine(conf: dict, name: str) -> None:
    """Describe this machine to asv (~/.asv-machine.json) under `name`, without questions."""
    rc = asv(conf, "machine", "--yes", "--machine", name)
    if rc:
        raise ConfigError(f"`asv machine --machine {name}` failed (exit {rc}); see its output above")


def run(conf: dict, name: str, sha: str, env: dict, bench: list[str] | None = None) -> int:
    """Record this checkout as commit `sha` for machine `name`; 0 ok, 2 some benchmarks failed."""
    args = ["run", "--machine", name, "-E", f"existing:{sys.executable}", "--set-commit-hash", sha,
            "--launch-method", "spawn", "--show-stderr"]
    for b in bench or []:
        args += ["--bench", b]
    rc = asv(conf, *args, env=env)
    if rc not in (0, 2):  # asv: 2 = some benchmark failed (shown in the site and the log), else an error
        raise ConfigError(f"`asv run` failed (exit {rc}); see its output above")
    return rc


def publish(conf: dict) -> None:
    rc = asv(conf, "publish")
    if rc:
        raise ConfigError(f"`asv publish` failed (exit {rc}); see its output above")
