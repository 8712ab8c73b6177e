"""vLLM `/metrics` → the `samples` frame: every vLLM generation mapped to one vocabulary.

The idea: the scrape is parsed by `prometheus_client`'s parser (never by regex) and each sample becomes
one row; one alias table renames the metrics vLLM renamed over its releases (vllm.md §1.4), so nothing
downstream has to know which version it is looking at:

    vllm:gpu_cache_usage_perc          → vllm:kv_cache_usage_perc
    vllm:time_per_output_token_seconds → vllm:inter_token_latency_seconds   (same buckets, same meaning)
    vllm:gpu_prefix_cache_*            → vllm:prefix_cache_*   (+ label unit="blocks" when HELP says blocks, 0.8.x)

Every spelling of the prefix reads as `vllm:` (`spelling()`): `vllm_` (an OpenTelemetry pipeline
rewrites colons to underscores), `ray_vllm:` and `ray_vllm_` (Ray Serve's metrics export). The map is by
prefix only (`vllm_` + rest → `vllm:` + rest), so `_bucket`/`_sum`/`_count`/`_total` suffixes stay as
they are; `source_metric` keeps the name as scraped.

When a scrape carries both spellings (0.9–0.14 emit them side by side) the new name wins and the old
rows are dropped; likewise `vllm:` wins over any other prefix spelling of the same family. `_created` families (single-process mode) are dropped; labels are kept as scraped
(V0 has no `engine`); bucket bounds come from each scrape's `le`; unknown metrics are kept unchanged.

    >>> df = parse(open("tests/fixtures/vllm_metrics/v0_6_6.txt").read(), ts=0)
    >>> df.loc[df.metric == "vllm:kv_cache_usage_perc", "value"].item()
    0.8125
"""

from __future__ import annotations

import math
import time

import pandas as pd

from stallscope.collectors.exposition import ParseCache, parse_rows, scrape  # noqa: F401 - scrape is public here
from stallscope.core.errors import CollectorError
from stallscope.core.schema import samples_frame

# old family name → new family name
ALIASES: dict[str, str] = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_hit_rate": "vllm:prefix_cache_hit_rate",
}
MAY_BE_BLOCKS = {"vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"}  # old families whose HELP may say blocks
_COLLECTED_TYPES = {"counter", "histogram", "summary", "gaugehistogram"}


PREFIXES = ("vllm:", "vllm_", "ray_vllm:", "ray_vllm_")  # every spelling of vLLM's namespace, read as `vllm:`
PROMQL_NAME_RE = "(ray_)?vllm[:_].+"  # the same set, as a PromQL `__name__=~` regex (fully anchored)


def spelling(name: str) -> str:
    """`name` with any vLLM prefix spelling mapped to `vllm:` (by prefix only; other names unchanged).

    >>> spelling("ray_vllm_e2e_request_latency_seconds_bucket")
    'vllm:e2e_request_latency_seconds_bucket'
    """
    for prefix in PREFIXES[1:]:
        if name.startswith(prefix) and len(name) > len(prefix):
            return "vllm:" + name[len(prefix):]
    return name


def canonical(name: str) -> tuple[str, str | None]:
    """(today's spelling, the old family it renames or None) of a family or sample name.

    >>> canonical("vllm:gpu_prefix_cache_hits_total")
    ('vllm:prefix_cache_hits_total', 'vllm:gpu_prefix_cache_hits')
    >>> canonical("vllm_gpu_cache_usage_perc")
    ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
    """
    name = spelling(name)
    for old, new in ALIASES.items():
        if name == old or name.startswith(old + "_"):
            return new + name[len(old):], old
    return name, None


def is_vllm(name: str) -> bool:
    """Whether a (canonical or scraped) metric name is in vLLM's namespace, any spelling."""
    return name.startswith(PREFIXES)


def rank(name: str) -> tuple[bool, bool]:
    """How far a scraped name is from today's spelling: (an old alias, another prefix); lower wins."""
    return canonical(name)[1] is not None, spelling(name) != name


def superseded(names) -> set[str]:
    """The scraped names to drop because a better spelling of the same family is also present."""
    best: dict[str, tuple] = {}
    for n in names:
        new = canonical(n)[0]
        best[new] = min(best.get(new, (True, True)), rank(n))
    return {n for n in names if rank(n) > best[canonical(n)[0]]}


def _map_families(families: list) -> list:
    dropped = superseded({f.name for f in families})
    created_bases = {f.name for f in families if f.type in _COLLECTED_TYPES}
    out = []
    for fam in families:
        new, old = canonical(fam.name)
        drop = fam.name in dropped or (fam.name.endswith("_created") and fam.name[:-8] in created_bases)
        extra = {"unit": "blocks"} if old in MAY_BE_BLOCKS and "blocks" in fam.documentation else {}
        for s in fam.samples:
            if drop or s.name.endswith("_created"):
                out.append(None)
                continue
            metric = new + s.name[len(fam.name):]
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            labels.update(extra)
            le = float(s.labels["le"]) if "le" in s.labels else math.nan
            out.append((metric, s.name, labels, le))
    return out


def parse(text: str, ts: int | None = None, *, cache: ParseCache | None = None) -> pd.DataFrame:
    """Parse one vLLM exposition text into the `samples` frame (schema.FRAMES["samples"]).

    `ts` is the scrape time in ns (default: now). Pass one `ParseCache` per target when parsing
    repeated scrapes of the same endpoint: the result is identical, only faster.

        >>> parse('vllm:num_requests_running{engine="0",model_name="m"} 3\\n', ts=1).value.tolist()
        [3.0]
    """
    if not isinstance(text, str):
        raise CollectorError(f"vLLM exposition must be text, got {type(text).__name__}")
    rows, values = parse_rows(text, _map_families, cache, what="vLLM /metrics scrape")
    metric, source, labels, le = zip(*rows) if rows else ((),) * 4
    return samples_frame(time.time_ns() if ts is None else int(ts), metric, source, [dict(d) for d in labels], le,
                         values)
