"""Entropy (KL divergence) on calib's own mergeable histogram: a threshold that batch size and order cannot change.

TensorRT's EntropyCalibration2, and calib's `entropy` that reproduces it bit for bit, spread 2048 bins over the
first calibration batch's absmax and double the bin width when a later batch goes past it: the grid, and so the
threshold, depends on which samples came first. This algorithm runs the same KL search (2048 bins, 128 levels, the
first bin dropped, the last minimum on ties) on 2048 bins over [0, absmax] re-binned from calib's power-of-two
histogram, which is exact under any batching or order; the threshold is a bin edge. Its cache carries the same
header as any other (EntropyCalibration2 by default), so TensorRT reads it as it reads `entropy`'s.
"""
from calib.algorithms import entropy

NAME = "entropy-stable"


def check(num_bins, num_levels, zero_bin, stride):
    return entropy.check(num_bins, num_levels, zero_bin, stride, "absmax")


def compute_amax(hist, num_bins: int = 2048, num_levels: int = 128, zero_bin: str = "drop",
                 stride: int = 1) -> float:
    return entropy.compute_amax(hist, num_bins, num_levels, zero_bin, stride, grid="absmax")
