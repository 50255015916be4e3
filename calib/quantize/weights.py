"""Constant tensors that are not initializers, and their values: weights reached through Constant nodes
(PaddlePaddle's exports keep every Conv weight in one), Identity, Cast, or a Reshape / Transpose of constants.

Such a weight is as constant as an initializer and is quantized per channel like one. ONNX Runtime's quantizer
and ModelOpt quantize initializers only and fold these chains first (ONNX Runtime in its pre-processing,
ModelOpt with onnx-graphsurgeon's constant folding); calib folds the chains that feed a weight while it writes
the Q/DQ pair: the value becomes an initializer behind the pair, and the nodes that computed it go when nothing
else reads them.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

FOLDED = frozenset({"Constant", "Identity", "Cast", "Reshape", "Transpose"})


def constant_tensors(nodes, initializers) -> set[str]:
    """Initializers, and every output of a FOLDED node whose inputs are all constants (nodes in graph order)."""
    consts = set(initializers)
    for node in nodes:
        if node.op_type in FOLDED and node.domain in ("", "ai.onnx") and \
                all(t in consts for t in node.input if t):
            consts.update(t for t in node.output if t)
    return consts


def _constant_attr(node) -> np.ndarray:
    a = node.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t)
    if a.name == "sparse_value":
        raise ValueError("a sparse Constant")
    return np.array(helper.get_attribute_value(a))


def _attr(node, name, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _reshape(x: np.ndarray, shape: np.ndarray, allowzero: int) -> np.ndarray:
    dims = [int(d) for d in shape]
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


class Folder:
    """Values of a model's constant tensors, computed with numpy when asked (each one once)."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self._inits = {t.name: t for t in g.initializer}
        self._producer = {t: n for n in g.node for t in n.output if t}
        self._values: dict[str, np.ndarray] = {}

    def value(self, name: str) -> np.ndarray:
        """The value of constant tensor `name`; ValueError when it is not one calib folds."""
        if name in self._values:
            return self._values[name]
        if name in self._inits:
            v = numpy_helper.to_array(self._inits[name])
        else:
            node = self._producer.get(name)
            if node is None or node.op_type not in FOLDED:
                raise ValueError(f"'{name}' is not a constant")
            v = self._compute(node)
        self._values[name] = v
        return v

    def _compute(self, node) -> np.ndarray:
        if node.op_type == "Constant":
            return _constant_attr(node)
        x = self.value(node.input[0])
        if node.op_type == "Identity":
            return x
        if node.op_type == "Cast":
            return x.astype(helper.tensor_dtype_to_np_dtype(_attr(node, "to")))
        if node.op_type == "Transpose":
            perm = _attr(node, "perm")
            return np.transpose(x, perm if perm else None)
        return _reshape(x, self.value(node.input[1]), _attr(node, "allowzero", 0))  # Reshape

    def chain(self, name: str) -> set[str]:
        """The outputs of the nodes that compute `name` (empty for an initializer)."""
        out, todo = set(), [name]
        while todo:
            t = todo.pop()
            node = self._producer.get(t)
            if node is None or t in out:
                continue
            out.update(node.output)
            todo += [i for i in node.input if i]
        return out


def prune(graph: onnx.GraphProto, made: set[str]) -> None:
    """Remove the nodes making tensors in `made` that nothing reads any more (graph outputs are read), then the
    initializers only those nodes read."""
    kept_out = {o.name for o in graph.output}
    removed = []
    while True:
        read = {t for n in graph.node for t in n.input} | kept_out
        dead = [n for n in graph.node if n.output and set(n.output) <= made and not (set(n.output) & read)]
        if not dead:
            break
        removed += dead
        for n in dead:
            graph.node.remove(n)
    if not removed:
        return
    read = {t for n in graph.node for t in n.input} | kept_out
    freed = {t for n in removed for t in n.input} - read
    freed &= {t.name for t in graph.initializer}
    if freed:
        keep = [t for t in graph.initializer if t.name not in freed]
        del graph.initializer[:]
        graph.initializer.extend(keep)
        inputs = [i for i in graph.input if i.name not in freed]  # an old exporter's initializers as inputs
        del graph.input[:]
        graph.input.extend(inputs)
