"""Which axis of each model input and output carries the samples.

calib keeps its batches with the samples on axis 0 for every input (the canonical layout: cut, joined, checked and
fingerprinted row by row); a model may take them elsewhere. A stateful streaming model, for instance, takes its
audio chunk as [B, N], its recurrent state as [2, B, 128] (batch on axis 1) and its sample rate as a scalar (no
batch axis at all). A Layout says where the samples go: `to_model` turns a canonical batch into the feed ONNX
Runtime takes, `from_model` turns the model's outputs back (samples on axis 0), and the dims helpers convert
shapes for the memory plan.

An input without a batch axis holds one value for every sample: canonically each row repeats it, and the feed
takes the first row. The axes come from `--batch-axis NAME=AXIS` (recipe `inputs: {NAME: {batch_axis: AXIS}}`) or
from the model: a scalar input has none; an input whose first dimension is fixed takes the axis whose dimension
is named like the other inputs' batch dimension, else, where another input's batch is free, its only free
dimension; any other input, axis 0. Outputs
follow the same rule (a returned state [2, B, 128] comes back as [B, 2, 128])."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from calib.errors import ModelError

NONE = None  # the axis of an input that holds one value for every sample


@dataclass(frozen=True)
class Layout:
    """Batch axes that are not 0: (name, axis) of inputs (axis None: no batch axis) and of outputs."""

    inputs: tuple[tuple[str, int | None], ...] = ()
    outputs: tuple[tuple[str, int], ...] = ()

    @property
    def identity(self) -> bool:
        return not self.inputs and not self.outputs

    def axis(self, name: str) -> int | None:
        """The batch axis of input `name` in the model's layout (None: it has none)."""
        return dict(self.inputs).get(name, 0)

    def output_axis(self, name: str) -> int:
        return dict(self.outputs).get(name, 0)

    def to_model(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A canonical batch (samples on axis 0) as the model takes it."""
        if not self.inputs:
            return dict(batch)
        axes = dict(self.inputs)
        out = {}
        for name, x in batch.items():
            ax = axes.get(name, 0)
            if ax is None:
                out[name] = np.array(x[0])  # 0-d stays 0-d (ascontiguousarray would make it 1-d)
            elif ax:
                out[name] = np.ascontiguousarray(np.moveaxis(x, 0, ax))
            else:
                out[name] = x
        return out

    def from_model(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs with their samples on axis 0."""
        if not self.outputs:
            return dict(outputs)
        axes = dict(self.outputs)
        return {k: np.moveaxis(v, axes[k], 0) if k in axes and isinstance(v, np.ndarray) and v.ndim > axes[k] else v
                for k, v in outputs.items()}

    def model_dims(self, name: str, dims: tuple) -> tuple:
        """Canonical dims of input `name` (samples first) in the model's layout."""
        ax = self.axis(name)
        dims = tuple(dims)
        if ax is None:
            return dims[1:]
        return dims[1:ax + 1] + dims[:1] + dims[ax + 1:] if ax else dims

    def canonical_dims(self, name: str, dims: tuple) -> tuple:
        """The model's dims of input `name` with the samples first (None for a dimension it leaves free)."""
        ax = self.axis(name)
        dims = tuple(dims)
        if ax is None:
            return (None, *dims)
        return (dims[ax], *dims[:ax], *dims[ax + 1:]) if ax else dims

    def to_json(self) -> dict:
        return {"inputs": {n: a for n, a in self.inputs}, "outputs": {n: a for n, a in self.outputs}}


def _dims(vi) -> list:
    """An input's or output's dims: int for a fixed one, str for a named one, None for an unknown one."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
            for d in t.shape.dim]


def _free(d) -> bool:
    return not isinstance(d, int)


def _infer(dims: list, batch_names: set, dynamic: bool) -> int | None:
    """The batch axis of dims whose first dimension is fixed: the one named like the batch, else (where the other
    inputs' batch is free) the only free one; else 0."""
    if not dims:
        return None
    if _free(dims[0]):
        return 0
    named = [i for i, d in enumerate(dims) if isinstance(d, str) and d in batch_names]
    if len(named) == 1:
        return named[0]
    free = [i for i, d in enumerate(dims) if _free(d)]
    return free[0] if dynamic and len(free) == 1 else 0


def infer_layout(model: onnx.ModelProto, given: Mapping[str, int | None] | None = None,
                 where: str = "--batch-axis", fed_whole: Mapping[str, tuple] | None = None) -> Layout:
    """The Layout of `model`: `given` (name -> axis, an input or an output; None: no batch axis) where said, else
    inferred (module doc). `fed_whole`: input -> the shape of a value fed as it is in every run (a constant with
    exactly the model's fixed shape): no batch axis. An unknown name or an axis past the rank is a ModelError naming
    `where` (the option the user typed)."""
    g = model.graph
    init = {t.name for t in g.initializer}
    ins = {vi.name: _dims(vi) for vi in g.input if vi.name not in init}
    outs = {vi.name: _dims(vi) for vi in g.output}
    given = dict(given or {})
    for name, ax in given.items():
        dims = ins.get(name, outs.get(name))
        if dims is None:
            raise ModelError(f"{where} {name}={ax}: the model has no input or output '{name}' (inputs: "
                             f"{', '.join(ins)}; outputs: {', '.join(outs)})")
        if ax is not None and (ax < 0 or (dims and ax >= len(dims)) or (not dims and name in ins and
                                                                          _rank_known(g, name))):
            raise ModelError(f"{where} {name}={ax}: '{name}' has {len(dims)} dimensions "
                             f"({_show(dims)}); the batch axis is one of 0-{max(len(dims) - 1, 0)}")
    batch_names = {d[0] for d in ins.values() if d and isinstance(d[0], str)}
    dynamic = any(d and _free(d[0]) for n, d in ins.items() if given.get(n, 0) == 0)
    for name, ax in given.items():
        dims = ins.get(name, outs.get(name))
        if ax is not None and dims and isinstance(dims[ax], str):
            batch_names.add(dims[ax])
    axes_in = []
    for name, dims in ins.items():
        if name in given:
            ax = given[name]
        elif name in (fed_whole or {}) and all(isinstance(d, int) for d in dims) and \
                tuple(fed_whole[name]) == tuple(dims) and dims:
            ax = None
        else:
            ax = _infer(dims, batch_names, dynamic) if dims or _rank_known(g, name) else 0
        if ax != 0:
            axes_in.append((name, ax))
    axes_out = []
    for name, dims in outs.items():
        ax = given.get(name) if name in given else (_infer(dims, batch_names, dynamic) if dims else 0)
        if ax:
            axes_out.append((name, ax))
    return Layout(tuple(axes_in), tuple(axes_out))


def _rank_known(graph, name: str) -> bool:
    for vi in graph.input:
        if vi.name == name:
            return vi.type.tensor_type.HasField("shape")
    return False


def _show(dims: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def with_layout(info, layout: Layout):
    """`info` (a ModelInfo) carrying `layout`."""
    return dataclasses.replace(info, layout=layout)


def batch_axes_text(items, flag: str = "--batch-axis") -> dict[str, int | None]:
    """NAME=AXIS items (AXIS an integer >= 0, or `none` for an input that holds one value for every sample)."""
    out: dict[str, int | None] = {}
    for item in items:
        name, sep, ax = str(item).rpartition("=")
        ax = ax.strip().lower()
        if not sep or not name or not (ax.isdigit() or ax == "none"):
            raise ModelError(f"{flag} '{item}': expected NAME=AXIS such as state=1 (the axis that carries the "
                             "samples), or NAME=none")
        out[name] = None if ax == "none" else int(ax)
    return out


def fix_hint(name: str, names: Mapping[str, str] | None = None) -> str:
    """The options that change how input `name` is fed, as the user writes them (`names`: recipe key -> flag)."""
    names = names or {}
    if "inputs.batch_axis" in names:
        return (f"{names['inputs.batch_axis']} {name}=AXIS if its samples run along another axis, or "
                f"{names.get('inputs.const', '--const')} {name}=VALUE|FILE.npy to feed one value with every sample")
    return (f"inputs: {{{name}: {{batch_axis: AXIS}}}} if its samples run along another axis, or inputs: {{{name}: "
            "{const: VALUE}} (or {file: FILE.npy}) to feed one value with every sample")


def shown(dims) -> str:
    """Dims as a list, '?' for a free one."""
    return "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in dims) + "]"
