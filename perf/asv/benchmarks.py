"""asv benchmarks: every variant and vendor library x the nightly suite, GPU medians in ms.

`track_latency_ms` (eager launch) and `track_graph_ms` (CUDA/HIP-graph replay) are the median,
over the repeats, of perf.measure.timing's per-repeat medians; asv treats larger as worse, which
holds for times. Parameters are (variant or library, scenario).

A night runs none of them: the nightly measures in one process of its own (perf/nightly/
collect.py), keeps the night in its store (perf/nightly/store.py), and `perf nightly publish`
writes asv's results from the store under these classes' names, parameters, unit and version
(perf/nightly/asvrun.py, which names them; a test keeps the two equal) before `asv publish` draws
them. The classes stay for the code asv's site shows and for a developer's own `asv run`: there
`setup_cache` reads the night's results file once (the selection's PERF_NIGHTLY_RESULTS, else this
commit's newest night in the local store), and each process asv starts looks its number up in what
that one read returned; `setup` raises NotImplementedError, asv's way of skipping, for a variant
that lacks a feature of the scenario or a library that is absent or refuses the shape. Nothing here
measures or imports torch.

`version` is pinned so that editing these bodies keeps the history; change it only when a
number starts to mean something else. Scenario parameters are perf/scenarios.py's names
(`llama3-8b/decode/batch32-kv1024/block16`); asv keeps parameter values inside its result
files, never in file names, so their `/` is safe. asv's series under the names used before the
rename (`llama3-8b_bs16_b32_s1024_d100`) are written under the new names from the store, whose
reader renames them (perf.results).
"""

import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # asv imports this file as a top-level package from perf/
    sys.path.insert(0, ROOT)

from perf.nightly import asvrun as _asvrun  # noqa: E402
from perf.nightly import selection as _selection  # noqa: E402

SELECTION = _selection.Selection.from_env()
PEER = _selection.PEER_PREFIX


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
    unit = _asvrun.UNIT
    version = _asvrun.VERSION
    timeout = _asvrun.TIMEOUT  # a lookup; starting the process is most of it

    def setup_cache(self):
        return _asvrun.summarize(SELECTION.results or _asvrun.night_of_head(ROOT))

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
