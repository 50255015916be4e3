"""Activation smoothing (calib.search.smooth): the INT8 error of one layer, the alpha chosen per layer on it, and
the layers left alone, on small MatMuls with known answers."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from calib.runners.onnxruntime import OrtRunner
from calib.search.smooth import ALPHAS, MIN_ROWS, choose, held_out_sqnr, output_sqnr, scales, smooth

RNG = np.random.default_rng(0)


def test_output_sqnr_is_the_int8_error_of_the_product():
    """x = [1, 0.3] at its max 1: 0.3 rounds to 38/127; ones(2, 1) is exact: x @ b = 1.3, INT8 gives 1 + 38/127."""
    x, b = np.array([[1.0, 0.3]]), np.ones((2, 1))
    want = 10 * np.log10(1.3 ** 2 / (1.3 - (1 + 38 / 127)) ** 2)
    assert np.isclose(output_sqnr(x, b, np.array([1.0, 0.3]), np.ones(2)), want)  # 64.35 dB
    # smoothed by s = [1, 0.3]: the activation [1, 1] is exact, the 0.3 rounds in the weights' column instead
    assert np.isclose(output_sqnr(x, b, np.array([1.0, 0.3]), np.array([1.0, 0.3])), want)


def test_diagonal_weights_take_the_largest_alpha():
    """A diagonal B is exact in INT8 per output column whatever the smoothing: only the activation's error counts,
    and the levelest activation (the largest alpha) has the least."""
    x = RNG.uniform(-1, 1, (256, 8))
    x[:, 0] *= 30
    xm, b = np.abs(x).max(0), np.eye(8)
    got = [output_sqnr(x, b, xm, scales(xm, np.ones(8), a)) for a in ALPHAS]
    assert got == sorted(got)  # the more the activation is levelled, the smaller its error
    c = choose(x, b)
    assert c.alpha == max(ALPHAS) and c.after_db > c.before_db + 6  # held out: the same order


def three_matmuls():
    """a: an outlier channel before a diagonal B; b: a level activation; c: an outlier channel before a dense B."""
    rng = np.random.default_rng(1)
    ws = {"wa": np.eye(8), "wb": np.diag([30.0] + [1.0] * 7), "wc": rng.uniform(-1, 1, (16, 8))}
    nodes = [helper.make_node("MatMul", [f"x{k}", f"w{k}"], [f"y{k}"], name=f"mm{k}") for k in "abc"]
    g = helper.make_graph(nodes, "three",
                          [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, ["N", n]) for k, n in
                           (("a", 8), ("b", 8), ("c", 16))],
                          [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, ["N", 8]) for k in "abc"],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in ws.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    feeds = {"xa": RNG.uniform(-1, 1, (256, 8)), "xb": RNG.uniform(-1, 1, (256, 8)),
             "xc": RNG.uniform(-1, 1, (256, 16))}
    feeds["xa"][:, 0] *= 30
    feeds["xc"][:, 0] *= 100
    return m, {k: v.astype(np.float32) for k, v in feeds.items()}


def test_each_layer_gets_its_own_alpha_and_a_level_one_none():
    m, feeds = three_matmuls()
    new, done = smooth(m, [feeds], ["mma", "mmb", "mmc"])
    # a: the largest alpha (diagonal B); c: 0.5, where the dense B's rows take the outlier channel's range (at 0.95
    # its 100x row rounds the others' weights away); b: no alpha gains the 1 dB a Mul must buy
    assert {k: v.alpha for k, v in done.items()} == {"mma": 0.95, "mmc": 0.5}
    assert all(v.after_db > v.before_db + 5 for v in done.values())
    assert [n.op_type for n in new.graph.node].count("Mul") == 2
    want, got = OrtRunner(m).run(feeds), OrtRunner(new).run(feeds)
    for k in ("ya", "yb", "yc"):  # the FP32 product unchanged
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-3)


def test_the_alpha_is_judged_on_rows_the_scales_did_not_see():
    """Set and measured on the same rows the activation's amax holds every row, so smoothing a channel that has one
    spike (row 0: 30, the rest within 1) looks free; held out, the half without the spike sets that channel's scale
    at 1 and the spike in the other half clips. The held-out figure is below the in-sample one and both halves
    count (the SQNR of each direction averaged)."""
    x = RNG.uniform(-1, 1, (256, 8))
    x[0, 0] = 30
    b = RNG.uniform(-1, 1, (8, 4))
    wm = np.abs(b).max(1)
    xm = np.abs(x).max(0)
    seen = output_sqnr(x, b, xm, scales(xm, wm, 0.95))
    held = held_out_sqnr(x, b, 0.95)
    one_way = [output_sqnr(t, b, np.abs(f).max(0), scales(np.abs(f).max(0), wm, 0.95))
               for f, t in ((x[0::2], x[1::2]), (x[1::2], x[0::2]))]
    assert np.isclose(held, np.mean(one_way)) and held < seen - 10


def test_too_few_rows_are_left_alone():
    """A classifier head's Gemm sees one row per image: with fewer than MIN_ROWS no alpha is chosen, even on an
    outlier channel that smoothing levels with many rows."""
    x = RNG.uniform(-1, 1, (MIN_ROWS - 1, 8))
    x[:, 0] *= 30
    c = choose(x, np.eye(8))
    assert c.after_db == c.before_db
    many = np.concatenate([x] * 4)
    assert choose(many, np.eye(8)).after_db > choose(many, np.eye(8)).before_db + 6
