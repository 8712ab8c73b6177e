"""analyzers/kernel_summary.py vs an independent plain-SQL + `statistics` computation on real exports."""

import sqlite3
import statistics
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal

import pandas as pd
import pytest
from nsys_cases import nsys_sample
from nsys_cases import WITH_KERNELS

from stallscope.analyzers.kernel_summary import summarize
from stallscope.collectors.nsight_sqlite import read_export


def _r1(x: float) -> float:
    return float(Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _expected(path):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("""SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
                               JOIN StringIds s ON s.id = k.demangledName""").fetchall()
    groups = defaultdict(list)
    for name, dur in rows:
        groups[name].append(dur)
    grand = sum(sum(v) for v in groups.values())
    out = []
    for name, v in groups.items():
        out.append({"name": name, "time_pct": _r1(sum(v) * 100.0 / grand), "total_ns": sum(v), "instances": len(v),
                    "avg_ns": _r1(statistics.fmean(v)), "med_ns": _r1(statistics.median(v)), "min_ns": min(v),
                    "max_ns": max(v), "stddev_ns": _r1(statistics.stdev(v)) if len(v) > 1 else 0.0})
    return sorted(out, key=lambda r: (-r["total_ns"], r["instances"], r["name"]))


@pytest.mark.parametrize("name", WITH_KERNELS)
def test_summary_matches_independent_computation(name):
    path = nsys_sample(name)
    got = summarize(read_export(str(path), with_launches=False).kernels)
    exp = _expected(path)
    assert len(got) == len(exp)
    for g, e in zip(got.to_dict("records"), exp):
        assert g == pytest.approx(e, abs=0.051), (g["name"], g, e)  # .05: last-digit rounding of a float mean
        assert g["name"] == e["name"] and g["total_ns"] == e["total_ns"] and g["instances"] == e["instances"]


def test_sample_stddev_median_of_even_count_and_order():
    k = pd.DataFrame({"start_ns": [0, 100, 300, 1000, 2000], "end_ns": [10, 130, 350, 1020, 2030],
                      "name": ["a", "a", "a", "b", "c"]})
    s = summarize(k)
    assert s["name"].tolist() == ["a", "c", "b"]  # total desc: a=90, c=30, b=20
    a = s.iloc[0]
    assert (a.total_ns, a.instances, a.min_ns, a.max_ns, a.med_ns, a.avg_ns) == (90, 3, 10, 50, 30.0, 30.0)
    assert a.stddev_ns == 20.0  # sample (n-1) stddev of 10, 30, 50
    assert s.iloc[1].stddev_ns == 0.0  # one instance
    assert s["time_pct"].tolist() == [64.3, 21.4, 14.3]
    two = summarize(pd.DataFrame({"start_ns": [0, 0], "end_ns": [10175, 23169], "name": ["x", "x"]}))
    assert two.iloc[0].med_ns == 16672.0 and two.iloc[0].avg_ns == 16672.0


def test_kernels_that_end_before_they_start_or_lie_off_the_clock_are_dropped_with_one_warning(tmp_path, caplog):
    """nsys's cuda_gpu_kern_sum takes end - start as it is; a row with end < start is a broken record,
    not negative GPU time: the reader drops it and says how many, and the summary stays non-negative."""
    from nsys_cases import kernel_export

    pid = 7 << 24
    path = kernel_export(tmp_path / "rev.sqlite", [
        (100, 300, 0, 1, 7, 1, 1, 1, pid), (400, 500, 0, 1, 7, 1, 1, 1, pid),
        (900, 600, 0, 1, 7, 2, 2, 1, pid), (1000, 10, 0, 1, 7, 1, 1, 1, pid), (-(2 ** 63), 2 ** 63 - 1, 0, 1, 7, 2, 2, 1, pid)],
        {1: "gemm", 2: "attn"})
    with caplog.at_level("WARNING"):
        kernels = read_export(str(path)).kernels
    assert [r.getMessage() for r in caplog.records] == [
        "CUPTI_ACTIVITY_KIND_KERNEL: dropped 2 rows that end before they start (a negative duration is no GPU time)",
        "CUPTI_ACTIVITY_KIND_KERNEL: dropped 1 row with a time outside 0..2^60 ns (not a trace clock)"]
    assert kernels["start_ns"].tolist() == [100, 400]
    got = summarize(kernels)
    assert got[["name", "time_pct", "total_ns", "instances"]].values.tolist() == [["gemm", 100.0, 300, 2]]
