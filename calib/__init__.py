"""calib: INT8 calibration workbench for NVIDIA TensorRT.

The public API is imported lazily so that `import calib` stays cheap.
"""
from __future__ import annotations

from calib.version import __version__

__all__ = ["__version__", "calibrate", "evaluate", "equalize_model", "CalibError"]


def __getattr__(name: str):
    if name == "calibrate":
        from calib.calibrate import calibrate

        return calibrate
    if name == "evaluate":
        from calib.evaluate.api import evaluate

        return evaluate
    if name == "equalize_model":
        from calib.equalize import equalize_file

        return equalize_file
    if name == "CalibError":
        from calib.errors import CalibError

        return CalibError
    raise AttributeError(f"module 'calib' has no attribute {name!r}")
