"""Fleet triage: the ranking on a real Prometheus holding a synthetic fleet, and every bad input as one line."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, urlparse

import pytest

from promserver import FakePrometheus, matrix
from stallscope.cli import main
from stallscope.core.config import load_thresholds
from stallscope.collectors.prometheus_fleet import Runner
from stallscope.rules import fleet as F
from stallscope.rules import fleet_triage

NS = 1_000_000_000
SECRET = "Bearer s3cr3t-token"


def _vector(*items) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [1, str(v)]} for m, v in items]}}).encode()


def _fake_fleet(fail_pod: str | None = None, status: int = 422, calls: list | None = None):
    """An API with three replicas (pods vllm-0000..2): inventory answers, empty episode answers, and
    `status` for every range query whose text contains `fail_pod` (group regexes escape `-` as `\\-`)."""
    pods = [{"pod": f"vllm-000{i}", "model_name": "m"} for i in range(3)]

    def answer(path):
        url = urlparse(path)
        q = parse_qs(url.query).get("query", [""])[0]
        if calls is not None:
            calls.append((url.path, q))
        if url.path.endswith("/query"):
            if "num_requests_running" in q:
                return 200, _vector(*((p, 16) for p in pods))
            return 200, _vector()
        if fail_pod and fail_pod in q:
            return status, json.dumps({"status": "error", "errorType": "execution",
                                       "error": "query processing would load too many samples into memory"}).encode()
        return 200, matrix()
    return answer


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stallscope: error: "), err
    return err[0]


FLEET = ["analyze", "--fleet", "--since", "2h", "--group-by", "pod,model_name"]


def test_unreachable_url_is_one_line_exit_2_and_no_header_printed(capsys):
    from promserver import free_port

    code = main([*FLEET, "--prometheus", f"http://127.0.0.1:{free_port()}", "--header", f"Authorization:{SECRET}",
                 "--timeout", "2"])
    line = _one_line(capsys)
    assert code == 2 and "unreachable" in line and SECRET not in line and "s3cr3t" not in line


@pytest.mark.parametrize("status,body,needle", [
    (400, b'{"status":"error","errorType":"bad_data","error":"invalid parameter \\"query\\""}', "bad_data"),
    (503, b'{"status":"error","errorType":"unavailable","error":"overloaded"}', "unavailable: overloaded"),
    (500, b"<html>oops</html>", "HTTP 500 with a body that is not JSON"),
])
def test_4xx_and_5xx_are_one_line_exit_2(capsys, status, body, needle):
    with FakePrometheus(lambda path: (status, body)) as prom:
        code = main([*FLEET, "--prometheus", prom.url, "--header", f"Authorization:{SECRET}"])
    line = _one_line(capsys)
    assert code == 2 and needle in line and "s3cr3t" not in line, line


def test_a_selector_matching_nothing_is_one_line_exit_2(capsys):
    with FakePrometheus(lambda path: (200, _vector())) as prom:
        code = main([*FLEET, "--prometheus", prom.url, "--selector", 'namespace="nope"'])
    line = _one_line(capsys)
    assert code == 2 and 'no vLLM replica' in line and 'namespace="nope"' in line


@pytest.mark.parametrize("flags,needle", [
    (["--max-memory", "lots"], "--max-memory 'lots' is not a size"),
    (["--max-memory", "10KB"], "cannot hold one replica's answer"),
    (["--group-by", "pod,le"], "'le' is not a usable Prometheus label name"),
    (["--concurrency", "0"], "--concurrency and --max-samples must be >= 1"),
    (["--header", "no-colon"], "expected NAME:VALUE"),
])
def test_bad_flags_are_one_line_exit_2(capsys, flags, needle):
    with FakePrometheus(_fake_fleet()) as prom:
        code = main([*FLEET, "--prometheus", prom.url, *flags])
    line = _one_line(capsys)
    assert code == 2 and needle in line, line


def test_a_failed_replica_group_is_reported_not_dropped(capsys):
    """One group answers 422 (over the server's sample limit): the others are triaged, the failure is
    named per group in stderr and in the JSON, and the failed replica is not ranked as clean."""
    with FakePrometheus(_fake_fleet("0001")) as prom:
        code = main([*FLEET, "--prometheus", prom.url, "--format", "json", "--max-memory", "1MB"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == 0
    assert [list(f["replicas"]) for f in doc["fleet"]["failures"].values()] == [["pod=vllm-0001,model_name=m"]]
    assert "too many samples" in next(iter(doc["fleet"]["failures"].values()))["error"]
    assert {r["replica"] for r in doc["ranking"]} == {"pod=vllm-0000,model_name=m", "pod=vllm-0002,model_name=m"}
    warn = [ln for ln in out.err.splitlines() if ln.startswith("stallscope: warning:")]
    assert len(warn) == 1 and "vllm-0001" in warn[0] and "not triaged" in warn[0]


def test_every_group_failing_is_exit_2(capsys):
    with FakePrometheus(_fake_fleet("pod=~")) as prom:
        code = main([*FLEET, "--prometheus", prom.url])
    assert code == 2 and "too many samples" in _one_line(capsys)


def test_transient_5xx_is_retried_with_backoff_then_reported():
    calls: list = []
    with FakePrometheus(_fake_fleet("0001", status=503, calls=calls)) as prom:
        now = time.time()
        report = fleet_triage.triage(prom.url, load_thresholds(), now - 3600, now, by=("pod", "model_name"),
                                     max_memory=400_000, retries=2, backoff_s=0.01, drill=False)
    failing = [q for p, q in calls if p.endswith("query_range") and "0001" in q]
    assert len(failing) == 4 * 3  # four expressions, each tried 1 + 2 times
    assert report.stats["retries"] == 8 and list(report.failures.values())[0]["replicas"] == ["pod=vllm-0001,model_name=m"]


@pytest.fixture(scope="module")
def fleet_40x6h(tmp_path_factory):
    """40 replicas x 6 h at 15 s (tests/fleet_data.py), backfilled: (TSDB directory, Truth, t0 unix s)."""
    import fleet_data
    from promserver import promtool

    tmp = tmp_path_factory.mktemp("fleet")
    t0 = (int(time.time()) // 3600 - 8) * 3600
    truth = fleet_data.write(tmp / "fleet.om", 40, 6, t0)
    fleet_data.backfill(tmp / "fleet.om", tmp / "tsdb", promtool())
    (tmp / "fleet.om").unlink()
    return tmp / "tsdb", truth, t0


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_ranking_finds_every_injected_replica_first(fleet_40x6h, capsys, tmp_path):
    from promserver import PrometheusServer

    storage, truth, t0 = fleet_40x6h
    injected = truth.injected()
    k = len(injected)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        code = main(["analyze", "--prometheus", prom.url, "--fleet", "--since", str(t0 * NS), "--until",
                     str((t0 + 6 * 3600) * NS), "--top", "3", "--format", "json", "--max-memory", "12MB",
                     "--html", str(tmp_path / "fleet.html")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["fleet"]["path"] == "raw" and not doc["fleet"]["failures"]
    assert doc["fleet"]["replicas"] == 40 and doc["fleet"]["stats"]["groups"] >= 2  # split by the budget
    pods = [r["labels"]["pod"] for r in doc["ranking"]]
    assert set(pods[:k]) == injected, (pods[:k], injected)  # no clean replica above an injected one
    for r in doc["ranking"][:k]:
        pod = r["labels"]["pod"]
        want = {kind for kind, _, _ in truth.episodes.get(pod, [])} or {"absent"}
        assert set(r["kinds"]) == want, (pod, r["kinds"], want)
        for kind, a, b in truth.episodes.get(pod, []):  # every injected episode overlaps a found one
            assert any(e["kind"] == kind and e["start_ns"] <= b * NS and e["end_ns"] >= a * NS
                       for e in r["episodes"]), (pod, kind, a, b)
    assert all(not r["kinds"] for r in doc["ranking"][k:])  # counter resets and clean replicas: no episode
    assert all(r["labels"]["pod"] not in truth.resets for r in doc["ranking"][:k])
    drilled = [r for r in doc["ranking"] if r["findings"] is not None]
    assert len(drilled) == 3  # the raw pull only for the top K
    for r in drilled:
        assert {f["kind"] for f in r["findings"]} >= set(r["kinds"]) - {"absent"}, r["replica"]
    html = (tmp_path / "fleet.html").read_text()
    assert "fleet: replica x time, coloured by kind" in html and "vllm-0000" in html


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_a_query_over_the_server_sample_limit_is_one_line_exit_2(fleet_40x6h, capsys, tmp_path):
    """A server started with --query.max-samples=20000 while the triage is told the default (50 M): every
    group's query is refused, one line, exit 2."""
    from promserver import PrometheusServer

    storage, _, t0 = fleet_40x6h
    with PrometheusServer(tmp_path, storage=storage, extra_args=["--query.max-samples=20000"]) as prom:
        code = main(["analyze", "--prometheus", prom.url, "--fleet", "--since", str(t0 * NS), "--until",
                     str((t0 + 6 * 3600) * NS)])
    line = _one_line(capsys)
    assert code == 2 and "too many samples" in line, line


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_recorded_path_ranks_the_ci_fleet_as_the_raw_path(fleet_40x6h, tmp_path):
    """rules/fleet.rules.yaml backfilled by promtool over the CI fleet: `auto` reads the recorded window tests
    (path "recorded", grid aligned to the rule evaluations) and ranks every replica exactly as the raw path
    on the same grid: the same order, episodes (kind, span, severity) and absent time; a selector on a
    label the rules do not keep is refused for --fleet-path recorded."""
    import shutil

    import fleet_data
    from conftest import ROOT
    from promserver import PrometheusServer, promtool
    from stallscope.core.errors import InputError

    src, truth, t0 = fleet_40x6h
    storage, end, th = tmp_path / "tsdb", t0 + 6 * 3600, load_thresholds()
    since = t0 + 1800  # the rules backfilled from half an hour into the data
    shutil.copytree(src, storage)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        fleet_data.backfill_rules(ROOT / "rules" / "fleet.rules.yaml", prom.url, since, end, storage, tmp_path,
                                  promtool())
    with PrometheusServer(tmp_path, storage=storage) as prom:
        rec = fleet_triage.triage(prom.url, th, since, end, drill=False)
        raw = fleet_triage.triage(prom.url, th, rec.start_ns / NS - 60, end, path="raw", drill=False)
        with pytest.raises(InputError, match="identity labels .* only, not 'job'"):
            fleet_triage.triage(prom.url, th, t0, end, path="recorded", matchers=[("job", "=", "vllm")], drill=False)
        runner = Runner(prom.url)
        assert fleet_triage.choose_path(runner, th, "auto", ("pod", "model_name"), [], since, end, 60, 60) == "raw"
        assert fleet_triage.choose_path(runner, th, "auto", F.DEFAULT_IDENTITY, [], since, end, 120, 120) == "raw"
        assert fleet_triage.choose_path(runner, th, "auto", F.DEFAULT_IDENTITY, [("pod", "=~", "vllm-00.*")],
                                        since, end, 60, 60) == "recorded"
        assert fleet_triage.choose_path(runner, th, "auto", F.DEFAULT_IDENTITY, [], t0, end, 60, 60) == "raw"
        assert fleet_triage.choose_path(runner, th, "recorded", F.DEFAULT_IDENTITY, [], t0, end, 60, 60) == "recorded"
    assert (rec.path, raw.path) == ("recorded", "raw") and rec.start_ns == raw.start_ns and rec.end_ns == raw.end_ns
    assert rec.stats["groups"] < raw.stats["groups"] and not rec.failures and not raw.failures

    def ranking(report):
        return [(r.name, r.seconds, [(e.kind, e.start_ns, e.end_ns, e.severity) for e in r.episodes])
                for r in report.replicas]
    assert ranking(rec) == ranking(raw)
    # The grid's first point reads the window [first - 1m, first]; `first` moves with the rule group's
    # evaluation offset (a hash of the rule file's path), so a stall ending inside that first window may or
    # may not be flagged. Every replica whose stall lasts past the first two windows must be; none whose
    # stalls all end before the first window begins may be.
    flagged = {r.labels["pod"] for r in rec.replicas if r.kinds()}
    first, w = rec.start_ns / NS, rec.window_ns / NS
    must = {pod for pod, eps in truth.episodes.items() if any(b > first + w for _, _, b in eps)}
    may = {pod for pod, eps in truth.episodes.items() if any(b > first - w for _, _, b in eps)}
    assert must | set(truth.dead) <= flagged <= may | set(truth.dead), (flagged, must, may, first - since)


def test_rules_cli_renders_the_fleet_group_from_the_thresholds(tmp_path, capsys):
    """`stallscope rules --group fleet` prints the stallscope-fleet group promtool accepts; the short window
    names the series and sets the group's interval (one sample per window)."""
    import yaml

    from stallscope.rules import fleet_recorded

    out = tmp_path / "fleet.yaml"
    assert main(["rules", "--group", "fleet", "--window-short", "30s", "-o", str(out)]) == 0
    (group,) = yaml.safe_load(out.read_text())["groups"]
    th = load_thresholds(windows={"short": "30s"})
    assert group["name"] == "stallscope-fleet" and group["interval"] == "30s"
    assert [r["record"] for r in group["rules"]] == [fleet_recorded.names(th)[k] for k in
                                                     ("presence", "impaired", "load", "long_prefill", "kv_pressure")]
    assert all(r["record"].endswith("30s") and "[30s]" in r["expr"] for r in group["rules"])
    capsys.readouterr()
    assert main(["rules", "--check", str(out)]) == 0
    assert "SUCCESS: 5 rules found" in capsys.readouterr().out


def test_thanos_params_reach_the_server_and_partial_responses_are_reported(capsys):
    """--query-param goes with every query (max_source_resolution, partial_response); an answer carrying
    `warnings` (a store missing) is kept and reported per group."""
    paths: list = []
    inner = _fake_fleet()

    def answer(path):
        paths.append(path)
        code, body = inner(path)
        if "query_range" in path:
            doc = json.loads(body)
            doc["warnings"] = ["store 10.0.0.9:10901 unavailable"]
            body = json.dumps(doc).encode()
        return code, body
    with FakePrometheus(answer) as prom:
        code = main([*FLEET, "--prometheus", prom.url, "--query-param", "max_source_resolution=0s",
                     "--query-param", "partial_response=true", "--header", "X-Scope-OrgID:tenant-a",
                     "--format", "json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == 0 and len(doc["ranking"]) == 3
    (group, fail), = doc["fleet"]["failures"].items()
    assert group.endswith("(partial response)") and "store 10.0.0.9:10901 unavailable" in fail["error"]
    assert "triaged from a partial response" in out.err
    ranged = [p for p in paths if "/query_range?" in p]
    assert ranged and all("max_source_resolution=0s" in p and "partial_response=true" in p for p in ranged)


def test_query_param_may_not_override_the_query(capsys):
    with FakePrometheus(_fake_fleet()) as prom:
        assert main([*FLEET, "--prometheus", prom.url, "--query-param", "step=1h"]) == 2
    assert "set by stallscope itself" in _one_line(capsys)


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_dashboard_fleet_source_triages_then_loads_only_the_clicked_replica(fleet_40x6h, tmp_path):
    from promserver import PrometheusServer
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    storage, truth, t0 = fleet_40x6h
    with PrometheusServer(tmp_path, storage=storage) as prom:
        src = DataSource.from_prometheus(prom.url, since_s=time.time() - t0, live=False, fleet=True)
        create_app(src)
        data.use(src)
        assert len(src.frames()["samples"]) == 0  # nothing raw before a replica is chosen
        fig, summary = page_module("fleet").update(0)
        top = fig.data[0].y[0]
        assert top.split("pod=")[1].split(",")[0] in truth.episodes and summary.startswith("40 replicas")
        assert page_module("fleet").open_replica({"points": [{"y": top}]}) == "/latency"
        pods = {lab.get("pod") for lab in src.frames()["samples"]["labels"]}
        assert pods == {top.split("pod=")[1].split(",")[0]}
        itl, _ = page_module("latency").update(0)
        assert len(itl.data) >= 1
