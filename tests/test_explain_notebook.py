"""examples/notebooks/categorical_eligibility.ipynb: run by a real notebook runner (nbclient).

The notebook walks the original question (the snippet and its output, the rule, the picture,
the ×100 check, one REINFORCE step of a linear softmax policy) and asserts every number it
shows against torch; here it is executed cell by cell in a fresh ipykernel, and its printed
outputs are held to the question's numbers. The repository keeps it without outputs.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parents[1] / "examples" / "notebooks" / "categorical_eligibility.ipynb"


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.slow
def test_notebook_runs_and_reproduces_the_question(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbclient")
    pytest.importorskip("ipykernel", reason="the dev extra installs ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell (its asserts)
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "probs-grad: tensor([[ 0.3100, -0.6900, -0.6900, -0.6900]])" in text
    assert "log_prob: tensor([-0.3711]" in text and "prob-grad: tensor([1.])" in text
    assert "e = [ 0.44927536 -1.         -1.         -1.        ]" in text
    assert "probs-grad: tensor([[ 0.0031, -0.0069, -0.0069, -0.0069]])" in text
    assert "after one step" in text
    images = [
        o["data"]["image/png"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert len(images) == 1 and base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert (tmp_path / "seed.png").exists()
