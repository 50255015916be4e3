"""Every error calib raises on purpose. The CLI turns them into one line and exit code 2."""
from __future__ import annotations


class CalibError(Exception):
    """Base class: the message names the file, tensor or key at fault."""

    exit_code = 2


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


def require(module: str, extra: str):
    """Import an optional module or raise a one-line error naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is not installed: pip install 'calib[{extra}]' ({exc})"
        ) from None
