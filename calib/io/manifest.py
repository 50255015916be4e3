"""The manifest of a published folder: which files calib wrote there, each with its size and sha256.

A manifest is data read from a folder that may have been copied, shared or edited, never an order: only plain
file names count (no separator, no `..`, nothing absolute), and a file is calib's only while its size and sha256
still match. Everything that deletes or replaces a file in an output folder asks `matches` first.
"""
from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import atomic_write_json, printable, read_bounded, sha256_file

log = logging.getLogger(__name__)

MANIFEST = ".calib-manifest.json"
PREVIOUS = ".calib-previous.json"  # in a staging folder: the manifest it replaces (for an interrupted move)
MARKER = ".calib-stage.json"  # in a staging folder: which --out it is for, and the folder itself (device, inode)
OWN = (MANIFEST, PREVIOUS, MARKER)
_LIMIT = 16 << 20


def plain(name) -> bool:
    """A bare file name inside a folder: not empty, no separator, not `.` or `..`, no NUL."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
            and "\0" not in name and os.path.basename(name) == name)


def _entry(value) -> dict | None:
    """{'sha256', 'size'} from a manifest value: this version's entry, or an earlier version's bare sha256."""
    if isinstance(value, str):
        return {"sha256": value, "size": None}
    if isinstance(value, dict) and isinstance(value.get("sha256"), str) and (
            value.get("size") is None or (isinstance(value["size"], int) and not isinstance(value["size"], bool))):
        return {"sha256": value["sha256"], "size": value.get("size")}
    return None


def parse(doc, where) -> dict | None:
    """A manifest document with its entries checked ({'files': {name: {'sha256', 'size'}}, ...}); entries that
    are not plain names of files are dropped with a warning; None if it is not a manifest at all."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return None
    kept = {}
    for name, value in files.items():
        e = _entry(value)
        if plain(name) and e is not None:
            kept[name] = e
        else:
            log.warning("%s: ignoring the entry %r: not a plain file name with its sha256", printable(where),
                        printable(name))
    return {**doc, "files": kept}


def read_json(path: Path):
    """A JSON file of calib's own (manifest, journal, marker), bounded; None if missing or unreadable."""
    try:
        return json.loads(read_bounded(path, _LIMIT, "manifest"))
    except (OSError, ValueError, RecursionError, CalibError):
        return None


def read_manifest(folder: str | Path, name: str = MANIFEST) -> dict | None:
    """The manifest of a published folder, checked (see `parse`); None without one or if unreadable."""
    p = Path(folder) / name
    return parse(read_json(p), p)


def describe(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def matches(path: Path, entry: dict | None) -> bool:
    """`path` is a regular file (not a link) with the size and sha256 of `entry`: the file calib wrote."""
    if entry is None:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or (entry.get("size") is not None and st.st_size != entry["size"]):
        return False
    try:
        return sha256_file(path) == entry["sha256"]
    except OSError:
        return False


def write_manifest(stage: Path, command: str = "") -> dict:
    """List every file in `stage` with its size and sha256 (the last file a run writes there)."""
    from calib.version import __version__

    files = {}
    for p in sorted(stage.iterdir()):
        if p.name in OWN:
            continue
        if not plain(p.name) or p.is_symlink() or not p.is_file():
            raise CalibError(f"{printable(p)}: calib publishes plain files only")
        files[p.name] = describe(p)
    doc = {"files": files, "calib_version": __version__, "command": command}
    atomic_write_json(stage / MANIFEST, doc)
    return doc


def refresh_manifest(folder: Path, names) -> None:
    """After rewriting files a manifest lists (cache convert onto a published cache), record their new content."""
    doc = read_manifest(folder)
    if doc is None or not any(n in doc["files"] for n in names):
        return
    for n in names:
        if n in doc["files"] and (folder / n).is_file():
            doc["files"][n] = describe(folder / n)
    atomic_write_json(folder / MANIFEST, doc)


def replaceable(folder: Path, name: str) -> bool:
    """`folder / name` is free, or the file calib wrote there (its manifest's entry still matches)."""
    p = folder / name
    return not os.path.lexists(p) or matches(p, (read_manifest(folder) or {"files": {}})["files"].get(name))


def record(folder: Path, names) -> None:
    """List files calib has just written straight into a published folder (during a run, under its lock) in the
    folder's manifest, so that they stay provably calib's (a later run may then replace them)."""
    doc = read_manifest(folder) or {"files": {}}
    for n in names:
        doc["files"][n] = describe(folder / n)
    atomic_write_json(folder / MANIFEST, doc)


def remove_listed(folder: Path, files: dict, keep=(), why: str = "") -> list[str]:
    """Delete from `folder` the files of `files` (a manifest's entries) that still match, except those in `keep`;
    returns the names left alone (a warning names each one that is there but not calib's)."""
    left = []
    for name, entry in sorted(files.items()):
        p = folder / name
        if not plain(name) or not os.path.lexists(p):
            continue
        if name in keep:
            left.append(name)
            continue
        if not matches(p, entry):
            log.warning("%s: left alone: not the file calib wrote there (changed since%s)", printable(p), why)
            left.append(name)
            continue
        p.unlink()
    return left


def remove_folder(folder: Path, files: dict | None) -> bool:
    """Remove a folder of calib's: the listed files that match (`files` None: every file, for a staging folder
    whose marker proves calib made it and never listed it), calib's own bookkeeping, then the folder if that
    emptied it; otherwise it stays where it is, named in a warning. True if it is gone."""
    if files is None:
        for p in folder.iterdir():
            if p.is_symlink() or p.is_file():
                p.unlink()
    else:
        remove_listed(folder, files)
    for name in OWN:
        if (folder / name).is_file() and not (folder / name).is_symlink():
            (folder / name).unlink()
    for p in folder.glob(".*.tmp"):  # calib's atomic writes cut short (calib.io.files)
        if p.is_file() and not p.is_symlink():
            p.unlink()
    try:
        folder.rmdir()
        return True
    except OSError:
        rest = sorted(p.name for p in folder.iterdir())
        log.warning("%s: left where it is: it holds files calib did not write there (%s)", printable(folder),
                    ", ".join(printable(n) for n in rest[:5]) + (", ..." if len(rest) > 5 else ""))
        return False
