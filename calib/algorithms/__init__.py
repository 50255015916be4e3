"""Calibration algorithms: pure functions Histogram -> amax (minmax, entropy as TensorRT's EntropyCalibration2,
percentile, mse, and entropy-stable: the same KL search on calib's own histogram, which batch size and order cannot
change), registered by name; numpy and the statistics kernels only."""
from calib.algorithms.registry import ALGORITHMS, compute, get, names

__all__ = ["ALGORITHMS", "compute", "get", "names"]
