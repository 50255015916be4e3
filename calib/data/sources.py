"""Build a Source from a recipe's DataSpec and PreprocessSpec."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import numpy as np
from PIL import Image

from calib.data.arrays import InputsSource, load_inputs, mapped_file, read_rows
from calib.data.feeding import canonical, const_rows, plain_info, with_consts
from calib.data.images import ImageSource, Sample, coco_samples, folder_samples, subset, yolo_samples
from calib.data.labels import category_map, labels_from_names, map_classes
from calib.data.transforms import Preprocessor, with_model_size
from calib.errors import DataError, called, require
from calib.quantize.layout import fix_hint
from calib.recipe import DataSpec, PreprocessSpec

log = logging.getLogger(__name__)


class ArrayImageSource:
    """An array of samples: uint8 images [N,H,W,C] go through the recipe's preprocessing, other arrays are fed
    as they are (already preprocessed)."""

    def __init__(self, array: np.ndarray, pre: Preprocessor, input_name: str, batch_size: int, index, label: str):
        self.array, self.pre, self.input_name = array, pre, input_name
        self.batch_size, self.index, self.label = batch_size, list(index), label
        self.samples = [Sample(path=None, image_id=int(i)) for i in self.index]
        self.mapped = mapped_file(array)

    def __len__(self) -> int:
        return len(self.index)

    def _one(self, i: int):
        x = read_rows(self.array, i, i + 1, self.mapped, self.label)[0]
        if x.dtype == np.uint8 and x.ndim == 3 and x.shape[-1] in (1, 3):
            return self.pre(Image.fromarray(np.asarray(x).squeeze(-1) if x.shape[-1] == 1 else np.asarray(x)))
        return np.array(x, copy=True), None

    def iter_with_meta(self):
        for lo in range(0, len(self.index), self.batch_size):
            idx = self.index[lo:lo + self.batch_size]
            got = [self._one(i) for i in idx]
            yield ({self.input_name: np.stack([g[0] for g in got])}, self.samples[lo:lo + self.batch_size],
                   [g[1] for g in got])

    def __iter__(self) -> Iterator[dict]:
        for batch, _, _ in self.iter_with_meta():
            yield batch


class TorchvisionSource(ImageSource):
    """A torchvision dataset (already on disk, no download) read through the recipe's preprocessing."""

    def __init__(self, spec: DataSpec, pre: Preprocessor, input_name: str, batch_size: int):
        tv = require("torchvision.datasets", "torch")
        cls = getattr(tv, spec.name or "", None)
        if cls is None:
            raise DataError(f"torchvision.datasets has no dataset '{spec.name}'")
        kwargs = {"root": spec.path}
        if spec.split:
            kwargs["split"] = spec.split
        try:
            self.dataset = cls(**kwargs)
        except (RuntimeError, OSError, TypeError) as exc:
            raise DataError(f"{spec.path}: torchvision {spec.name} cannot be opened ({exc})") from None
        idx = picked(spec, list(range(len(self.dataset))))
        samples = [Sample(path=None, image_id=i) for i in idx]
        super().__init__(samples, pre, input_name, batch_size, spec.max_bad, label=f"torchvision:{spec.name}")

    def _load(self, s: Sample):
        from calib.data.images import as_array

        img, target = self.dataset[s.image_id]
        object.__setattr__(s, "label", int(target) if isinstance(target, int) else None)
        return as_array(self.pre(img.convert("RGB") if hasattr(img, "convert") else img))


def picked(spec: DataSpec, samples: list) -> list:
    """The seeded subset of `samples` that `spec` asks for; an offset past the end is an error naming it."""
    if spec.offset < 0 or (spec.limit is not None and spec.limit < 1):
        raise DataError(f"{spec.path}: offset must be >= 0 and limit >= 1 (got offset {spec.offset}, "
                        f"limit {spec.limit})")
    if spec.offset >= len(samples):
        raise DataError(f"{spec.path}: offset {spec.offset} skips all {len(samples)} samples")
    left = len(samples) - spec.offset
    if spec.limit is not None and spec.limit > left:
        log.warning("%s: limit %d asks for more samples than the %d %s; using %d", spec.path, spec.limit, left,
                    f"left after offset {spec.offset}" if spec.offset else "there are", left)
    return subset(samples, spec.limit, spec.seed, spec.offset)


def _local(path: str) -> str:
    """A data path, with `zoo:<name>` fetched (calib.zoo.registry DATASETS)."""
    if path.startswith("zoo:"):
        from calib.zoo.registry import fetch_data

        return str(fetch_data(path[4:]))
    return path


def image_samples(spec: DataSpec) -> list[Sample]:
    """The samples of an image dataset (folder, coco, yolo) with their labels in the model's terms, after
    limit/offset, plus every image of the `include` folders."""
    path = _local(spec.path)
    if spec.kind == "folder":
        samples, _ = folder_samples(path)
    elif spec.kind == "coco":
        if not spec.annotations:
            raise DataError(f"{path}: a coco data source needs 'annotations' (the COCO json)")
        samples, cats = coco_samples(path, spec.annotations)
        ids = set(cats) | {int(c) for s in samples if s.classes is not None for c in s.classes}
        mapping, how = category_map(spec.category_map, ids, spec.annotations, spec.category_map_file)
        log.info("%s: category ids to class indices: %s", spec.annotations, how)
        samples = map_classes(samples, mapping, spec.annotations)
    elif spec.kind == "yolo":
        samples = yolo_samples(path)
    else:
        raise DataError(f"unknown data kind '{spec.kind}'")
    samples = picked(spec, samples)
    for extra in spec.include:
        more, _ = folder_samples(_local(extra))
        samples += more
    if spec.include:  # image ids stay unique across folders
        samples = [dataclasses.replace(s, image_id=i) for i, s in enumerate(samples)]
    if spec.label_regex:
        samples = labels_from_names(samples, spec.label_regex, spec.path)
    return samples


def _inputs(inputs) -> list[tuple]:
    """The model inputs a source feeds: ModelInfo.inputs, a ModelInfo, or one input's name."""
    return list(plain_info(inputs).inputs)


def _check_keys(spec: DataSpec) -> None:
    """Keys that another kind of data would silently ignore."""
    given = {"inputs": spec.inputs and spec.kind not in ("npz", "text"),
             "tokenizer": spec.tokenizer and spec.kind != "text",
             "max_length": spec.max_length and spec.kind != "text"}
    for key, wrong in given.items():
        if wrong:
            raise DataError(f"{spec.path}: {key}: not for {spec.kind} data (inputs: npz or text; tokenizer, "
                            "max_length: text)")


def make_source(spec: DataSpec, pre_spec: PreprocessSpec, inputs, batch_size: int, option_names=None,
                consts=None):
    """The Source of `spec` for the model inputs `inputs` (ModelInfo.inputs, a ModelInfo whose layout says where
    each input's samples are, or one input's name); images are resized to the model's input size where `pre_spec`
    gives none and the size is known. `option_names`: recipe key -> the flag the user typed, for the messages.
    `consts`: input -> a value fed with every sample (calib.data.feeding; its batches carry one row per sample)."""
    info = plain_info(inputs)
    rows = const_rows(consts or {}, info, option_names, called("inputs.const", option_names)) if consts else {}
    inputs = [i for i in info.inputs if i[0] not in rows]
    names = [n for n, _, _ in inputs]
    label = spec.path
    _check_keys(spec)
    if spec.kind == "text":
        return with_consts(text_source(spec, inputs, batch_size), rows)
    if spec.kind in ("npy", "npz"):
        arrays = load_inputs(spec.path, names, spec.inputs, spec.key)
        if len(arrays) > 1 or not info.layout.identity:
            arrays, found = canonical(arrays, info, label, option_names)
            rows = {**found, **rows}
        if not arrays:
            raise DataError(f"{spec.path}: every input is fed one value for every sample; calib needs samples")
        n = next(iter(arrays.values())).shape[0]
        if n == 0:
            raise DataError(f"{spec.path}: no samples")
        idx = picked(spec, list(range(n)))
        if len(arrays) > 1:
            return with_consts(InputsSource(arrays, batch_size, idx, label), rows)
        name = next(iter(arrays))
        return with_consts(ArrayImageSource(arrays[name], Preprocessor(pre_spec), name, batch_size, idx, label), rows)
    if len(names) > 1:
        raise DataError(f"{spec.path}: {spec.kind} data feeds one input; the model takes {names} (give an .npz "
                        "with one array per input, or text, or feed the others one value for every sample: "
                        f"{fix_hint(names[1], option_names)})")
    if inputs[0][1]:
        pre_spec = with_model_size(pre_spec, tuple(inputs[0][1]))
    sizing = f"{called('preprocess.resize', option_names)} or {called('input_shapes', option_names)}"
    if spec.kind == "torchvision":
        return with_consts(TorchvisionSource(spec, Preprocessor(pre_spec), names[0], batch_size), rows)
    return with_consts(ImageSource(image_samples(spec), Preprocessor(pre_spec), names[0], batch_size, spec.max_bad,
                                   label, spec.max_pixels, sizing), rows)


def text_source(spec: DataSpec, inputs, batch_size: int):
    """A TextSource over `spec` (kind text): its lines, tokenizer, max_length, inputs, limit/offset."""
    from calib.data.text import TextSource, read_lines

    if not spec.tokenizer:
        raise DataError(f"{spec.path}: tokenizer: a text data source needs a tokenizer.json")
    from calib.zoo.registry import tokenizer_path

    lines = read_lines(spec.path)
    lines = [lines[i] for i in picked(spec, list(range(len(lines))))]
    return TextSource(lines, tokenizer_path(spec.tokenizer), inputs, batch_size, spec.max_length, spec.inputs,
                      spec.path)
