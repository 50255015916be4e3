"""Labels a dataset carries, in the model's terms: COCO category ids mapped to class indices, class indices read
from file names.

COCO numbers its 80 detection categories with ids from 1 to 90, with gaps; a model trained on COCO numbers its
classes 0 to 79. Comparing id 1 with class 0 would score a perfect detection as a miss, so every COCO annotation
goes through a map:

- `coco80`: COCO's standard table (id 1 person -> class 0, ..., id 90 toothbrush -> class 79);
- `identity`: the file's category ids already are class indices;
- `auto` (default): identity when the ids include 0 (not a COCO id), else coco80 when every id is one of COCO's 80,
  else an error asking for a map;
- `category_map_file`: a JSON or YAML mapping {category_id: class_index} that wins over the above.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np
import yaml

from calib.errors import DataError
from calib.io.reading import parse_json, read_text
from calib.io.yamlload import YamlLimitError, load_yaml

log = logging.getLogger(__name__)

COCO80_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32,
              33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
              60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)
MAPS = ("auto", "coco80", "identity")
MAX_MAP_BYTES = 16 << 20  # a category map file larger than this is not one


def coco80() -> dict[int, int]:
    """COCO category id -> class index of a model trained on COCO's 80 categories."""
    return {cid: k for k, cid in enumerate(COCO80_IDS)}


def _integer(v) -> int:
    """An int from an int or a string of digits; a float, a bool or other text is a ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{v!r} is not an integer")
    return int(v)


def _read_map_file(path: str) -> dict[int, int]:
    p = Path(path)
    text = read_text(p, MAX_MAP_BYTES, "category_map_file", DataError)
    try:
        raw = parse_json(text, str(p), "category_map_file", DataError) if p.suffix == ".json" else load_yaml(text)
        out = {_integer(k): _integer(v) for k, v in dict(raw).items()}
    except (ValueError, TypeError, AttributeError, yaml.YAMLError, YamlLimitError, RecursionError) as exc:
        raise DataError(f"{p}: category_map_file is not a mapping of category id to class index ({exc})") from None
    if any(v < 0 for v in out.values()):
        raise DataError(f"{p}: category_map_file maps to a negative class index")
    return out


def category_map(kind: str, ids, annotations: str, file: str | None = None) -> tuple[dict[int, int] | None, str]:
    """(id -> class index, or None for identity; how it was chosen) for the category ids found in `annotations`."""
    if file:
        return _read_map_file(file), f"category_map_file {file}"
    ids = {int(i) for i in ids}
    if kind == "identity":
        return None, "identity"
    if kind == "coco80":
        return coco80(), "coco80"
    if kind != "auto":
        raise DataError(f"{annotations}: category_map '{kind}' is not one of {', '.join(MAPS)}")
    if not ids or 0 in ids:
        return None, "identity (the ids include 0, so they are class indices)"
    if ids <= set(COCO80_IDS):
        return coco80(), "coco80 (every id is one of COCO's 80)"
    extra = sorted(ids - set(COCO80_IDS))[:5]
    raise DataError(f"{annotations}: category ids {extra} are not COCO's 80 ids and the ids do not start at 0: set "
                    "category_map (coco80 or identity) or category_map_file (a mapping id -> class index)")


def map_classes(samples: list, mapping: dict[int, int] | None, annotations: str) -> list:
    """Samples with their box classes turned into class indices."""
    if mapping is None:
        return samples
    out = []
    for s in samples:
        if s.classes is None or not len(s.classes):
            out.append(s)
            continue
        missing = [int(c) for c in s.classes if int(c) not in mapping]
        if missing:
            raise DataError(f"{annotations}: category id {missing[0]} (image {s.path.name}) is not in the category map")
        out.append(dataclasses.replace(s, classes=np.array([mapping[int(c)] for c in s.classes], np.int64)))
    return out


def labels_from_names(samples: list, pattern: str, where: str) -> list:
    """Samples labelled with the class index that `pattern` (a regex, its first group) finds in each file name,
    e.g. '_(\\d+)\\.jpg$' for 'imagenet_03_990.jpg' -> 990. Files whose name it does not match carry no label;
    a pattern that matches no file at all is an error."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise DataError(f"{where}: label_regex '{pattern}' is not a regular expression ({exc})") from None
    if rx.groups < 1:
        raise DataError(f"{where}: label_regex '{pattern}' needs a group around the class index")
    out, found = [], 0
    for s in samples:
        m = rx.search(s.path.name) if s.path is not None else None
        if m and m.group(1) and m.group(1).isdigit():
            out.append(dataclasses.replace(s, label=int(m.group(1))))
            found += 1
        else:
            out.append(s)
    if not found:
        raise DataError(f"{where}: label_regex '{pattern}' finds a class index in none of the file names")
    return out
