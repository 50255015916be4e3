"""The notebooks are saved with their outputs, as notebooks/make_notebooks.py writes and runs them: the same cells,
each run in order, no error, no folder of the machine that ran them; and they still run top to bottom on the CPU
(each asserts what it shows)."""
import importlib.util
import json
import re

import nbformat
import pytest

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# absolute paths of a machine: a home, a temporary or a work folder (the outputs name files relative to the repository)
MACHINE_PATH = re.compile(r"(?<![\w.])(/root\b|/home/\w|/Users/\w|/tmp/|/var/folders/|/work/|[A-Z]:\\\\)")


def _maker():
    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "notebooks" / "make_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _texts(nb) -> list[str]:
    """Every text a notebook's outputs hold (images left out)."""
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            out.append(o.get("text", ""))
            out += [v for k, v in o.get("data", {}).items() if k.startswith("text/")]
            out += o.get("traceback", [])
    return out


def test_there_are_three_and_make_notebooks_writes_them():
    assert [p.name for p in NOTEBOOKS] == sorted(_maker().NOTEBOOKS) and len(NOTEBOOKS) == 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_with_the_outputs_of_its_cells(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    ref = _maker().build(path.name)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in ref.cells], \
        "the notebook is not what make_notebooks.py writes: run python notebooks/make_notebooks.py"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run top to bottom, once"
    assert all(c.outputs for c in code[1:]), "every cell after the set-up shows something"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    text = "\n".join(_texts(nb))
    assert "Traceback" not in text and "Error" not in text
    assert not re.search(r"\d+%\|", text), "a progress bar (with its timings) was saved"
    assert path.stat().st_size < 200_000, "outputs kept small"
    for c in nb.cells:  # the whole file but its images: sources, outputs, metadata
        for o in c.get("outputs", []):
            o.get("data", {}).pop("image/png", None)
    found = MACHINE_PATH.search(json.dumps(nb))
    assert not found, found
    assert not any("execution" in c.metadata for c in nb.cells), "cell timings were saved"


def test_the_first_notebook_shows_its_plot_and_its_findings():
    nb = nbformat.read(ROOT / "notebooks" / "01_algorithms_side_by_side.ipynb", as_version=4)
    pngs = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(pngs) == 1
    text = "\n".join(_texts(nb))
    assert re.search(r"entropy +\d+ of \d+ thresholds moved", text) and "entropy-stable    0 of" in text


def test_machine_paths_in_an_output_are_refused():
    maker = _maker()
    nb = maker.build("03_cache_in_tensorrt.ipynb")
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"wrote {ROOT}/runs/x.cache\n")]
    with pytest.raises(ValueError, match="a folder of this machine"):
        maker.clean(nb)
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stderr",
                                                  text="calibrate: 100%|#####| 32/32 [00:02<00:00, 14.2img/s]\n")]
    assert maker.clean(nb).cells[2].outputs == []


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    """Run again from its cells (about 15 s each on two cores): every assertion in it holds on this checkout."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("nbclient")
    nb = _maker().execute(_maker().build(path.name))
    text = "\n".join(_texts(nb))
    assert "Traceback" not in text
    assert not any(o.output_type == "error" for c in nb.cells for o in c.get("outputs", []))
    def kinds(book):  # what each cell shows, warnings (which depend on the installed versions) left out; a warning
        # between two prints splits their stdout in two outputs, which are one without it: adjacent streams count once
        shown = [[o.output_type for o in c.get("outputs", []) if o.get("name") != "stderr"] for c in book.cells]
        return [[k for i, k in enumerate(ks) if not (k == "stream" and i and ks[i - 1] == "stream")] for ks in shown]

    assert kinds(nb) == kinds(nbformat.read(path, as_version=4)), \
        "the saved outputs are stale: run python notebooks/make_notebooks.py"
