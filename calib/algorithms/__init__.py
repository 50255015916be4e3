"""Calibration algorithms: pure functions Histogram -> amax, registered by name."""
from calib.algorithms.registry import ALGORITHMS, compute, get, names

__all__ = ["ALGORITHMS", "compute", "get", "names"]
