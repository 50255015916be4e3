"""The building half of the TensorRT stand-in: network, ONNX parser, builder config, optimization profiles and the
builder, whose plan is JSON the runtime half (engine.py) reads. Implicit INT8 calibrates with ONNX Runtime as
TensorRT 8.6 does: a cache is used only under the header of the calibrator class's algorithm."""
from __future__ import annotations

import json
import struct
import types

import numpy as np
import onnx

from calib.runners.onnxruntime import OrtRunner

from .dtypes import ALGO, LAYER_TYPE, NP, ONNX_TO_DT, OTHER_LAYER, QUANTIZABLE, DataType, major_of


class _Tensor:
    def __init__(self, name, dtype, shape=()):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)


class _Layer:
    """A network layer of TensorRT 11: its types come from the network (strongly typed), none can be set."""

    def __init__(self, t, node):
        self.name = node.name
        self._op_type = node.op_type
        self.type = getattr(t.LayerType, LAYER_TYPE.get(node.op_type, OTHER_LAYER))
        self._outputs = [_Tensor(o, DataType.INT32 if node.op_type == "Shape" else DataType.FLOAT)
                         for o in node.output]
        self.num_outputs = len(self._outputs)
        self._precision = None
        self._output_types = {}
        self._inputs = []  # the tensors it reads (weights aside), set by the parser

    num_inputs = property(lambda self: len(self._inputs))

    def get_output(self, index):
        return self._outputs[index]

    def get_input(self, index):
        return self._inputs[index]


class _WeakLayer(_Layer):
    """A network layer up to TensorRT 10: its precision and output types can be set."""

    precision = property(lambda self: self._precision, lambda self, value: setattr(self, "_precision", value))

    def set_output_type(self, index, dtype):
        self._output_types[index] = dtype


class _Network:
    def __init__(self, t, flags):
        self._t, self.flags = t, flags
        self.layers, self._inputs, self._outputs, self._model_path, self._int64_inputs = [], [], [], None, []

    num_layers = property(lambda self: len(self.layers))
    num_inputs = property(lambda self: len(self._inputs))
    num_outputs = property(lambda self: len(self._outputs))

    def get_layer(self, index):
        return self.layers[index]

    def get_input(self, index):
        return self._inputs[index]

    def get_output(self, index):
        return self._outputs[index]

    def mark_output(self, tensor):
        self._outputs.append(tensor)


class _Parser:
    def __init__(self, network):
        self._network, self._errors = network, []

    num_errors = property(lambda self: len(self._errors))

    def get_error(self, index):
        return self._errors[index]

    def parse_from_file(self, model):
        try:
            m = onnx.load(model)
        except Exception as exc:
            self._errors.append(f"cannot parse: {exc}")
            return False
        net = self._network
        net._model_path = model
        inits = {i.name for i in m.graph.initializer}
        for i in m.graph.input:
            if i.name in inits:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in i.type.tensor_type.shape.dim]
            net._inputs.append(_Tensor(i.name, ONNX_TO_DT.get(i.type.tensor_type.elem_type, DataType.FLOAT), dims))
            if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:  # TensorRT takes it as int32
                net._int64_inputs.append(i.name)
        from calib.deploy.plugins import is_plugin

        layer_cls = _WeakLayer if major_of(net._t) < 11 else _Layer
        for k, node in enumerate(m.graph.node):
            if is_plugin(node) and not net._t.plugins_loaded:  # TensorRT's parser without the plugin library
                self._errors.append(f"In node {k} ({node.op_type}): UNSUPPORTED_NODE: No importer registered for "
                                    f"op: {node.op_type}. Attempting to import as plugin. Plugin not found")
                return False
            if not node.name:
                node.name = f"node_of_{node.output[0]}"  # TensorRT 8.6's name for an unnamed ONNX node
            net.layers.append(layer_cls(net._t, node))
        by_name = {o.name: o for layer in net.layers for o in layer._outputs}
        by_name.update({i.name: i for i in net._inputs})
        for layer, node in zip(net.layers, m.graph.node):
            layer._inputs = [by_name[i] for i in node.input if i in by_name]
        net._outputs = [by_name[o.name] for o in m.graph.output]
        for t, o in zip(net._outputs, m.graph.output):  # an integer graph output (a plugin's counts) stays integer
            if o.type.tensor_type.elem_type == onnx.TensorProto.INT32:
                t.dtype = DataType.INT32
        return True


class _Profile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, input, min, opt, max):  # noqa: A002 (TensorRT's parameter names)
        self.shapes[input] = (tuple(min), tuple(opt), tuple(max))


class _Config:
    """A builder config of TensorRT 11: no calibrator, no calibration profile."""

    def __init__(self, logger=None):
        self._logger = logger
        self.flags, self.profiles = set(), []
        self._tactics, self._timing, self._workspace = None, None, None
        self.profiling_verbosity, self.builder_optimization_level = None, 3

    def set_memory_pool_limit(self, pool, pool_size):
        self._workspace = pool_size

    def set_tactic_sources(self, tactic_sources):
        self._tactics = tactic_sources

    def set_flag(self, flag):
        self.flags.add(flag)

    def clear_flag(self, flag):
        self.flags.discard(flag)

    def get_flag(self, flag):
        return flag in self.flags

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)

    def create_timing_cache(self, serialized_timing_cache):
        blob = bytes(serialized_timing_cache)
        if b"MYELIN" in blob and self._logger is not None:  # what TensorRT 8.6 does with such a cache
            self._logger.log(self._logger.Severity.ERROR if hasattr(self._logger, "Severity") else 1,
                             "1: [myelinCache.h::deserializeFromBuffer::52] Error Code 1: Myelin (Myelin error "
                             "from unknown graph)")
            blob = b""
        return types.SimpleNamespace(serialize=lambda: blob or b"timing")

    def set_timing_cache(self, cache, ignore_mismatch):
        self._timing = cache

    def get_timing_cache(self):
        return self._timing


class _WeakConfig(_Config):
    """A builder config up to TensorRT 10: implicit INT8 through a calibrator, at a calibration profile."""

    def __init__(self, logger=None):
        super().__init__(logger)
        self.int8_calibrator, self.calibration_profile = None, None

    def set_calibration_profile(self, profile):
        self.calibration_profile = profile


class _Builder:
    def __init__(self, t, logger, major):
        self._t, self._logger, self._major = t, logger, major

    def create_network(self, flags=0):
        if self._major < 10 and not flags & (1 << int(self._t.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)):
            raise RuntimeError("implicit batch networks are not supported by this stand-in")
        return _Network(self._t, flags)

    def create_builder_config(self):
        cfg = (_WeakConfig if self._major < 11 else _Config)(self._logger)
        if hasattr(self._t.BuilderFlag, "TF32"):  # TensorRT's default: FP32 convolutions and matrix products in TF32
            cfg.flags.add(self._t.BuilderFlag.TF32)
        return cfg

    def create_optimization_profile(self):
        return _Profile()

    def _error(self, msg):
        self._logger.log(self._t.ILogger.Severity.ERROR, msg)
        return None

    def _shapes(self, net, cfg):
        """Every profile must give every dynamic input min <= opt <= max of the input's rank, fixed dims kept;
        returns the profiles ({input: (min, opt, max)}, fixed inputs included) or None after logging the error."""
        dynamic = [i for i in net._inputs if any(d < 0 for d in i.shape)]
        if dynamic and not cfg.profiles:
            return self._error(f"input {dynamic[0].name} has dynamic shape and no optimization profile")
        profiles = []
        for k, p in enumerate(cfg.profiles or [_Profile()]):
            shapes = {}
            for i in net._inputs:
                if i not in dynamic:
                    shapes[i.name] = (i.shape, i.shape, i.shape)
                    continue
                if i.name not in p.shapes:
                    return self._error(f"optimization profile {k} has no shapes for dynamic input {i.name}")
                lo, opt, hi = p.shapes[i.name]
                ok = all(len(s) == len(i.shape) for s in (lo, opt, hi)) and all(
                    (d < 0 or a == b == c == d) and a <= b <= c for a, b, c, d in zip(lo, opt, hi, i.shape))
                if not ok:
                    return self._error(f"optimization profile {k}: invalid shapes for {i.name}")
                shapes[i.name] = p.shapes[i.name]
            profiles.append(shapes)
        return profiles

    def _calibrate(self, net, cfg, calib, shapes):  # shapes: profile 0
        algo = next((a for c, a in ALGO.items() if isinstance(calib, getattr(self._t, c))), None)
        text = calib.read_calibration_cache()
        if text:
            head = bytes(text).split(b"\n", 1)[0].decode()
            if head.endswith("-" + algo):
                return parse_cache(bytes(text))
        if any(any(d < 0 for d in i.shape) for i in net._inputs) and cfg.calibration_profile is None:
            return self._error("calibration profile not set for a network with dynamic shapes")
        self._t.calibration_shapes = dict(cfg.calibration_profile.shapes) if cfg.calibration_profile else {}
        prof = cfg.calibration_profile.shapes if cfg.calibration_profile else {}
        names = [i.name for i in net._inputs]
        runner = OrtRunner(net._model_path, expose=[o.name for layer in net.layers for o in layer._outputs
                                                     if o.dtype == DataType.FLOAT])
        amax: dict = {}
        while True:
            ptrs = calib.get_batch(names)
            if ptrs is None:
                break
            feed = {}
            for n, p, i in zip(names, ptrs, net._inputs):
                shape = prof.get(n, shapes[n])[1]
                feed[n] = self._t.memory.read(p, shape, NP[i.dtype])
            wide = set(net._int64_inputs)  # int32 on the engine, int64 in the model
            ort_feed = {k: v.astype(np.int64) if k in wide else v for k, v in feed.items()}
            for k, v in {**feed, **runner.run(ort_feed)}.items():
                if isinstance(v, np.ndarray) and v.dtype == np.float32:
                    amax[k] = max(amax.get(k, 0.0), float(np.abs(v).max()))
        if not amax:
            return self._error("Calibration failure occurred with no scaling factors detected.")
        ver = "".join(self._t.__version__.split(".")[:2]) + "00"
        lines = [f"TRT-{ver}-{algo}"] + [f"{k}: {struct.pack('>f', np.float32(v / 127.0)).hex()}"
                                          for k, v in amax.items()]
        blob = ("\n".join(lines) + "\n").encode()
        calib.write_calibration_cache(blob)
        return parse_cache(blob)

    def build_serialized_network(self, network, config):
        net, cfg = network, config
        profiles = self._shapes(net, cfg)
        if profiles is None:
            return None
        shapes = profiles[0]
        scales = {}
        flag = self._t.BuilderFlag
        int8 = getattr(flag, "INT8", None) in cfg.flags
        qdq = any(layer._op_type == "QuantizeLinear" for layer in net.layers)
        if int8 and not qdq:
            if cfg.int8_calibrator is None:
                return self._error("INT8 requested but no calibrator")
            scales = self._calibrate(net, cfg, cfg.int8_calibrator, shapes)
            if scales is None:
                return None
        fp16 = getattr(flag, "FP16", None) in cfg.flags
        layers = []
        for layer in net.layers:
            if layer.type in (self._t.LayerType.CONSTANT, self._t.LayerType.SHAPE):
                continue
            tname = self._t.LayerType(layer.type).name
            if layer._precision is not None:
                prec = {DataType.FLOAT: "FP32", DataType.HALF: "FP16", DataType.INT8: "Int8"}[layer._precision]
            elif (int8 or qdq) and tname in QUANTIZABLE:
                prec = "Int8"
            else:
                prec = "FP16" if fp16 else "FP32"
            outs = [_FORMAT.get(layer._output_types.get(j), prec) for j in range(len(layer._outputs))]
            layers.append({"Name": layer.name, "LayerType": tname,
                           "Inputs": [{"Name": "x", "Format/Datatype": f"Row major linear {prec} format"}],
                           "Outputs": [{"Name": o.name, "Format/Datatype": f"Row major linear {p} format"}
                                       for o, p in zip(layer._outputs, outs)],
                           "TacticName": _tactic(tname, prec)})
        # As TensorRT 8.6 does (measured on an H100): an INT8 layer writes INT8 unless its output type says
        # otherwise, also into a layer pinned to float, which then reads the quantized values
        written = {o["Name"] for la in layers for o in la["Outputs"] if "Int8" in o["Format/Datatype"]}
        into_float = [[t.name, layer.name] for layer in net.layers
                      if getattr(layer, "_precision", None) in (DataType.FLOAT, DataType.HALF)
                      for t in layer._inputs if t.name in written]
        # and a PRelu is a float layer of its own behind an INT8 Conv, which writes INT8 into it (P-Net on an H100)
        conv_out = {o["Name"] for la in layers if la["LayerType"] == "CONVOLUTION" for o in la["Outputs"]}
        precision = {la["Name"]: la["Inputs"][0]["Format/Datatype"] for la in layers}
        # (TensorRT's choice, made per build: `prelu_reads_int8 = False` models the builds where the Conv wrote float)
        into_float += [[t.name, layer.name] for layer in net.layers
                       if self._t.prelu_reads_int8 and layer._op_type == "PRelu"
                       and "Int8" not in precision.get(layer.name, "Int8")
                       and getattr(layer, "_precision", None) is None
                       for t in layer._inputs[:1] if t.name in written and t.name in conv_out]
        # the inspector says Int8 for a tensor every reader of which reads it rounded (an INT8 layer, or a float one
        # listed above); otherwise the INT8 layer wrote float, as TensorRT does where a float layer reads it
        rounded = {t for t, _ in into_float}
        readers: dict = {}
        for layer in net.layers:
            for t in layer._inputs:
                readers.setdefault(t.name, []).append(layer.name)
        for la in layers:
            for o in la["Outputs"]:
                if "Int8" in o["Format/Datatype"] and o["Name"] not in rounded and not all(
                        "Int8" in precision.get(r, "") for r in readers.get(o["Name"], [])):
                    o["Format/Datatype"] = "Row major linear FP32 format"
        plan = {"model": net._model_path, "inputs": [[i.name, list(i.shape), int(i.dtype)] for i in net._inputs],
                "int64_inputs": list(net._int64_inputs),
                "outputs": [o.name for o in net._outputs], "output_dtypes": [int(o.dtype) for o in net._outputs],
                "shapes": {k: [list(s) for s in v] for k, v in shapes.items()},
                "profiles": [{k: [list(s) for s in v] for k, v in p.items()} for p in profiles],
                "layers": layers, "scales": scales, "flags": sorted(int(f) for f in cfg.flags),
                "simulate_int8": bool(self._t.simulate_int8 and scales),
                "tf32": getattr(self._t.BuilderFlag, "TF32", None) in cfg.flags,
                "int8_layers": [la["Name"] for la in layers if "Int8" in la["Inputs"][0]["Format/Datatype"]],
                "int8_into_float": into_float}
        self._t.builds.append({"config": cfg, "network": net})
        return b"STANDIN" + json.dumps(plan).encode()


_FORMAT = {DataType.FLOAT: "FP32", DataType.HALF: "FP16", DataType.INT8: "Int8"}
_KERNEL_TYPES = {"Int8": "i8i8_i8i32_f32", "FP16": "f16f16_f16f16_f16", "FP32": "f32f32_f32f32_f32"}


def _tactic(layer_type: str, prec: str) -> str:
    """A kernel name as TensorRT 8.6 writes a convolution's, matrix multiply's or pooling's (the types in it, except
    an FP16 max pooling's, as on an H100); other layers (pointwise, shuffle, reformat) have none."""
    if layer_type == "POOLING":
        return {"Int8": "sm72_xmma_pooling_IMMA_NCxHW32_generic_kMAX",
                "FP16": "sm50_xmma_pooling_coalescedC_NHWC_kMAX_2_False",
                "FP32": "sm50_xmma_pooling_tiled_FP32NCHW_kAVERAGE"}[prec]
    if layer_type not in ("CONVOLUTION", "MATRIX_MULTIPLY", "FULLY_CONNECTED"):
        return ""
    return f"sm90_xmma_fprop_implicit_gemm_{_KERNEL_TYPES[prec]}_standin"


def parse_cache(blob: bytes) -> dict:
    out = {}
    for line in blob.decode().splitlines()[1:]:
        name, hx = line.rsplit(": ", 1)
        out[name] = struct.unpack(">f", bytes.fromhex(hx))[0]
    return out
