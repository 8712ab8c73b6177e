"""Fleet ranking: episodes from per-window severities with the detectors' merging, the order, drill windows,
and the heat map / HTML built from them."""

from __future__ import annotations

import numpy as np

from stallscope.analyzers import fleet as A

NS = 1_000_000_000
STEP = 60 * NS
TS = np.arange(20, dtype=np.int64) * STEP


def test_episodes_merge_like_the_detectors():
    impaired = np.zeros(20)
    impaired[[2, 3, 5]] = 2       # one window apart: one episode (episodes.find)
    impaired[[10]] = 3            # alone, critical
    impaired[[13]] = 1            # interference only: info
    load = np.zeros(20)
    load[6] = 1                   # prefill load one window after the first episode: decode starvation
    kv = np.zeros(20)
    kv[[7, 8]] = 1                # near full, the pool never ran out: the drill-down's kv_near_full, not pressure
    kv[[14]] = 2                  # a single window is not KV pressure (at least two)
    kv[[16, 17]] = 3
    eps = A.replica_episodes({"impaired": impaired, "load": load, "kv_pressure": kv}, TS, 60 * NS, STEP)
    got = [(e.kind, e.severity, e.start_ns // STEP, e.end_ns // STEP) for e in eps]
    assert got == [("decode_starvation", "warning", 2, 5), ("stream_stall", "critical", 10, 10),
                   ("stream_stall", "info", 13, 13),
                   ("kv_pressure", "critical", 14, 17)]  # the lone window at 14 joins across one gap
    assert A.seconds_by_kind(eps, STEP) == {"decode_starvation": 240.0, "stream_stall": 120.0, "kv_pressure": 240.0}


def test_ranking_puts_episode_time_first_then_severity_then_absence():
    ones = np.ones(20)
    masks = {"clean": {}, "dead": {"absent": A.absent_mask(np.r_[np.ones(10), np.zeros(10)], 0)},
             "short-critical": {"impaired": np.r_[np.full(2, 3.0), np.zeros(18)]},
             "short-warning": {"impaired": np.r_[np.full(2, 2.0), np.zeros(18)]},
             "long": {"kv_pressure": 2 * ones}, "near-full": {"kv_pressure": ones}}
    ranked = A.triage(masks, {}, TS, 60 * NS, STEP)
    assert [r.name for r in ranked] == ["long", "short-critical", "short-warning", "dead", "clean", "near-full"]
    assert ranked[3].seconds == {"absent": 600.0} and ranked[3].episode_seconds == 0


def test_absence_counts_only_after_the_fleet_reported():
    assert list(A.absent_mask(np.array([0, 0, 1, np.nan, 1]), 2)) == [0, 0, 0, 1, 0]


def test_drill_windows_join_close_episodes_and_keep_the_longest():
    mk = A.FlaggedRun
    eps = [mk("decode_starvation", "warning", 100 * NS, 160 * NS), mk("kv_pressure", "warning", 1000 * NS, 1100 * NS),
           mk("absent", "warning", 0, 5000 * NS), mk("decode_starvation", "warning", 9000 * NS, 9060 * NS)]
    got = A.drill_windows(eps, 60 * NS, 0, 10_000 * NS, join_ns=1800 * NS, most=1)
    assert got == [(0, 1160 * NS)]  # 100..1100 joined, padded 2 windows before (clipped at 0), 1 after
    assert len(A.drill_windows(eps, 60 * NS, 0, 10_000 * NS, join_ns=1800 * NS)) == 2


def test_heat_map_codes_and_html_escape_labels():
    from stallscope.render import fleet as R

    impaired = np.zeros(20)
    impaired[3] = 3
    load = np.zeros(20)
    load[3] = 1
    kv = np.zeros(20)
    kv[[5, 6]] = 2
    masks = {'pod=<b>x</b>': {"impaired": impaired, "load": load, "kv_pressure": kv,
                              "absent": np.r_[np.zeros(19), 1.0]}}
    ranked = A.triage(masks, {'pod=<b>x</b>': {"pod": "<b>x</b>"}}, TS, 60 * NS, STEP)
    report = A.FleetReport(ranked, int(TS[0]), int(TS[-1]), STEP, 60 * NS, ("pod",), "raw", masks=masks)
    names, z = R.heat_codes(report)
    assert names == ['pod=<b>x</b>'] and z[0, 3] == 7 and z[0, 5] == 2 and z[0, 19] == 1 and z[0, 0] == 0
    html = R.fleet_html(report)
    assert "pod=&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html.split("<h2>Ranking</h2>")[1]
    text = R.fleet_text(report)
    assert "1 of 1 with any" in text and "critical" in text
