"""The What-if page: the slider callback reads the simulation of the loaded frames (no I/O of its own)."""

from __future__ import annotations

import pandas as pd
import pytest

import dashboard_frames as F
from stallscope.dashboards import data
from stallscope.dashboards.app import create_app, page_module
from stallscope.dashboards.data import DataSource
from stallscope.render.figures_whatif import whatif_curves


@pytest.fixture(scope="module")
def page():
    create_app(DataSource.from_frames(F.all_frames(), name="synthetic"))
    return page_module("whatif")


def test_whatif_slider_callback_reads_each_budget(page):
    data.use(DataSource.from_frames(F.all_frames(), name="synthetic"))
    body = page.update(0)
    # the synthetic steps: 16 decodes of 30 ms, a 4096-token whole-prompt prefill of 600 ms every 50 steps
    assert body.id == "whatif-ready" and "400 recorded steps" in body.children
    assert "workload from step counts" in body.children and "--max-num-batched-tokens" in body.children
    # no run directory: inputs from the steps alone, the default candidates (no budget of the run's own) and 896,
    # the largest whose slowest long-prompt step fits 160 ms: 30 ms + (896 - 16 decodes) x 0.139 ms = 152 ms
    max_index, marks, start = page.slider(0, None)
    assert (max_index, list(marks.values())) == (5, ["256", "512", "896", "1024", "2048", "4096"])
    assert marks[start] == "896"
    assert f"--max-num-batched-tokens {marks[start]} (" in body.children   # the slider starts on the recommendation
    fig, text = page.curves(0, 0)
    assert text.startswith("--max-num-batched-tokens 256: ITL P99")
    names = [t.name for t in fig.data]
    assert names[:4] == ["ITL P99", "ITL P50", "TTFT P99, long prompts", "TTFT P99, short prompts"]
    assert "ITL P99, chunking off" in names and "output tok/s" in names
    slow = next(t for t in fig.data if t.name == "slowest long-prompt step")
    assert list(slow.y) == sorted(slow.y) and slow.y[2] <= 0.16 < slow.y[3]   # 896 fits the bound, 1,024 does not
    itl = list(fig.data[0].y)
    assert itl == sorted(itl)                      # a larger budget never lowers the predicted ITL P99 here
    off = next(t for t in fig.data if t.name == "ITL P99, chunking off")
    assert off.y[0] == pytest.approx(0.63, abs=0.05)   # the 600 ms prefill step + a 30 ms decode step
    _, text5 = page.curves(5, 0)
    assert text5.startswith("--max-num-batched-tokens 4096") and "misses" in text5


def test_whatif_page_without_steps_says_why(page):
    frames = {k: v for k, v in F.all_frames().items() if k != "steps"}
    data.use(DataSource.from_frames(frames, name="no steps"))
    fig, text = page.curves(2, 0)
    assert text == "" and "needs recorded engine steps" in fig.layout.annotations[0].text


def test_curves_figure_marks_slo_selection_and_recommendation():
    preds = pd.DataFrame({"max_num_batched_tokens": [256, 512, 2048], "enable_chunked_prefill": [True, True, False],
                          "itl_p99_s": [0.1, 0.3, 0.9], "itl_p50_s": [0.03] * 3, "ttft_long_p99_s": [2.0, 1.5, 1.2],
                          "ttft_short_p99_s": [0.2] * 3, "output_tok_s": [90.0, 95.0, 97.0]})
    fig = whatif_curves(preds, slo_s=0.2, selected=512, recommended=256)
    shapes = fig.layout.shapes
    assert [s.y0 for s in shapes if s.type == "line" and s.y0 == s.y1] == [0.2]
    assert sorted(s.x0 for s in shapes if s.x0 == s.x1) == [256.0, 512.0]
    assert list(fig.layout.xaxis.ticktext) == ["256", "512", "off"]
