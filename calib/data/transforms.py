"""Image preprocessing declared in a recipe: resize (shorter side, exact, letterbox centred or top-left), center
crop, channel order, scale, mean/std, layout and dtype. PIL bilinear resizing, as torchvision does for PIL images."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from PIL import Image

from calib.recipe import PreprocessSpec


@dataclass(frozen=True)
class Letterbox:
    """How an original image maps into the model input: input = original * scale + (pad_x, pad_y)."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    width: int  # original size
    height: int

    def to_original(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        b = np.asarray(boxes_xyxy, np.float64).copy()
        b[:, [0, 2]] = (b[:, [0, 2]] - self.pad_x) / self.scale_x
        b[:, [1, 3]] = (b[:, [1, 3]] - self.pad_y) / self.scale_y
        b[:, [0, 2]] = b[:, [0, 2]].clip(0, self.width)
        b[:, [1, 3]] = b[:, [1, 3]].clip(0, self.height)
        return b


def _pair(v) -> tuple[int, int] | None:
    if v is None:
        return None
    v = tuple(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


class Preprocessor:
    def __init__(self, spec: PreprocessSpec):
        self.spec = spec
        n = 3
        self.mean = np.asarray(spec.mean, np.float32).reshape(-1)[:n]
        self.std = np.asarray(spec.std, np.float32).reshape(-1)[:n]

    def geometry(self, img: Image.Image) -> tuple[Image.Image, Letterbox]:
        s = self.spec
        w, h = img.size
        sx = sy = 1.0
        px = py = 0.0
        if s.resize:
            if s.mode == "letterbox":
                th, tw = _pair(s.resize)
                r = min(th / h, tw / w)
                # at least one pixel: a 30000x2 image letterboxed to 640 keeps a 1-pixel strip, not a 0-pixel side
                nw, nh = max(1, min(tw, int(round(w * r)))), max(1, min(th, int(round(h * r))))
                resized = img.resize((nw, nh), Image.BILINEAR)
                left = int(round((tw - nw) / 2 - 0.1))
                top = int(round((th - nh) / 2 - 0.1))
                if s.letterbox_anchor == "top-left":  # padded right and bottom only (YOLOX)
                    left = top = 0
                canvas = Image.new("RGB", (tw, th), (s.pad_value,) * 3)
                canvas.paste(resized, (left, top))
                img, sx, sy, px, py = canvas, nw / w, nh / h, float(left), float(top)
            elif s.mode == "exact" or len(s.resize) == 2:
                th, tw = _pair(s.resize)
                img, sx, sy = img.resize((tw, th), Image.BILINEAR), tw / w, th / h
            else:  # shorter side, as torchvision.transforms.Resize(int)
                size = s.resize[0]
                if w <= h:
                    nw, nh = size, int(size * h / w)
                else:
                    nw, nh = int(size * w / h), size
                img, sx, sy = img.resize((nw, nh), Image.BILINEAR), nw / w, nh / h
        if s.crop:
            ch, cw = _pair(s.crop)
            iw, ih = img.size
            top = int(round((ih - ch) / 2.0))
            left = int(round((iw - cw) / 2.0))
            img = img.crop((left, top, left + cw, top + ch))
            px -= left
            py -= top
        return img, Letterbox(sx, sy, px, py, w, h)

    def __call__(self, img: Image.Image) -> tuple[np.ndarray, Letterbox]:
        s = self.spec
        img = img.convert("RGB")
        img, box = self.geometry(img)
        x = np.asarray(img, dtype=np.uint8)
        if s.color == "BGR":
            x = x[..., ::-1]
        if s.dtype == "uint8":
            out = np.ascontiguousarray(x)
        else:
            out = x.astype(np.float32) * np.float32(s.scale)
            out = (out - self.mean) / self.std
            out = out.astype(s.dtype)
        if s.layout == "NCHW":
            out = out.transpose(2, 0, 1)
        return np.ascontiguousarray(out), box


def with_model_size(spec: PreprocessSpec, dims: tuple, layout: str | None = None) -> PreprocessSpec:
    """`spec` resizing to the model input's height and width (`dims`, an image input's shape) where it gives no
    size of its own and the model's is known (fixed by the model or by input_shapes / --input-shape)."""
    if spec.resize is not None or spec.crop is not None or len(dims) != 4:
        return spec
    hw = dims[2:4] if (layout or spec.layout) == "NCHW" else dims[1:3]
    if not all(isinstance(d, int) and d > 0 for d in hw):
        return spec
    return dataclasses.replace(spec, resize=tuple(hw), mode="letterbox" if spec.mode == "letterbox" else "exact")
