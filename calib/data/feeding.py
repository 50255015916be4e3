"""Inputs that are not a dataset's samples: constants fed with every sample, and arrays laid out as the model takes
them (calib.quantize.layout), turned into calib's canonical batches (samples on axis 0 for every input).

A constant (`--const NAME=VALUE`, recipe `inputs: {NAME: {const: VALUE}}` or `{file: FILE.npy}`) is a number, a
nested list or an array from a .npy file, given either as one sample's value (the model's shape without the batch
axis), as one run's value with 1 on the batch axis, or, for an input without a batch axis (a scalar sample rate),
as the model takes it. An .npz whose arrays are laid out as ONNX Runtime takes the inputs (a state [2, N, 128]
with its samples on axis 1, a 0-d sample rate) is read the same way: a 0-d array, or one with a single sample
where the others hold more, is fed with every sample."""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from calib.errors import DataError, called
from calib.quantize.layout import fix_hint, shown
from calib.quantize.model import ModelInfo

log = logging.getLogger(__name__)

_NP = {1: np.float32, 10: np.float16, 11: np.float64, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_}


def parse_consts(items, flag: str = "--const") -> dict[str, object]:
    """NAME=VALUE items: VALUE a number, a list such as [1, 2] (YAML), or a .npy file."""
    import yaml

    out = {}
    for item in items:
        name, sep, text = str(item).partition("=")
        if not sep or not name or not text.strip():
            raise DataError(f"{flag} '{item}': expected NAME=VALUE, e.g. sr=16000, bias=[0.5, 1] or state=h0.npy")
        text = text.strip()
        if text.endswith(".npy"):
            out[name] = Path(text)
            continue
        try:
            out[name] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise DataError(f"{flag} {name}={text}: not a number, a list or a .npy file") from None
    return out


def _npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return np.asarray(np.load(path, allow_pickle=False))
    except Exception as exc:
        raise DataError(f"{path}: not a readable .npy file ({exc})") from None


def const_value(name: str, value, dtype, where: str) -> np.ndarray:
    """`value` (a number, nested lists, an array or a .npy path) as an array of the input's dtype."""
    if isinstance(value, Path):
        value = _npy(value)
    if isinstance(value, bool) or value is None or isinstance(value, (str, dict)):
        raise DataError(f"{where} {name}: expected a number, a list of numbers or a .npy file, got {value!r}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise DataError(f"{where} {name}: not an array of numbers ({value!r})") from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise DataError(f"{where} {name}: not an array of numbers (got {arr.dtype} {list(arr.shape)})")
    want = np.dtype(dtype)
    cast = arr.astype(want)
    if want.kind in "iub" and arr.dtype.kind == "f" and not np.array_equal(cast, arr):
        raise DataError(f"{where} {name}: the model takes {want.name}, the value {arr.ravel()[:4].tolist()} is not "
                        "whole")
    return cast


def const_row(name: str, value: np.ndarray, dims: tuple, axis: int | None, where: str) -> np.ndarray:
    """One canonical row of a constant: the input's value for one sample (for an input without a batch axis, the
    whole value). A shape that fits no reading is an error naming the input, its shape and the model's."""
    rank = len(dims)
    one = [d for i, d in enumerate(dims) if i != axis] if axis is not None else list(dims)

    def fits(shape, want) -> bool:
        return len(shape) == len(want) and all(not isinstance(w, int) or w <= 0 or w == s
                                               for s, w in zip(shape, want))

    if axis is None:
        if value.ndim == 0 and rank:
            return _filled(name, value, dims, where)
        if fits(value.shape, dims):
            return value
    else:
        if value.ndim == 0 and rank:
            return _filled(name, value, tuple(one), where)
        if value.ndim == rank - 1 and fits(value.shape, one):
            return value
        if value.ndim == rank and value.shape[axis] == 1 and fits(np.delete(value.shape, axis), one):
            return np.take(value, 0, axis=axis)
    how = "no batch axis" if axis is None else f"its samples on axis {axis}"
    raise DataError(f"{where} {name}: a value of shape {list(value.shape)} does not fit input '{name}' "
                    f"{shown(dims)} ({how}): give one sample's value {shown(one)}"
                    + ("" if axis is None else f", or one run's with 1 on axis {axis}"))


def _filled(name: str, value: np.ndarray, dims, where: str) -> np.ndarray:
    if not all(isinstance(d, int) and d > 0 for d in dims):
        raise DataError(f"{where} {name}: one number fills input '{name}' only where its shape is fixed; it is "
                        f"{shown(dims)}: give an array or a .npy file")
    return np.full(tuple(dims), value, value.dtype)


def const_rows(consts: Mapping[str, object], info, names=None, where: str = "--const") -> dict[str, np.ndarray]:
    """input -> canonical row for every constant in `consts` (input -> value as parse_consts or a recipe gives)."""
    inputs = {n: (d, et) for n, d, et in info.inputs}
    out = {}
    for name, value in consts.items():
        if name not in inputs:
            raise DataError(f"{where} {name}: the model has no input '{name}' (inputs: {', '.join(inputs)})")
        dims, et = inputs[name]
        arr = const_value(name, value, _NP.get(et, np.float32), where)
        out[name] = const_row(name, arr, tuple(dims), info.layout.axis(name), where)
    return out


def whole_shapes(consts: Mapping[str, object]) -> dict[str, tuple]:
    """The shapes of the constants given as arrays (numbers, lists, .npy files), for calib.quantize.layout."""
    out = {}
    for name, value in consts.items():
        try:
            if isinstance(value, Path):
                out[name] = tuple(_npy(value).shape)
            elif not isinstance(value, (str, dict, bool)) and value is not None:
                out[name] = tuple(np.shape(value))
        except (DataError, ValueError):
            continue  # said when the value is read
    return out


def canonical(arrays: Mapping[str, np.ndarray], info, label: str, names=None) -> tuple[dict, dict]:
    """(per-sample arrays with their samples on axis 0, constant rows) from arrays laid out as the model takes its
    inputs (info.layout). Every error names the input, its shape, what the model wants and the option that fixes
    it (`names`: recipe key -> flag)."""
    inputs = info.input_dims
    lay = info.layout
    per, whole, counts = {}, {}, {}
    for name, a in arrays.items():
        dims, ax = tuple(inputs.get(name, ())), lay.axis(name)
        if ax is None or a.ndim == 0:
            whole[name] = a
            continue
        if ax and (a.ndim != len(dims) or ax >= a.ndim):
            raise DataError(f"{label}: input '{name}' gets an array of shape {list(a.shape)}, the model wants "
                            f"{shown(dims)} with its samples on axis {ax}: {fix_hint(name, names)}")
        counts[name] = a.shape[ax]
        per[name] = a
    if per:
        most = max(counts.values())
        for name in [n for n, c in counts.items() if c == 1 and most > 1]:
            log.info("%s: input '%s' holds one sample %s: fed with every sample", label, name,
                     list(per[name].shape))
            whole[name] = per.pop(name)
            counts.pop(name)
    if len(set(counts.values())) > 1:
        shapes = ", ".join(f"'{n}' {list(per[n].shape)} (samples on axis {lay.axis(n)}: {counts[n]})" for n in per)
        raise DataError(f"{label}: the inputs' arrays hold different numbers of samples: {shapes}; say which axis "
                        f"carries an input's samples or feed it one value for every sample ("
                        f"{fix_hint(min(per, key=lambda n: counts[n]), names)})")
    out = {n: (np.moveaxis(a, lay.axis(n), 0) if lay.axis(n) else a) for n, a in per.items()}
    rows = {}
    for name, a in whole.items():
        ax = lay.axis(name)
        dims = tuple(inputs.get(name, ()))
        try:
            rows[name] = const_row(name, np.asarray(a), dims, ax, f"{label}: input")
        except DataError:
            raise DataError(f"{label}: input '{name}' gets an array of shape {list(a.shape)}, the model wants "
                            f"{shown(dims)}" + ("" if ax is None else f" with its samples on axis {ax}")
                            + f": {fix_hint(name, names)}") from None
    return out, rows


class WithConsts:
    """A Source whose batches also carry the constant inputs, one row per sample (calib.quantize.layout feeds the
    model the first row of an input without a batch axis)."""

    def __init__(self, source, rows: Mapping[str, np.ndarray]):
        self.source, self.rows = source, dict(rows)

    def __len__(self) -> int:
        return len(self.source)

    def __getattr__(self, name: str):
        if name in ("source", "rows"):
            raise AttributeError(name)
        return getattr(self.source, name)

    def _add(self, batch: dict) -> dict:
        n = len(next(iter(batch.values()))) if batch else 1
        return {**batch, **{k: np.repeat(v[None], n, 0) for k, v in self.rows.items() if k not in batch}}

    def iter_with_meta(self):
        if hasattr(self.source, "iter_with_meta"):
            for batch, samples, meta in self.source.iter_with_meta():
                yield self._add(batch), samples, meta
        else:
            for batch in self.source:
                b = self._add(batch)
                n = len(next(iter(b.values())))
                yield b, [None] * n, [None] * n

    def __iter__(self) -> Iterator[dict]:
        for batch in self.source:
            yield self._add(batch)


def with_consts(source, rows: Mapping[str, np.ndarray]):
    return WithConsts(source, rows) if rows else source


def option_where(names, key: str = "inputs.const") -> str:
    return called(key, names)


class _Plain:
    """The inputs of a model as a ModelInfo gives them, with calib's own layout (samples on axis 0)."""

    def __init__(self, inputs):
        from calib.quantize.layout import Layout

        self.inputs, self.layout = tuple(inputs), Layout()

    input_dims = ModelInfo.input_dims


def plain_info(inputs):
    """A ModelInfo as it is; ModelInfo.inputs or one input's name as an object with .inputs and .layout."""
    if hasattr(inputs, "layout"):
        return inputs
    return _Plain([(inputs, (), 1)] if isinstance(inputs, str) else inputs)


def laid_out(model, info, batch_axes=None, consts=None, where: str = "--batch-axis"):
    """`info` (a ModelInfo of `model`, a path or an onnx.ModelProto) with the layout its inputs and outputs take:
    `batch_axes` (name -> axis) where given, the constants' shapes and the model's dims otherwise
    (calib.quantize.layout.infer_layout)."""
    import onnx

    from calib.quantize.layout import infer_layout, with_layout

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    return with_layout(info, infer_layout(proto, batch_axes or {}, where, whole_shapes(consts or {})))
