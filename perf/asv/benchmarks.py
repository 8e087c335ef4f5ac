"""asv benchmarks: every variant and vendor library x the nightly suite, GPU medians in ms.

`track_latency_ms` (eager launch) and `track_graph_ms` (CUDA/HIP-graph replay) return the
median, over the repeats, of perf.measure.timing's per-repeat medians; asv treats larger as worse,
which holds for times. Parameters are (variant or library, scenario) from the selection
that `python -m perf nightly` exports (perf/nightly/selection.py says why through the
environment); `setup` raises NotImplementedError, asv's way of skipping, for a variant
that lacks a feature of the scenario or a library that is absent or refuses the shape.

The GPU work happens once per commit, in one process: `setup_cache` reads the results
file the nightly driver has just measured for this commit (perf/nightly/collect.py) or,
when asv runs on its own, measures it there. asv's spawn launcher (CUDA and forked children
do not mix) then starts one process per parameter combination and benchmark, each of
which only looks its number up: they never import torch.

`version` is pinned so that editing these bodies keeps the history; change it only when a
number starts to mean something else. Scenario parameters are perf/scenarios.py's names
(`llama3-8b/decode/batch32-kv1024/block16`); asv keeps parameter values inside its result
files, never in file names, so their `/` is safe. asv has no way to rename a parameter value:
its series under the names used before the rename (`llama3-8b_bs16_b32_s1024_d100`) end
there and the new ones start fresh (our own history, perf/nightly/history.py, continues).
"""

import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # asv imports this file as a top-level package from perf/
    sys.path.insert(0, ROOT)

from perf.nightly import selection as _selection  # noqa: E402

SELECTION = _selection.Selection.from_env()
PEER = _selection.PEER_PREFIX
# Setting up measures the whole suite when asv runs without the driver: hours, not asv's
# default 60 s. The nightly job's own limit (240 min, perf/ci/workflows.py) is the real bound.
SETUP_CACHE_TIMEOUT = 4 * 3600


def _lookup(cache: dict, name: str, scenario: str) -> dict:
    entry = cache["cases"].get((name, scenario))
    if entry is None:
        raise NotImplementedError(f"{name} {scenario}: not in this commit's measurement {cache['path']}")
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    return entry


def _value(cache: dict, name: str, scenario: str, metric: str) -> float:
    entry = _lookup(cache, name, scenario)
    if metric in entry:
        return entry[metric]
    reason = entry.get("errors", {}).get(metric) or entry.get("error")
    if reason:
        raise RuntimeError(f"{name} {scenario} {metric}: {reason}")
    return math.nan  # not measurable here (graphs without a GPU): asv shows n/a


class _Measured:
    unit = "ms"
    version = "1"
    timeout = 120  # a lookup; starting the process is most of it

    def setup_cache(self):
        from perf.nightly import collect

        out = SELECTION.results or _selection.default_results(ROOT)
        return collect.load_or_measure(SELECTION, out)

    setup_cache.timeout = SETUP_CACHE_TIMEOUT

    def setup(self, cache, name, scenario):
        _lookup(cache, self.prefix + name, scenario)

    def track_latency_ms(self, cache, name, scenario):
        return _value(cache, self.prefix + name, scenario, "eager")

    def track_graph_ms(self, cache, name, scenario):
        return _value(cache, self.prefix + name, scenario, "graph")


class PagedAttention(_Measured):
    """The kernel family (kernels.VARIANTS), paged KV cache."""

    prefix = ""
    params = [list(SELECTION.variants), list(SELECTION.scenarios)]
    param_names = ["variant", "scenario"]


if SELECTION.peers:

    class VendorLibrary(_Measured):
        """The vendor's libraries on the same batches (perf.peers; "dense" ones read dense copies)."""

        prefix = PEER
        params = [list(SELECTION.peers), list(SELECTION.scenarios)]
        param_names = ["library", "scenario"]
