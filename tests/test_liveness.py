"""The bytes a run holds at once (calib.quantize.liveness) and the estimates calib.runners.budget builds on them:
known answers on hand-made graphs, exact to the byte."""
from pathlib import Path

import pytest
from onnx import helper

from calib.quantize.liveness import groups, peak_bytes
from calib.quantize.model import inspect_model, load_model
from calib.quantize.shapes import activation_sizes
from calib.runners.budget import layerwise_bytes, outputs_bytes, pass_bytes
from nets import relu_chain


def node(op, ins, outs):
    return helper.make_node(op, ins, outs)


# x -> a -> b -> c -> y, with a skip: y = Add(c, a). Sizes: x 10, a 20, b 40, c 80, y 160 bytes.
DIAMOND = [node("Relu", ["x"], ["a"]), node("Relu", ["a"], ["b"]), node("Relu", ["b"], ["c"]),
           node("Add", ["c", "a"], ["y"])]
SIZES = {"x": 10, "a": 20, "b": 40, "c": 80, "y": 160}


def test_peak_of_a_graph_returning_its_output_only():
    # at Add: x (given) + a (read here, dies after) + c + y = 10 + 20 + 80 + 160
    assert peak_bytes(DIAMOND, SIZES, given=["x"], kept=["y"]) == 270
    # at Relu c: x + a (read later) + b + c = 150 < 270; without the skip a would die at Relu b


def test_peak_when_every_activation_is_returned():
    # every tensor kept to the end: the flat sum at the last node
    assert peak_bytes(DIAMOND, SIZES, given=["x"], kept=["a", "b", "c", "y"]) == 310


def test_kept_tensors_stay_and_the_others_die_after_their_last_reader():
    # b kept: at Add x + a + b + c + y = 310; c kept instead: b dies at Relu c, so x + a + c + y = 270
    assert peak_bytes(DIAMOND, SIZES, given=["x"], kept=["b", "y"]) == 310
    assert peak_bytes(DIAMOND, SIZES, given=["x"], kept=["c", "y"]) == 270
    # nothing given: x is made by no node and costs nothing; a tensor no node reads dies where it is made
    dead = [node("Relu", ["x"], ["a"]), node("Neg", ["a"], ["unused"]), node("Relu", ["a"], ["y"])]
    assert peak_bytes(dead, {"a": 1, "unused": 100, "y": 1000}, kept=["y"]) == 1001  # not 1101


def test_groups_are_consecutive_and_within_the_limit():
    assert groups(["a", "b", "c", "d"], {"a": 3, "b": 3, "c": 3, "d": 3}, 6) == [["a", "b"], ["c", "d"]]
    assert groups(["a", "b", "c"], {"a": 1, "b": 10, "c": 1}, 4) == [["a"], ["b"], ["c"]]  # b alone, too big
    assert groups(["a", "b"], {"a": 1, "b": 1}, 100) == [["a", "b"]]


def test_budget_bytes_per_sample_on_a_relu_chain(tmp_path):
    # images -> r1 -> ... -> r6, out = r1 + r6; every tensor t bytes per sample
    model = relu_chain(tmp_path / "m.onnx", [2, 3, 16, 16], 6)
    info, proto = inspect_model(model), load_model(model)
    t = 4 * 3 * 16 * 16
    sizes = activation_sizes(proto, info)
    assert sizes == {n: t for n in ["images", *[f"r{i}" for i in range(1, 7)], "out"]}  # per sample, not per run
    # the pass returns everything: 8 tensors at the last node, plus the collector's work on one
    assert pass_bytes(proto, info, sizes, info.activations) == 8 * t + t
    # the pass not reading r2..r6 (derived from their inputs): at a middle Relu images + r1 + r(i-1) + ri, at the
    # Add images + r1 + r6 + out: 4 at once, plus one
    assert pass_bytes(proto, info, sizes, ["images", "r1", "out"]) == 4 * t + t
    # per-layer comparison of one group r1..r3 (+ the output): FP32's 4 kept tensors held while a simulation runs
    # (images, r1, r2, r3 kept, r6 and out at the Add: 6) and one dequantized copy
    assert layerwise_bytes(proto, info, sizes, ["r1", "r2", "r3"]) == 4 * t + 6 * t + t
    # outputs only: FP32's out held; a run holds images + r1 + r(i-1) + ri at its worst; one dequantized copy
    assert outputs_bytes(proto, info, sizes) == t + 4 * t + t


@pytest.mark.parametrize("k", [1, 2, 3])
def test_layerwise_groups_cover_every_activation_once(tmp_path, k):
    model = relu_chain(tmp_path / "m.onnx", [1, 3, 16, 16], 10)  # 12 tensors of one size
    info, proto = inspect_model(model), load_model(model)
    sizes = activation_sizes(proto, info)
    parts = groups(list(info.activations), sizes, -(-sum(sizes.values()) // k))
    assert len(parts) == k and [n for g in parts for n in g] == list(info.activations)


_MEASURED = """
import json, logging, resource, sys
from calib.cli import main
seen = []
class Seen(logging.Handler):
    def emit(self, record):
        if hasattr(record, "estimate"):
            seen.append(record.estimate)
logging.getLogger("calib.runners.budget").addHandler(Seen())
logging.getLogger("calib.runners.budget").setLevel(logging.DEBUG)
try:
    main(["--quiet", *sys.argv[1:]], standalone_mode=False)
except SystemExit as exc:
    assert not exc.code, exc.code
# VmHWM: this process image's own high-water mark (getrusage's maxrss keeps the forking parent's RSS across exec)
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(json.dumps({"peak": hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "estimate": max(seen)}))
"""


@pytest.mark.slow
def test_the_estimate_is_within_1_3x_of_the_measured_peak_on_a_real_model(tmp_path, thirdparty_root):
    """PP-LCNet's text-line classifier (ppocr-cls, 0.6 MB, batches of 6 lines) calibrated in its own interpreter:
    calib's estimate of the command's peak RSS is at or above the peak, and within 1.3x of it."""
    import json
    import subprocess
    import sys

    from conftest import fetch_thirdparty

    sys.path.insert(0, str(Path(__file__).resolve().parent / "thirdparty"))
    import runs

    case = runs.CASES["ppocr-cls"]
    model = fetch_thirdparty("ppocr-cls", thirdparty_root)
    photos = runs.photo_folder(case.calibration, tmp_path / "photos")
    r = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, runs.calibrate_args(case, model, photos,
                                                                                       tmp_path / "c"))],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"estimate {got['estimate'] / (1 << 20):.0f} MB, peak {got['peak'] / (1 << 20):.0f} MB")
    assert got["peak"] <= got["estimate"] <= 1.3 * got["peak"], got
