"""Detection ground truth read with its schema checked: COCO json and YOLO txt labels.

Every fault is one DataError naming the file and the annotation id (COCO) or line (YOLO): a box that is not four
finite numbers, a missing file_name, ids that are not integers, a YOLO row of another column count, a class that is
not a non-negative integer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calib.errors import DataError
from calib.io.reading import printable, read_json, read_text

MAX_COCO_BYTES = 2 << 30  # COCO's largest official file (instances_train2017.json) is 448 MiB
MAX_LABEL_BYTES = 64 << 20  # one YOLO label file: a few rows per object


@dataclass(frozen=True)
class Coco:
    images: dict  # image id -> file name
    boxes: dict  # image id -> list of (xywh, category id), crowd annotations left out
    categories: dict  # category id -> name


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _list_of_objects(doc: dict, key: str, where: str, required: bool) -> list:
    if key not in doc:
        if required:
            raise DataError(f"{where}: not a COCO annotation file (no '{key}' list)")
        return []
    items = doc[key]
    if not isinstance(items, list):
        raise DataError(f"{where}: '{key}' must be a list, got {type(items).__name__}")
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"{where}: {key}[{k}] must be an object, got {_short(item)}")
    return items


def _images(doc: dict, where: str) -> dict:
    images = {}
    for k, im in enumerate(_list_of_objects(doc, "images", where, True)):
        iid = im.get("id")
        if not _is_int(iid):
            raise DataError(f"{where}: images[{k}]: id must be an integer, got {_short(iid)}")
        name = im.get("file_name")
        if not isinstance(name, str) or not name:
            raise DataError(f"{where}: image id {iid}: file_name missing or not a string ({_short(name)})")
        if iid in images:
            raise DataError(f"{where}: image id {iid} appears twice")
        images[iid] = name
    return images


def _box(a: dict, label: str) -> list[float]:
    bbox = a.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
        raise DataError(f"{label}: bbox must be 4 finite numbers [x, y, width, height], got {_short(bbox)}")
    if bbox[2] < 0 or bbox[3] < 0:
        raise DataError(f"{label}: bbox has a negative width or height ({_short(bbox)})")
    return [float(v) for v in bbox]


def read_coco(path) -> Coco:
    """The images, boxes and categories of a COCO annotation file, every field the evaluation uses checked."""
    where = printable(path)
    doc = read_json(path, MAX_COCO_BYTES, "COCO annotations", DataError)
    if not isinstance(doc, dict):
        raise DataError(f"{where}: not a COCO annotation file (a JSON object with 'images'), got {type(doc).__name__}")
    images = _images(doc, where)
    categories = {}
    for k, c in enumerate(_list_of_objects(doc, "categories", where, False)):
        if not _is_int(c.get("id")):
            raise DataError(f"{where}: categories[{k}]: id must be an integer, got {_short(c.get('id'))}")
        categories[c["id"]] = str(c.get("name", c["id"]))
    boxes: dict = {i: [] for i in images}
    for k, a in enumerate(_list_of_objects(doc, "annotations", where, False)):
        aid = a.get("id", f"#{k}")
        label = f"{where}: annotation {aid if _is_int(aid) else _short(aid)}"
        if not _is_int(aid) and "id" in a:
            raise DataError(f"{label}: id must be an integer")
        iid, cid = a.get("image_id"), a.get("category_id")
        if not _is_int(iid):
            raise DataError(f"{label}: image_id must be an integer, got {_short(iid)}")
        if iid not in images:
            raise DataError(f"{label}: image_id {iid} is not in 'images'")
        if not _is_int(cid):
            raise DataError(f"{label}: category_id must be an integer, got {_short(cid)}")
        crowd = a.get("iscrowd", 0)
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise DataError(f"{label}: iscrowd must be 0 or 1, got {_short(crowd)}")
        if not crowd:
            boxes[iid].append((_box(a, label), cid))
    return Coco(images, boxes, categories)


YOLO_SLACK = 0.01  # how far past 0..1 a normalized YOLO value may stray (an exporter's rounding), as fractions


def read_yolo_labels(path) -> np.ndarray:
    """[n, 5] rows 'class cx cy w h' of a YOLO label file; a row of another length, a value that is not a finite
    number, a class that is not a non-negative integer, a negative size or a coordinate outside 0..1 (beyond
    YOLO_SLACK: pixel coordinates) is an error naming the line."""
    where = printable(path)
    rows = []
    for no, line in enumerate(read_text(path, MAX_LABEL_BYTES, "YOLO label file", DataError).splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5:
            raise DataError(f"{where}: line {no}: expected 5 columns 'class cx cy w h', got {len(fields)}")
        try:
            values = [float(f) for f in fields]
        except ValueError:
            raise DataError(f"{where}: line {no}: not numbers ({_short(line.strip())})") from None
        if not all(math.isfinite(v) for v in values):
            raise DataError(f"{where}: line {no}: values must be finite numbers ({_short(line.strip())})")
        cls = values[0]
        if cls < 0 or cls >= 1 << 31 or cls != int(cls):
            raise DataError(f"{where}: line {no}: class {fields[0]} is not a non-negative integer")
        if values[3] < 0 or values[4] < 0:
            raise DataError(f"{where}: line {no}: negative box width or height ({_short(line.strip())})")
        if not all(-YOLO_SLACK <= v <= 1 + YOLO_SLACK for v in values[1:]):
            raise DataError(f"{where}: line {no}: cx cy w h must be fractions of the image size, 0 to 1 "
                            f"({_short(line.strip())}: pixel coordinates?)")
        rows.append(values)
    return np.array(rows, np.float64).reshape(-1, 5)
