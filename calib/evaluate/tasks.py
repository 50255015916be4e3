"""Which task metric fits a model: checked on its declared outputs before any inference.

classification: one output of class scores [N, C] (or [N, C, 1, 1]);
embedding: one output of vectors [N, D] (a sentence encoder), compared by cosine per sample;
text: strings from the CTC head (calib.evaluate.scores.ctc) or a postprocess hook, compared with FP32's;
detection: a head calib.evaluate.heads decodes (boxes + scores outputs, [N, A, 5 + C] YOLOv5/YOLOX, [N, 4 + C, A]
YOLOv8), or any outputs with a postprocess hook (calib.evaluate.postprocess), which then decides the task.
A task that does not fit is refused with one line naming the model and its outputs (an agreement computed on
box coordinates means nothing)."""
from __future__ import annotations

from pathlib import Path

import onnx

from calib.errors import ModelError
from calib.evaluate import heads

TASKS = ("outputs", "classification", "detection", "embedding", "text")


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
    """The built-in head these outputs fit (calib.evaluate.heads): its name where one family fits, `auto` where
    the values decide (an [N, A, 5 + C] head: raw YOLOX or decoded), None where none fits."""
    fits = heads.fitting(shapes)
    if not fits:
        return None
    family = [h for h in fits if h != "yolox"]
    return family[0] if len(family) == 1 and family[0] != "yolov5" else "auto"


def is_classifier(shapes: dict) -> bool:
    first = next(iter(shapes.values()), None)
    if first is None:
        return len(shapes) == 1  # no declared rank: let the metric see the values
    squeezed = [d for d in first[1:] if d != 1]
    return len(first) >= 2 and len(squeezed) <= 1 and len(shapes) == 1


def check_task(model: str | Path | onnx.ModelProto, task: str, detection_format_wanted: str | None = None,
               flag: str = "--task", label: str | None = None, head_flag: str = "--head") -> str | None:
    """Refuse a task the model's outputs do not fit; returns the head found (detection only: the one asked for
    where it fits, `auto` where the first batch decides). `flag` names the setting in the message (`--task`, or a
    recipe's `evaluation.task`), `head_flag` the head's, `label` the model."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    label = label or (proto.graph.name if isinstance(model, onnx.ModelProto) else str(model))
    shapes = output_shapes(proto)
    if task not in TASKS:
        raise ModelError(f"unknown task '{task}' (choose from {', '.join(TASKS)})")
    found = detection_format(shapes)
    if task == "text":
        raise ModelError(f"{label}: {flag} text needs a decoder: the CTC head (--head ctc --charset FILE; recipe "
                         "evaluation.charset) or a postprocess hook returning one string per sample")
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
            raise ModelError(f"{label}: {flag} detection needs outputs boxes [N, A, 4] + scores [N, A, C], one "
                             f"[N, A, 5 + C] (YOLOv5/YOLOX) or one [N, 4 + C, A] (YOLOv8), or a postprocess "
                             f"hook (--postprocess FILE.py:FUNCTION); its outputs are {_show(shapes)}{hint}")
        wanted = detection_format_wanted
        if wanted and wanted != "auto":
            if heads.canonical(wanted) not in heads.fitting(shapes):
                raise ModelError(f"{label}: detection format {wanted} does not fit its outputs {_show(shapes)} "
                                 f"({found if found != 'auto' else 'yolov5 or yolox'} does; {head_flag} chooses "
                                 "the head)")
            return wanted
        return found
    return None
