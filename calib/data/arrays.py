"""Arrays from .npy / .npz files (or memory) as a Source of preprocessed batches, for one input or several."""
from __future__ import annotations

import math
import os
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
        array = np.load(path, mmap_mode="r", allow_pickle=False)
        if isinstance(array, np.memmap) and array.offset is not None and \
                array.offset + array.nbytes > path.stat().st_size:
            raise DataError(f"{path}: cut short: its header promises {array.offset + array.nbytes} bytes, the file "
                            f"has {path.stat().st_size}")
        return array
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a readable numpy file ({exc})") from None


def load_inputs(path: str | Path, inputs, mapping=None, key: str | None = None) -> dict[str, np.ndarray]:
    """Model input -> array, for the model inputs named in `inputs`, from an .npz (or .npy for one input).

    An input takes the array `mapping[input]`, else the array named like it; a model of one input also takes an
    .npz's only array, or `key`. The arrays are as the file holds them: calib.data.feeding.canonical checks their
    numbers of samples along each input's batch axis."""
    path, inputs, mapping = Path(path), list(inputs), dict(mapping or {})
    unknown = sorted(set(mapping) - set(inputs))
    if unknown:
        raise DataError(f"{path}: inputs: '{unknown[0]}' is not an input of the model (inputs: {inputs})")
    if key is not None and mapping:
        raise DataError(f"{path}: give the arrays either with 'key' or with 'inputs', not both")
    if len(inputs) == 1 and not mapping:
        return {inputs[0]: _single(path, inputs[0], key)}
    if path.suffix != ".npz":
        load_array(path)  # a missing or unreadable file says so first
        raise DataError(f"{path}: one array for a model of {len(inputs)} inputs {inputs}: give an .npz holding one "
                        "array per input, named like the input (or mapped with 'inputs')")
    names = _npz_names(path)
    out = {}
    for name in inputs:
        want = mapping.get(name, name)
        if want not in names:
            how = f"array '{want}'" if want != name else "array of that name"
            raise DataError(f"{path}: no data for model input '{name}': the file has no {how} (has {names}; "
                            "map arrays to inputs with 'inputs', or feed the input one value for every sample with "
                            f"--const {name}=VALUE, recipe inputs: {{{name}: {{const: VALUE}}}})")
        out[name] = load_array(path, want)
    return out


def _npz_names(path: Path) -> list[str]:
    if not path.is_file():
        load_array(path)  # says: not found, or a folder
    try:
        with np.load(path, allow_pickle=False) as z:
            return list(z.keys())
    except Exception as exc:
        raise DataError(f"{path}: not a readable numpy file ({exc})") from None


def _single(path: Path, name: str, key: str | None) -> np.ndarray:
    """The one array of a one-input model: `key`, an .npz's only array, or its array named like the input."""
    if key is None and path.suffix == ".npz" and path.is_file():
        names = _npz_names(path)
        if len(names) > 1 and name in names:
            key = name
        elif len(names) > 1:
            raise DataError(f"{path}: holds arrays {names} and none is named like the model input '{name}'; "
                            "name one with key=")
    return load_array(path, key)


def mapped_file(array) -> tuple[str, int] | None:
    """(file, data offset) of a memory-mapped .npy array that spans its whole file (as np.load maps it), else None."""
    name, offset = getattr(array, "filename", None), getattr(array, "offset", None)
    if not isinstance(array, np.memmap) or name is None or offset is None or not array.flags.c_contiguous:
        return None
    try:
        return (name, offset) if offset + array.nbytes == os.stat(name).st_size else None
    except OSError:
        return None


def read_rows(array: np.ndarray, start: int, stop: int, mapped: tuple[str, int] | None, label: str) -> np.ndarray:
    """array[start:stop] as a new array in memory. Rows of a memory-mapped file (`mapped`, from mapped_file) are
    read with pread, not through the mapping: a file cut while the pass runs is a DataError naming it, not a
    SIGBUS that kills the process without a word."""
    if mapped is None:
        return np.array(array[start:stop], copy=True)
    name, offset = mapped
    row = array.dtype.itemsize * math.prod(int(d) for d in array.shape[1:])
    want = row * (stop - start)
    try:
        fd = os.open(name, os.O_RDONLY)
        try:
            data = os.pread(fd, want, offset + row * start)
        finally:
            os.close(fd)
    except OSError as exc:
        raise DataError(f"{label}: cannot read samples {start}-{stop - 1} ({exc.strerror or exc})") from None
    if len(data) != want:
        raise DataError(f"{label}: cut short while it was read (samples {start}-{stop - 1} need bytes up to "
                        f"{offset + row * stop}, the file now ends at {offset + row * start + len(data)})")
    return np.frombuffer(data, array.dtype).reshape((stop - start,) + array.shape[1:]).copy()


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
        self.mapped = mapped_file(array)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[dict]:
        for i in range(0, self.n, self.batch_size):
            x = read_rows(self.array, i, min(self.n, i + self.batch_size), self.mapped, self.label)
            yield {self.input_name: preset_transform(x, self.preset, self.channels_first)}


class InputsSource:
    """Batches of several arrays (model input -> array, same number of samples), fed as they are: token ids
    stay int64, masks int64, features float32."""

    def __init__(self, arrays: dict, batch_size: int = 8, index=None, label: str = "<arrays>"):
        if not arrays:
            raise DataError(f"{label}: no arrays")
        n = {name: a.shape[0] if a.ndim else 0 for name, a in arrays.items()}
        if len(set(n.values())) > 1:
            raise DataError(f"{label}: the inputs' arrays hold different numbers of samples ({n})")
        if batch_size < 1:
            raise DataError(f"batch size must be >= 1, got {batch_size}")
        self.arrays = dict(arrays)
        self.batch_size = batch_size
        self.index = list(range(next(iter(n.values())))) if index is None else list(index)
        if not self.index:
            raise DataError(f"{label}: no samples")
        self.label = label

    def __len__(self) -> int:
        return len(self.index)

    def iter_with_meta(self):
        """(batch, samples, meta) as the image sources give them; these samples carry no labels."""
        for batch in self:
            n = len(next(iter(batch.values())))
            yield batch, [None] * n, [None] * n

    def __iter__(self) -> Iterator[dict]:
        for lo in range(0, len(self.index), self.batch_size):
            idx = self.index[lo:lo + self.batch_size]
            yield {name: np.array(a[idx], copy=True) for name, a in self.arrays.items()}


def as_source(data, inputs, batch_size: int = 8, preprocess: str = "none", consts=None, option_names=None):
    """A Source from what the Python API takes, for the model inputs `inputs` (ModelInfo.inputs, or a ModelInfo,
    whose layout says where each input's samples are): a Source as it is; an ndarray for a one-input model; a dict
    of arrays (model input -> array, laid out as the model takes them); a .npy/.npz path (an .npz: one array per
    input, named like it). `consts`: input -> a value fed with every sample (calib.data.feeding)."""
    from calib.data.feeding import canonical, const_rows, plain_info, with_consts

    info = plain_info(inputs)
    rows = const_rows(consts or {}, info, option_names) if consts else {}
    names = [n for n, _, _ in info.inputs if n not in rows]
    label = str(data) if isinstance(data, (str, Path)) else "<arrays>"
    if isinstance(data, (str, Path)):
        data = load_inputs(data, names)
        if len(data) == 1 and not rows and info.layout.identity:
            data = data[names[0]]
    if isinstance(data, np.ndarray):
        if len(names) > 1:
            raise DataError(f"{label}: one array for a model of {len(names)} inputs {names}: give a dict or an "
                            ".npz of one array per input")
        return with_consts(ArraySource(data, names[0], batch_size, preprocess, label=label), rows)
    if isinstance(data, dict):
        if preprocess != "none":
            raise DataError(f"{label}: preprocess '{preprocess}' applies to one image input; several arrays are "
                            "fed as they are")
        per, found = canonical({k: np.asarray(v) for k, v in data.items() if k not in rows}, info, label,
                               option_names)
        return with_consts(InputsSource(per, batch_size, label=label), {**found, **rows})
    return with_consts(data, rows)
