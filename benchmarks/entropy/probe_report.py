"""What the probe networks say about TensorRT's EntropyCalibration2 (probes.py, captured by capture_trt.py).

    python benchmarks/entropy/probe_report.py PROBES_DIR

PROBES_DIR holds NET-entropy2.cache and NET-minmax.cache for the probe networks (dist, dist_b4, dist_n1, topo,
edge); the values fed are rebuilt with probes.make() (and checked against the sha256 in probes.json when present).
For every probe tensor it prints TensorRT's threshold in units of the bin width of two candidate grids
(the first batch's absmax / 2048 with the width doubled until the absmax fits, and the absmax / 2048): an integer
+ 0.5 on the right grid. Then the questions, one line each, and for the tie probes which thresholds are equal.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probes  # noqa: E402
from calib.quantize.cache import read_cache  # noqa: E402

NBINS = 2048


class TrtHistogram:
    """|x| histogram as TensorRT 8.6 keeps it: 2048 bins over the first batch's absmax; a batch past the range
    doubles the width (neighbouring bins summed) until it fits; values at the top edge land in the last bin."""

    def __init__(self, nbins: int = NBINS):
        self.nbins, self.width, self.zeros, self.absmax = nbins, None, 0, 0.0
        self.counts = np.zeros(nbins, np.float64)
        self.first_zero_batches = 0

    def add(self, x: np.ndarray) -> None:
        a = np.abs(np.asarray(x, np.float32).ravel())
        self.zeros += int(a.size - np.count_nonzero(a))
        m = float(a.max()) if a.size else 0.0
        if self.width is None:
            if m == 0.0:
                self.first_zero_batches += 1
                self.counts[0] += a.size
                return
            self.width = m / self.nbins
        while m > self.nbins * self.width:
            self.counts = np.concatenate([self.counts.reshape(-1, 2).sum(1), np.zeros(self.nbins // 2)])
            self.width *= 2.0
        idx = np.minimum((a / np.float32(self.width)).astype(np.int64), self.nbins - 1)
        self.counts += np.bincount(idx, minlength=self.nbins)
        self.absmax = max(self.absmax, m)


def tensors(net: str) -> tuple[dict, dict]:
    """name -> list of per-batch arrays for every input and every op output of a probe network; the data digest."""
    import onnxruntime as ort

    model, data = probes.make(net)
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in data.items()}
    nb, b = next(iter(data.values())).shape[:2]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    # intermediate tensors too
    inter = [o for n in model.graph.node for o in n.output if o not in outs]
    if inter:
        from onnx import helper

        m2 = model.__class__()
        m2.CopyFrom(model)
        for t in inter:
            m2.graph.output.append(helper.make_tensor_value_info(t, 1, None))
        sess = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = [o.name for o in sess.get_outputs()]
    per = {k: [] for k in list(data) + outs}
    for i in range(nb):
        feed = {k: v[i] for k, v in data.items()}
        for k, v in feed.items():
            per[k].append(v)
        for k, v in zip(outs, sess.run(None, feed)):
            per[k].append(v)
    return per, {"sha256": probes.digest(flat)}


def grid_units(batches: list, thr: float) -> dict:
    h = TrtHistogram()
    for b in batches:
        h.add(b)
    amax = max(float(np.abs(b).max()) for b in batches)
    return {"trt_grid": None if h.width is None else thr / h.width - 0.5,
            "absmax_grid": thr / (amax / NBINS) - 0.5 if amax else None, "absmax": amax,
            "first_absmax": float(np.abs(batches[0]).max()), "hist": h}


def report(pdir: Path) -> str:
    lines = []
    meta = json.loads((pdir / "probes.json").read_text()) if (pdir / "probes.json").is_file() else {}
    results = {}
    for net in probes.NETWORKS:
        ec, mc = pdir / f"{net}-entropy2.cache", pdir / f"{net}-minmax.cache"
        if not ec.is_file():
            lines.append(f"- {net}: no cache")
            continue
        ent, mm = read_cache(ec).amaxes(), (read_cache(mc).amaxes() if mc.is_file() else {})
        per, dig = tensors(net)
        want = meta.get(f"{net}-entropy2", {}).get("data_sha256")
        if want and want != dig["sha256"]:
            lines.append(f"- {net}: rebuilt data differ from what TensorRT was fed (numpy version?): skipped")
            continue
        lines.append(f"\n## {net}\n\n| tensor | TensorRT amax | minmax (TRT) | absmax | first-batch absmax | "
                     "thr/w - 0.5 (first-batch grid) | (absmax grid) |\n|---|---|---|---|---|---|---|")
        for name, thr in ent.items():
            if name not in per:
                continue
            g = grid_units(per[name], thr)
            results[(net, name)] = (thr, g)
            tg = "-" if g["trt_grid"] is None else f"{g['trt_grid']:.3f}"
            ag = "-" if g["absmax_grid"] is None else f"{g['absmax_grid']:.3f}"
            lines.append(f"| {name} | {thr:.6g} | {mm.get(name, float('nan')):.6g} | {g['absmax']:.6g} | "
                         f"{g['first_absmax']:.6g} | {tg} | {ag} |")
        same = {}
        for k, v in ent.items():
            same.setdefault(v, []).append(k)
        ties = [v for v in same.values() if len(v) > 1]
        if ties:
            lines.append("\nequal thresholds: " + "; ".join(" = ".join(t) for t in ties))
    on_grid = [abs(g["trt_grid"] - round(g["trt_grid"])) < 1e-3 for (_, _), (_, g) in results.items()
               if g["trt_grid"] is not None]
    lines.insert(0, f"# Probe report\n\nthresholds on the first-batch grid (integer bin index): "
                    f"{sum(on_grid)} of {len(on_grid)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
