"""The held-out samples and the task metric of one `calib recover` run, served to a peer that runs in another
Python (benchmarks/nncf_control.py): the same model, calibration and evaluation samples, metric function and
FP32 reference that `calib recover` judges on.

    python benchmarks/recover_scorer.py WORK KEY -- RECOVER_ARGS...

RECOVER_ARGS are `calib recover`'s own (MODEL or RECIPE, --data and the rest; --target and --out are ignored).
Writes WORK/model.onnx (the FP32 model at opset 13 or above, names kept, as calib measures it),
WORK/calibration.npz and WORK/validation.npz (item i under 'i/INPUT', laid out as the model takes it: one sample
per item, or the model's fixed batch), then answers on stdout one JSON line per request read on stdin: a request
is the path of an .npz of outputs ('i/OUTPUT' for the items it covers, as the model returns them), the answer
{"value": KEY over those items}. The first line written is {"ready": items, "fp32": KEY of FP32 itself}.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def inputs(args: list):
    """(model file, ModelInfo, calibration source, evaluation source, Evaluation) exactly as `calib recover ARGS`
    builds them."""
    from calib.cli.data import DataArgs
    from calib.cli.recover import _from_flags
    from calib.cli.recover import recover as command
    from calib.cli.task import choose_task

    ctx = command.make_context("recover", [*args, "--target", "x>=0", "--out", "unused"])
    p = dict(ctx.params)
    model = p.pop("model")
    if Path(model).suffix.lower() in (".yaml", ".yml"):
        from calib.recipe import load_recipe
        from calib.search.recover_recipe import recipe_inputs

        got = recipe_inputs(load_recipe(model, p["overrides"]), p["calib_samples"])
        return got.model, got.info, got.calibration, got.evaluation, got.judged
    data_args = DataArgs.pop(p)
    chosen = choose_task(p["task"], p["head"], p["charset"], p["metric"], p["postprocess"])
    model, info, cal, ev, evaluation, _ = _from_flags(model, data_args, p["calib_samples"], p["batch_size"], chosen,
                                                      p["input_shapes"], p["batch_axes"], p["consts"],
                                                      p["memory_budget"])
    return model, info, cal, ev, evaluation


def singles(batches: list, fixed) -> list:
    """Batches cut to one sample each (to the model's fixed batch, if it has one: a remainder is left out)."""
    step, out = fixed or 1, []
    for b, s, m in batches:
        n = int(next(iter(b.values())).shape[0])
        out += [({k: v[i:i + step] for k, v in b.items()}, s[i:i + step], m[i:i + step])
                for i in range(0, n - step + 1, step)]
    return out


def _save(path: Path, items: list, layout) -> None:
    arrays = {}
    for i, b in enumerate(items):
        fed = layout.to_model(b) if layout is not None and not layout.identity else b
        arrays.update({f"{i}/{k}": np.asarray(v) for k, v in fed.items()})
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _items(arrays) -> dict:
    out: dict = {}
    for k in arrays.files:
        i, name = k.split("/", 1)
        out.setdefault(int(i), {})[name] = arrays[k]
    return out


def main(argv: list) -> None:
    import onnx

    from calib.quantize.model import initializers_not_inputs, load_model
    from calib.quantize.opset import at_qdq_opset
    from calib.search.measure import Measure, _items as source_items

    work, key, args = Path(argv[0]), argv[1], argv[argv.index("--") + 1:]
    work.mkdir(parents=True, exist_ok=True)
    model, info, cal, ev, evaluation = inputs(args)
    proto = at_qdq_opset(initializers_not_inputs(load_model(model)), str(model))
    m = Measure(proto, info, ev, evaluation.task, evaluation.detection, evaluation.hook, evaluation.user, 1)
    m.batches = singles(m.batches, m.fixed)
    m.ref = m.run(m.model, "FP32")
    layout = info.layout
    onnx.save(proto, str(work / "model.tmp.onnx"))
    (work / "model.tmp.onnx").replace(work / "model.onnx")
    _save(work / "validation.npz", [b for b, _, _ in m.batches], layout)
    cal_items = singles(list(source_items(cal)), m.fixed)
    _save(work / "calibration.npz", [b for b, _, _ in cal_items], layout)

    def value(idx: list, outs: list):
        sub = copy.copy(m)
        sub.batches, sub.ref = [m.batches[i] for i in idx], [m.ref[i] for i in idx]
        v = sub.points(outs).get(key)
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)

    print(json.dumps({"ready": len(m.batches), "fp32": value(list(range(len(m.batches))), m.ref),
                      "calibration": len(cal_items)}), flush=True)
    for line in sys.stdin:
        items = _items(np.load(line.strip()))
        idx = sorted(items)
        outs = [layout.from_model(items[i]) if layout is not None and not layout.identity else items[i] for i in idx]
        print(json.dumps({"value": value(idx, outs)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
