"""calib's TensorRT code that needs no TensorRT library, run on the real bindings: network flags, cache header
digits, the logger and profiler subclasses, the calibrator classes (their algorithm as TensorRT's own base class
reports it) and the refusals of what a version lacks. Prints JSON; run beside the bindings and their stubs."""
from __future__ import annotations

import json
import sys


def _error(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # the one-line message calib gives, or what the bindings raise
        return f"{type(exc).__name__}: {exc}"
    return None


def run(trt) -> dict:
    import numpy as np

    from calib.runners.tensorrt import builder, calibrators, compat, profile

    out = {"version": trt.__version__, "cache_version": compat.cache_version(trt),
           "weakly_typed": compat.weakly_typed(trt), "flags": compat.network_flags(trt),
           "flags_strongly_typed": compat.network_flags(trt, strongly_typed=True),
           "implicit_int8": _error(lambda: compat.check_implicit_int8(trt)),
           "constraint_flags": {}, "calibrators": {}}
    for kind in ("obey", "prefer"):
        try:
            out["constraint_flags"][kind] = int(compat.constraint_flag(trt, kind))
        except Exception as exc:
            out["constraint_flags"][kind] = f"{type(exc).__name__}: {exc}"
    logger = builder.trt_logger(trt)
    logger.log(trt.ILogger.Severity.ERROR, "an error")
    logger.log(trt.ILogger.Severity.INFO, "not kept")
    out["logger"] = {"is_ilogger": isinstance(logger, trt.ILogger), "errors": logger.errors}
    out["profiler_is_iprofiler"] = isinstance(profile._profiler(trt), trt.IProfiler)
    inputs = {"x": ((3,), np.float32)}
    for kind in compat.BASE_CLASS:
        try:
            c = calibrators.make_calibrator(kind, [{"x": np.zeros((2, 3), np.float32)}], inputs, 2, None, trt=trt)
            fed = calibrators.cache_calibrator({"x": 1.0}, trt=trt, carrier=compat.CARRIER_OF[kind])
            out["calibrators"][kind] = {"is_calibrator": isinstance(c, trt.IInt8Calibrator),
                                        "batch_size": c.get_batch_size(), "algorithm": str(c.get_algorithm()),
                                        "cache_header": fed.read_calibration_cache().decode().splitlines()[0],
                                        "cache_algorithm": str(fed.get_algorithm())}
        except Exception as exc:
            out["calibrators"][kind] = f"{type(exc).__name__}: {exc}"
    out["builder"] = _error(lambda: trt.Builder(logger))  # the stub library has no builder to give
    return out


def main() -> int:
    import tensorrt_bindings

    sys.modules["tensorrt"] = tensorrt_bindings  # what `import tensorrt` gives with the full wheel
    json.dump(run(tensorrt_bindings), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
