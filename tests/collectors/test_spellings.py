"""Every spelling of vLLM's namespace reads as one family set: `vllm:`, `vllm_` (OpenTelemetry), `ray_vllm:` and
`ray_vllm_` (Ray Serve), through the parser, the scrape import, `analyze` and a real Prometheus."""

import json
import time

import pandas as pd
import pytest

from expo_frames import simulate_starvation, to_openmetrics, write_arm
from respell import DERIVED, FIXTURES, SPELLINGS, respell
from stallscope.cli import main
from stallscope.collectors import loader, vllm

NS = 10**9
ORIGINALS = ["v0_6_6.txt", "v0_8_5_v1.txt", "v0_10_2.txt", "v0_10_2_multiprocess_2engines.txt",
             "v0_33_0_custom_itl_buckets.txt", "refserver_tiny.txt"]


def _frame(text: str) -> pd.DataFrame:
    df = vllm.parse(text, ts=1)
    return df.drop(columns="source_metric").assign(labels=df["labels"].map(lambda d: tuple(sorted(d.items()))))


@pytest.mark.parametrize("name", ORIGINALS)
@pytest.mark.parametrize("prefix", SPELLINGS)
def test_a_respelled_capture_parses_to_the_same_frame(name, prefix):
    text = (FIXTURES / name).read_text()
    want, got = _frame(text), _frame(respell(text, prefix))
    pd.testing.assert_frame_equal(want, got)
    assert got["metric"].str.startswith("vllm:").sum() > 20


@pytest.mark.parametrize("derived", sorted(DERIVED))
def test_the_derived_fixtures_are_what_respell_writes(derived):
    src, prefix = DERIVED[derived]
    text = (FIXTURES / derived).read_text()
    assert text.split("\n", 1)[1] == respell((FIXTURES / src).read_text(), prefix)
    df = vllm.parse(text, ts=1)
    assert df["source_metric"].str.startswith(prefix).all()
    assert pd.Series(df["metric"]).str.startswith("vllm:").all()
    if src == "v0_10_2.txt":  # 0.10.2 carries the old and new KV names side by side: the new one wins
        assert (df["metric"] == "vllm:kv_cache_usage_perc").sum() == 1
        assert not df["source_metric"].str.contains("gpu_cache_usage").any()


def test_prefix_map_keeps_suffixes_and_prefers_todays_spelling():
    assert vllm.canonical("vllm_request_success_total") == ("vllm:request_success_total", None)
    assert vllm.canonical("ray_vllm:gpu_prefix_cache_hits_total") == ("vllm:prefix_cache_hits_total",
                                                                      "vllm:gpu_prefix_cache_hits")
    assert vllm.spelling("vllm_") == "vllm_" and vllm.spelling("vllmx_y") == "vllmx_y"
    assert vllm.superseded({"vllm:num_requests_running", "vllm_num_requests_running", "ray_vllm:x"}) == {
        "vllm_num_requests_running"}
    both = "vllm:num_requests_running 3\nvllm_num_requests_running 4\n"
    assert vllm.parse(both, ts=1)["value"].tolist() == [3.0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spell")
    texts = []
    _, steps = simulate_starvation(30, texts=texts)
    for prefix in ("vllm:", *SPELLINGS):
        write_arm(root / prefix.replace(":", "C"), [(ts, respell(t, prefix) if prefix != "vllm:" else t)
                                                    for ts, t in texts], steps)
    return root


def _analyze(capsys, argv):
    code = main(["analyze", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_analyze_gives_identical_findings_and_quantiles_for_every_spelling(runs, capsys):
    code, want = _analyze(capsys, [str(runs / "vllmC"), "--fail-on", "info"])
    assert code == 1 and {f["kind"] for f in want["findings"]} == {"decode_starvation"}
    for prefix in SPELLINGS:
        got_code, got = _analyze(capsys, [str(runs / prefix.replace(":", "C")), "--fail-on", "info"])
        assert got_code == code and got["findings"] == want["findings"], prefix
        assert got["quantiles"] == want["quantiles"], prefix
        assert got["request_views"] == want["request_views"] and len(want["request_views"]) >= 15, prefix


def test_collect_import_stores_the_canonical_names(runs, tmp_path, capsys):
    db = tmp_path / "s.db"
    assert main(["collect", "--db", str(db), "--import", str(runs / "ray_vllmC" / "scrapes.jsonl"), "--quiet"]) == 0
    capsys.readouterr()
    want = loader.load(runs / "vllmC")["vllm"]["samples"]
    got = loader.load(db)["vllm"]["samples"]
    got = got[got["metric"].astype(str).str.startswith("vllm:")]  # the store adds `up` and scrape_duration_seconds
    assert set(got["metric"].astype(str)) == set(want["metric"])
    assert len(got) == len(want) and got["value"].sum() == pytest.approx(want["value"].sum())


def _jsonl(path, texts):
    with open(path, "w") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"ts": 1_764_400_000 + i, "target": "node", "text": t}) + "\n")


NODE = "# TYPE node_load1 gauge\nnode_load1 0.5\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"


def test_a_target_with_no_vllm_family_is_named_and_nothing_recognised_exits_2(runs, tmp_path, capsys, caplog):
    _jsonl(tmp_path / "node.jsonl", [NODE] * 5)
    assert main(["analyze", str(tmp_path / "node.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error: no vLLM or DCGM metric recognised in node") and err.count("\n") == 1
    # beside a vLLM run, the blind target is warned about by name and the run is still analysed
    caplog.clear()
    code, out = _analyze(capsys, [str(runs / "vllm_"), str(tmp_path / "node.jsonl"), "--fail-on", "info"])
    assert code == 1 and out["findings"]
    assert any("node.jsonl/node exposes no vLLM" in r.getMessage() and "node_load1" in r.getMessage()
               for r in caplog.records)


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus", "promtool")
def test_prometheus_source_reads_every_spelling(tmp_path):
    from promserver import PrometheusServer, backfill_openmetrics

    t0 = (int(time.time()) // 3600 - 2) * 3600 * NS
    samples, _ = simulate_starvation(20, t0_ns=t0)
    om = to_openmetrics(samples)
    parts = [om.replace("# EOF\n", "")] + [
        respell(om, p).replace("# EOF\n", "").replace('model_name="m"', f'instance="{p}",model_name="m"') for p in SPELLINGS]
    storage = tmp_path / "tsdb"
    backfill_openmetrics("".join(parts) + "# EOF\n", storage, tmp_path)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        got = loader.load(prom.url, t0, t0 + 20 * NS, step="1s")
    df = pd.concat([f["samples"] for f in got.values()])
    by_instance = df.groupby(df["labels"].map(lambda d: d.get("instance", "vllm:")))
    counts = {i: (set(g["metric"]), len(g), round(g["value"].sum(), 6)) for i, g in by_instance}
    assert set(counts) == {"vllm:", *SPELLINGS}
    assert all(counts[p] == counts["vllm:"] for p in SPELLINGS) and len(counts["vllm:"][0]) >= 5


from hypothesis import assume, given, strategies as st  # noqa: E402

_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,30}", fullmatch=True)


@given(rest=_NAMES, prefix=st.sampled_from(SPELLINGS))
def test_every_spelling_of_any_name_maps_to_the_vllm_colon_name(rest, prefix):
    assert vllm.canonical(prefix + rest) == vllm.canonical("vllm:" + rest)
    assume(not rest.startswith(("vllm_", "ray_vllm_")))
    assert vllm.spelling(rest) == rest  # a name outside vLLM's namespace is never renamed
