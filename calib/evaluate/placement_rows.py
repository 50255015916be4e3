"""A placement choice that trades accuracy for speed, shown with both its rows: where calib's Q/DQ placement quantizes
a stem Conv's output before its LeakyRelu (calib.quantize.placement: TensorRT 8.6 leaves that LeakyRelu unfused), the
Q/DQ model with the pair and the one without it are run on the same samples (paired) as `<algo> qdq` and
`<algo> qdq stem-float`, and the report says which the Q/DQ model has, what the other costs in speed (the engines
measured in benchmarks/RESULTS_QDQ.md) and the option that picks it."""
from __future__ import annotations

import onnx


def _measured() -> dict:
    """The stem placements' speeds: the table of calib.deploy.measured that timed both (YOLOv3-tiny, H200, level 3)."""
    from calib.deploy.measured import TABLES

    t = next(t for t in TABLES if "qdq-stem-float" in t["ms"] and "fp16" in t["ms"] and t["level"] == 3)
    ms = t["ms"]
    return {"model": t["model"], "card": t["card"], "tensorrt": t["tensorrt"], "level": t["level"],
            "batch": t["batch"], "ms": {"fp16": ms["fp16"], "implicit": ms["implicit"], "stem-int8": ms["qdq"],
                                        "stem-float": ms["qdq-stem-float"]}}


OPTION = "calib cache convert --keep-stem-output-float; recipe calibration.stem_output: float"


def add_placement_rows(result: dict, algo: str, model: onnx.ModelProto, amax: dict, chosen: onnx.ModelProto,
                       stem_int8: bool, model_path, source, recipe, budget, hook, metric=None,
                       label: str | None = None, residual_branch: str = "float") -> dict | None:
    """Both placements of the stem Conv's output as rows of `result` (None where the model has no such Conv); the
    `chosen` Q/DQ model is the one written (stem output INT8 when `stem_int8`)."""
    from calib.deploy.emulate import Fp16Runner
    from calib.evaluate.fp16_rows import add_rows
    from calib.io.memory import release
    from calib.quantize.placement import stem_outputs
    from calib.quantize.qdq import insert_qdq

    stems = stem_outputs(model)
    if not stems:
        return None
    other = insert_qdq(model, amax, stem_output=not stem_int8, label=label, residual_branch=residual_branch)
    q_int8, q_float = (chosen, other) if stem_int8 else (other, chosen)
    names = {"int8": f"{algo} qdq", "float": f"{algo} qdq stem-float"}
    release()
    engines = {names["int8"]: Fp16Runner(q_int8, names["int8"], backend="onnxruntime (Q/DQ model as written)"),
               names["float"]: Fp16Runner(q_float, names["float"], backend="onnxruntime (Q/DQ model as written)")}
    add_rows(result, engines, model_path, source, recipe, budget, hook, metric)
    return {"tensors": stems, "rows": names, "written": "int8" if stem_int8 else "float", "option": OPTION,
            "measured": _measured()}


def placement_blocks(report: dict) -> list[tuple]:
    """The report's section: the two rows with their intervals, the measured speed of each placement, which the
    written Q/DQ model has and the option that picks the other."""
    from calib.evaluate import report_doc as doc

    info = report.get("placement")
    if not info:
        return []
    s = report["summary"]
    metric = s.get("metric") or "output_sqnr_db"
    m, ms = info["measured"], info["measured"]["ms"]
    rows = []
    for key, label, speed in (("int8", "stem output INT8", ms["stem-int8"]),
                              ("float", "stem output float", ms["stem-float"])):
        name = info["rows"][key]
        fig = (s.get("intervals", {}).get(name) or {}).get(metric)
        if fig is None and name in s.get("rows", {}):
            fig = {"value": s["rows"][name].get(metric)}
        rows.append([f"`{name}`", label + (" (the Q/DQ model written)" if info["written"] == key else ""),
                     doc.fig_cell(fig, metric), f"{speed:.4f} ms, {ms['implicit'] / speed:.2f}x implicit, "
                     f"{ms['fp16'] / speed:.2f}x FP16"])
    text = (f"TensorRT 8.6 leaves the LeakyRelu after the stem Conv ({', '.join(f'`{t}`' for t in info['tensors'])}) "
            "unfused. With a Q/DQ pair on the Conv's output both run in INT8, as in the implicit engine; without it "
            "the Conv writes FP16 (a slow INT8-in, FP16-out kernel) and the LeakyRelu runs in FP16: one rounding "
            f"fewer, a slower engine. The other placement: {info['option']}.")
    head = ["row", "placement", f"{s.get('labels', {}).get(metric, metric)} (95 % CI)",
            f"measured on {m['model']} ({m['card']}, TensorRT {m['tensorrt']}, level {m['level']}, batch {m['batch']})"]
    return [("h2", "Placement choice: the stem Conv's output"), ("p", text), ("table", head, rows)]
