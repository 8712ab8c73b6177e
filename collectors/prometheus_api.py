"""Fleet source: Prometheus HTTP API `query_range` → the same frames as the store (placeholder)."""

from stallscope.errors import CollectorError


def load(url, start, end, *, selector, step=None, targets=None):
    raise CollectorError("the Prometheus source is not yet implemented")
