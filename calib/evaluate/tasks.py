"""Which task metric fits a model: checked on its declared outputs before any inference.

classification: one output of class scores [N, C] (or [N, C, 1, 1]);
embedding: one output of vectors [N, D] (a sentence encoder), compared by cosine per sample;
detection: `boxes` [N, A, 4] and `scores` [N, A, C] (calib's YOLOv3 import), or one [N, 4 + C, A] (YOLOv8).
A task that does not fit is refused with one line naming the model and its outputs (an agreement computed on
box coordinates means nothing)."""
from __future__ import annotations

from pathlib import Path

import onnx

from calib.errors import ModelError

TASKS = ("outputs", "classification", "detection", "embedding")


def output_shapes(model: onnx.ModelProto) -> dict[str, tuple | None]:
    """Output name -> declared shape (None for an unknown dimension), or None where no rank is declared."""
    out = {}
    for o in model.graph.output:
        t = o.type.tensor_type
        if not t.HasField("shape"):
            out[o.name] = None
            continue
        out[o.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return out


def _show(shapes: dict) -> str:
    def dims(s):
        return "?" if s is None else "[" + ", ".join("N" if i == 0 and d is None else str(d if d is not None
                                                     else "?") for i, d in enumerate(s)) + "]"

    return ", ".join(f"{k} {dims(v)}" for k, v in shapes.items())


def detection_format(shapes: dict) -> str | None:
    """yolov3 | yolov8 where the outputs have that layout, else None."""
    b, s = shapes.get("boxes", ()), shapes.get("scores", ())
    if "boxes" in shapes and "scores" in shapes and (b is None or (len(b) == 3 and b[-1] in (4, None))) \
            and (s is None or len(s) == 3):
        return "yolov3"
    if len(shapes) == 1:
        (only,) = shapes.values()
        if only is not None and len(only) == 3 and (only[1] is None or only[1] > 4) and \
                (only[1] is None or only[2] is None or only[2] > only[1]):
            return "yolov8"
    return None


def is_classifier(shapes: dict) -> bool:
    first = next(iter(shapes.values()), None)
    if first is None:
        return len(shapes) == 1  # no declared rank: let the metric see the values
    squeezed = [d for d in first[1:] if d != 1]
    return len(first) >= 2 and len(squeezed) <= 1 and len(shapes) == 1


def check_task(model: str | Path | onnx.ModelProto, task: str, detection_format_wanted: str | None = None,
               flag: str = "--task", label: str | None = None) -> str | None:
    """Refuse a task the model's outputs do not fit; returns the detection format found (detection only).
    `flag` names the setting in the message (`--task`, or a recipe's `evaluation.task`), `label` the model."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    label = label or (proto.graph.name if isinstance(model, onnx.ModelProto) else str(model))
    shapes = output_shapes(proto)
    if task not in TASKS:
        raise ModelError(f"unknown task '{task}' (choose from {', '.join(TASKS)})")
    found = detection_format(shapes)
    if task == "classification" and not is_classifier(shapes):
        hint = f"; use {flag} detection" if found else f"; use {flag} outputs"
        raise ModelError(f"{label}: {flag} classification needs one output of class scores [N, C]; its outputs "
                         f"are {_show(shapes)}{hint}")
    if task == "embedding":
        only = next(iter(shapes.values()), ())
        if len(shapes) != 1 or (only is not None and len(only) != 2):
            raise ModelError(f"{label}: {flag} embedding needs one output of vectors [N, D]; its outputs are "
                             f"{_show(shapes)}; use {flag} outputs")
    if task == "detection":
        if found is None:
            hint = f"; use {flag} classification" if is_classifier(shapes) else f"; use {flag} outputs"
            raise ModelError(f"{label}: {flag} detection needs outputs boxes [N, A, 4] + scores [N, A, C] "
                             f"(YOLOv3) or one [N, 4 + C, A] (YOLOv8); its outputs are {_show(shapes)}{hint}")
        if detection_format_wanted and detection_format_wanted != found:
            raise ModelError(f"{label}: detection format {detection_format_wanted} does not fit its outputs "
                             f"{_show(shapes)} ({found} does)")
        return found
    return None
