"""Tensors a node's subgraphs (If branches, Loop and Scan bodies) read from the graph around them.

ONNX lets a body read any tensor of an enclosing graph by name, without listing it among the node's inputs. A pass
that gives a tensor another type or another name (calib.quantize.fp16) must treat those reads like inputs of the
node that holds the body, or the body reads a tensor of the wrong type.
"""
from __future__ import annotations

import onnx


def subgraphs(node) -> list[onnx.GraphProto]:
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _reads(graph: onnx.GraphProto, outer: list) -> None:
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    for n in graph.node:
        for t in n.input:
            if t and t not in defined:
                outer.append(t)
        for g in subgraphs(n):
            inner: list = []
            _reads(g, inner)
            outer.extend(t for t in inner if t not in defined)
        defined.update(n.output)
    outer.extend(o.name for o in graph.output if o.name not in defined)


def outer_reads(node) -> list[str]:
    """The names `node`'s subgraphs read from enclosing graphs, in first-read order, each once."""
    out: list = []
    for g in subgraphs(node):
        _reads(g, out)
    return list(dict.fromkeys(out))


def rename_reads(node, names: dict) -> None:
    """In `node`'s subgraphs, every read of an enclosing graph's tensor `old` made a read of `names[old]`."""
    for g in subgraphs(node):
        _rename_in(g, names)


def _rename_in(graph: onnx.GraphProto, names: dict) -> None:
    shadow = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    live = {k: v for k, v in names.items() if k not in shadow}
    for n in graph.node:
        for k, t in enumerate(n.input):
            if t in live:
                n.input[k] = live[t]
        for g in subgraphs(n):
            _rename_in(g, live)
        live = {k: v for k, v in live.items() if k not in set(n.output)}
    for o in graph.output:
        if o.name in live:
            o.name = live[o.name]
