"""Atomic file writes and hashing."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from calib.io.reading import printable, read_bytes  # noqa: F401 (printable: re-exported)


_SCRATCH: list[Path] = []


def scratch_dir(key: str) -> Path:
    """A folder of this process's scratch space (removed at exit) for `key`: derived models calib writes before
    it knows where its output goes (calib.data.folding, calib.runners.reshape)."""
    import atexit
    import shutil
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="calib-models-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    folder = _SCRATCH[0] / key
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8; a character that cannot be encoded (a file name's undecodable byte) is written as a \\x escape."""
    return atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_bounded(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (calib.io.reading.read_bytes)."""
    return read_bytes(path, limit, what)


def calib_home() -> Path:
    """Where calib keeps what outlives a run (fetched models, timing caches, capture graphs): $CALIB_HOME, by
    default ~/.cache/calib."""
    return Path(os.environ.get("CALIB_HOME", Path.home() / ".cache" / "calib"))


def file_key(path: str | os.PathLike) -> tuple:
    """What identifies a file's contents for as long as nobody writes it: device, inode, size, mtime (ns)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def per_file(table: dict, path: str | os.PathLike, make: Callable[[], Any], limit: int = 64):
    """make(), worked out once per process for the file at `path` while nobody writes it (`table` keyed by the
    path and its file_key; past `limit` entries the oldest goes). A path that cannot be read is not remembered:
    make() then says what is wrong with it."""
    try:
        key = (str(path), file_key(path))
    except OSError:
        return make()
    if key not in table:
        if len(table) >= limit:
            del table[next(iter(table))]
        table[key] = make()
    return table[key]


_DIGESTS: dict = {}  # a model is hashed once per process, not per use


def sha256_file(path: str | os.PathLike) -> str:
    def digest() -> str:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    return per_file(_DIGESTS, path, digest)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PREV = ".calib-prev"  # suffix of the hard links that keep a pair's previous files during its replacement


def _stage_bytes(path: Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return tmp


def replace_together(items: list[tuple[str | os.PathLike, bytes]]) -> list[Path]:
    """Replace files that belong together (a cache and its sidecar, an engine and its .json).

    Every new content goes to a temporary file beside its target first, so a failure while writing (a full disk)
    changes nothing. The previous files are then kept as hard links `<name>.calib-prev` until all renames are done;
    a process killed between the renames leaves them, and `recover_together` puts the previous pair back."""
    paths = [Path(p) for p, _ in items]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    tmps: list[str] = []
    try:
        for p, (_, data) in zip(paths, items):
            tmps.append(_stage_bytes(p, data))
    except BaseException:
        for t in tmps:
            if os.path.exists(t):
                os.unlink(t)
        raise
    prevs = []
    for p in paths:
        prev = p.with_name(p.name + PREV)
        if prev.exists() or prev.is_symlink():
            prev.unlink()
        if p.is_file():
            os.link(p, prev)
            prevs.append(prev)
    for p, t in zip(paths, tmps):
        os.replace(t, p)
    for prev in prevs:
        prev.unlink()
    return paths


def recover_together(paths, consistent) -> bool:
    """After a replacement killed between its renames: if `consistent()` says the current files do not belong
    together, move the kept previous files back (True); stale links of a finished replacement are removed."""
    paths = [Path(p) for p in paths]
    prevs = [p.with_name(p.name + PREV) for p in paths]
    if not any(prev.exists() for prev in prevs):
        return False
    if consistent():
        for prev in prevs:
            if prev.exists():
                prev.unlink()
        return False
    for p, prev in zip(paths, prevs):
        if prev.exists():
            if p.exists() and os.path.samefile(prev, p):  # not replaced yet: rename(2) of one file is a no-op
                prev.unlink()
            else:
                os.replace(prev, p)
    return True
