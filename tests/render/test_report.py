"""The standalone HTML report: self-contained, shows the evidence, and escapes every input string."""

import pandas as pd

from expo_frames import simulate_starvation, write_arm
from stallscope.analyzers.diagnose import Report
from stallscope.analyzers.finding import Finding
from stallscope.analyzers import signals
from stallscope.render import html as report
from stallscope.cli import main
from stallscope.render import figures

EVIL = '<script>alert("x")</script>'


def test_report_escapes_labels_targets_and_findings(tmp_path):
    texts = []
    simulate_starvation(30, texts=texts)
    write_arm(tmp_path / "run" / "off", texts, target=EVIL)
    out = tmp_path / "r.html"
    assert main(["analyze", str(tmp_path / "run"), "--html", str(out), "--format", "json", "--fail-on", "info"]) == 1
    page = out.read_text()
    assert EVIL not in page and "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # tables and findings, escaped
    assert page.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in page
    assert "<script src=" not in page  # plotly.js is inlined: the file works offline
    assert "decode_starvation" in page and "--max-num-batched-tokens" in page


def test_figures_escape_target_names_in_traces():
    samples, _ = simulate_starvation(20)
    sig = signals.compute(samples).assign(target=EVIL)
    fig = figures.latency_figure(sig, None, slo_s=0.2)
    names = [t.name for t in fig.data if t.name]
    assert names and all("<script>" not in n for n in names)
    assert any("&lt;script&gt;" in n for n in names)


def test_report_sections_with_and_without_signals():
    f = Finding("kv_pressure", "warning", 10**18, 10**18 + 10**9, "a<b>", {"kv_usage_max": 0.9}, "full `cache`",
                "use `--kv-cache-dtype fp8`")
    page = report.render_html(Report(findings=[f]), title="t<1>")
    assert "<title>t&lt;1&gt;</title>" in page
    assert "<code>--kv-cache-dtype fp8</code>" in page and "a&lt;b&gt;" in page
    assert "Timeline" not in page  # no signals, no roofline: no figures
    roof = {"gpu": "H100-SXM", "peak_flops": 989.4e12, "peak_bw": 3.35e12,
            "points": pd.DataFrame({"series": ["h/gpu0"], "intensity": [12.0], "flops": [4e13]})}
    page = report.render_html(Report(roofline=roof), title="t")
    assert "Timeline" in page and "ridge 295 FLOP\\u002fB" in page


def test_report_shows_the_request_views_with_the_analyzers_numbers(tmp_path):
    import re

    from stallscope.analyzers import request_views as RV
    from stallscope.collectors import loader

    texts = []
    simulate_starvation(30, texts=texts)
    write_arm(tmp_path / "run" / "off", texts, target="vllm")
    out = tmp_path / "r.html"
    assert main(["analyze", str(tmp_path / "run" / "off"), "--html", str(out), "--format", "json",
                 "--fail-on", "info"]) == 1
    page = out.read_text()
    assert "<h2>Request-level views</h2>" in page
    samples = loader.load(tmp_path / "run" / "off")["vllm"]["samples"]
    s = RV.summary(samples)
    p99 = s[(s["view"] == "itl") & (s["series"] == "P99")]["text"].item()
    row = re.search(r"<tr><td>Inter-token latency</td><td>model_name=m</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[3] == p99 == "25 ms-50 ms"   # P50, P90, P95, P99, mean: the same text the analyzer gives
    assert "Prefill time (vLLM: Requests Prefill and Decode Time)" in page
