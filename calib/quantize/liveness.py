"""Which tensors a run holds at once: the peak of the bytes alive over a graph's nodes in their (topological)
order, and the split of many exposed tensors into groups that each fit a size.

A run allocates a node's outputs when the node runs and frees a tensor after its last reader, except the tensors
the run returns (`kept`: the graph outputs and any exposed activation), which stay until the run ends, and the
tensors the caller feeds (`given`), which the caller holds throughout. That is ONNX Runtime's allocation plan
without its in-place reuse (an elementwise node writing over an input that dies there), so a peak from here is at
or a little above the runtime's own: an estimate that errs on the side of refusing, never of running out."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx


def peak_bytes(nodes: Sequence[onnx.NodeProto], sizes: Mapping[str, int], given: Iterable[str] = (),
               kept: Iterable[str] = ()) -> int:
    """The most bytes alive at once over `nodes` run in order: `sizes` (tensor -> bytes; a tensor not in it costs
    nothing), `given` held from the start, `kept` held from the node that makes it to the end."""
    given, kept = set(given), set(kept)
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for x in node.input:
            if x:
                last[x] = i
    held = sum(sizes.get(n, 0) for n in given)
    peak = held
    for i, node in enumerate(nodes):
        made = [o for o in dict.fromkeys(node.output) if o and o not in given]
        held += sum(sizes.get(o, 0) for o in made)
        peak = max(peak, held)
        dying = {x for x in node.input if x and last.get(x) == i} | {o for o in made if o not in last}
        held -= sum(sizes.get(x, 0) for x in dying if x not in given and x not in kept)
    return peak


def groups(names: Sequence[str], sizes: Mapping[str, int], limit: int) -> list[list[str]]:
    """`names` in order, cut into consecutive groups of at most `limit` bytes each (a tensor larger than `limit`
    alone in its group)."""
    out: list[list[str]] = []
    total = 0
    for n in names:
        s = sizes.get(n, 0)
        if not out or (total + s > limit and out[-1]):
            out.append([])
            total = 0
        out[-1].append(n)
        total += s
    return out
