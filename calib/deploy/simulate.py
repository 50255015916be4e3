"""The Q/DQ model that simulates a deployed engine on the CPU, from its precision model (calib.deploy.precision).

- Explicit quantization: calib's Q/DQ placement with the layers the engine runs in float left out.
- Implicit INT8 (a calibration cache): TensorRT quantizes where an INT8 engine layer reads a tensor made outside
  it, with that tensor's own scale from the cache: every activation input of an INT8 layer, and the weights of its
  Conv/Gemm/MatMul per output channel. Inside a fused layer (Conv + activation + residual Add) nothing is
  rounded; a layer in float reads and writes float. This differs from the Q/DQ placement where the engine
  differs from it: a Conv whose activation TensorRT did not fuse rounds its output too, and a tensor read by a
  Concat and by another INT8 layer is rounded with its own scale for the other layer and again with the
  Concat's scale (TensorRT's INT8 copy into the Concat), where a Q/DQ model gives it the Concat's scale once.
- Where an INT8 layer writes INT8 into a layer in float, that layer reads the rounded values. Which tensors an
  engine stores in INT8 is TensorRT's choice, made per build by timing: the same P-Net variant on two H100 builds
  rounded its Conv's output into a PRelu once and not the other time. A precision model from the inspector of
  the engine built (int8_tensors) says it; otherwise a PRelu in float behind an INT8 Conv is taken to read the
  Conv's output rounded (UNFUSED).
"""
from __future__ import annotations

import logging
from dataclasses import replace

import onnx

from calib.deploy.precision import FP16, INT8, PrecisionModel, implicit_rules, node_name
from calib.quantize.placement import WEIGHTED
from calib.quantize.opset import at_qdq_opset, mark_opset
from calib.quantize.qdq import (Exclusions, WeightPairs, _order, _pair, _set_kernel_shape, activation_scale, insert_qdq,
                                quantizable_layers)
from calib.quantize.ties import CARRIERS, Graph, tie_amax

log = logging.getLogger(__name__)
# activations TensorRT 8.6 runs as a float layer of their own behind an INT8 Conv, which may then write INT8 (its
# output's scale from the cache) and a reformat feeds the float layer: MTCNN's P-Net on an H100, a variant with
# conv2d_4 in FP16 gave 15.74 dB on the engine; this rounding 15.93, without it 19.43 (9 reformats in 17 layers).
# The guess where the engine's formats are not known: another build of that variant wrote float (19.14 dB)
UNFUSED = frozenset({"PRelu"})


def simulated_model(model: onnx.ModelProto, amax: dict, pm: PrecisionModel | None,
                    exclude: Exclusions = Exclusions()) -> onnx.ModelProto:
    """The Q/DQ model of `model` with `amax` as the engine described by `pm` would run it (None: calib's
    placement, as for a Q/DQ model). A model below opset 13 is converted first, its names kept
    (calib.quantize.opset)."""
    model = at_qdq_opset(model)
    if pm is None:
        return insert_qdq(model, amax, exclude)
    if pm.mode == "explicit":
        kept = pm.float_nodes(quantizable_layers(model))
        return insert_qdq(model, amax, Exclusions(exclude.names + kept, exclude.op_types))
    if (exclude.names or exclude.op_types) and pm.source == "rules":  # the rules again, with those layers in float
        # (calib build types the writers of a float layer's inputs float, so a layer INT8 only to feed it is float)
        pm = implicit_rules(model, exclude.excludes)
    elif exclude.names or exclude.op_types:  # layers asked in float (--exclude, a fallback list) run in FP16
        left = {node_name(n) for n in model.graph.node if exclude.excludes(n)}
        stored = pm.int8_tensors
        if stored is not None:  # a layer in float writes float: its outputs leave the engine's INT8 tensors
            stored = stored - {o for n in model.graph.node if node_name(n) in left for o in n.output}
        pm = replace(pm, nodes={k: (FP16 if k in left and p == INT8 else p) for k, p in pm.nodes.items()},
                     int8_tensors=stored)
    return implicit_qdq(model, amax, pm)


def implicit_qdq(model: onnx.ModelProto, amax: dict, pm: PrecisionModel) -> onnx.ModelProto:
    m = at_qdq_opset(model)
    if m is model:
        m = onnx.ModelProto()
        m.CopyFrom(model)
    g = m.graph
    graph = Graph.of(m)
    amax = tie_amax(m, amax)
    pairs = WeightPairs(m)
    index = {node_name(n): i for i, n in enumerate(g.node)}
    layer_of = {}
    for li, group in enumerate(pm.layers):
        for name in group:
            if name in index:
                layer_of[index[name]] = li
    int8 = sorted(index[n] for n, p in pm.nodes.items() if p == INT8 and n in index)
    new_nodes, new_inits, done, rewires, missing = [], [], {}, [], set()

    def rounded(t: str) -> str | None:
        """The tensor TensorRT reads for `t` rounded with its own scale (one Q/DQ pair per tensor); None where the
        scale is zero (zero on every calibration batch: the tensor stays float)."""
        scale = activation_scale(float(amax[t]))
        if scale is not None and ("a", t) not in done:
            done[("a", t)] = _pair(t, f"{t}_engine", scale, None, new_nodes, new_inits)
        return done.get(("a", t))

    for i in int8:
        node = g.node[i]
        for k, t in enumerate(node.input):
            if not t:
                continue
            if node.op_type in CARRIERS and k > 0:
                continue  # a value-moving layer's shape, indices or pads: never data, never rounded
            if t in graph.constants:  # an initializer, or a constant behind Constant/Identity/Cast/... nodes
                if node.op_type in WEIGHTED and k <= 1:
                    got = pairs.dq(node, k, t)
                    if got is not None:
                        rewires.append((i, k, *got))
                continue
            p = graph.producer.get(t)
            if p is not None and i in layer_of and layer_of.get(p) == layer_of[i]:
                continue  # made inside the same fused engine layer: never rounded
            if t not in amax:
                missing.add(t)
            elif (new := rounded(t)) is not None:
                rewires.append((i, k, new, None))
    for i, node in enumerate(g.node):  # float layers reading a tensor stored in INT8
        if pm.nodes.get(node_name(node)) == INT8:
            continue
        if pm.int8_tensors is not None:  # the engine's own formats
            for k, t in enumerate(node.input):
                if t in pm.int8_tensors and t in amax and (new := rounded(t)) is not None:
                    rewires.append((i, k, new, None))
            continue
        if node.op_type not in UNFUSED:  # a guess: a PRelu behind an INT8 Conv (see UNFUSED)
            continue
        src = graph.producer.get(node.input[0])
        if src is None or g.node[src].op_type not in WEIGHTED or pm.nodes.get(node_name(g.node[src])) != INT8:
            continue
        if node.input[0] in amax and (new := rounded(node.input[0])) is not None:
            rewires.append((i, 0, new, None))
    for i, k, new, shape in rewires:
        node = g.node[i]
        node.input[k] = new
        if shape is not None:
            _set_kernel_shape(node, shape)
    if missing:
        log.warning("no scale for %d tensors read by INT8 layers, left in float: %s", len(missing),
                    ", ".join(sorted(missing)[:5]))
    for t, why in pairs.unfolded.items():
        log.warning("weight %s read by an INT8 layer left in float: %s", t, why)
    _order(g, new_nodes + pairs.nodes)
    g.initializer.extend(new_inits + pairs.inits)
    pairs.finish(g)
    mark_opset(m)
    return m
