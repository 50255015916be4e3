"""Writes the notebooks in this folder from the cells below (outputs stripped). Run after editing a cell."""
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent
SETUP = """from pathlib import Path
import numpy as np
ROOT = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
GOLDEN = ROOT / "tests" / "golden" / "trt86-h200"
OUT = ROOT / "runs" / "notebooks"
OUT.mkdir(parents=True, exist_ok=True)"""

NOTEBOOKS = {
    "01_algorithms_side_by_side.ipynb": [
        ("md", "# Calibration algorithms side by side\n\nOne statistics pass over the data feeds all four "
               "algorithms. Here: the small CNN that TensorRT 8.6 calibrated on an H200 (`tests/golden`), its 64 "
               "calibration samples, every algorithm's threshold drawn on the histograms, and the per-layer SQNR "
               "each gives in the CPU INT8 simulation."),
        ("code", SETUP),
        ("code", """import calib
model = GOLDEN / "cnn" / "cnn.onnx"
res = calib.calibrate(model, GOLDEN / "cnn" / "cnn_calib.npy", ["minmax", "entropy", "percentile", "mse"], batch_size=8)
for algo, amax in res.amax.items():
    print(f"{algo:10s}", "  ".join(f"{t}={amax[t]:.3g}" for t in ["input", "conv0", "relu0", "relu2", "logits"]))"""),
        ("md", "TensorRT's own caches for the same model and data, for comparison (minmax matches to 1e-6):"),
        ("code", """from calib.cache import read_cache
trt = {"minmax": read_cache(GOLDEN / "cnn" / "int8-minmax.cache").amaxes(),
       "entropy": read_cache(GOLDEN / "cnn" / "int8-entropy2.cache").amaxes()}
for algo in trt:
    common = [t for t in trt[algo] if t in res.amax[algo]]
    ratio = np.array([res.amax[algo][t] / trt[algo][t] for t in common])
    print(f"{algo}: calib / TensorRT over {len(common)} tensors: median {np.median(ratio):.4f}, "
          f"min {ratio.min():.4f}, max {ratio.max():.4f}")"""),
        ("code", """import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, 3, figsize=(14, 3))
for ax, t in zip(axes, ["conv0", "relu1", "gap"]):
    h = res.stats.histogram(t)
    top = h.absmax
    ax.bar(np.linspace(0, top, 256, endpoint=False), np.maximum(h.resample(256, top), 0.5), width=top / 256,
           color="0.6", log=True, align="edge")
    for algo, amax in res.amax.items():
        ax.axvline(amax[t], label=f"{algo} {amax[t]:.3g}", color={"minmax": "r", "entropy": "b", "percentile": "g", "mse": "m"}[algo])
    ax.set_title(t); ax.legend(fontsize=7)
plt.show()"""),
        ("code", """from calib.data.arrays import ArraySource, load_array
from calib.evaluate.api import evaluate
src = ArraySource(load_array(GOLDEN / "cnn" / "cnn_calib.npy"), "input", 8)
ev = evaluate(model, res.amax, src)
for algo, e in ev["configs"].items():
    print(f"{algo:10s} logits SQNR {e['outputs']['logits']['sqnr_db']:.1f} dB")
plt.figure(figsize=(8, 3))
for algo, e in ev["configs"].items():
    plt.plot([l["sqnr_db"] for l in e["layers"]], "o-", label=algo)
plt.xticks(range(len(e["layers"])), [l["tensor"] for l in e["layers"]], rotation=45); plt.ylabel("SQNR dB"); plt.legend(); plt.show()"""),
    ],
    "02_reading_a_report.ipynb": [
        ("md", "# Reading an accuracy-drop report, diffing caches, deciding what to fall back\n\nThe CLI "
               "writes `report.json` next to the HTML; everything in the HTML is in the JSON. This notebook "
               "calibrates and evaluates the small golden CNN, reads the report, diffs two caches and asks the "
               "fallback search which layers to keep in float for a 42 dB output SQNR."),
        ("code", SETUP),
        ("code", """import json
from click.testing import CliRunner
from calib.cli import main
model, data = GOLDEN / "cnn" / "cnn.onnx", GOLDEN / "cnn" / "cnn_calib.npy"
cli = lambda *a: print(CliRunner().invoke(main, ["--quiet", *map(str, a)]).output)
cli("calibrate", model, "--data", data, "--out", OUT / "caches")
cli("evaluate", model, "--cache", OUT / "caches" / "minmax.cache", "--cache", OUT / "caches" / "entropy.cache",
    "--data", data, "--out", OUT / "report")
report = json.loads((OUT / "report" / "report.json").read_text())
print("best:", report["summary"]["best"])
for algo, row in report["summary"]["rows"].items():
    print(algo, {k: round(v, 4) for k, v in row.items()})"""),
        ("md", "The worst layers of each algorithm, and where entropy and minmax disagree most:"),
        ("code", """for algo, rows in report["summary"]["worst_layers"].items():
    print(algo, [(r["tensor"], round(r["sqnr_db"], 1)) for r in rows[:4]])
cli("cache", "diff", OUT / "caches" / "minmax.cache", OUT / "caches" / "entropy.cache", "--top", "5")"""),
        ("code", """import onnx
from calib.fallback import Scorer, budget_target, quantizable_layers, rank, search
from calib.data.arrays import load_array
from calib.cache import read_cache
x = np.asarray(load_array(data))
m = onnx.load(str(model))
scorer = Scorer(m, read_cache(OUT / "caches" / "minmax.cache").amaxes(), [({"input": x[:32]}, None)], "output_sqnr")
ranking = rank(scorer, quantizable_layers(m))
found = search(scorer, ranking, budget_target("output_sqnr", scorer.fp32_score, 0, 42.0))
print("all INT8:", round(found["int8_score"], 1), "dB; keep in FP16:", found["float_layers"], "->", round(found["score"], 1), "dB")"""),
    ],
    "03_cache_in_tensorrt.ipynb": [
        ("md", "# Reusing a calibration cache in a production TensorRT build\n\nA cache from calib is what "
               "TensorRT itself writes: `TRT-8600-EntropyCalibration2`, then `tensor: hex(float32 amax/127)`. "
               "TensorRT reads it through a calibrator whose class matches the header and then never asks for "
               "a batch. Where TensorRT is not installed the cells say what they would do; the Q/DQ path runs "
               "anywhere."),
        ("code", SETUP),
        ("code", """import calib
model = GOLDEN / "cnn" / "cnn.onnx"
res = calib.calibrate(model, GOLDEN / "cnn" / "cnn_calib.npy", ["entropy"], batch_size=8, out=OUT / "trt")
print((OUT / "trt" / "entropy.cache").read_text()[:200])
print("trtexec --onnx=%s --int8 --fp16 --calib=%s --saveEngine=cnn.engine" % (model, OUT / "trt" / "entropy.cache"))"""),
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
    config.int8_calibrator = CacheCalibrator(str(OUT / "trt" / "entropy.cache"))
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (1, 3, 64, 64), (8, 3, 64, 64), (8, 3, 64, 64))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    print("engine bytes:", len(plan))
else:
    print("skipped: no TensorRT")"""),
        ("md", "TensorRT 10/11 use explicit quantization: the same scales as a Q/DQ ONNX model, which ONNX "
               "Runtime also runs on the CPU:"),
        ("code", """from click.testing import CliRunner
from calib.cli import main
r = CliRunner().invoke(main, ["cache", "convert", str(OUT / "trt" / "entropy.cache"), "--model", str(model),
                              "--to", "qdq", "-o", str(OUT / "trt" / "cnn.qdq.onnx")])
print(r.output)
print("trtexec --onnx=%s --int8 --fp16" % (OUT / "trt" / "cnn.qdq.onnx"))"""),
    ],
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = nbf.v4.new_notebook()
        nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in cells]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbf.write(nb, HERE / name)


if __name__ == "__main__":
    main()
