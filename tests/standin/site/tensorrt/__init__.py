"""`import tensorrt` in a test subprocess whose PYTHONPATH starts with tests/standin/site: the stand-in, at the
version in $STANDIN_TRT_VERSION (default 8.6.0), sharing memory with the cuda.cudart stand-in."""
import os as _os

from tests.standin.tensorrt import SHARED as _SHARED, make_trt as _make

globals().update({k: v for k, v in vars(_make(_os.environ.get("STANDIN_TRT_VERSION", "8.6.0"), _SHARED)).items()
                  if not k.startswith("__") or k == "__version__"})
