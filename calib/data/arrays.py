"""Arrays from .npy / .npz files (or memory) as a Source of preprocessed batches."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from calib.errors import DataError

PRESETS = ("none", "unit", "imagenet")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def load_array(path: str | Path, key: str | None = None) -> np.ndarray:
    """An array from .npy (memory-mapped) or .npz (`key`, or its only array)."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected a .npy or .npz file")
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                keys = list(z.keys())
                if key is None:
                    if len(keys) != 1:
                        raise DataError(f"{path}: holds arrays {keys}; name one with key=")
                    key = keys[0]
                if key not in keys:
                    raise DataError(f"{path}: has no array '{key}' (has {keys})")
                return z[key]
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a readable numpy file ({exc})") from None


def preset_transform(x: np.ndarray, preset: str, channels_first: bool) -> np.ndarray:
    """uint8/float images -> float32 model input for the simple presets of `calib calibrate`."""
    if preset not in PRESETS:
        raise DataError(f"unknown --preprocess '{preset}' (choose from {', '.join(PRESETS)})")
    x = np.asarray(x)
    if preset == "none":
        return np.array(x, dtype=np.float32 if x.dtype.kind == "f" else x.dtype, copy=True)
    x = x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
    nhwc = x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3)
    if preset == "imagenet":
        if nhwc:
            x = (x - IMAGENET_MEAN) / IMAGENET_STD
        else:
            x = (x - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]
    if nhwc and channels_first:
        x = x.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(x, dtype=np.float32)


class ArraySource:
    """Batches of an array (from memory or a file), for one model input, with a preset transform."""

    def __init__(self, array: np.ndarray, input_name: str, batch_size: int = 8, preset: str = "none",
                 channels_first: bool = True, limit: int | None = None, label: str = "<array>"):
        if array.ndim < 1 or array.shape[0] == 0:
            raise DataError(f"{label}: no samples")
        if batch_size < 1:
            raise DataError(f"batch size must be >= 1, got {batch_size}")
        if preset not in PRESETS:
            raise DataError(f"unknown --preprocess '{preset}' (choose from {', '.join(PRESETS)})")
        self.array = array
        self.input_name = input_name
        self.batch_size = batch_size
        self.preset = preset
        self.channels_first = channels_first
        self.label = label
        self.n = min(array.shape[0], limit) if limit else array.shape[0]

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[dict]:
        for i in range(0, self.n, self.batch_size):
            x = self.array[i:min(self.n, i + self.batch_size)]
            yield {self.input_name: preset_transform(x, self.preset, self.channels_first)}
