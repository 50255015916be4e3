"""Checks of calib against the real TensorRT Python bindings (tests/test_trt_api.py)."""
