"""What one nightly measures and where it goes, passed to its worker processes through the environment.

A sharded night's workers (perf/nightly/shard.py) and a developer's own `asv run`
(perf/asv/benchmarks.py, where asv starts a fresh process for every parameter combination of
every benchmark and each imports the benchmark module, which builds its `params` at import) read
the selection from environment variables that the driver sets once. That keeps them from
importing torch or the kernels to compute it (about 1.8 s each on a 2-core CPU, measured
2026-11-21, against about 0.05 s for this module and PyYAML). Without the variables the same
defaults are computed, only slower.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from perf.checkout import ROOT  # noqa: F401  (collect and scaling measure this checkout)
from perf.errors import ConfigError
from perf.names import slug
from perf.peers import PREFIX as PEER_PREFIX  # noqa: F401  (results name a library's series "peer:<name>")
from perf.vendor import detect

ENV_PREFIX = "PERF_NIGHTLY_"
DEFAULT_SUITE = "nightly"
# Repeat medians per case and commit. Five is the least for which the alert's one-sided
# Mann-Whitney test of the newest commit against two earlier ones (10 values) can reach
# p < 0.01 (thresholds.yaml alpha): the smallest p is 1 / C(15, 5) = 3.3e-4; with three it
# would be 1 / C(9, 3) = 0.012. Unmeasured default otherwise (2026-11-21).
DEFAULT_REPEATS = 5
# Samples per repeat for an `asv run` by hand; `python -m perf nightly` passes thresholds.yaml's
# statistics.samples (reading it here would cost every asv process the thresholds file).
DEFAULT_SAMPLES = 25
# A repeat of a slow case is cut to fewer samples so that it takes about this long (at
# least MIN_SAMPLES): the nightly grid has prefills that take 100 ms and more per call.
# Unmeasured default (2026-11-21), sized so that the grid stays within hours on one GPU.
DEFAULT_REPEAT_BUDGET_MS = 250.0
MIN_SAMPLES = 5
# A case whose one warm call takes longer than this is not timed nightly: it is recorded as a
# skip with its measured call time. Without it most of the suite's time was naive on the
# 32-sequence 32k-token mixed batches (an estimated 94 s a call, 80 calls: 2.3 hours each;
# docs/nightly.md "Runtime"). 5 s keeps every other variant and library on every scenario of
# the nightly suite (the slowest estimate, 1.4 s at shard.py's default 100 TFLOP/s, leaves
# room for a variant 3x slower than that) and naive wherever its call is under 5 s. A policy
# choice (2026-11-22), not a measurement of noise.
DEFAULT_MAX_CALL_MS = 5000.0


@dataclass(frozen=True)
class Selection:
    """The cases of one nightly: suite, scenarios, variants, vendor libraries, sampling."""

    suite: str
    scenarios: tuple[str, ...]  # scenario names (perf.scenarios), in suite order
    variants: tuple[str, ...]  # kernels.VARIANTS names
    peers: tuple[str, ...]  # perf.peers names (vendor libraries) present on this machine
    repeats: int = DEFAULT_REPEATS
    samples: int = DEFAULT_SAMPLES
    budget_ms: float = DEFAULT_REPEAT_BUDGET_MS
    max_call_ms: float = DEFAULT_MAX_CALL_MS
    results: str = ""  # JSON Lines file of this commit's measurement ("" = the default path)

    def to_env(self) -> dict[str, str]:
        return {
            f"{ENV_PREFIX}SUITE": self.suite,
            f"{ENV_PREFIX}SCENARIOS": ",".join(self.scenarios),
            f"{ENV_PREFIX}VARIANTS": ",".join(self.variants),
            f"{ENV_PREFIX}PEERS": ",".join(self.peers) or "none",
            f"{ENV_PREFIX}REPEATS": str(self.repeats),
            f"{ENV_PREFIX}SAMPLES": str(self.samples),
            f"{ENV_PREFIX}BUDGET_MS": str(self.budget_ms),
            f"{ENV_PREFIX}MAX_CALL_MS": str(self.max_call_ms),
            f"{ENV_PREFIX}RESULTS": self.results,
        }

    @classmethod
    def from_env(cls, environ: dict | None = None) -> Selection:
        """The selection the driver exported, or the defaults (suite `nightly`, everything)."""
        env = os.environ if environ is None else environ
        get = lambda key: (env.get(ENV_PREFIX + key) or "").strip()  # noqa: E731
        suite = get("SUITE") or DEFAULT_SUITE
        scenarios = resolve_scenarios(suite, get("SCENARIOS") or None)
        variants = _split(get("VARIANTS")) or default_variants()
        peers_text = get("PEERS")
        peers = () if peers_text == "none" else (_split(peers_text) or default_peers())
        return cls(suite, scenarios, variants, peers,
                   repeats=_positive_int(get("REPEATS"), DEFAULT_REPEATS, "REPEATS"),
                   samples=_positive_int(get("SAMPLES"), DEFAULT_SAMPLES, "SAMPLES"),
                   budget_ms=float(get("BUDGET_MS") or DEFAULT_REPEAT_BUDGET_MS),
                   max_call_ms=float(get("MAX_CALL_MS") or DEFAULT_MAX_CALL_MS),
                   results=get("RESULTS"))


def _split(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _positive_int(text: str, default: int, key: str) -> int:
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"environment: {ENV_PREFIX}{key}={text!r} must be a positive integer; "
                          f"unset it or fix the value")
    return int(text)


def resolve_scenarios(suite: str, patterns: str | None) -> tuple[str, ...]:
    """Scenario names of a suite of perf/suites.yaml, or of a comma-separated list of names and
    fnmatch globs: globs select from the suite, full names are taken as they are."""
    from perf import scenarios as sc

    chosen = sc.suite(suite)
    if not patterns:
        return tuple(s.name for s in chosen)
    names = [p.strip() for p in patterns.split(",") if p.strip()]
    exact = [n for n in names if not any(ch in n for ch in "*?[")]
    globs = [n for n in names if n not in exact]
    out = [s.name for s in sc.select(chosen, ",".join(globs))] if globs else []
    for name in exact:
        try:
            name = sc.Scenario.parse(name).name  # an earlier name: the current one
        except ValueError as e:
            raise ConfigError(f"--scenarios: {e}") from None
        if name not in out:
            out.append(name)
    return tuple(out)


def default_variants() -> tuple[str, ...]:
    """Every registered variant (imports the kernels, hence torch and triton)."""
    import kernels

    return tuple(kernels.VARIANTS)


def default_peers(vendor: str | None = None) -> tuple[str, ...]:
    """The vendor libraries worth measuring on this machine (imports torch)."""
    from perf import peers

    return tuple(peers.peers_for(vendor or detect() or "cpu"))


# --- where things go ----------------------------------------------------------------------


def machine_name(runner: str | None = None, gpu: str | None = None) -> str:
    """`<runner>_<gpu>`: GitHub's RUNNER_NAME (else the host name) and the GPU's name, so
    two runners of one GPU kind keep separate histories (their noise and clocks differ)."""
    runner = runner or os.environ.get("RUNNER_NAME") or socket.gethostname()
    if gpu is None:
        import torch

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu-interpreter"
    return f"{slug(runner)}_{slug(gpu)}"
