"""`import tensorrt` in a test subprocess whose PYTHONPATH starts with tests/standin/site: the stand-in, at the
version in $STANDIN_TRT_VERSION (default 8.6.0), sharing memory with the cuda.cudart stand-in; with
$STANDIN_SIMULATE_INT8=1 its INT8 engines run calib's Q/DQ simulation of the layers they hold in INT8."""
import os as _os

from tests.standin.tensorrt import SHARED as _SHARED, make_trt as _make

_t = _make(_os.environ.get("STANDIN_TRT_VERSION", "8.6.0"), _SHARED)
_t.simulate_int8 = _os.environ.get("STANDIN_SIMULATE_INT8") == "1"
globals().update({k: v for k, v in vars(_t).items() if not k.startswith("__") or k == "__version__"})
