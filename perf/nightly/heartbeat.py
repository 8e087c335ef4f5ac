"""Heartbeat: a runner whose nights stopped arriving is an issue, closed when they return.

    python -m perf nightly heartbeat [--branch perf-data] [--remote origin] [--data DIR]
                                     [--max-age-hours 36] [--repo OWNER/NAME] [--dry-run DIR]

A nightly that no longer runs says nothing: no results, no alert, a dashboard that looks
as it did. So a job of its own (no GPU) reads the data branch (perf/nightly/store.py) and, for
every runner with a folder under nights/, takes the time its newest night was measured; a
runner silent for longer than `--max-age-hours` gets one issue (key `heartbeat/<runner>`,
through the tracker of perf/ci/github.py: updated each run, never duplicated), and the issue
is closed with a comment once a night of the runner lands again. `--dry-run DIR` writes the
issues as JSON files into DIR instead of GitHub.

A runner that never saved a night has no folder to be found by: the machines listed in
thresholds.yaml (`<vendor>.runners.nightly_runners`) are expected, and one of them with no night
on the branch is missing, with an issue of the same key (closed once its first night lands), once
its listing is older than `--max-age-hours`: the listing's time is that of the oldest commit that
added its name to thresholds.yaml (`git log -S`; the workflow's heartbeat job checks out the whole
history), so a runner just added is not missing before its first night was due. A name in no
commit yet (an edit not committed) is listed now; where git cannot tell (no repository), the
runner is missing at once, as if listed long ago.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from dataclasses import dataclass

from perf.nightly import store

# A nightly runs every 24 hours; 12 more allow for a late or slow run before anyone is told
# (a default chosen by reasoning: a runner that missed one night is told the next day).
MAX_AGE_HOURS = 36.0
KEY_PREFIX = "heartbeat/"
LABELS = ("perf-heartbeat",)


@dataclass(frozen=True)
class Beat:
    """A runner's last sign of life: its newest night and when it was measured."""

    runner: str
    night: store.Night | None
    seen: _dt.datetime | None  # when the newest night was measured (UTC)
    age_hours: float | None
    silent: bool
    expected: bool = False  # listed in thresholds.yaml (runners.nightly_runners)
    listed: _dt.datetime | None = None  # when it was listed (an expected runner without a night)

    @property
    def key(self) -> str:
        return KEY_PREFIX + self.runner


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def seen_at(night: store.Night, now: _dt.datetime | None = None) -> _dt.datetime:
    """When a night was measured: its results' time (perf.results.load, the one reader, and the
    names rule's time: not after `now` and a day). A night whose results cannot be read, or that
    claims a time to come, is a ConfigError: dated by its folder it would look alive."""
    from perf import names

    return names.time(night.results().environment.get("time"), f"{night.results_path}: environment.time",
                      now)


def beats(data: str, now: _dt.datetime, max_age_hours: float = MAX_AGE_HOURS,
          expected: tuple[str, ...] = (), listed: dict | None = None) -> list[Beat]:
    """Every runner of the checkout `data` and every `expected` one, silent or not, by name; an
    expected runner without a night is silent (missing) once it was listed (`listed`: runner ->
    UTC time) more than `max_age_hours` ago, or at once when `listed` does not say when."""
    out = []
    for runner in sorted({*store.runners(data), *expected}):
        night = store.newest(data, runner)
        if night is None:  # no folder, or a folder with no night in it: silent since it was listed
            since = (listed or {}).get(runner)
            age = (now - since).total_seconds() / 3600 if since is not None else None
            out.append(Beat(runner, None, None, age, age is None or age > max_age_hours, runner in expected,
                            since))
            continue
        seen = seen_at(night, now)
        age = (now - seen).total_seconds() / 3600
        out.append(Beat(runner, night, seen, age, age > max_age_hours, runner in expected))
    return out


def issue(beat: Beat, max_age_hours: float, branch: str) -> tuple[str, str]:
    """(title, body) of a silent runner's issue."""
    if beat.night is None:
        title = f"Nightly runner {beat.runner} has no night on {branch}"
        when = (f", listed since {beat.listed.isoformat(timespec='minutes')}" if beat.listed else "")
        since = (f"no night of it is on the data branch, though thresholds.yaml expects one "
                 f"(`runners.nightly_runners`{when}): it is missing; check that the name is the machine "
                 f"`perf nightly` prints on that runner" if beat.expected else
                 "no night of it is on the data branch (its folder is empty)")
    else:
        title = f"Nightly runner {beat.runner} silent since {beat.night.date}"
        since = (f"its newest night, `nights/{beat.runner}/{beat.night.date}/`, was measured at "
                 f"{beat.seen.isoformat(timespec='minutes')}, {beat.age_hours:.0f} hours ago")
    body = "\n".join([
        f"## {title}", "",
        f"The nightly saves one folder per runner and night to the branch `{branch}` "
        f"(`python -m perf nightly save`); for runner `{beat.runner}` {since}, more than the "
        f"{max_age_hours:g} hours the heartbeat allows (`--max-age-hours`).", "",
        "Check that the runner is online and picks up the nightly workflow's jobs, and the "
        "workflow's latest runs (a job that fails before `nightly save` leaves no night). "
        "This issue is updated while the runner stays silent and closed when its next night lands.",
    ])
    return title, body


def heartbeat(data: str, tracker, now: _dt.datetime, max_age_hours: float = MAX_AGE_HOURS,
              branch: str = store.BRANCH, say=print, expected: tuple[str, ...] = (),
              listed: dict | None = None) -> list[Beat]:
    """Open or update the issue of each silent (or `expected` but missing) runner of `data`,
    close those of runners heard from again; the beats."""
    found = beats(data, now, max_age_hours, expected, listed)
    open_keys = tracker.open_keys()
    for beat in found:
        if beat.silent:
            title, body = issue(beat, max_age_hours, branch)
            number = tracker.upsert(beat.key, title, body, LABELS)
            say(f"{beat.runner}: silent ({title}); issue #{number}")
        elif beat.key in open_keys:
            back = f"`nights/{beat.runner}/{beat.night.date}/`"
            tracker.close(beat.key, f"Nights are back: {back} was measured at "
                                    f"{beat.seen.isoformat(timespec='minutes')}.")
            say(f"{beat.runner}: heard from again ({beat.night.date}); closed its heartbeat issue")
        elif beat.night is None:
            say(f"{beat.runner}: listed {beat.age_hours:.0f} h ago, no night yet (missing after "
                f"{max_age_hours:g} h)")
        else:
            say(f"{beat.runner}: newest night {beat.night.date}, {beat.age_hours:.0f} h ago")
    return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("heartbeat (perf/nightly/heartbeat.py)")
    g.add_argument("--max-age-hours", type=float, default=MAX_AGE_HOURS,
                   help=f"a runner whose newest night is older is silent (default: {MAX_AGE_HOURS:g})")
    g.add_argument("--repo", default=None, help="OWNER/NAME of the issues (default: $GITHUB_REPOSITORY)")
    g.add_argument("--dry-run", default=None, metavar="DIR",
                   help="write the issues as JSON files into DIR instead of GitHub")


def listed_at(root: str, thresholds: str, runners: tuple[str, ...], now: _dt.datetime) -> dict:
    """Runner -> when thresholds.yaml first listed it (module docstring): the oldest commit adding
    its name; `now` for a name in no commit yet; left out where git cannot tell."""
    import os

    from perf import git

    path = os.path.relpath(os.path.abspath(thresholds), root)
    out = {}
    for runner in runners:
        when = git.first_change_time(root, path, runner)
        if when is not None:
            out[runner] = _dt.datetime.fromisoformat(when).astimezone(_dt.timezone.utc) if when else now
    return out


def main(args: argparse.Namespace, conf: dict) -> int:
    from perf.ci import github
    from perf.errors import NothingMeasured
    from perf.thresholds import load_thresholds

    expected = load_thresholds(args.thresholds).nightly_runners()
    tracker = github.tracker(args.repo, args.dry_run)

    def run(folder: str) -> int:
        if not store.runners(folder) and not expected:
            raise NothingMeasured(f"{args.branch}: no runner has a night on it yet (nights/ is empty); the "
                                  f"heartbeat starts once `python -m perf nightly save` has run, or once "
                                  f"thresholds.yaml lists the machines it expects (runners.nightly_runners)")
        now = _now()
        silent = heartbeat(folder, tracker, now, args.max_age_hours, args.branch, expected=expected,
                           listed=listed_at(conf["_root"], args.thresholds, expected, now))
        print(f"heartbeat: {sum(b.silent for b in silent)} of {len(silent)} runners silent for more than "
              f"{args.max_age_hours:g} hours", flush=True)
        return 0

    if args.data:
        return run(store.check_data(args.data))
    with store.checkout(conf["_root"], args.branch, args.remote) as folder:
        return run(folder)
