"""vLLM `/metrics` → the `samples` frame: every vLLM generation mapped to one vocabulary.

The idea: the scrape is parsed by `prometheus_client`'s parser (never by regex) and each sample becomes
one row; one alias table renames the metrics vLLM renamed over its releases (vllm.md §1.4), so nothing
downstream has to know which version it is looking at:

    vllm:gpu_cache_usage_perc          → vllm:kv_cache_usage_perc
    vllm:time_per_output_token_seconds → vllm:inter_token_latency_seconds   (same buckets, same meaning)
    vllm:gpu_prefix_cache_*            → vllm:prefix_cache_*   (+ label unit="blocks" when HELP says blocks, 0.8.x)

When a scrape carries both spellings (0.9–0.14 emit them side by side) the new name wins and the old
rows are dropped. `_created` families (single-process mode) are dropped; labels are kept as scraped
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


def canonical(name: str) -> tuple[str, str | None]:
    """(today's spelling, the old family it renames or None) of a family or sample name.

    >>> canonical("vllm:gpu_prefix_cache_hits_total")
    ('vllm:prefix_cache_hits_total', 'vllm:gpu_prefix_cache_hits')
    """
    for old, new in ALIASES.items():
        if name == old or name.startswith(old + "_"):
            return new + name[len(old):], old
    return name, None


def _map_families(families: list) -> list:
    names = {f.name for f in families}
    created_bases = {f.name for f in families if f.type in _COLLECTED_TYPES}
    out = []
    for fam in families:
        new, old = canonical(fam.name)
        drop = (old is not None and new in names) or (
            fam.name.endswith("_created") and fam.name[:-8] in created_bases)
        extra = {"unit": "blocks"} if old in MAY_BE_BLOCKS and "blocks" in fam.documentation else {}
        for s in fam.samples:
            if drop or s.name.endswith("_created"):
                out.append(None)
                continue
            metric = new + s.name[len(fam.name):] if old else s.name
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
