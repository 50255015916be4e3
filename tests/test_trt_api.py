"""calib against the real TensorRT Python API of 10.13 and 11.4, on a machine without TensorRT or a GPU.

The `tensorrt-cu12-bindings` wheels (PyPI) import beside stub libraries (tests/trt_api): every class, enum and
signature is the real one. Checked per version:
- every TensorRT name calib's code reaches on that version (the paths calib.runners.tensorrt.compat picks for it)
  exists there, with a signature that takes calib's call (tests/trt_api/reach.py);
- calib's code that needs no TensorRT library runs on the real bindings (tests/trt_api/live.py);
- the calibrator classes override the methods TensorRT's base classes call;
- the stand-in (tests/standin) offers nothing the version lacks, so tests passing on it mean something.

    pytest -m trt_api      # wheels cached in $CALIB_TRT_API_CACHE or ~/.cache/calib-trt-api; needs cc and pip
"""
from __future__ import annotations

import enum
import inspect
import os
import textwrap

import pytest

from conftest import GOLDEN, ROOT
from standin.tensorrt import STANDIN_ONLY, Memory, make_trt
from trt_api import bindings, surface
from trt_api.api import Api
from trt_api.program import Program
from trt_api.reach import check

pytestmark = pytest.mark.trt_api
V10, V11 = bindings.VERSIONS
_INVENTORIES: dict = {}


def _unavailable(reason: str):
    if os.environ.get(bindings.REQUIRED_ENV) == "1":
        pytest.fail(f"TensorRT bindings unavailable ({bindings.REQUIRED_ENV}=1): {reason}")
    pytest.skip(reason)


def api_of(version: str) -> Api:
    if version not in _INVENTORIES:
        try:
            _INVENTORIES[version] = bindings.inventory(version)
        except bindings.Unavailable as exc:
            _INVENTORIES[version] = exc  # asked once per session
    found = _INVENTORIES[version]
    if isinstance(found, bindings.Unavailable):
        _unavailable(str(found))
    return Api(found)


@pytest.fixture(scope="module")
def program():
    return Program.from_files(ROOT)


def test_the_bindings_are_the_real_api():
    """Known answers from TensorRT's release notes: 11 removed IInt8Calibrator, the FP16/INT8 flags and the
    precision constraints, the bindings I/O went in 10; both build serialized networks from an ONNX parser."""
    a10, a11 = api_of(V10), api_of(V11)
    assert (a10.label, a11.label) == (V10, V11)
    assert {"INT8", "FP16", "OBEY_PRECISION_CONSTRAINTS"} <= set(a10.enum_members("BuilderFlag"))
    assert not {"INT8", "FP16", "OBEY_PRECISION_CONSTRAINTS"} & set(a11.enum_members("BuilderFlag"))
    assert a10.member("module", "IInt8EntropyCalibrator2") and not a11.member("module", "IInt8EntropyCalibrator2")
    assert a11.member("ILayer", "precision") is None and a10.member("ILayer", "precision")["settable"]
    for a in (a10, a11):
        assert a.member("ICudaEngine", "get_binding_index") is None
        sig = a.member("Builder", "create_network")["signatures"][0]
        assert [p["name"] for p in sig["params"]] == ["flags"] and sig["returns"] == "INetworkDefinition"
        assert [p["name"] for p in a.member("OnnxParser", "__init__")["signatures"][0]["params"]] == ["network",
                                                                                                       "logger"]


@pytest.mark.parametrize("version", bindings.VERSIONS)
def test_calib_uses_only_what_the_version_has(program, version):
    uses, problems = check(program, api_of(version))
    assert not problems, f"{len(problems)} TensorRT name(s) calib uses that {version} lacks:\n" + "\n".join(problems)
    names = {f"{u.owner}.{u.name}" for u in uses}
    common = {"ICudaEngine.get_tensor_name", "IExecutionContext.execute_async_v3", "Builder.build_serialized_network",
              "IBuilderConfig.set_memory_pool_limit", "IOptimizationProfile.set_shape", "ITensor.dtype"}
    weak = {"BuilderFlag.INT8", "BuilderFlag.FP16", "IBuilderConfig.int8_calibrator", "ILayer.precision",
            "IBuilderConfig.set_calibration_profile", "module.IInt8EntropyCalibrator2"}
    assert common <= names
    if version == V10:
        assert weak <= names
    else:  # compat takes calib around what 11 removed
        assert not weak & names
    assert not {"ICudaEngine.num_bindings", "IExecutionContext.execute_async_v2"} & names  # 8.x only


def _check_snippet(version: str, code: str) -> list[str]:
    module = "calib.runners.tensorrt.snippet"
    program = Program.from_files(ROOT, extra={module: textwrap.dedent(code)})
    _, problems = check(program, api_of(version))
    return [p for p in problems if "snippet.py" in p]


SNIPPET = '''
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.compat import has


def ungated(trt, cfg):
    cfg.set_flag(trt.BuilderFlag.INT8)


def gated(trt, cfg):
    compat.require_weak_typing(trt, "weak typing")
    cfg.set_flag(trt.BuilderFlag.FP16)


def branch(trt, cfg):
    if compat.weakly_typed(trt):
        cfg.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)


def probed(engine, context, trt):
    if has(context, "execute_async_v3"):
        return context.execute_async_v3(0)
    return context.execute_async_v2([], 0) + engine.num_bindings


def _helper(trt, cfg):
    cfg.int8_calibrator = None


def calls_helper_gated(trt, cfg):
    if not compat.weakly_typed(trt):
        return
    _helper(trt, cfg)
'''


def test_the_checker_follows_compat_per_version():
    assert _check_snippet(V10, SNIPPET) == []
    assert _check_snippet(V11, SNIPPET) == [
        f"TensorRT {V11}: no BuilderFlag.INT8 (calib/runners/tensorrt/snippet.py:7)"]


BROKEN = '''
def wrong(trt, builder, engine, cfg, name):
    prof = builder.create_optimization_profile()
    prof.set_shapes(name, (1,), (1,), (1,))
    engine.num_io_tensors = 3
    cfg.set_timing_cache(cfg.create_timing_cache(b""))
    cfg.set_flag(getattr(trt.BuilderFlag, name))
    if hasattr(trt.TacticSource, name.upper()):
        return getattr(trt.TacticSource, name.upper())

    class Logger(trt.ILogger):
        def log(self, msg):
            pass

        def flush(self):
            pass
'''


@pytest.mark.parametrize("version", bindings.VERSIONS)
def test_the_checker_names_the_version_and_the_fault(version):
    where = "calib/runners/tensorrt/snippet.py"
    got = _check_snippet(version, BROKEN)
    assert got == sorted([
        f"TensorRT {version}: IBuilderConfig.set_timing_cache takes (cache, ignore_mismatch), not 1 positional "
        f"argument(s) ({where}:6)",
        f"TensorRT {version}: ICudaEngine.num_io_tensors cannot be assigned ({where}:5)",
        f"TensorRT {version}: Logger overrides ILogger.flush, which this version lacks (TensorRT never calls it) "
        f"({where}:15)",
        f"TensorRT {version}: Logger.log takes 1 argument(s); TensorRT calls it with (severity, msg) ({where}:12)",
        f"TensorRT {version}: getattr on BuilderFlag.? with a name the checker cannot resolve: give it as a "
        f"constant or probe it with hasattr ({where}:7)",
        f"TensorRT {version}: no IOptimizationProfile.set_shapes ({where}:4)"])


def test_a_helper_only_its_module_calls_counts_only_where_it_is_reached():
    helper = '''
    from calib.runners.tensorrt import compat


    def _int8(trt, cfg):
        cfg.set_flag(trt.BuilderFlag.INT8)


    def build(trt, cfg, int8):
        if int8:
            compat.check_implicit_int8(trt)
            _int8(trt, cfg)
    '''
    assert _check_snippet(V11, helper) == []
    assert _check_snippet(V11, helper.replace("            compat.check_implicit_int8(trt)\n", "")) == [
        f"TensorRT {V11}: no BuilderFlag.INT8 (calib/runners/tensorrt/snippet.py:6)"]


@pytest.mark.parametrize("version", bindings.VERSIONS)
def test_calib_runs_on_the_real_bindings(version):
    api_of(version)
    got = bindings.run_script(bindings.HERE / "live.py", version)
    assert got["version"] == version and got["flags"] == 0
    assert got["logger"] == {"is_ilogger": True, "errors": ["an error"]} and got["profiler_is_iprofiler"]
    assert got["builder"] == "TypeError: pybind11::init(): factory function returned nullptr"  # the stubs
    if version == V10:
        assert got["cache_version"] == "101303" and got["weakly_typed"] and got["implicit_int8"] is None
        assert got["flags_strongly_typed"] == 1 << 1  # STRONGLY_TYPED is 1 in 10.x
        assert got["constraint_flags"] == {"obey": 9, "prefer": 10}
        for kind, c in got["calibrators"].items():
            carrier = c["cache_header"].split("-")[-1]  # the header names the algorithm of the class feeding it
            assert c["is_calibrator"] and c["batch_size"] == 2, kind
            assert c["algorithm"] == c["cache_algorithm"]
            assert c["algorithm"].split(".")[-1].replace("_", "").lower() == carrier.lower(), kind
    else:
        assert got["flags_strongly_typed"] == 0  # always strongly typed; the flag is deprecated and ignored
        assert "has no implicit INT8" in got["implicit_int8"] and not got["weakly_typed"]
        assert all("has no implicit INT8" in c for c in got["calibrators"].values())
        assert all("builds every network strongly typed" in m for m in got["constraint_flags"].values())


def test_calibrators_override_what_tensorrt_calls():
    """TensorRT calls a calibrator's get_batch_size, get_batch, read/write_calibration_cache (and the legacy
    calibrator's quantile and histogram methods, which its trampoline calls by name without binding them) by name:
    a misspelt or misnamed override is never called."""
    from calib.runners.tensorrt import compat
    from calib.runners.tensorrt.calibrators import _Feed, _FromCache

    api = api_of(V10)
    for base in compat.BASE_CLASS.values():
        for name, info in api.classes()[base]["members"].items():
            if info["kind"] != "method" or name in ("__init__", "get_algorithm"):
                continue
            for cls in (_Feed, _FromCache):
                assert hasattr(cls, name), f"{cls.__name__} lacks {base}.{name}"
                params = [p for p in inspect.signature(getattr(cls, name)).parameters if p != "self"]
                assert len(params) == len(info["signatures"][0]["params"]), f"{cls.__name__}.{name}"
    called = set(api.classes()[compat.BASE_CLASS["legacy"]]["members"]) | set(api.data["callbacks"])
    assert {"get_quantile", "read_histogram_cache"} <= set(api.data["callbacks"])
    for cls in (_Feed, _FromCache):
        own = {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")} - called
        assert own == {"release"}, f"{cls.__name__} defines {own - {'release'}}, which TensorRT never calls"


@pytest.mark.parametrize("version", bindings.VERSIONS)
def test_the_standin_offers_nothing_the_version_lacks(version):
    found = surface.problems(make_trt(version, Memory()), api_of(version), str(GOLDEN / "cnn" / "cnn.onnx"),
                             STANDIN_ONLY)
    assert not found, "\n".join(found)


def test_the_standin_check_sees_an_extra_name_and_a_wrong_parameter():
    t = make_trt(V11, Memory())
    t.BuilderFlag = enum.IntEnum("BuilderFlag", "INT8 DEBUG", start=0)
    t.Logger = type("Logger", (t.ILogger,), {"log": lambda self, s, m: None})
    found = surface.problems(t, api_of(V11), str(GOLDEN / "cnn" / "cnn.onnx"), STANDIN_ONLY)
    assert found == [f"the stand-in's BuilderFlag has INT8, TensorRT {V11}'s has not",
                     "stand-in Logger.log(s, m): the real one takes (severity, msg)"]
