"""Built-in decoders for the detection heads users bring most, recognized from the output shapes.

boxes-scores  two outputs: boxes [N, A, 4] xyxy in input pixels and scores [N, A, C] (calib's YOLOv3 import;
              `yolov3` is the same head under its older name)
yolov5        one output [N, A, 5 + C]: cx, cy, w, h in input pixels, objectness, C class scores (YOLOv5, YOLOv7,
              and YOLOX exported with its own decoding)
yolox         one output [N, A, 5 + C] as YOLOX exports it by default: x, y in grid cells and log w, h, one anchor per
              cell of strides 8, 16 and 32, decoded as YOLOX's demo_postprocess does it: (xy + cell) * stride and
              exp(wh) * stride
yolov8        one output [N, 4 + C, A]: cx, cy, w, h in input pixels and C class scores, no objectness (YOLOv8, YOLO11)

A head's scores are objectness x class score where it has an objectness (as YOLOv5's and YOLOX's own NMS compute
them). `auto` takes the one head that fits the shapes; an [N, A, 5 + C] output with one anchor per cell of
strides 8/16/32 whose centres are small numbers (cell offsets, not pixels) is YOLOX's raw head, else YOLOv5's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calib.errors import ModelError

HEADS = ("boxes-scores", "yolov5", "yolox", "yolov8")
ALIASES = {"yolov3": "boxes-scores"}
CHOICES = ("auto", *HEADS, *ALIASES)
STRIDES = (8, 16, 32)
_TEXT = {"boxes-scores": "separate boxes [N, A, 4] (xyxy) and scores [N, A, C] outputs",
         "yolov5": "YOLOv5/YOLOv7-style [N, A, 5 + C]: boxes in pixels, objectness x class score",
         "yolox": "YOLOX-style raw [N, A, 5 + C]: grid decode with strides 8/16/32 and exp for w/h, "
                  "objectness x class score",
         "yolov8": "YOLOv8/YOLO11-style [N, 4 + C, A]: boxes in pixels, class scores"}


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def _rank3(shape) -> bool:
    return shape is not None and len(shape) == 3


def boxes_scores_names(shapes: dict) -> tuple[str, str] | None:
    """(boxes output, scores output) where two rank-3 outputs are boxes [N, A, 4] and scores [N, A, C]."""
    if len(shapes) != 2 or not all(_rank3(s) or s is None for s in shapes.values()):
        return None
    if "boxes" in shapes and "scores" in shapes:
        b = shapes["boxes"]
        return ("boxes", "scores") if b is None or b[-1] in (4, None) else None
    (n1, s1), (n2, s2) = shapes.items()
    if s1 is None or s2 is None:
        return None
    fours = [n for n, s in ((n1, s1), (n2, s2)) if s[-1] == 4]
    if len(fours) == 2:
        fours = [n for n in fours if "box" in n.lower()]
    if len(fours) != 1 or (s1[1] is not None and s2[1] is not None and s1[1] != s2[1]):
        return None
    return (fours[0], n2 if fours[0] == n1 else n1)


def fitting(shapes: dict) -> list[str]:
    """The heads whose layout the outputs (name -> shape, None for an unknown dimension or rank) have."""
    out = ["boxes-scores"] if boxes_scores_names(shapes) else []
    if len(shapes) == 1:
        (only,) = shapes.values()
        if _rank3(only):
            _, d1, d2 = only
            if (d1 is None or d1 > 4) and (d2 is None or (d1 is not None and d2 > d1)):  # [N, 4 + C, A]
                out.append("yolov8")
            if (d2 is None or d2 >= 6) and (d1 is None or (d2 is not None and d1 > d2)):  # [N, A, 5 + C]
                out += ["yolov5", "yolox"]
    return out


def grid_sizes(anchors: int, input_hw: tuple[int, int] | None) -> list[tuple[int, int]] | None:
    """Cells (h, w) per stride of 8/16/32 when `anchors` is one per cell: from the input's height and width, or
    for a square input when they are not known; None where the count is not one anchor per cell."""
    if input_hw:
        sizes = [(input_hw[0] // s, input_hw[1] // s) for s in STRIDES]
        return sizes if sum(h * w for h, w in sizes) == anchors else None
    side = round(math.sqrt(anchors * 16 / 21)) * 8  # (side / 8)^2 * (1 + 1/4 + 1/16) cells
    sizes = [(side // s, side // s) for s in STRIDES]
    return sizes if side and sum(h * w for h, w in sizes) == anchors else None


def grid_decode(y: np.ndarray, sizes: list[tuple[int, int]]) -> np.ndarray:
    """YOLOX's demo_postprocess: [N, A, 5 + C] raw -> cx, cy, w, h in input pixels (the rest unchanged)."""
    cells, strides = [], []
    for (h, w), s in zip(sizes, STRIDES):
        xv, yv = np.meshgrid(np.arange(w), np.arange(h))
        cells.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((h * w, 1), s))
    cell, stride = np.concatenate(cells).astype(np.float32), np.concatenate(strides).astype(np.float32)
    y = np.asarray(y, np.float32)
    return np.concatenate([(y[..., :2] + cell) * stride, np.exp(y[..., 2:4]) * stride, y[..., 4:]], -1)


def _xyxy(cxcywh: np.ndarray) -> np.ndarray:
    cxcy, wh = cxcywh[..., :2], cxcywh[..., 2:4]
    return np.concatenate([cxcy - wh / 2, cxcy + wh / 2], -1)


@dataclass(frozen=True)
class Head:
    """A resolved head: which outputs it reads and how; `grid` for YOLOX's raw head."""

    name: str
    outputs: tuple[str, ...]
    grid: tuple[tuple[int, int], ...] = ()

    def split(self, outputs: dict) -> tuple[np.ndarray, np.ndarray]:
        """(boxes [N, A, 4] xyxy in input pixels, scores [N, A, C]) from a batch of the model's outputs."""
        if self.name == "boxes-scores":
            b, s = outputs[self.outputs[0]], outputs[self.outputs[1]]
            return b, s
        y = outputs[self.outputs[0]]
        if self.name == "yolov8":
            y = y.transpose(0, 2, 1)
            return _xyxy(y), y[..., 4:]
        if self.name == "yolox":
            y = grid_decode(y, list(self.grid))
        return _xyxy(y), y[..., 5:] * y[..., 4:5]

    def candidates(self, outputs: dict) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per image: (boxes [A, 4], best class score [A], its class [A]) before any threshold."""
        boxes, scores = self.split(outputs)
        out = []
        for b, s in zip(boxes, scores):
            c = s.argmax(1)
            out.append((b, s[np.arange(s.shape[0]), c], c))
        return out

    def describe(self) -> str:
        where = ", ".join(self.outputs)
        cells = f"; grid {' + '.join(f'{h}x{w}' for h, w in self.grid)}" if self.grid else ""
        return f"head {self.name} ({_TEXT[self.name]}; output {where}{cells})"


def _show(shapes: dict) -> str:
    return ", ".join(f"{k} [{', '.join('?' if d is None else str(d) for d in v)}]" if v is not None else f"{k} ?"
                     for k, v in shapes.items())


def looks_raw(y: np.ndarray, input_hw: tuple[int, int] | None, sizes) -> bool:
    """x, y of an [N, A, 5 + C] output are cell offsets (YOLOX raw), not pixels: pixel centres of every cell
    reach across the input, offsets stay within a few cells."""
    side = min(input_hw) if input_hw else sizes[0][0] * STRIDES[0]
    xy = np.abs(np.asarray(y[..., :2], np.float64))
    return bool(xy.size) and float(np.nanmax(xy)) < side / 4


def resolve(name: str, outputs: dict, input_hw: tuple[int, int] | None = None, flag: str = "--head") -> Head:
    """The head `name` (or `auto`) for these outputs (name -> a batch array, FP32's), checked against their shapes."""
    shapes = {k: tuple(np.shape(v)) for k, v in outputs.items()}
    fits = fitting(shapes)
    want = canonical(name)
    if want != "auto" and want not in fits:
        raise ModelError(f"{flag} {name}: the outputs are {_show(shapes)}, not {_TEXT.get(want, want)}"
                         + (f" ({', '.join(fits)} fits)" if fits else ""))
    if want == "auto":
        family = [h for h in fits if h != "yolox"]
        if len(family) != 1:
            raise ModelError(f"no built-in head fits the outputs {_show(shapes)}: choose one with {flag} "
                             f"({', '.join(HEADS)}) or give --postprocess FILE.py:FUNCTION")
        want = family[0]
    if want == "boxes-scores":
        return Head(want, boxes_scores_names(shapes))
    (only,) = outputs
    if want == "yolov8":
        return Head(want, (only,))
    sizes = grid_sizes(shapes[only][1], input_hw)
    if canonical(name) == "auto":  # the shapes say objectness head; its values say raw or decoded
        raw = sizes is not None and looks_raw(outputs[only], input_hw, sizes)
        want = "yolox" if raw else "yolov5"
    if want == "yolox" and sizes is None:
        raise ModelError(f"{flag} yolox: {shapes[only][1]} anchors are not one per cell of strides 8, 16 and 32 "
                         f"for an input of {input_hw or 'unknown size'}")
    return Head(want, (only,), tuple(sizes) if want == "yolox" else ())


def image_hw(batch: dict) -> tuple[int, int] | None:
    """Height and width of the (first) image input of a batch: NCHW, or NHWC where the last axis is channels."""
    for x in batch.values():
        s = np.shape(x)
        if len(s) == 4:
            return (s[1], s[2]) if s[3] in (1, 3, 4) and s[1] not in (1, 3, 4) else (s[2], s[3])
    return None
