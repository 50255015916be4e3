"""A user's postprocess hook, `FILE.py:FUNCTION`: turns a batch of a model's outputs into what its task scores.

The function takes {output name: numpy array [N, ...]} (one batch) and returns either
  detections: a list of N items, one per image, each (boxes [K, 4] xyxy in input pixels, scores [K], classes [K])
              as a tuple or a dict with those keys; every candidate may be returned: calib applies the confidence
              threshold, class-wise NMS and the detection limit (evaluation.detection) itself;
  class scores: one array [N, C] (with task embedding: vectors, compared by cosine);
  strings: a list of N str (exact match and character error rate against FP32's).
The file is loaded from its path (importlib), never from the import path; every error names the file and the
function, and a result of another structure is refused in one line saying what was expected.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np

from calib.errors import DataError, ModelError
from calib.io.files import read_bounded

MAX_HOOK_BYTES = 16 << 20
EXPECTED = ("a list of {n} (boxes [K, 4] xyxy, scores [K], classes [K]), one per image, or class scores [{n}, C]"
            " (vectors with task embedding), or a list of {n} strings")


def parse(text: str, flag: str = "--postprocess") -> tuple[Path, str]:
    """FILE.py:FUNCTION -> (path, function name)."""
    path, sep, func = str(text).rpartition(":")
    if not sep or not path or not func.isidentifier() or not path.endswith(".py"):
        raise ModelError(f"{flag} '{text}': expected FILE.py:FUNCTION, e.g. decode.py:postprocess")
    return Path(path).expanduser(), func


class Hook:
    """A loaded hook; calling it checks what the function returns (`kind`: detection | classification)."""

    def __init__(self, path: Path, func: str, fn):
        self.path, self.func, self.fn = path, func, fn
        self.label = f"{path}:{func}"

    def describe(self) -> str:
        return f"postprocess {self.path.name}:{self.func}"

    def __call__(self, outputs: dict) -> tuple[str, object]:
        n = next(iter(outputs.values())).shape[0] if outputs else 0
        try:
            got = self.fn(dict(outputs))
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the hook runs: the command stops as it would anywhere
            raise
        except BaseException as exc:  # the user's code, sys.exit() included: one line naming it, never an exit 0
            raise DataError(f"{self.label} raised {type(exc).__name__}: {_said(exc)}") from None
        return check(got, n, self.label)

    def candidates(self, outputs: dict) -> list:
        kind, got = self(outputs)
        if kind != "detection":
            raise DataError(f"{self.label} returned class scores {list(np.shape(got))} where detections were "
                            f"expected: {EXPECTED.format(n=np.shape(got)[0])}")
        return got


def load(text: str, flag: str = "--postprocess") -> Hook:
    """Load FILE.py and find FUNCTION in it (a missing file, a file that fails to run, a missing or non-callable
    function: one line naming the file and the function)."""
    path, func = parse(text, flag)
    if not path.is_file():
        raise ModelError(f"{flag} {text}: file not found: {path}")
    name = "calib_postprocess_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{flag} {text}: {path} cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    source = read_bounded(path, MAX_HOOK_BYTES, "postprocess file")
    sys.modules[name] = module  # dataclasses and pickling in the user's file look their module up
    try:  # compiled here, not by the import system: no __pycache__ is written beside the user's file
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:  # a syntax error, a failing import, sys.exit() in the user's file
        sys.modules.pop(name, None)
        raise ModelError(f"{flag} {text}: the file failed to load ({type(exc).__name__}: {_said(exc)})") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ModelError(f"{flag} {text}: {path.name} has no function '{func}'"
                         + ("" if fn is None else f" ('{func}' is a {type(fn).__name__})"))
    return Hook(path, func, fn)


def _said(exc: BaseException) -> str:
    """What an exception says; for a SystemExit, the code it exits with."""
    if isinstance(exc, SystemExit):
        return f"exit code {exc.code!r} (a hook must return, not exit)"
    return str(exc)


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"an array {list(x.shape)}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}"


def _image(item, label: str, j: int, n: int):
    if isinstance(item, dict):
        missing = [k for k in ("boxes", "scores", "classes") if k not in item]
        if missing:
            raise DataError(f"{label} returned image {j} without '{missing[0]}': expected {EXPECTED.format(n=n)}")
        item = (item["boxes"], item["scores"], item["classes"])
    if not isinstance(item, (list, tuple)) or len(item) != 3:
        raise DataError(f"{label} returned {_describe(item)} for image {j}: expected {EXPECTED.format(n=n)}")
    try:
        b, s, c = (np.asarray(v, np.float64) for v in item)
    except (TypeError, ValueError):
        raise DataError(f"{label} returned non-numbers for image {j}: expected {EXPECTED.format(n=n)}") from None
    k = s.reshape(-1).size
    if b.size != 4 * k or (b.ndim == 2 and b.shape[1] != 4) or c.reshape(-1).size != k:
        raise DataError(f"{label} returned boxes {list(b.shape)}, scores {list(s.shape)}, classes {list(c.shape)} "
                        f"for image {j}: expected boxes [K, 4] xyxy, scores [K], classes [K]")
    _finite(b, label, f"boxes of image {j}")
    _finite(s, label, f"scores of image {j}")
    c = c.reshape(-1)
    if k and (not np.all(np.isfinite(c)) or np.any(c != np.round(c)) or c.min() < 0):
        raise DataError(f"{label} returned classes that are not whole numbers >= 0 for image {j}")
    return b.reshape(-1, 4), s.reshape(-1), c.astype(np.int64)


def _finite(x: np.ndarray, label: str, what: str) -> None:
    """NaN or Inf in what a hook returns is refused: it would score as agreement (a NaN row's argmax is 0 in both
    models) or as boxes no metric can place."""
    if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
        bad = np.argwhere(~np.isfinite(x))[0]
        raise DataError(f"{label} returned NaN or Inf in its {what} (first at {list(map(int, bad))}): a hook's "
                        "results must be finite numbers")


def check(got, n: int, label: str) -> tuple[str, object]:
    """('classification', scores [n, C]), ('detection', [(boxes, scores, classes)] * n) or ('text', [str] * n),
    else one line."""
    if isinstance(got, np.ndarray) and got.dtype != object:
        if got.ndim == 2 and got.shape[0] == n and np.issubdtype(got.dtype, np.number):
            _finite(got, label, "class scores")
            return "classification", got
        raise DataError(f"{label} returned {_describe(got)}: expected {EXPECTED.format(n=n)}")
    if isinstance(got, (list, tuple)) and len(got) == n and n and all(isinstance(x, str) for x in got):
        return "text", list(got)
    if isinstance(got, (list, tuple)) and len(got) == n:
        return "detection", [_image(item, label, j, n) for j, item in enumerate(got)]
    raise DataError(f"{label} returned {_describe(got)}: expected {EXPECTED.format(n=n)}")
