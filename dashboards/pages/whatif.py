"""What-if: a budget slider over the predicted ITL/TTFT/throughput curves of the loaded run or steps.

The recommendation is `stallscope.analyzers.budget.recommend_budget`'s, the call `stallscope whatif`
and `analyze` make: on a run directory with the run's own inputs (`DataSource.whatif_inputs`, what
`stallscope whatif --from` resolves), otherwise with inputs rebuilt from the loaded steps and metrics.
It runs once per data version through the data source's memo; the callbacks only read it. Without a
step trace there is nothing to fit, and the page says so.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, dcc, html

from stallscope.dashboards import data
from stallscope.render.figures import empty_figure
from stallscope.core.errors import ToolkitError

dash.register_page(__name__, path="/whatif", name="What-if", order=6)

DEFAULT_BUDGETS = (256, 512, 1024, 2048, 4096)   # slider marks until the data names its candidates

layout = html.Div([
    html.H2("What-if: chunk budgets"),
    html.P("The engine's own scheduler replayed in simulated time on this workload, with step costs fitted on the "
           "recorded steps (docs/whatif.md). Move the slider to read one budget.", className="note"),
    html.Div(id="whatif-body"),
    dcc.Slider(id="whatif-budget", min=0, max=len(DEFAULT_BUDGETS) - 1, step=1, value=None,
               marks={i: str(b) for i, b in enumerate(DEFAULT_BUDGETS)}),
    dcc.Graph(id="whatif-curves"),
    html.Div(id="whatif-selected"),
], className="page")


def _steps_and_samples(src):
    """One arm's steps (the first, when a run has several) and the samples when there is one target."""
    frames = src.frames()
    steps, samples = frames.get("steps"), frames.get("samples")
    arms = src.step_targets()
    if arms:
        steps = steps[steps["target"] == arms[0]]
    if samples is not None and "target" in samples and samples["target"].nunique() > 1:
        samples = None
    return steps, samples, (arms[0] if arms else "")


def result(src) -> dict | str:
    """The what-if result for the current data, or a sentence saying why there is none.

    {"predictions", "recommendation", "budgets" (recommend_budget's), "inputs", "note"}.
    """
    def compute():
        from stallscope.analyzers.budget import inputs_from_frames, recommend_budget
        inputs, note = src.whatif_inputs(), ""
        if isinstance(inputs, str):
            inputs, note = None, f"Not simulating the run as a whole: {inputs}. "
        if inputs is None:
            steps, samples, arm = _steps_and_samples(src)
            if steps is None or len(steps) == 0:
                return note + "What-if needs recorded engine steps (a run directory's steps.jsonl, --trace FILE)."
            try:
                inputs = inputs_from_frames(steps, samples, source=f"arm {arm}" if arm else "the step trace")
            except ToolkitError as exc:
                return note + f"What-if cannot run on these steps: {exc}"
        try:
            out = recommend_budget(inputs, float(src.thresholds["itl_slo_s"]), include_unchunked=True)
        except ToolkitError as exc:
            return note + f"What-if cannot run on these inputs: {exc}"
        return {**out, "inputs": inputs, "note": note}
    return src.memo(("whatif",), compute)


def _budget_at(res: dict, index) -> int:
    """The slider position's budget; no position yet means the recommended one."""
    budgets = res["budgets"]
    if index is None:
        return res["recommendation"]["max_num_batched_tokens"]
    return budgets[min(max(int(index), 0), len(budgets) - 1)]


@callback(Output("whatif-body", "children"), Input("app-live", "n_intervals"))
def update(_tick):
    src = data.current()
    res = result(src)
    steps = src.frames()["steps"]
    if isinstance(res, str):
        return html.P(f"What-if simulation is installed; {len(steps):,} recorded steps available. {res}",
                      id="whatif-ready")
    rec, inputs = res["recommendation"], res["inputs"]
    cost = inputs.cost.summary()
    fit = (f"MAPE {cost['mape']:.0%}, R² {cost['r2']:.2f}" if cost.get("mape") is not None else "fit error unknown")
    return html.P(f"What-if simulation is installed; {len(steps):,} recorded steps available. {res['note']}"
                  f"Simulating {inputs.source}: step cost fitted on {cost['n_steps']:,} steps ({fit}); workload "
                  f"from {inputs.workload.source}. "
                  f"{'Recommended' if rec['meets_slo'] else 'No budget meets the SLO; closest'}: {rec['flags']} "
                  f"({rec['reason']}).", id="whatif-ready")


@callback(Output("whatif-budget", "max"), Output("whatif-budget", "marks"), Output("whatif-budget", "value"),
          Input("app-live", "n_intervals"), State("whatif-budget", "value"))
def slider(_tick, value):
    """The slider's stops are the simulated budgets; it starts on the recommended one."""
    res = result(data.current())
    budgets = DEFAULT_BUDGETS if isinstance(res, str) else res["budgets"]
    if value is None and not isinstance(res, str):
        value = budgets.index(res["recommendation"]["max_num_batched_tokens"])
    return len(budgets) - 1, {i: str(b) for i, b in enumerate(budgets)}, value


@callback(Output("whatif-curves", "figure"), Output("whatif-selected", "children"),
          Input("whatif-budget", "value"), Input("app-live", "n_intervals"))
def curves(budget_index, _tick):
    from stallscope.render.figures_whatif import whatif_curves

    src = data.current()
    res = result(src)
    if isinstance(res, str):
        return empty_figure("Predicted per --max-num-batched-tokens", res), ""
    budget = _budget_at(res, budget_index)
    preds = res["predictions"]
    rec = res["recommendation"]
    fig = whatif_curves(preds, slo_s=rec["itl_slo_s"], selected=budget, recommended=rec["max_num_batched_tokens"])
    row = preds[(preds["max_num_batched_tokens"] == budget) & preds["enable_chunked_prefill"]].iloc[0]
    verdict = "meets" if row["itl_p99_s"] <= rec["itl_slo_s"] else "misses"
    text = (f"--max-num-batched-tokens {budget}: ITL P99 {row['itl_p99_s'] * 1e3:.0f} ms ({verdict} the "
            f"{rec['itl_slo_s'] * 1e3:.0f} ms SLO), ITL P50 {row['itl_p50_s'] * 1e3:.0f} ms, TTFT P99 long "
            f"{row['ttft_long_p99_s']:.2f} s / short {row['ttft_short_p99_s']:.2f} s, "
            f"{row['output_tok_s']:.1f} output tokens/s.")
    return fig, text
