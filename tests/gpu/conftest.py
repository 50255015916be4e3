"""Fixtures shared by the GPU tests (run on the device: `pytest -m gpu tests/gpu`)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def cuda():
    """calib's CUDA device, or a skip where there is none."""
    from calib.runners.tensorrt.device import Cuda

    try:
        return Cuda()
    except Exception as exc:  # no GPU here
        pytest.skip(f"no CUDA device: {exc}")
