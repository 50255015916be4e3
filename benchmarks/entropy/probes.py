"""One-layer probe networks and chosen data for pinning down TensorRT's EntropyCalibration2.

Each probe is one network input (its own data stream) feeding one op, so one calibration answers as many
questions as the network has inputs; the cache holds a threshold for the input and for the op's output.

  dist      inputs [1, 8192] -> Relu, 8 batches: uniform, Gaussian, Laplace, outliers (first or last batch),
            batches with growing or shrinking max, constants, zeros, all-negative, asymmetric, exact-zero spikes,
            scaled copies (scale invariance), integers, sparse tensors, a first batch of zeros
  dist_b4   the same values regrouped as 2 batches of 4 (does the grouping of samples into batches matter?)
  dist_n1   the first batch of each dist input only (1 batch)
  edge      tensors that may break a calibration (all zeros, a constant, two values, nearly all zeros), apart
            so that a failure there loses nothing else
  topo      inputs [1, 4, 32, 32] -> MaxPool, Concat, Resize (nearest/linear), 1x1 identity Conv (+Relu),
            SiLU (Sigmoid*x), Add, Split, HardSwish, GlobalAveragePool: ties between an op's input and output
            thresholds; 8 batches

Only numpy and onnx: the device script and the CPU comparison both import it. `make(name)` returns
(onnx.ModelProto, {input: float32 array [batches, batch, ...]}); the device script saves the arrays it fed.
"""
from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = 8192
BATCHES = 8
OPSET = 14
IR_VERSION = 8  # TensorRT 8.6's parser reads IR 8


def digest(arrays: dict) -> str:
    """sha256 of named arrays (names sorted, each name then its bytes): what a capture records of the data it fed,
    and what the CPU side checks its rebuilt data against."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


def _dist_data(seed: int = 20) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (BATCHES, 1, N)
    g = rng.standard_normal(shape).astype(np.float32)
    d = {
        "u01": rng.random(shape),
        "u11": rng.uniform(-1, 1, shape),
        "gauss": g.copy(),
        "laplace": rng.laplace(0, 1, shape),
        "outlier_first": rng.standard_normal(shape),
        "outlier_last": None,
        "grow2": rng.standard_normal(shape) * (2.0 ** np.arange(BATCHES))[:, None, None],
        "shrink2": None,
        "grow_jump": rng.standard_normal(shape),
        "grow_slow": rng.standard_normal(shape) * (1.1 ** np.arange(BATCHES))[:, None, None],
        "const": np.full(shape, 0.5),
        "zeros": np.zeros(shape),
        "negonly": -np.abs(rng.standard_normal(shape)),
        "asym": rng.standard_normal(shape),
        "relu_gauss": np.maximum(rng.standard_normal(shape), 0),
        "tiny": g * np.float32(1e-3),
        "big": g * np.float32(1e3),
        "ints": rng.integers(-20, 21, shape).astype(np.float64),
        "expo": rng.exponential(1.0, shape),
        "sparse": np.zeros(shape),
        "first_zero": rng.standard_normal(shape),
        "two_point": (rng.random(shape) < 0.5).astype(np.float64),
        "halfnormal": np.abs(rng.standard_normal(shape)),
        "outlier_mid": rng.standard_normal(shape),
        "outlier_huge": rng.standard_normal(shape),
    }
    d["outlier_mid"][3, 0, 5] = 200.0  # the body spans ~46 of 2048 bins: below a search start at 128?
    d["outlier_huge"][3, 0, 5] = 1000.0  # ~9 bins
    d["outlier_first"][0, 0, 0] = 50.0
    d["outlier_last"] = d["outlier_first"].copy()
    d["outlier_last"][0, 0, 0] = d["outlier_last"][-1, 0, 0]
    d["outlier_last"][-1, 0, 0] = 50.0
    d["shrink2"] = d["grow2"][::-1].copy()
    d["grow_jump"][-1] *= 100.0
    d["asym"][d["asym"] > 0] *= 3.0
    idx = rng.integers(0, N, (BATCHES, 10))
    for b in range(BATCHES):
        d["sparse"][b, 0, idx[b]] = rng.standard_normal(10)
    d["first_zero"][0] = 0.0
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in d.items()}


def _relu_net(names: list[str], shape: list[int]) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names]
    outputs = [helper.make_tensor_value_info(f"{n}_relu", TensorProto.FLOAT, shape) for n in names]
    nodes = [helper.make_node("Relu", [n], [f"{n}_relu"], name=f"{n}_relu_node") for n in names]
    return _model(helper.make_graph(nodes, "dist", inputs, outputs))


def _model(graph) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="calib-probes")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m)
    return m


def _topo() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(21)
    c, h, w = 4, 32, 32
    shp = (BATCHES, 1, c, h, w)

    def gauss(s=1.0):
        return (rng.standard_normal(shp) * s).astype(np.float32)

    data = {"mp_in": gauss(), "mp5_in": rng.laplace(0, 1, shp).astype(np.float32), "cat_a": gauss(1.0),
            "cat_b": gauss(3.0), "rsn_in": gauss(), "rsl_in": rng.laplace(0, 1, shp).astype(np.float32),
            "conv_in": gauss(), "convr_in": gauss(), "silu_in": gauss(2.0), "add_a": gauss(1.0),
            "add_b": gauss(2.0), "split_in": gauss() * np.array([1, 1, 4, 4], np.float32)[:, None, None],
            "hsw_in": gauss(3.0), "gap_in": gauss() + 0.5, "mp_relu_in": gauss()}
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    eye = numpy_helper.from_array(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1), "eye_w")
    zero_b = numpy_helper.from_array(np.zeros(c, np.float32), "zero_b")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "x2_scales")
    roi = numpy_helper.from_array(np.zeros(0, np.float32), "empty_roi")
    split = numpy_helper.from_array(np.array([2, 2], np.int64), "split_sizes")
    nodes = [
        helper.make_node("MaxPool", ["mp_in"], ["mp_out"], kernel_shape=[2, 2], strides=[2, 2], name="mp"),
        helper.make_node("MaxPool", ["mp5_in"], ["mp5_out"], kernel_shape=[5, 5], strides=[1, 1],
                         pads=[2, 2, 2, 2], name="mp5"),
        helper.make_node("Relu", ["mp_relu_in"], ["mp_relu_r"], name="mpr_relu"),
        helper.make_node("MaxPool", ["mp_relu_r"], ["mp_relu_out"], kernel_shape=[5, 5], strides=[1, 1],
                         pads=[2, 2, 2, 2], name="mpr"),
        helper.make_node("Concat", ["cat_a", "cat_b"], ["cat_out"], axis=1, name="cat"),
        helper.make_node("Resize", ["rsn_in", "empty_roi", "x2_scales"], ["rsn_out"], mode="nearest", name="rsn"),
        helper.make_node("Resize", ["rsl_in", "empty_roi", "x2_scales"], ["rsl_out"], mode="linear", name="rsl"),
        helper.make_node("Conv", ["conv_in", "eye_w", "zero_b"], ["conv_out"], name="conv"),
        helper.make_node("Conv", ["convr_in", "eye_w", "zero_b"], ["convr_c"], name="convr"),
        helper.make_node("Relu", ["convr_c"], ["convr_out"], name="convr_relu"),
        helper.make_node("Sigmoid", ["silu_in"], ["silu_s"], name="silu_sig"),
        helper.make_node("Mul", ["silu_in", "silu_s"], ["silu_out"], name="silu_mul"),
        helper.make_node("Add", ["add_a", "add_b"], ["add_out"], name="add"),
        helper.make_node("Split", ["split_in", "split_sizes"], ["split_0", "split_1"], axis=1, name="split"),
        helper.make_node("Relu", ["split_0"], ["split_0r"], name="split_r0"),
        helper.make_node("Relu", ["split_1"], ["split_1r"], name="split_r1"),
        helper.make_node("HardSwish", ["hsw_in"], ["hsw_out"], name="hsw"),
        helper.make_node("GlobalAveragePool", ["gap_in"], ["gap_out"], name="gap"),
    ]
    ins = [vi(n, f, [1, c, h, w]) for n in data if n not in ("cat_a", "cat_b")] + \
        [vi("cat_a", f, [1, c, h, w]), vi("cat_b", f, [1, c, h, w])]
    outs = [vi("mp_out", f, [1, c, h // 2, w // 2]), vi("mp5_out", f, [1, c, h, w]), vi("mp_relu_out", f, [1, c, h, w]),
            vi("cat_out", f, [1, 2 * c, h, w]), vi("rsn_out", f, [1, c, 2 * h, 2 * w]),
            vi("rsl_out", f, [1, c, 2 * h, 2 * w]), vi("conv_out", f, [1, c, h, w]), vi("convr_out", f, [1, c, h, w]),
            vi("silu_out", f, [1, c, h, w]), vi("add_out", f, [1, c, h, w]), vi("split_0r", f, [1, 2, h, w]),
            vi("split_1r", f, [1, 2, h, w]), vi("hsw_out", f, [1, c, h, w]), vi("gap_out", f, [1, c, 1, 1])]
    g = helper.make_graph(nodes, "topo", ins, outs, initializer=[eye, zero_b, scales, roi, split])
    return _model(g), data


EDGE = ("const", "zeros", "two_point", "sparse")


def make(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    if name == "topo":
        return _topo()
    d = _dist_data()
    if name == "edge":
        d = {k: d[k] for k in EDGE}
        return _relu_net(list(d), [1, N]), d
    d = {k: v for k, v in d.items() if k not in EDGE}
    if name == "dist_b4":
        d = {k: v.reshape(2, 4, N) for k, v in d.items()}
    elif name == "dist_n1":
        d = {k: v[:1] for k, v in d.items()}
    elif name != "dist":
        raise ValueError(f"unknown probe network {name}")
    return _relu_net(list(d), [d["u01"].shape[1], N]), d


NETWORKS = ("dist", "dist_b4", "dist_n1", "topo", "edge")
