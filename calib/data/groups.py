"""Which samples are not independent: crops (or other variants) of one source photo form a group.

A folder may hold a sidecar `sources.json`, {"<file in the folder>": "<its source image, relative to the folder>"}
(datasets/make_photos.py writes one for its crops). A sample's group is the resolved path of its source image, so
that a crop and its original in another folder (datasets/photos) fall in the same group; a sample that no sidecar
names is its own group. The evaluation's bootstrap resamples groups, not samples (calib.evaluate.uncertainty).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from calib.errors import DataError
from calib.io.reading import read_json

SIDECAR = "sources.json"
MAX_SOURCES_BYTES = 256 << 20


def read_sources(folder: str | Path) -> dict[str, str]:
    """{relative file name: resolved source path} from `folder`/sources.json ({} without one)."""
    root = Path(folder)
    p = root / SIDECAR
    if not p.exists():
        return {}
    data = read_json(p, MAX_SOURCES_BYTES, "sources file", DataError)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise DataError(f"{p}: must map each file name to its source image's path (strings)")
    return {k: os.path.normpath(str((root / v).absolute())) for k, v in data.items()}


def with_groups(samples: list, folder: str | Path) -> list:
    """`samples` of `folder` with extra['group'] set from the folder's sidecar (unchanged without one)."""
    src = read_sources(folder)
    if not src:
        return samples
    root = Path(folder)
    out = []
    for s in samples:
        key = s.path.relative_to(root).as_posix() if s.path is not None else None
        g = src.get(key)
        out.append(dataclasses.replace(s, extra={**s.extra, "group": g}) if g else s)
    return out


def group_of(sample, position: int) -> str:
    """The group of a sample: its sidecar source, else its own file, else its position in the evaluation."""
    extra = getattr(sample, "extra", None) or {}
    if extra.get("group"):
        return extra["group"]
    path = getattr(sample, "path", None)
    if path is not None:
        return os.path.normpath(str(Path(path).absolute()))
    return f"#{position}"
