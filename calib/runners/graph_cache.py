"""ONNX Runtime's rewritten capture graph (calib.runners.blocked), kept on disk from one process to the next.

The blocked-layout capture takes two sessions to make: one in which ONNX Runtime optimizes the exposed model (and
writes the optimized graph out), one for the graph rewritten from it; YOLOv3-tiny: 0.4 s of a 3.9 s calibration,
paid by every command. The rewritten graph depends only on the model file, the tensors exposed, ONNX Runtime's
version, the CPU (ONNX Runtime's NCHWc block size follows its instruction set) and calib's rewrite, so it is kept
under $CALIB_HOME/ort, named by a digest of all of them, and a later capture opens it as one session without
optimization. Where the optimized graph has no blocked layout, an empty marker file says so. The folder keeps the
most recently used files within a size budget. Anything unreadable there is removed and made again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from functools import cache
from pathlib import Path

from calib.io.files import atomic_write_bytes, calib_home
from calib.quantize import model as model_facts

log = logging.getLogger(__name__)

BUDGET = 2 << 30  # bytes kept in the folder
MAX_FILES = 32


def folder() -> Path:
    return calib_home() / "ort"


@cache
def _context() -> str:
    """What, besides the model and the exposed tensors, decides the rewritten graph."""
    import onnxruntime as ort

    here = Path(__file__).parent
    code = hashlib.sha256()
    for path in (here / "blocked.py", here / "onnxruntime.py", here / "graph_cache.py", Path(model_facts.__file__)):
        code.update(path.read_bytes())  # the rewrite, and the shape inference it reads
    cpu = platform.machine()
    try:  # Linux: the instruction sets (not platform.processor(), which runs `uname -p` there)
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            cpu += next((line for line in fh if line.startswith(("flags", "Features"))), "")
    except OSError:
        cpu += platform.processor()
    return json.dumps([ort.__version__, code.hexdigest(), cpu])


def key(model_sha256: str, exposed: list[str]) -> str:
    return hashlib.sha256(json.dumps([model_sha256, list(exposed), _context()]).encode()).hexdigest()[:32]


def lookup(k: str) -> tuple[str, Path] | None:
    """("blocked", path of the rewritten graph) or ("plain", marker path) for a key stored before; None if not."""
    for kind, suffix in (("blocked", ".onnx"), ("plain", ".plain")):
        p = folder() / (k + suffix)
        if p.is_file():
            try:
                os.utime(p)  # most recently used
            except OSError:
                pass
            return kind, p
    return None


def store(k: str, data: bytes | None) -> None:
    """Keep the rewritten graph's bytes (None: the marker of a graph without blocked layout); a folder that cannot
    be written only costs the next capture the two sessions again."""
    try:
        atomic_write_bytes(folder() / (k + (".onnx" if data is not None else ".plain")), data or b"")
        _prune()
    except OSError as exc:
        log.debug("capture graph not kept: %s", exc)


def forget(k: str) -> None:
    for suffix in (".onnx", ".plain"):
        try:
            (folder() / (k + suffix)).unlink()
        except OSError:
            pass


def _prune() -> None:
    """Remove the least recently used files past MAX_FILES or past BUDGET bytes."""
    files = []
    for p in folder().iterdir():
        if p.suffix in (".onnx", ".plain"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, p))
    files.sort(reverse=True)
    total = 0
    for i, (_, size, p) in enumerate(files):
        total += size
        if i >= MAX_FILES or total > BUDGET:
            try:
                p.unlink()
            except OSError:
                pass
