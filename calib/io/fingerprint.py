"""The data fingerprint in every sidecar: a sha256 over the input batches' names, shapes, dtypes and bytes."""
from __future__ import annotations

import numpy as np


def fingerprint_update(digest, name: str, x: np.ndarray) -> None:
    """Add one input batch to a data fingerprint (the sidecars' data_fingerprint)."""
    x = np.ascontiguousarray(x)
    digest.update(f"{name}{x.shape}{x.dtype}".encode())
    digest.update(x.data)
