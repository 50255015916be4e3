"""Placement choices that trade accuracy for speed, each shown with all its rows. Two exist (calib.quantize.placement):

    stem      a stem Conv's output before its LeakyRelu, which TensorRT 8.6 leaves unfused: "int8" (a Q/DQ pair
              there, the default) or "float" (`--keep-stem-output-float`)
    residual  a residual Add's Conv branch behind an activation (YOLOv8's bottleneck): "conv" (a pair on the Conv's
              output, the default), "act" (on the activation's output) or "float" (`--residual-branch`)

The Q/DQ model as written is the row `<algo> qdq`; for every choice the model has, each other form is built with
only that choice changed and run on the same samples (paired) as `<algo> qdq <choice>-<form>`. The report gives each
form's simulated accuracy with its interval, its speed where an engine of it was timed (calib.deploy.measured) and
the option that picks it."""
from __future__ import annotations

import onnx

FORMS = {"stem": ("int8", "float"), "residual": ("conv", "act", "float")}
FLAGS = {("stem", "int8"): None, ("stem", "float"): "--keep-stem-output-float", ("residual", "conv"): None,
         ("residual", "act"): "--residual-branch act", ("residual", "float"): "--residual-branch float"}
KEYS = {"stem": "stem_output", "residual": "residual_branch"}


def option(choice: str, form: str) -> str:
    """What picks this form: the convert flag (none for the default) and the recipe key."""
    return (f"calib cache convert {FLAGS[choice, form] or '(the default)'}; "
            f"recipe calibration.{KEYS[choice]}: {form}")


TEXT = {
    "stem": "TensorRT 8.6 leaves the LeakyRelu after the stem Conv ({tensors}) unfused. With a Q/DQ pair on the "
            "Conv's output both run in INT8, as in the implicit engine; without it the Conv writes FP16 (a slow "
            "INT8-in, FP16-out kernel) and the LeakyRelu runs in FP16: one rounding fewer, a slower engine.",
    "residual": "TensorRT 8.6 does not fuse a residual Add into a Conv that reaches it through an activation "
                "({tensors}): the activation and the Add run as a layer of their own. Left float, that layer runs "
                "in FP16 behind a Conv writing FP16; with a pair on the Conv's output (conv) it runs in INT8, as in "
                "the implicit engine; with a pair on the activation's output (act, ModelOpt's form) the Conv and "
                "activation run in INT8 and the Add alone.",
}
TITLE = {"stem": "the stem Conv's output", "residual": "residual Adds behind an activation"}


def sites(model: onnx.ModelProto) -> dict:
    """The choices this model has: choice -> the tensors (stem) or Add nodes (residual) it decides."""
    from calib.quantize.placement import residual_adds, stem_outputs

    found = {"stem": stem_outputs(model), "residual": residual_adds(model)}
    return {k: v for k, v in found.items() if v}


def add_placement_rows(result: dict, algo: str, model: onnx.ModelProto, amax: dict, chosen: onnx.ModelProto,
                       written: dict, model_path, source, recipe, budget, hook, metric=None,
                       **qdq_options) -> dict | None:
    """Every other form of each placement choice the model has, as rows of `result` beside the `chosen` Q/DQ model
    (`written`: {"stem": "int8"|"float", "residual": "float"|"conv"|"act"}, the forms it has; `qdq_options` the
    other insert_qdq arguments it was made with). None where the model has no such choice."""
    from calib.deploy.emulate import Fp16Runner
    from calib.evaluate.fp16_rows import add_rows
    from calib.io.memory import release
    from calib.quantize.qdq import insert_qdq

    found = sites(model)
    if not found:
        return None
    backend = "onnxruntime (Q/DQ model as written)"
    own = f"{algo} qdq"
    engines, choices = {own: Fp16Runner(chosen, own, backend=backend)}, []
    for choice, tensors in found.items():
        rows = {}
        for form in FORMS[choice]:
            if form == written[choice]:
                rows[form] = own
                continue
            forms = {**written, choice: form}
            other = insert_qdq(model, amax, stem_output=forms["stem"] == "int8", residual_branch=forms["residual"],
                               **qdq_options)
            rows[form] = f"{own} {choice}-{form}"
            engines[rows[form]] = Fp16Runner(other, rows[form], backend=backend)
        choices.append({"choice": choice, "tensors": tensors, "written": written[choice], "rows": rows,
                        "options": {f: option(choice, f) for f in FORMS[choice]}})
    release()
    add_rows(result, engines, model_path, source, recipe, budget, hook, metric)
    return {"choices": choices}


def placement_blocks(report: dict) -> list[tuple]:
    """The report's sections, one per choice: a row per form with its interval and its measured speed (or that no
    engine of it was timed), which form the written Q/DQ model has and the option that picks each."""
    from calib.deploy.measured import placement_speeds
    from calib.deploy.worth import verdict
    from calib.evaluate import report_doc as doc

    info = report.get("placement")
    if not info:
        return []
    s = report["summary"]
    metric = s.get("metric") or "output_sqnr_db"
    out = []
    for c in info.get("choices", []):
        speeds = placement_speeds(c["choice"], report.get("model_sha256"))
        rows, slower = [], []
        for form, name in c["rows"].items():
            fig = (s.get("intervals", {}).get(name) or {}).get(metric)
            if fig is None and name in s.get("rows", {}):
                fig = {"value": s["rows"][name].get(metric)}
            row = [f"`{name}`", form + (" (the Q/DQ model written)" if c["written"] == form else ""),
                   doc.fig_cell(fig, metric)]
            if speeds:
                ms = speeds["ms"].get(form)
                x_fp16 = speeds["fp16"] / ms if ms and speeds.get("fp16") else None
                if x_fp16 and verdict(x_fp16) == "slower":
                    slower.append(f"`{name}` ({x_fp16:.2f}x)")
                row.append(f"{ms:.4f} ms, {speeds['implicit'] / ms:.2f}x implicit"
                           + (f", {x_fp16:.2f}x FP16" if x_fp16 else "") if ms else "not timed")
            rows.append(row + [f"`{c['options'][form]}`"])
        text = TEXT[c["choice"]].format(tensors=", ".join(f"`{t}`" for t in c["tensors"][:4])
                                        + (f" and {len(c['tensors']) - 4} more" if len(c["tensors"]) > 4 else ""))
        head = ["row", "form", f"{s.get('labels', {}).get(metric, metric)} (95 % CI)"]
        if speeds:
            head.append(f"measured on {speeds['where']}")
            if slower:
                text += (f" Measured there, {' and '.join(slower)} ran slower than the FP16 engine, which is also the "
                         "more accurate: where that form's accuracy is needed, FP16 gives it faster.")
        else:
            text += " No engine of these forms has been timed for this model: time yours with `calib bench`."
        out += [("h2", f"Placement choice: {TITLE[c['choice']]}"), ("p", text), ("table", head + ["picked by"], rows)]
    return out
