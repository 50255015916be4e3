"""Image datasets: a folder (flat, or one subfolder per class), COCO json, YOLO txt labels."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from calib.data.transforms import Letterbox, Preprocessor
from calib.errors import DataError

log = logging.getLogger(__name__)
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".gif"}


@dataclass(frozen=True)
class Sample:
    path: Path
    image_id: int
    label: int | None = None  # class index (classification)
    boxes: np.ndarray | None = None  # [n, 4] xywh in pixels (detection ground truth)
    classes: np.ndarray | None = None  # [n] category ids
    extra: dict = field(default_factory=dict)


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXT)


def _readable_dir(path: Path, what: str) -> None:
    if not path.exists():
        raise DataError(f"{path}: {what} not found")
    if not path.is_dir():
        raise DataError(f"{path}: {what} is not a folder")
    try:
        next(iter(path.iterdir()), None)
    except PermissionError:
        raise DataError(f"{path}: {what} is not readable (permission denied)") from None


def folder_samples(path: str | Path) -> tuple[list[Sample], list[str]]:
    """Images of a flat folder, or of one subfolder per class (class index = sorted subfolder order)."""
    root = Path(path)
    _readable_dir(root, "image folder")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and _images_in(d))
    samples: list[Sample] = []
    if classes:
        for ci, c in enumerate(classes):
            samples += [Sample(p, 0, label=ci) for p in _images_in(root / c)]
    else:
        samples = [Sample(p, 0) for p in _images_in(root)]
    samples = [Sample(s.path, i, s.label) for i, s in enumerate(samples)]
    if not samples:
        raise DataError(f"{root}: no images ({', '.join(sorted(IMAGE_EXT))})")
    return samples, classes


def coco_samples(images: str | Path, annotations: str | Path) -> tuple[list[Sample], dict]:
    images, annotations = Path(images), Path(annotations)
    _readable_dir(images, "COCO image folder")
    try:
        doc = json.loads(annotations.read_text())
        imgs = {im["id"]: im for im in doc["images"]}
        cats = {c["id"]: c["name"] for c in doc.get("categories", [])}
        per: dict[int, list] = {i: [] for i in imgs}
        for a in doc.get("annotations", []):
            per[a["image_id"]].append(a)
    except FileNotFoundError:
        raise DataError(f"{annotations}: COCO annotation file not found") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{annotations}: not a COCO annotation file ({exc.__class__.__name__}: {exc})") from None
    samples = []
    for iid in sorted(imgs):
        anns = [a for a in per[iid] if not a.get("iscrowd", 0)]
        boxes = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
        classes = np.array([a["category_id"] for a in anns], np.int64)
        samples.append(Sample(images / imgs[iid]["file_name"], iid, boxes=boxes, classes=classes))
    if not samples:
        raise DataError(f"{annotations}: no images listed")
    return samples, cats


def yolo_samples(path: str | Path) -> list[Sample]:
    """YOLO layout: <path>/images/*.jpg with <path>/labels/*.txt (or .txt beside each image) holding
    'class cx cy w h' rows normalised to the image size."""
    root = Path(path)
    _readable_dir(root, "YOLO dataset folder")
    img_dir = root / "images" if (root / "images").is_dir() else root
    lbl_dir = root / "labels" if (root / "labels").is_dir() else img_dir
    samples = []
    for i, p in enumerate(_images_in(img_dir)):
        txt = lbl_dir / (p.stem + ".txt")
        rows = np.zeros((0, 5))
        if txt.is_file():
            try:
                rows = np.loadtxt(txt, ndmin=2).reshape(-1, 5)
            except ValueError as exc:
                raise DataError(f"{txt}: not a YOLO label file ({exc})") from None
        boxes = None
        try:
            with Image.open(p) as im:  # reads the header only
                w, h = im.size
            cx, cy, bw, bh = (rows[:, k] for k in range(1, 5))
            boxes = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h], 1)
        except (OSError, UnidentifiedImageError):
            pass  # reported when the image is loaded
        samples.append(Sample(p, i, classes=rows[:, 0].astype(np.int64), boxes=boxes,
                              extra={"yolo": rows[:, 1:]}))
    if not samples:
        raise DataError(f"{img_dir}: no images")
    return samples


def subset(samples: list, limit: int | None, seed: int, offset: int = 0) -> list:
    """A seeded random subset (order fixed by the seed), skipping `offset` samples."""
    if limit is None and offset == 0:
        return list(samples)
    order = np.random.default_rng(seed).permutation(len(samples))
    picked = order[offset:offset + limit] if limit is not None else order[offset:]
    return [samples[i] for i in sorted(picked)]


def open_image(path: Path) -> Image.Image:
    with Image.open(path) as im:
        im.load()
        return im.convert("RGB")


def as_array(out) -> tuple[np.ndarray, object]:
    """(array, letterbox) from a Preprocessor, or from any callable on a PIL image (a torchvision transform
    returning a tensor, a function returning an ndarray)."""
    if isinstance(out, tuple) and len(out) == 2:
        return out
    if hasattr(out, "detach"):  # a torch tensor, without importing torch here
        out = out.detach().cpu().numpy()
    return np.ascontiguousarray(out, dtype=np.float32 if np.asarray(out).dtype.kind == "f" else None), None


class ImageSource:
    """Preprocessed batches of images for one model input; unreadable images are skipped and counted.

    `preprocess` is a calib Preprocessor or any callable taking a PIL image (e.g. a torchvision transform)."""

    def __init__(self, samples: list[Sample], preprocess: Preprocessor, input_name: str, batch_size: int = 8,
                 max_bad: float = 0.1, label: str = "images"):
        if not samples:
            raise DataError(f"{label}: no images")
        self.samples = samples
        self.pre = preprocess
        self.input_name = input_name
        self.batch_size = batch_size
        self.max_bad = max_bad
        self.label = label
        self.bad: list[str] = []

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, s: Sample):
        try:
            return as_array(self.pre(open_image(s.path)))
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            self.bad.append(str(s.path))
            log.warning("skipping unreadable image %s (%s)", s.path, exc.__class__.__name__)
            if len(self.bad) > self.max_bad * len(self.samples):
                raise DataError(f"{s.path}: {len(self.bad)} of {len(self.samples)} images unreadable "
                                f"(more than max_bad={self.max_bad:g})") from None
            return None

    def iter_with_meta(self) -> Iterator[tuple[dict, list[Sample], list[Letterbox]]]:
        self.bad = []
        xs, ss, bs = [], [], []
        good = 0
        for s in self.samples:
            got = self._load(s)
            if got is None:
                continue
            good += 1
            if xs and got[0].shape != xs[0].shape:
                raise DataError(f"{s.path}: preprocessed to shape {list(got[0].shape)}, the batch has "
                                f"{list(xs[0].shape)} (set preprocess.resize for images of different sizes)")
            xs.append(got[0])
            ss.append(s)
            bs.append(got[1])
            if len(xs) == self.batch_size:
                yield {self.input_name: np.stack(xs)}, ss, bs
                xs, ss, bs = [], [], []
        if xs:
            yield {self.input_name: np.stack(xs)}, ss, bs
        if good == 0:
            raise DataError(f"{self.label}: none of the {len(self.samples)} images could be read")

    def __iter__(self) -> Iterator[dict]:
        for batch, _, _ in self.iter_with_meta():
            yield batch
