"""The notebooks in docs/notebooks run end to end on a small trace set without an error."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from sim.analysis.load import read_trace_pandas

from .conftest import TraceSets, named_partition

NOTEBOOKS = Path(__file__).resolve().parents[2] / "docs" / "notebooks"


@pytest.fixture
def kernel_of_this_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``python3`` kernel spec that runs this interpreter, ahead of any user-level one."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "kraft-py", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


@pytest.mark.parametrize("name", ["01_trace_to_verdicts.ipynb", "02_failing_run.ipynb"])
def test_notebook_runs_without_error(
    name: str, traces: TraceSets, kernel_of_this_venv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KRAFT_TRACE_DIR", str(traces.mixed))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=kernel_of_this_venv,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "the notebook must draw its plots"
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "runs=" in text and "violations=" in text


def test_kafka_notebook_plots_a_failing_run(
    kafka_traces: Path, kernel_of_this_venv: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left to choose, the kafka notebook draws a violating run: its produce latency and
    availability, then the offsets of the partition the simulator's verdict names."""
    monkeypatch.setenv("KRAFT_TRACE_DIR", str(kafka_traces))
    notebook = nbformat.read(NOTEBOOKS / "03_kafka_run.ipynb", as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=kernel_of_this_venv,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3, "latency and availability, offsets, the report's figure"
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "violations=" in text
    shown = re.search(r"^run: (\S+)$", text, flags=re.MULTILINE)
    assert shown is not None, text
    runs = read_trace_pandas(str(kafka_traces)).runs.set_index("run_id")
    assert runs.loc[shown.group(1), "outcome"] == "violation"
    check, key = named_partition(runs.loc[shown.group(1), "violation"])
    assert f"{check}: {key} offset=" in text
