"""The CLI's error contract, the schema validator and frame builders, and the thresholds loader."""

import subprocess
import sys

import pandas as pd
import pytest

from stallscope.core import schema
from stallscope.cli import main
from stallscope.core.config import load_thresholds, parse_duration
from stallscope.core.errors import ConfigError, SchemaError


def test_unknown_command_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and err.count("\n") == 1


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "stallscope.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "usage: stallscope" in out.stdout


def test_validate_names_missing_column():
    frame = pd.DataFrame({"kind": ["x"], "severity": ["info"]})
    with pytest.raises(SchemaError, match="missing column `start_ns` in findings frame"):
        schema.validate(frame, "findings")


def test_validate_rejects_float_time():
    frame = schema.empty("steps")
    frame = pd.DataFrame({"step": [0], "start_ns": [1.5], "end_ns": [2.0], "num_prefill_tokens": [1.0], "num_decode_tokens": [1.0]})
    with pytest.raises(SchemaError, match="start_ns"):
        schema.validate(frame, "steps")


def test_gpu_frame_keeps_an_optional_column_only_when_some_value_is_non_empty():
    df = schema.gpu_frame(7, "h", ["0", "1"], ["GPU-a", None], "L4", ["power_w", "power_w"], [60, 61.5],
                          pod=["", None], namespace=[None, "ns"], target="dcgm")
    assert list(df.columns) == ["ts", "hostname", "gpu", "uuid", "model", "metric", "value", "namespace", "target"]
    assert df["ts"].tolist() == [7, 7] and df["uuid"].tolist() == ["GPU-a", ""] and df["namespace"].tolist() == ["", "ns"]
    assert all(df[c].dtype == object for c in ("hostname", "gpu", "metric", "target")) and df["value"].sum() == 121.5
    cat = pd.Categorical.from_codes([0, 1], categories=["", "mig-3"])
    empty = pd.Categorical.from_codes([0, 0], categories=[""])
    df = schema.gpu_frame([1, 2], cat, cat, cat, cat, cat, [1.0, 2.0], gpu_instance=cat, pod=empty)
    assert "pod" not in df and df["gpu_instance"].dtype == "category" and df["gpu_instance"].tolist() == ["", "mig-3"]


def test_samples_frame_uses_arrays_as_given():
    import numpy as np

    value = np.array([1.0, 2.0])
    df = schema.samples_frame(np.array([5, 6]), ["a", "b"], ["a", "b"], [{}, {"le": "x"}], [np.nan, 1.0], value)
    assert "target" not in df and np.shares_memory(df["value"].to_numpy(), value)
    assert df["labels"].tolist() == [{}, {"le": "x"}] and df["metric"].dtype == object
    assert len(schema.samples_frame(0, (), (), (), (), (), target="t").columns) == 7


def test_steps_frame_numbers_steps_and_casts_declared_columns():
    df = schema.steps_frame([{"start_ns": 10, "end_ns": 20, "num_prefill_tokens": 3, "num_decode_tokens": 0,
                              "kv_blocks_used": 4, "num_scheduled_tokens": {"r": 3}}] * 2)
    assert df["step"].tolist() == [0, 1] and df["kv_blocks_used"].dtype == "float64"
    assert df["end_ns"].dtype == "int64" and df["num_scheduled_tokens"][1] == {"r": 3}


def test_thresholds_defaults_and_overrides(tmp_path):
    t = load_thresholds()
    assert t["itl_slo_s"] == 0.2 and t["kv_usage_high"] == 0.8
    assert load_thresholds(itl_slo_s=0.1)["itl_slo_s"] == 0.1
    bad = tmp_path / "t.yaml"
    bad.write_text("nope: 1\n")
    with pytest.raises(ConfigError, match="unknown threshold 'nope'"):
        load_thresholds(bad)


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("5m", 300), ("1h30m", 5400), ("0m", 0), ("250ms", 0.25)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_rejects_garbage():
    with pytest.raises(ConfigError, match="bad duration '5x'"):
        parse_duration("5x")


def test_a_missing_python_module_is_a_user_error_with_the_install_hint(capsys, monkeypatch):
    """A dependency absent from the environment (here httpx, which loadgen needs) is exit 2 and one line that
    names it and says how to reinstall, not an internal error."""
    import sys
    monkeypatch.setitem(sys.modules, "httpx", None)          # `import httpx` now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "stallscope.refserver.loadgen", raising=False)
    assert main(["loadgen", "--url", "http://127.0.0.1:9", "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert err == ("stallscope: error: Python module `httpx` is not installed; reinstall stallscope with its "
                   "dependencies (`pip install -e .` in the checkout)\n")
