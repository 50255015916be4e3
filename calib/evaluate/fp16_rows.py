"""The FP16+INT8 model's rows in a report: the Q/DQ model as written and the FP16+INT8 model, each run on the CPU
(calib.deploy.emulate) and compared with FP32 (`calib run`'s calibration.float_type, `calib evaluate --float-type
fp16`)."""
from __future__ import annotations

import onnx

from calib.quantize.fp16_model import make_fp16_model


def add_fp16_rows(result: dict, algo: str, qdq: onnx.ModelProto, fp16: onnx.ModelProto, model_path, source, recipe,
                  budget, hook, metric=None) -> list[str]:
    """Compare the Q/DQ model as written (FP32 float layers) and its FP16+INT8 model with FP32 on the evaluation
    data, on the same samples (paired); their rows join `result` as `<algo> qdq` and `<algo> qdq-fp16`."""
    from calib.deploy.emulate import Fp16Runner
    from calib.io.memory import release

    release()  # the first evaluation's sessions and copies: handed back before the budget counts what is held
    names = [f"{algo} qdq", f"{algo} qdq-fp16"]
    engines = {names[0]: Fp16Runner(qdq, names[0], backend="onnxruntime (Q/DQ model as written)"),
               names[1]: Fp16Runner(fp16, names[1])}
    release()
    res = add_rows(result, engines, model_path, source, recipe, budget, hook, metric)
    if "paired" in result:  # the two rows ran on the same samples: their comparison decides the Deploy section
        result["paired"] += [c for c in res.get("paired") or [] if {c["a"], c["b"]} == set(names)]
    return names


def add_rows(result: dict, engines: dict, model_path, source, recipe, budget, hook, metric=None) -> dict:
    """Run `engines` (row name -> runner of a model as written) on the evaluation data, the samples of `result`,
    add their rows to it and return the evaluation (its paired comparisons among these rows)."""
    from calib.evaluate.api import evaluate
    from calib.recipe import feeding

    axes, consts = feeding(recipe)
    res = evaluate(model_path, {}, source, recipe.evaluation.task, recipe.evaluation.detection, layerwise=False,
                   engines=engines, memory_budget=budget, input_shapes=recipe.input_shapes, postprocess=hook,
                   metric=metric, batch_size=recipe.evaluation.batch_size, batch_axes=axes, consts=consts)
    for n in engines:
        result["configs"][n] = res["configs"][n]
    return res


def fp16_engines(model: onnx.ModelProto, configs: dict, exclude, label) -> tuple[dict, list]:
    """`calib evaluate --float-type fp16`: per cache, runners of its Q/DQ model as written and of its FP16+INT8
    model (ranges: the cache's amax), and what the report says of each FP16+INT8 model."""
    from calib.deploy.emulate import Fp16Runner
    from calib.quantize.qdq import insert_qdq

    engines, infos = {}, []
    for name, amax in configs.items():
        q = insert_qdq(model, amax, exclude, label=str(label))
        f = make_fp16_model(model, amax, None, None, exclude, label=str(label))
        rows = [f"{name} qdq", f"{name} qdq-fp16"]
        engines[rows[0]] = Fp16Runner(q, rows[0], backend="onnxruntime (Q/DQ model as written)")
        engines[rows[1]] = Fp16Runner(f.model, rows[1])
        infos.append({**f.entry(name, "fp32"), "rows": rows})
    return engines, infos
