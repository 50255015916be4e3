"""MinMax: the largest absolute value seen (as TensorRT's IInt8MinMaxCalibrator)."""
NAME = "minmax"


def compute_amax(hist) -> float:
    return float(hist.absmax)
