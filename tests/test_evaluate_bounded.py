"""The evaluator's bounded path (micro-batches, one configuration at a time, graph outputs kept) gives what
running every session on the whole batch gives."""
import numpy as np
import pytest

from calib.calibrate import calibrate
from calib.evaluate.layerwise import Comparison, Simulator
from calib.quantize.model import inspect_model


@pytest.mark.parametrize("micro", [1, 3, 64])
def test_compare_matches_the_whole_batch(tiny_model, tiny_data, micro):
    res = calibrate(tiny_model, tiny_data, ["minmax", "mse"])
    info = inspect_model(tiny_model)
    sim = Simulator(tiny_model, info, res.amax, micro_batch=micro)
    batch = {"input": np.load(tiny_data)[:7]}
    whole, bounded = {n: Comparison(n) for n in res.amax}, {n: Comparison(n) for n in res.amax}
    ref, tests = sim.run(batch)
    for n, t in tests.items():
        whole[n].update(ref, t)
    ref_out, test_out = sim.compare(batch, bounded)
    # ONNX Runtime's kernels round differently at another batch size (a few ULP, which can move an INT8
    # rounding): exact where the micro-batch holds the whole batch, close otherwise
    same = micro >= 7
    close = (lambda a, b: np.array_equal(a, b)) if same else (lambda a, b: np.allclose(a, b, rtol=1e-3, atol=0.05))
    assert set(ref_out) == {"logits"} and close(ref_out["logits"], ref["logits"])
    for n in res.amax:
        assert close(test_out[n]["logits"], tests[n]["logits"])
        a, b = whole[n].layers(info), bounded[n].layers(info)
        assert [x["tensor"] for x in a] == [x["tensor"] for x in b] and len(a) == len(info.activations)
        for x, y in zip(a, b):
            assert y["sqnr_db"] == pytest.approx(x["sqnr_db"], rel=1e-12 if same else 0.02), x["tensor"]
    assert set(sim.compare(batch, bounded, keep_reference=True)[0]) == set(sim.names)
