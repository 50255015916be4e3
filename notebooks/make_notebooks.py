"""Writes the notebooks in this folder from the cells below, runs each top to bottom on the CPU and saves it with
its outputs, so that it reads on a repository page as it ran:

    python notebooks/make_notebooks.py            # all three; or name some: ... 01_algorithms_side_by_side.ipynb

Run it after editing a cell (nbclient, nbformat and ipykernel come with the dev extra). tests/test_notebooks.py
checks that the saved notebooks hold exactly these cells, each run, and runs them again.

The notebooks start in this folder, as Jupyter starts them, move to the repository and name every file relative to
it, so no output names a folder of the machine that ran them; a saved output that does is an error here. Progress bars (their rates are
timings) and cell timings are left out of the saved outputs, and cell ids are fixed, so that running the script
again changes only what the code prints.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
PROGRESS = re.compile(r"\d+%\|.*\|")  # a tqdm line: `calibrate: 100%|#####| 64/64 [00:04<00:00, 14.2img/s]`

SETUP = """import os
from pathlib import Path
import numpy as np
if Path.cwd().name == "notebooks":
    os.chdir("..")  # the repository: every path below is relative to it, as in the README's commands
ROOT = Path(".")
GOLDEN = ROOT / "tests" / "golden" / "trt86-h200"
OUT = ROOT / "runs" / "notebooks"
OUT.mkdir(parents=True, exist_ok=True)"""

MOBILENET = """from calib.calibrate import calibrate
from calib.data.sources import make_source
from calib.recipe import DataSpec, PreprocessSpec
model = GOLDEN / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"
pre = PreprocessSpec(resize=(256,), crop=(224,), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
photos = str(ROOT / "datasets" / "photos_crops")"""

NOTEBOOKS = {
    "01_algorithms_side_by_side.ipynb": [
        ("md", "# Calibration algorithms side by side\n\nOne statistics pass over the data feeds every "
               "algorithm. Here: torchvision's MobileNetV2 (ImageNet weights, the model TensorRT 8.6 calibrated "
               "in `tests/golden`) on real photos (`datasets/photos_crops`): 64 crops to calibrate, 128 others "
               "to evaluate. The algorithms differ by 16 points of top-1 agreement with FP32 here, which is why "
               "calib compares them per model instead of trusting one. Beside the four default algorithms, "
               "`entropy-stable`: the KL search of TensorRT's entropy calibrator on calib's own histogram."),
        ("code", SETUP),
        ("code", MOBILENET + """
ALGOS = ["minmax", "entropy", "entropy-stable", "percentile", "mse"]
calib_src = make_source(DataSpec(kind="folder", path=photos, limit=64, seed=0), pre, "input", 16)
eval_src = make_source(DataSpec(kind="folder", path=photos, limit=128, offset=64, seed=0), pre, "input", 16)
res = calibrate(model, calib_src, ALGOS, batch_size=16)
for algo, amax in res.amax.items():
    print(f"{algo:15s}", "  ".join(f"{t.split('/')[-2] if '/' in t else t}={amax[t]:.3g}" for t in list(amax)[:4]))"""),
        ("md", "Where each algorithm puts its threshold on three activations (log scale): minmax takes the "
               "largest value seen, the others clip the long tail."),
        ("code", """import matplotlib.pyplot as plt
COLORS = {"minmax": "r", "entropy": "b", "entropy-stable": "c", "percentile": "g", "mse": "m"}
tensors = [t for t in res.amax["minmax"] if "Conv" in t][:3]
fig, axes = plt.subplots(1, 3, figsize=(14, 3))
for ax, t in zip(axes, tensors):
    h = res.stats.histogram(t)
    top = h.absmax
    ax.bar(np.linspace(0, top, 256, endpoint=False), np.maximum(h.resample(256, top), 0.5), width=top / 256,
           color="0.6", log=True, align="edge")
    for algo, amax in res.amax.items():
        ax.axvline(amax[t], label=f"{algo} {amax[t]:.3g}", color=COLORS[algo])
    ax.set_title(t.split("/")[-3] if t.count("/") > 2 else t, fontsize=9); ax.legend(fontsize=8)
plt.show()"""),
        ("md", "The INT8 simulation of each on the 128 held-out crops: top-1 agreement with FP32 with its 95 % "
               "interval, and logits SQNR."),
        ("code", """from calib.evaluate.api import evaluate
ev = evaluate(model, res.amax, eval_src, task="classification", layerwise=False)
agree = {}
for algo, e in ev["configs"].items():
    t = e["task"]["agreement_top1"]
    agree[algo] = t["value"] if isinstance(t, dict) else t
    ci = e["task"].get("intervals", {}).get("agreement_top1") or (t.get("ci95") if isinstance(t, dict) else None)
    print(f"{algo:15s} top-1 agreement {agree[algo]:.3f} {ci or ''}  logits SQNR {e['outputs']['logits']['sqnr_db']:.1f} dB")
# what this notebook shows: on real photos the clipping algorithms beat minmax by a wide margin
assert min(agree["percentile"], agree["mse"]) > agree["minmax"] + 0.08, agree
assert max(agree.values()) - min(agree.values()) > 0.1, agree"""),
        ("md", "Batch size and order. TensorRT's EntropyCalibration2 spreads its 2048 bins over the first "
               "batch's absmax (doubling the width when a later batch goes past it), and calib's `entropy` "
               "computes it the same way, so the first batch's range moves its thresholds. The other "
               "algorithms read calib's histograms, whose power-of-two bins merge exactly: the same 64 crops at "
               "batch size 4 instead of 16 change none of their bits."),
        ("code", """small = make_source(DataSpec(kind="folder", path=photos, limit=64, seed=0), pre, "input", 4)
again = calibrate(model, small, ALGOS, batch_size=4)
moved = {}
for algo in ALGOS:
    a, b = res.amax[algo], again.amax[algo]
    moved[algo] = [t for t in a if a[t] != b[t]]
    worst = max((max(a[t], b[t]) / min(a[t], b[t]) for t in moved[algo]), default=1.0)
    print(f"{algo:15s} {len(moved[algo]):3d} of {len(a)} thresholds moved" + (f", up to {worst:.2f}x" if moved[algo] else ""))
assert moved["entropy"] and not any(moved[a] for a in ALGOS if a != "entropy"), moved"""),
    ],
    "02_reading_a_report.ipynb": [
        ("md", "# Reading an accuracy-drop report, diffing caches, deciding what to fall back\n\nThe CLI "
               "writes `report.json` next to the HTML; everything in the HTML is in the JSON. This notebook "
               "calibrates MobileNetV2 on 64 real photo crops from the command line, evaluates minmax and "
               "percentile on 128 others, reads the report's decision (with its interval), diffs the two caches "
               "and asks the fallback search which layers to keep in float for a 15 dB logits SQNR (among the "
               "first 12 layers, to keep it short)."),
        ("code", SETUP),
        ("code", """import json
from click.testing import CliRunner
from calib.cli import main
model, photos = GOLDEN / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx", ROOT / "datasets" / "photos_crops"
pre = ["--resize", "256", "--crop", "224", "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
def cli(*a):
    r = CliRunner().invoke(main, ["--quiet", *map(str, a)])
    print(r.output)
    assert r.exit_code == 0, r.output
cli("calibrate", model, "--data", photos, *pre, "--limit", "64", "--algo", "minmax,percentile", "--out", OUT / "caches")
cli("evaluate", model, "--cache", OUT / "caches" / "minmax.cache", "--cache", OUT / "caches" / "percentile.cache",
    "--data", photos, *pre, "--limit", "128", "--offset", "64", "--task", "classification", "--no-layerwise",
    "--out", OUT / "report")
report = json.loads((OUT / "report" / "report.json").read_text())
d = report["summary"]["decision"]
print("ship:", d["ship"], "-", d["reason"])
# what this notebook shows: percentile beats minmax beyond noise on these photos
assert d["ship"] == "percentile" and d["status"] == "best", d"""),
        ("md", "Where minmax and percentile disagree most (ratio of amax, percentile / minmax):"),
        ("code", """cli("cache", "diff", OUT / "caches" / "minmax.cache", OUT / "caches" / "percentile.cache", "--top", "5")"""),
        ("code", """import onnx
from calib.data.sources import make_source
from calib.quantize.cache import read_cache
from calib.quantize.qdq import quantizable_layers
from calib.recipe import DataSpec, PreprocessSpec
from calib.search.fallback import Scorer, budget_target, rank, search
spec = PreprocessSpec(resize=(256,), crop=(224,), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
src = make_source(DataSpec(kind="folder", path=str(photos), limit=16, offset=64, seed=0), spec, "input", 16)
x = next(iter(src))["input"]
m = onnx.load(str(model))
scorer = Scorer(m, read_cache(OUT / "caches" / "percentile.cache").amaxes(), [({"input": x}, None)], "output_sqnr")
ranking = rank(scorer, quantizable_layers(m)[:12])
found = search(scorer, ranking, budget_target("output_sqnr", scorer.fp32_score, 0, 15.0))
print("all INT8:", round(found["int8_score"], 1), "dB; keep in FP16:", found["float_layers"], "->", round(found["score"], 1), "dB")
assert found["score"] >= 15.0 > found["int8_score"] and len(found["float_layers"]) < 12, found"""),
    ],
    "03_cache_in_tensorrt.ipynb": [
        ("md", "# Reusing a calibration cache in a production TensorRT build\n\nA cache from calib is what "
               "TensorRT itself writes: `TRT-8600-EntropyCalibration2`, then `tensor: hex(float32 amax/127)`. "
               "TensorRT reads it through a calibrator whose class matches the header and then never asks for "
               "a batch. Here: MobileNetV2 (ImageNet weights) calibrated on 32 real photo crops. Where TensorRT "
               "is not installed the cells say what they would do; the Q/DQ model is written anywhere."),
        ("code", SETUP),
        ("code", MOBILENET + """
src = make_source(DataSpec(kind="folder", path=photos, limit=32, seed=0), pre, "input", 16)
res = calibrate(model, src, ["entropy"], batch_size=16, out=OUT / "trt")
cache = OUT / "trt" / "entropy.cache"
print("".join(cache.read_text().splitlines(keepends=True)[:5]))
print(f"trtexec --onnx={model} --int8 --fp16 --calib={cache} --saveEngine=mobilenet_v2.engine")"""),
        ("code", """try:
    import tensorrt as trt
except ImportError:
    trt = None
    print("TensorRT is not installed here: the next cell shows the builder code and skips the build.")

CALIBRATOR = '''
class CacheCalibrator(trt.IInt8EntropyCalibrator2):
    def __init__(self, path):
        super().__init__(); self.path = path
    def get_batch_size(self): return 1
    def get_batch(self, names): return None          # never called: the cache is complete
    def read_calibration_cache(self): return open(self.path, "rb").read()
    def write_calibration_cache(self, cache): pass
'''
print(CALIBRATOR)"""),
        ("code", """if trt is not None:
    exec(CALIBRATOR)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(model.read_bytes())
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.INT8)
    config.int8_calibrator = CacheCalibrator(str(cache))
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (1, 3, 224, 224), (8, 3, 224, 224), (8, 3, 224, 224))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    print("engine bytes:", len(plan))
else:
    print("skipped: no TensorRT")"""),
        ("md", "TensorRT 10/11 use explicit quantization: the same scales as a Q/DQ ONNX model (TensorRT 11 "
               "has no implicit INT8 at all):"),
        ("code", """from click.testing import CliRunner
from calib.cli import main
qdq = OUT / "trt" / "mobilenet_v2.qdq.onnx"
r = CliRunner().invoke(main, ["cache", "convert", str(cache), "--model", str(model), "--to", "qdq", "-o", str(qdq)])
print(r.output)
assert r.exit_code == 0 and qdq.is_file(), r.output
print(f"trtexec --onnx={qdq} --int8 --fp16")"""),
    ],
}


def build(name: str) -> nbf.NotebookNode:
    """The notebook `name` as its cells say, without outputs."""
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
                for kind, src in NOTEBOOKS[name]]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    nb.metadata["kernelspec"] = dict(KERNEL)
    return nb


def execute(nb: nbf.NotebookNode, timeout: int = 600) -> nbf.NotebookNode:
    """Runs `nb` in a fresh kernel, in this folder, on this checkout's calib; its outputs cleaned (`clean`)."""
    from nbclient import NotebookClient

    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    NotebookClient(nb, timeout=timeout, kernel_name=KERNEL["name"], record_timing=False,
                   resources={"metadata": {"path": str(HERE)}}).execute(env=env)
    return clean(nb)


def _lines_kept(text: str) -> str:
    """A stream's text without progress-bar lines (each line as a terminal leaves it: after its last \\r)."""
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join(line for line in lines if not PROGRESS.search(line))


def machine_paths() -> list[str]:
    """Folders of this machine that no saved output may name."""
    found = {str(REPO), str(Path.home()), tempfile.gettempdir(), sys.prefix, sys.base_prefix,
             str(Path(sys.executable).resolve().parent)}
    return sorted((p for p in found if len(p) > 1), key=len, reverse=True)


def clean(nb: nbf.NotebookNode) -> nbf.NotebookNode:
    """Progress bars and cell timings out; an error if an output names a folder of this machine."""
    bad = machine_paths()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        kept = []
        for out in cell.outputs:
            if out.output_type == "stream":
                out.text = _lines_kept(out.text)
                if not out.text.strip():
                    continue
            kept.append(out)
            text = out.get("text", "") + "".join(v for k, v in out.get("data", {}).items() if k.startswith("text/"))
            for p in bad:
                if p in text:
                    raise ValueError(f"cell {i}: an output names {p}, a folder of this machine: {text[:300]!r}")
        cell.outputs = kept
    return nb


def main(names: list[str]) -> None:
    for name in names or list(NOTEBOOKS):
        if name not in NOTEBOOKS:
            raise SystemExit(f"no notebook {name} (choose from {', '.join(NOTEBOOKS)})")
        nb = execute(build(name))
        nbf.write(nb, HERE / name)
        print(f"{name}: {sum(len(c.get('outputs', [])) for c in nb.cells)} outputs")


if __name__ == "__main__":
    main(sys.argv[1:])
