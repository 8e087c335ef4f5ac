"""The nightly's history on a git branch of its own: the one reader and writer of its layout.

    python -m perf nightly save [--branch perf-data] [--remote origin] [--retries 5] [--data DIR]
    python -m perf nightly checkout [--branch perf-data] [--remote origin] --data DIR

The data branch (`perf-data`) holds one folder per runner and night, never shared between
runners, so two runners saving the same night touch different paths and both land:

    nights/<runner>/<YYYY-MM-DD>/results.jsonl     the night's measurements (perf.results)
                                 fingerprint.json  the environment (perf/fingerprint.py), with
                                                   the clocks as the measuring ended
                                 alert.json        the alert (and attribution) state after it

`<runner>` is the nightly's machine (`<runner>_<gpu>`, one history: perf.nightly.selection),
the date the UTC day the measurement started. This is the nightly's one store: `nightly run`
puts its night here, the history (perf/nightly/history.py), the alert, the dashboard, asv's
published site (perf/nightly/asvrun.py), the attribution and the heartbeat read it. `--data DIR`
names a checkout of the branch (the history, the dashboard and the alert read it); without it a
machine keeps its nights in a local folder of the same layout (`local`: `.asv/perf-data`), which
nothing pushes. `save` commits this runner's night (the results the nightly wrote into `--out`,
their fingerprint, the machine's part of alert.json) and pushes it; a push refused because another
runner pushed first is fetched, rebased and pushed again (perf.git.push_retrying). The night's
folder is written beside its place and renamed into it, and the commit and the push are git's own
atomic steps, so an interrupted save leaves the branch as it was and no half-written folder.
`checkout` makes a checkout without saving. The Actions cache only saves time: everything the
nightly reads is here.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import tempfile
from dataclasses import dataclass

from perf import files, fingerprint, git, names
from perf.errors import ConfigError

BRANCH = "perf-data"
REMOTE = "origin"
RETRIES = 5  # pushes retried after a refusal (git.RETRY_S: about a minute in all; default by reasoning)
NIGHTS = "nights"
LOCAL = "perf-data"  # the local store beside asv's results folder, where no --data is given
RESULTS, FINGERPRINT, ALERT = "results.jsonl", "fingerprint.json", "alert.json"
_FIX = "the data branch is written by `python -m perf nightly save` only; restore the file from its history"


@dataclass(frozen=True)
class Night:
    """One runner's night on the data branch (or a checkout of it)."""

    runner: str
    date: str  # YYYY-MM-DD, UTC
    path: str  # the night's folder

    @property
    def results_path(self) -> str:
        return os.path.join(self.path, RESULTS)

    def results(self):
        """The night's results (perf.results.load: the one results reader)."""
        from perf import results

        return results.load(self.results_path, warn=False)

    def fingerprint(self) -> dict | None:
        """fingerprint.json (perf.fingerprint.check), None where the night has none."""
        path = os.path.join(self.path, FINGERPRINT)
        if not os.path.exists(path):
            return None
        return fingerprint.check(files.load_json(path, "a night's fingerprint", _FIX), path)

    def alert(self) -> dict | None:
        """alert.json (perf.nightly.alert's document, this runner's machine only), None if absent."""
        path = os.path.join(self.path, ALERT)
        if not os.path.exists(path):
            return None
        doc = files.load_json(path, "a night's alert state", _FIX)
        if not isinstance(doc.get("machines", []), list):
            raise ConfigError(f"{path}: `machines` is not a list; {_FIX}")
        return doc


def commit_of(res) -> str:
    """The commit a night's results (perf.results.Results) measured: the nightly's header, else the
    environment's; "" where neither says."""
    return (res.header.get("nightly") or {}).get("commit") or res.environment.get("commit") or ""


def local(results_dir: str) -> str:
    """The store of a machine without a checkout of the data branch (no `--data`): the same
    layout in `.asv/perf-data`, beside asv's results folder (`results_dir`); `write_night` makes it."""
    return os.path.join(os.path.dirname(os.path.abspath(results_dir)), LOCAL)


def check_name(runner: str, what: str = "runner") -> str:
    """A runner's name by the one rule (perf/names.py)."""
    return names.runner(runner, what)


def night_dir(data: str, runner: str, date: str) -> str:
    """nights/<runner>/<date> of the checkout `data`."""
    check_name(runner)
    names.date(date, f"{os.path.join(data, NIGHTS, runner)}: night")
    return os.path.join(data, NIGHTS, runner, date)


def check_data(data: str, flag: str = "--data") -> str:
    """`data` is a checkout of the data branch (a folder holding nights/); ConfigError otherwise."""
    if not os.path.isdir(os.path.join(data, NIGHTS)):
        why = "no such folder" if not os.path.exists(data) else f"it holds no {NIGHTS}/ folder"
        raise ConfigError(f"{flag} {data}: not a checkout of the data branch ({why}); make one with "
                          f"`python -m perf nightly checkout --data {data}`")
    return data


def _entries(folder: str, what: str, check) -> list[str]:
    """The folders in `folder`, each name checked (`check(name, where)`: perf/names.py's rule);
    hidden ones (a save interrupted) are no entries. A name the rule refuses is a ConfigError:
    nothing but `save` writes the store, so it is another tool's folder or a wrong clock's."""
    out = []
    for n in sorted(os.listdir(folder)):
        path = os.path.join(folder, n)
        if n.startswith(".") or not os.path.isdir(path):
            continue
        try:
            check(n, f"{folder}: {what}")
        except ConfigError as e:
            raise ConfigError(f"{e}; {_FIX} (or move the folder out of {NIGHTS}/)") from None
        out.append(n)
    return out


def runners(data: str) -> list[str]:
    """The runners with a folder under nights/, by name (a name the rule refuses: ConfigError)."""
    folder = os.path.join(data, NIGHTS)
    if not os.path.isdir(folder):
        return []
    return _entries(folder, "runner", names.runner)


def nights(data: str, runner: str | None = None) -> list[Night]:
    """Every night (of `runner`, or of every runner), oldest first per runner. A hidden folder
    (a save was interrupted in it) and a day without results are no nights; a folder that is no
    real day, or a day after today, is a ConfigError (a night dated 2099 would hide a silent
    runner from the heartbeat for ever)."""
    out = []
    for r in [check_name(runner)] if runner else runners(data):
        folder = os.path.join(data, NIGHTS, r)
        if not os.path.isdir(folder):
            continue
        for date in _entries(folder, "night", names.date):
            path = os.path.join(folder, date)
            if os.path.isfile(os.path.join(path, RESULTS)):
                out.append(Night(r, date, path))
    return out


def newest(data: str, runner: str) -> Night | None:
    found = nights(data, runner)
    return found[-1] if found else None


# --- writing a night --------------------------------------------------------------------------


def write_night(data: str, runner: str, date: str, results_path: str | None, fp: dict | None,
                alert: dict | None) -> Night:
    """Put a night into the checkout `data`: the files given replace those there, the others
    stay. Written into a hidden folder beside its place and renamed into it, so a reader (or
    an interrupted writer) sees the old night or the new one, never a part."""
    target = night_dir(data, runner, date)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{date}.", dir=parent)
    try:
        if os.path.isdir(target):
            for name in (RESULTS, FINGERPRINT, ALERT):
                if os.path.isfile(os.path.join(target, name)):
                    shutil.copy2(os.path.join(target, name), os.path.join(staging, name))
        if results_path is not None:
            text = files.read_text(results_path, "the night's results file", "run the nightly first")
            files.write_text(os.path.join(staging, RESULTS), text)
        if fp is not None:
            files.write_json(os.path.join(staging, FINGERPRINT), fp)
        if alert is not None:
            files.write_json(os.path.join(staging, ALERT), alert)
        if not os.path.isfile(os.path.join(staging, RESULTS)):
            raise ConfigError(f"{target}: a night needs its results; pass the results file the nightly wrote")
        old = None
        if os.path.isdir(target):
            old = tempfile.mkdtemp(prefix=f".{date}.old.", dir=parent)
            os.rename(target, os.path.join(old, date))
        os.rename(staging, target)
        staging = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return Night(runner, date, target)


def write_alert(night: Night, doc: dict) -> Night:
    """Replace the alert.json of a night already in a store (the alert computed once, stored
    with the night it is about: perf/nightly/alert.py `stored`)."""
    data = os.path.dirname(os.path.dirname(os.path.dirname(night.path)))
    return write_night(data, night.runner, night.date, None, None, doc)


def clean(data: str) -> None:
    """Remove what an interrupted `write_night` left behind (hidden folders under nights/)."""
    for path in glob.glob(os.path.join(data, NIGHTS, "*", ".*")):
        shutil.rmtree(path, ignore_errors=True)


# --- what this runner measured tonight ----------------------------------------------------------


@dataclass(frozen=True)
class Tonight:
    """The night a `save` commits: its results file, fingerprint and alert state."""

    runner: str
    date: str
    results_path: str
    fingerprint: dict
    alert: dict | None


def tonight(results_path: str, alert_path: str | None = None, machine: str | None = None) -> Tonight:
    """The night of the results file `results_path` (written by `perf nightly run`): its
    machine, its UTC day, the fingerprint (the measuring process's end one where it left it,
    else the results header's) and its machine's part of alert.json when that is about it."""
    from perf import results

    res = results.load(results_path, warn=False)
    env = res.environment
    nightly = res.header.get("nightly") or {}
    runner = check_name(machine or nightly.get("machine") or "", "the results' machine")
    when = names.time(env.get("time"), f"{results_path}: environment.time").date().isoformat()
    fp = fingerprint.read_end(results_path) or fingerprint.from_environment(env)
    alert = None
    if alert_path and os.path.exists(alert_path):
        doc = files.load_json(alert_path, "alert.json", "run `python -m perf alert` again")
        sha = commit_of(res)
        mine = [m for m in doc.get("machines", []) if isinstance(m, dict) and m.get("machine") == runner
                and m.get("commit") == sha]
        if mine:
            alert = {**{k: v for k, v in doc.items() if k != "machines"}, "machines": mine,
                     "alert": any(m.get("alerts") for m in mine)}
    return Tonight(runner, when, results_path, fp, alert)


def find_tonight(out: str, sha: str) -> list[str]:
    """The results files `perf nightly run` copied into `out` for commit `sha` (one per machine)."""
    return sorted(glob.glob(os.path.join(out, f"*-{sha[:8]}.jsonl")))


# --- save and checkout ----------------------------------------------------------------------


def save(root: str, night: Tonight, branch: str = BRANCH, remote: str = REMOTE, retries: int = RETRIES,
         data: str | None = None, say=print) -> str:
    """Commit `night` to `branch` and push it to `remote` (retrying, module docstring); the
    commit pushed. `data`: keep that folder a checkout of the branch afterwards."""
    message = f"nightly: {night.runner} {night.date}"
    with git.branch_worktree(root, remote, branch, data) as (folder, base):
        rel = os.path.relpath(night_dir(folder, night.runner, night.date), folder)

        def commit() -> None:
            clean(folder)
            write_night(folder, night.runner, night.date, night.results_path, night.fingerprint, night.alert)
            git.commit_paths(folder, [rel], message)

        commit()
        pushed = git.push_retrying(folder, remote, branch, base, retries, commit, say=say)
    say(f"saved {rel} to {remote} {branch} at {pushed[:10]}")
    return pushed


@contextlib.contextmanager
def checkout(root: str, branch: str = BRANCH, remote: str = REMOTE, data: str | None = None):
    """A checkout of the data branch as it is on `remote` (kept at `data`, else temporary)."""
    with git.branch_worktree(root, remote, branch, data) as (folder, _):
        os.makedirs(os.path.join(folder, NIGHTS), exist_ok=True)
        yield folder


# --- command line (perf nightly save | checkout) ------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the data branch (save, checkout, heartbeat; perf/nightly/store.py)")
    g.add_argument("--branch", default=BRANCH, help=f"the history's branch (default: {BRANCH})")
    g.add_argument("--remote", default=REMOTE, help=f"the remote it is pushed to (default: {REMOTE})")
    g.add_argument("--retries", type=int, default=RETRIES,
                   help=f"save: pushes retried when another runner pushed first (default: {RETRIES})")


def save_main(args: argparse.Namespace, conf: dict) -> int:
    root = conf["_root"]
    sha, _ = git.head_commit(root)
    found = find_tonight(args.out, sha)
    if not found:
        raise ConfigError(f"--out {args.out}: no results of commit {sha[:8]} (*-{sha[:8]}.jsonl); run "
                          f"`python -m perf nightly run` first")
    alert_path = os.path.join(args.out, "alert.json")
    for path in found:
        night = tonight(path, alert_path, args.machine)
        save(root, night, args.branch, args.remote, args.retries, args.data)
    return 0


def checkout_main(args: argparse.Namespace, conf: dict) -> int:
    if not args.data:
        raise ConfigError("nightly checkout: pass --data DIR, the folder to keep the data branch in")
    with checkout(conf["_root"], args.branch, args.remote, args.data) as folder:
        print(f"{folder}: {args.branch} of {args.remote}, {len(nights(folder))} nights of "
              f"{len(runners(folder))} runners", flush=True)
    return 0
