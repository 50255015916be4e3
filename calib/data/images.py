"""Image datasets: a folder (flat, or one subfolder per class), COCO json, YOLO txt labels."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from calib.data.annotations import read_coco, read_yolo_labels
from calib.data.transforms import Letterbox, Preprocessor
from calib.errors import DataError
from calib.io.files import printable

log = logging.getLogger(__name__)
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".gif"}
MAX_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485  # Pillow's decompression-bomb limit
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_TRANSPOSED = (5, 6, 7, 8)  # EXIF orientations that swap width and height
UNREADABLE = (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError)


class ImageTooLarge(ValueError):
    """An image with more pixels than the data spec's max_pixels (a decompression bomb?)."""


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
    from calib.data.groups import with_groups

    return with_groups(samples, root), classes


def coco_samples(images: str | Path, annotations: str | Path) -> tuple[list[Sample], dict]:
    images, annotations = Path(images), Path(annotations)
    _readable_dir(images, "COCO image folder")
    coco = read_coco(annotations)
    samples = []
    for iid in sorted(coco.images):
        anns = coco.boxes[iid]
        boxes = np.array([b for b, _ in anns], np.float64).reshape(-1, 4)
        classes = np.array([c for _, c in anns], np.int64)
        samples.append(Sample(images / coco.images[iid], iid, boxes=boxes, classes=classes))
    if not samples:
        raise DataError(f"{annotations}: no images listed")
    return samples, coco.categories


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
        rows = read_yolo_labels(txt) if txt.exists() else np.zeros((0, 5))
        boxes = None
        try:
            with Image.open(p) as im:  # reads the header only
                w, h = im.size
                if im.getexif().get(0x0112) in _TRANSPOSED:  # labels are for the image as displayed
                    w, h = h, w
            cx, cy, bw, bh = (rows[:, k] for k in range(1, 5))
            boxes = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h], 1)
        except UNREADABLE:
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


def to_rgb(im: Image.Image) -> Image.Image:
    """8-bit RGB as Pillow users expect: 16-bit gray scaled (not clipped) to 0-255, float gray in [0, 1] or
    [0, 255] scaled likewise, a palette with transparency through RGBA, alpha dropped."""
    if im.mode in _SIXTEEN_BIT:
        a = np.asarray(im).astype(np.float64)
        im = Image.fromarray(np.round(np.clip(a, 0, 65535) / 257.0).astype(np.uint8), "L")
    elif im.mode == "F":
        a = np.nan_to_num(np.asarray(im, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        a = a * 255.0 if a.size and a.max() <= 1.0 else a
        im = Image.fromarray(np.round(np.clip(a, 0, 255)).astype(np.uint8), "L")
    elif im.mode in ("P", "PA"):
        im = im.convert("RGBA")
    return im if im.mode == "RGB" else im.convert("RGB")


def open_image(path: Path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """An image file as 8-bit RGB, upright (EXIF orientation applied); more than `max_pixels` is refused
    before decoding (ImageTooLarge), as Pillow refuses twice its own limit (DecompressionBombError)."""
    with Image.open(path) as im:
        w, h = im.size
        if w * h > max_pixels:
            raise ImageTooLarge(f"{w}x{h} pixels, more than max_pixels={max_pixels}")
        im.load()
        im = ImageOps.exif_transpose(im)
        return to_rgb(im)


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
                 max_bad: float = 0.1, label: str = "images", max_pixels: int = MAX_PIXELS,
                 resize_name: str = "preprocess.resize or input_shapes"):
        """resize_name: the options that size the images, as the user calls them (for the message)."""
        if not samples:
            raise DataError(f"{label}: no images")
        self.samples = samples
        self.pre = preprocess
        self.input_name = input_name
        self.batch_size = batch_size
        self.max_bad = max_bad
        self.label = label
        self.max_pixels = max_pixels
        self.resize_name = resize_name
        self.bad: list[str] = []  # printable names of the files skipped
        self.shrunk: list[float] = []  # per image read: how many times smaller its sides became (the larger)

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, s: Sample):
        try:
            return as_array(self.pre(open_image(s.path, self.max_pixels)))
        except UNREADABLE as exc:
            name = printable(s.path)
            self.bad.append(name)
            log.warning("skipping unreadable image %s (%s: %s)", name, exc.__class__.__name__, exc)
            if len(self.bad) > self.max_bad * len(self.samples):
                raise DataError(f"{name}: {len(self.bad)} of {len(self.samples)} images unreadable "
                                f"(more than max_bad={self.max_bad:g})") from None
            return None

    def iter_with_meta(self) -> Iterator[tuple[dict, list[Sample], list[Letterbox]]]:
        self.bad, self.shrunk = [], []
        xs, ss, bs = [], [], []
        good = 0
        for s in self.samples:
            got = self._load(s)
            if got is None:
                continue
            good += 1
            if isinstance(got[1], Letterbox) and min(got[1].scale_x, got[1].scale_y) > 0:
                self.shrunk.append(1.0 / min(got[1].scale_x, got[1].scale_y))
            if xs and got[0].shape != xs[0].shape:
                raise DataError(f"{printable(s.path)}: preprocessed to shape {list(got[0].shape)}, the batch has "
                                f"{list(xs[0].shape)} (give {self.resize_name} for images of different sizes)")
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


SHRINK_NOTE = 4.0  # images made this many times smaller (per side) lose what the model was to see


def shrink_note(source, size: str, flag: str) -> str | None:
    """A sentence for the report where the images `source` read were scaled down more than SHRINK_NOTE times (the
    median over them, per side) to the model's fixed input `size` (e.g. "32x32"): a placeholder size, often."""
    shrunk = getattr(source, "shrunk", None) or []
    if not shrunk:
        return None
    median = float(np.median(shrunk))
    if median <= SHRINK_NOTE:
        return None
    return (f"The {len(shrunk)} images were scaled down {median:.1f}x (median, per side) to the model's fixed "
            f"{size} input: a placeholder size the exporter left? Give {flag} at the size the model is used at "
            "(calib overrides a fixed dimension where the graph checks and runs there).")
