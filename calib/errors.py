"""Every error calib raises on purpose. The CLI turns them into one line and exit code 2."""
from __future__ import annotations


class CalibError(Exception):
    """Base class: the message names the file, tensor or key at fault."""

    exit_code = 2


_BREAKS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines() breaks on


def one_line(text: str) -> str:
    """`text` on one line: each line break written as its escape (a file or tensor name holding a newline)."""
    return "".join(c.encode("unicode_escape").decode("ascii") if c in _BREAKS else c for c in str(text))


class RecipeError(CalibError):
    """A recipe file has an unknown key, a wrong type or a missing file."""


class DataError(CalibError):
    """Calibration or evaluation data cannot be read or does not fit the model."""


class ModelError(CalibError):
    """The ONNX model cannot be loaded or lacks what is asked of it."""


class CacheError(CalibError):
    """A calibration cache or its sidecar is malformed or does not match the model."""


class MissingExtraError(CalibError):
    """An optional dependency (tensorrt, torch, ...) is needed but not installed."""


DISTRIBUTION = "calib-trt"  # the name pip knows calib by (`calib` on PyPI is an unrelated project)
# the optional extras of pyproject.toml, so that a hint names packages pip can install from anywhere
EXTRAS = {"trt": ("tensorrt>=8.6", "cuda-python>=12"), "torch": ("torch>=2.1", "torchvision>=0.16"),
          "data": ("scikit-image>=0.22", "scikit-learn>=1.3"), "text": ("tokenizers>=0.15",),
          "ray": ("ray>=2.9",)}


def install_hint(extra: str) -> str:
    """A pip command that installs what `extra` adds, wherever calib came from."""
    reqs = " ".join(f"'{r}'" for r in EXTRAS.get(extra, ()))
    return f"pip install {reqs} (the [{extra}] extra of {DISTRIBUTION}; in a clone: pip install -e '.[{extra}]')"


def require(module: str, extra: str):
    """Import an optional module or raise a one-line error naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{module} is not installed: {install_hint(extra)} ({exc})") from None


def called(key: str, names=None) -> str:
    """What the user calls option `key` (a recipe key such as 'preprocess.resize'): the command-line flag where
    `names` (key -> flag, given by the command line) maps it, else the key itself."""
    return (names or {}).get(key, key)


class BudgetError(CalibError):
    """The memory budget cannot hold what a command must keep at once (said before any work)."""
