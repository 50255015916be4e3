"""Fixtures shared by the GPU tests (run on the device: `pytest -m gpu tests/gpu`)."""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="module")
def cuda():
    """calib's CUDA device, or a skip where there is none."""
    from calib.runners.tensorrt.device import Cuda

    try:
        return Cuda()
    except Exception as exc:  # no GPU here
        pytest.skip(f"no CUDA device: {exc}")


def pytest_runtest_logreport(report):
    """With CALIB_GPU_INSTAFAIL=1 (benchmarks/gpu_pipeline.sh), a failure's traceback is printed when it happens, not
    only in the summary at the end, which a device call's time limit can cut off."""
    if report.failed and os.environ.get("CALIB_GPU_INSTAFAIL") == "1":
        sys.stdout.write(f"\nFAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n"
                         f"{report.longreprtext[-6000:]}\n")
        sys.stdout.flush()
