"""The running half of the TensorRT stand-in: runtime, engine and execution contexts over the builder's JSON plan.
Engines run the ONNX model with ONNX Runtime (plugins in numpy; INT8 engines optionally through calib's Q/DQ
simulation of the layers they hold in Int8), reading and writing the stand-in's host Memory."""
from __future__ import annotations

import json
import types

import numpy as np

from calib.runners.onnxruntime import OrtRunner

from .dtypes import NP, DataType


class _Runtime:
    def __init__(self, t, major, minor):
        self._t, self._major, self._minor = t, major, minor

    def deserialize_cuda_engine(self, serialized_engine):
        plan = bytes(serialized_engine)
        if not plan.startswith(b"STANDIN"):
            return None
        cls = _BindingsEngine if self._major < 10 else _Engine  # TensorRT 10 removed the bindings API
        return cls(self._t, json.loads(plan[7:]), named=(self._major, self._minor) >= (8, 5))


def _simulated(plan):
    """The Q/DQ model of an INT8 stand-in engine: the layers it holds in Int8 quantized, the others in float."""
    import onnx

    from calib.quantize.placement import WEIGHTED
    from calib.quantize.qdq import Exclusions, insert_qdq, quantizable_layers

    model = onnx.load(plan["model"])
    int8 = {n[len("node_of_"):] if n.startswith("node_of_") else n for n in plan["int8_layers"]}
    quant = quantizable_layers(model)
    floats = tuple(n for n in quant if n not in int8)
    # a layer without weights held in Int8 (a Transpose) reads its inputs rounded with their own scales, as its
    # Int8 input format says, also where calib's placement leaves them float (its consumer in float)
    reads = [[t, n.name or n.output[0]] for n in model.graph.node if (n.name or n.output[0]) in int8
             and n.op_type not in WEIGHTED for t in n.input if t in plan["scales"]]
    q = insert_qdq(model, {k: v * 127.0 for k, v in plan["scales"].items()}, Exclusions(names=floats))
    return _int8_into_float(q, {**plan, "int8_into_float": [*plan.get("int8_into_float", ()), *reads]})


def _int8_into_float(model, plan):
    """A Q/DQ pair (the tensor's scale) before each float-pinned layer that reads a tensor written in INT8."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    for k, (tensor, layer) in enumerate(plan.get("int8_into_float", ())):
        name = layer[len("node_of_"):] if layer.startswith("node_of_") else layer
        at = next(i for i, n in enumerate(g.node) if (n.name or n.output[0]) == name)
        node = g.node[at]
        s, z = f"standin_s{k}", f"standin_z{k}"
        g.initializer.extend([numpy_helper.from_array(np.array(plan["scales"][tensor], np.float32), s),
                              numpy_helper.from_array(np.array(0, np.int8), z)])
        pair = [helper.make_node("QuantizeLinear", [tensor, s, z], [f"{tensor}_standin_q{k}"]),
                helper.make_node("DequantizeLinear", [f"{tensor}_standin_q{k}", s, z], [f"{tensor}_standin_dq{k}"])]
        for i, x in enumerate(node.input):
            if x == tensor:
                node.input[i] = f"{tensor}_standin_dq{k}"
        for n in reversed(pair):
            g.node.insert(at, n)
    return model


def _model_runner(plan):
    import onnx

    from calib.deploy.plugins import PluginModelRunner, plugin_nodes

    if plugin_nodes(onnx.load(plan["model"], load_external_data=False)):  # the plugins run in numpy
        plugin_runner = PluginModelRunner(plan["model"])
        runner = types.SimpleNamespace(
            run=lambda feed, outputs=None: plugin_runner.run(feed, outputs or plan["outputs"]))
    else:
        runner = OrtRunner(_simulated(plan) if plan.get("simulate_int8") else plan["model"],
                           expose=[o for o in plan["outputs"]])
    if plan.get("tf32"):  # TF32's 10-bit mantissa, modelled on the float inputs (rounded to nearest)
        run_fp32 = runner.run
        runner.run = lambda feed, outputs=None: run_fp32({k: _tf32(v) for k, v in feed.items()}, outputs)
    wide = set(plan.get("int64_inputs") or ())
    if wide:  # the engine's int32 inputs go back to the model's int64 for ONNX Runtime
        run = runner.run
        runner.run = lambda feed, outputs=None: run(
            {k: v.astype(np.int64) if k in wide else v for k, v in feed.items()}, outputs)
    return runner


def _tf32(x):
    if not (isinstance(x, np.ndarray) and x.dtype == np.float32):
        return x
    bits = np.ascontiguousarray(x).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


class _Engine:
    """An engine of TensorRT 10 and later: I/O by named tensors only."""

    def __init__(self, t, plan, named):
        self._t, self._plan = t, plan
        self._io = [(n, True, shape, DataType(dt)) for n, shape, dt in plan["inputs"]]
        dts = plan.get("output_dtypes") or [DataType.FLOAT] * len(plan["outputs"])
        self._io += [(o, False, None, DataType(dt)) for o, dt in zip(plan["outputs"], dts)]
        self._profiles = plan.get("profiles") or [plan["shapes"]]
        self.num_optimization_profiles = len(self._profiles)
        if named:
            self.num_io_tensors = len(self._io)
        self._runner = _model_runner(plan)

    def _find(self, name):
        return next(i for i, e in enumerate(self._io) if e[0] == name)

    def get_tensor_name(self, index):
        return self._io[index][0]

    def get_tensor_mode(self, name):
        return self._t.TensorIOMode.INPUT if self._io[self._find(name)][1] else self._t.TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name):
        return self._io[self._find(name)][3]

    def get_tensor_shape(self, name):
        e = self._io[self._find(name)]
        return tuple(e[2]) if e[1] else (-1,)

    def get_tensor_profile_shape(self, name, profile_index):
        if not 0 <= profile_index < len(self._profiles):
            raise IndexError(f"profile {profile_index} out of range")
        return [tuple(s) for s in self._profiles[profile_index][name]]

    def create_execution_context(self):
        named, bindings = hasattr(self, "num_io_tensors"), hasattr(self, "num_bindings")
        cls = _ContextBoth if named and bindings else _ContextV3 if named else _ContextV2
        return cls(self)

    def create_engine_inspector(self):
        return _Inspector(self)


class _Inspector:
    """TensorRT 8.6's engine inspector: for an engine with a shape range (a profile whose min and max differ) every
    tensor's format is 'N/A due to dynamic shapes', with an execution context set or not (an H100: batch 1-8 gave
    none, through a context too; batch 4-4 gave them)."""

    def __init__(self, engine):
        self._e = engine
        self.execution_context = None

    def get_engine_information(self, format):
        layers = self._e._plan["layers"]
        if any(tuple(r[0]) != tuple(r[2]) for prof in self._e._profiles for r in prof.values()):
            layers = [{**la, **{k: [{**t, "Format/Datatype": "N/A due to dynamic shapes"} for t in la[k]]
                                for k in ("Inputs", "Outputs") if k in la}} for la in layers]
        return json.dumps({"Layers": layers})


class _BindingsEngine(_Engine):
    """An engine of TensorRT 8: bindings too, every I/O tensor once per profile ("name [profile k]" past the
    first)."""

    def __init__(self, t, plan, named):
        super().__init__(t, plan, named)
        self.num_bindings = len(self._io) * len(self._profiles)

    def get_binding_name(self, index):
        k, j = divmod(index, len(self._io))
        return self._io[j][0] + (f" [profile {k}]" if k else "")

    def binding_is_input(self, index):
        return self._io[index % len(self._io)][1]

    def get_binding_index(self, name):
        return self._find(name)

    def get_binding_dtype(self, index):
        return self._io[index % len(self._io)][3]

    def get_binding_shape(self, index):
        return self.get_tensor_shape(self._io[index % len(self._io)][0])

    def get_profile_shape(self, profile_index, binding):
        return self.get_tensor_profile_shape(self._io[binding % len(self._io)][0], profile_index)


class _Context:
    def __init__(self, engine):
        self._e = engine
        self._profile = 0
        self._shapes = {n: tuple(s) for n, is_in, s, _ in engine._io if is_in}
        self._addr = {}
        self._out_shapes = {}
        self.shapes_set = []  # every accepted input shape: (profile, name, shape)

    active_optimization_profile = property(lambda self: self._profile)
    _profiler = None
    enqueue_emits_profile = True
    _refused_profilers = 0  # `profiler = None` on 8.x: TensorRT logs an API Usage Error and keeps the profiler

    @property
    def profiler(self):
        return self._profiler

    @profiler.setter
    def profiler(self, value):
        if value is None and self._e._t.__version__.startswith("8."):
            self._refused_profilers += 1
            return
        self._profiler = value

    def set_optimization_profile_async(self, profile_index, stream_handle):
        if not 0 <= profile_index < len(self._e._profiles):
            return False
        self._profile = profile_index
        self._shapes = {n: tuple(s) for n, is_in, s, _ in self._e._io if is_in}  # shapes are set again per profile
        return True

    def _set_shape(self, name, shape):
        lo, _, hi = self._e._profiles[self._profile][name]
        if len(shape) != len(lo) or any(s < a or s > b for s, a, b in zip(shape, lo, hi)):
            return False
        self._shapes[name] = tuple(shape)
        self.shapes_set.append((self._profile, name, tuple(shape)))
        return True

    def _infer(self):
        feed = {n: np.zeros(s, NP[dt]) for n, is_in, _, dt in self._e._io if is_in for s in [self._shapes[n]]}
        return {k: v.shape for k, v in self._e._runner.run(feed).items()}

    def _shape(self, name):
        if name in self._shapes:
            return self._shapes[name]
        if name not in self._out_shapes or self._out_shapes.get("_for") != dict(self._shapes):
            self._out_shapes = {**self._infer(), "_for": dict(self._shapes)}
        return self._out_shapes[name]

    def _report(self):  # a stand-in time per engine layer: 1 us per layer index, so shares are known
        if self._profiler is not None and self.enqueue_emits_profile:
            for i, layer in enumerate(self._e._plan["layers"]):
                self._profiler.report_layer_time(layer["Name"], 0.001 * (i + 1))

    def _key(self, mem):
        return (tuple((n, self._addr[n], mem.writes.get(self._addr[n], 0), self._shapes[n]) for n in self._shapes),
                tuple(sorted(self._addr.items())))

    def _run(self):
        if any(d < 0 for s in self._shapes.values() for d in s):
            return False  # an input's shape was never set
        captured = self._e._t.memory.capturing
        if captured is not None:  # a CUDA graph's capture: recorded, run at each launch of the graph
            addr = dict(self._addr)
            run = lambda: self._run_at(addr)  # noqa: E731
            run.kernels = len(self._e._plan.get("layers") or ()) or 1  # what cudaGraphGetNodes counts
            captured.append(run)
            return True
        return self._run_now()

    def _run_at(self, addr):
        self._addr = addr
        return self._run_now()

    def _run_now(self):
        self._report()
        mem = self._e._t.memory
        if self._key(mem) == getattr(self, "_last", None):
            return True  # same inputs as the last run: the outputs in memory are already right (timing loops)
        io = self._e._io
        feed = {n: mem.read(self._addr[n], self._shapes[n], NP[dt]) for n, is_in, _, dt in io if is_in}
        out_dt = {n: NP[dt] for n, is_in, _, dt in io if not is_in}
        for k, v in self._e._runner.run(feed).items():
            mem.to_device(self._addr[k], np.ascontiguousarray(v, out_dt.get(k, np.float32)))
        self._last = self._key(mem)
        return True


class _Named:
    """Named-tensor I/O (TensorRT 8.5+)."""

    def set_input_shape(self, name, shape):
        return self._set_shape(name, shape)

    def get_tensor_shape(self, name):
        return self._shape(name)

    def set_tensor_address(self, name, memory):
        self._addr[name] = memory

    def execute_async_v3(self, stream_handle):
        return self._run()


class _Bindings:
    """Bindings I/O (TensorRT 8; removed in 10)."""

    def set_binding_shape(self, binding, shape):
        k, j = divmod(binding, len(self._e._io))
        if k != self._profile:
            return False  # a binding of another profile than the context's
        return self._set_shape(self._e._io[j][0], shape)

    def get_binding_shape(self, binding):
        return self._shape(self._e._io[binding % len(self._e._io)][0])

    def execute_async_v2(self, bindings, stream_handle):
        per = len(self._e._io)
        self._addr = {self._e._io[j][0]: bindings[self._profile * per + j] for j in range(per)}
        return self._run()


class _ContextV3(_Named, _Context):
    pass


class _ContextV2(_Bindings, _Context):
    pass


class _ContextBoth(_Named, _Bindings, _Context):
    pass
