"""ConfigError: a mistake the user can fix, reported in one line (no traceback), exit 2.

Every gate raises it for bad input: malformed or unknown-vendor thresholds, a missing base
ref, a dirty worktree, no GPU, results of another schema version. The message is the whole
report, so it names the file, the field and the fix.

Exit codes of every command (perf/cli.py's boundary turns what is raised into them): 0 pass,
1 a regression or a wrong result (ContextLost too), 2 bad input (ConfigError, NothingMeasured,
a missing package), 3 a bug in the harness (any other exception: one `internal error:` line,
the traceback with --debug), 130 interrupted (Ctrl-C or SIGTERM), 141 stdout's reader went
away (`| head`; nothing more is printed).
"""

from __future__ import annotations

EXIT_OK = 0  # pass (warnings allowed)
EXIT_FAIL = 1  # a regression or a wrong result
EXIT_BAD_INPUT = 2  # bad input or configuration
EXIT_INTERNAL = 3  # a bug in the harness: an unexpected exception (traceback with --debug)
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C (128 + SIGINT, as shells report it); what ran is kept
EXIT_BROKEN_PIPE = 141  # stdout's reader went away (`| head`): 128 + SIGPIPE, as coreutils' and git's


class ConfigError(Exception):
    """Bad input or configuration; `str(err)` is the one line to print before exiting 2."""

    exit_code = EXIT_BAD_INPUT


class NothingMeasured(ConfigError):
    """No verdict from zero measured or compared cases: exit 2, never a pass. The message says
    why (a filter that matched nothing, graph metrics without a GPU, a file without records).
    `NothingMeasured(why)` adds the prefix unless `why` already has it."""

    PREFIX = "nothing was measured: "

    def __init__(self, why: str) -> None:
        super().__init__(why if why.startswith(self.PREFIX) else self.PREFIX + why)


# What CUDA/HIP report after a kernel faults the context (sticky errors): every later call in
# the process fails the same way, so measuring on only records the fault again and again.
CONTEXT_LOST_MARKS = ("illegal memory access", "unspecified launch failure", "device-side assert",
                      "misaligned address", "illegal instruction", "hardware exception")


def context_lost(reason: str) -> bool:
    """Whether an error's text says the GPU context is lost (a kernel faulted)."""
    text = reason.lower()
    return any(mark in text for mark in CONTEXT_LOST_MARKS)


class ContextLost(ConfigError):
    """A kernel faulted the GPU context: the process stops, with what finished kept. Reported
    in one line like a ConfigError, but exit 1: a wrong result, not bad input."""

    exit_code = EXIT_FAIL
