"""Where independent work runs: `Serial` in this process, or a Ray cluster (calib.scale.ray, imported only when
asked for). Both give results in the order of the items, so a caller that reads them in that order gets the same
numbers from either.

    pool.share(obj)                       -> a handle (Ray: one copy in the object store; Serial: obj)
    pool.map(fn, handle, items)           -> [fn(obj, item) for item in items], run where the pool runs work
    pool.fold(start, step, end, handle, items)
                                          -> [end(state) per worker]: each worker's state = start(obj), then
                                             step(state, item) for the items dealt to it in turn (item i to
                                             worker i % size); for work whose per-worker state merges exactly
"""
from __future__ import annotations

from calib.errors import CalibError


class Serial:
    """Everything in this process, in order; `size` states in a fold, dealt to as a cluster's workers would be
    (what a test of the merging needs, without a cluster)."""

    def __init__(self, size: int = 1):
        self.size = size
        self.label = "this process"

    def share(self, obj):
        return obj

    def map(self, fn, shared, items) -> list:
        return [fn(shared, item) for item in items]

    def fold(self, start, step, end, shared, items) -> list:
        states = [start(shared) for _ in range(self.size)]
        for i, item in enumerate(items):
            step(states[i % self.size], item)
        return [end(s) for s in states]

    def close(self) -> None:
        pass


def check(address: str | None, option: str = "--ray") -> None:
    """The option's value and Ray's presence, before any model or data is read (one-line errors)."""
    if address is None:
        return
    if not address.strip():
        raise CalibError(f"{option}: empty address: give 'auto' (the running cluster) or a Ray address "
                         "(host:6379, ray://host:10001)")
    from calib.scale.ray import installed

    installed(option)


def open_pool(address: str | None, option: str = "--ray"):
    """None: no pool (the caller's own single-process path). 'auto' or a Ray address (host:port, ray://...):
    that cluster (calib.scale.ray)."""
    if address is None:
        return None
    check(address, option)
    from calib.scale.ray import RayPool

    return RayPool(address.strip(), option)
