"""The Ray cluster as a calib.scale.pool: the only module that imports ray (the [ray] extra).

Work is sent as module-level functions (the workers import calib, so it must be installed where they run) and
picklable objects; a shared object goes once into the object store, and results come back in the order of the
items whatever order the workers finish in."""
from __future__ import annotations

import logging

from calib.errors import CalibError, MissingExtraError, install_hint

log = logging.getLogger(__name__)
IN_FLIGHT = 2  # items queued per worker in a fold: the driver holds at most this many batches per worker


def installed(option: str = "--ray") -> None:
    """A one-line error naming the option and the extra when Ray is missing."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"{option}: Ray is not installed: {install_hint('ray')}") from None


def _unreachable(address: str, timeout: float = 5.0) -> str | None:
    """Why an explicit HOST:PORT (or ray://HOST:PORT) address cannot be reached, or None (Ray itself would retry
    for minutes)."""
    import socket

    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return None  # 'auto', or a form Ray reads itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    return None


def _call(fn, shared, item):
    return fn(shared, item)


class _Folder:
    """One worker's state of a fold (a Ray actor)."""

    def __init__(self, start, shared):
        self.state = start(shared)

    def step(self, step, item) -> None:
        step(self.state, item)

    def end(self, end):
        return end(self.state)


class RayPool:
    """`address`: 'auto' (the cluster this machine belongs to, or RAY_ADDRESS) or a cluster address. Each task
    takes one CPU; `size` is the CPUs the cluster has."""

    def __init__(self, address: str, option: str = "--ray"):
        import ray

        self.option = option
        self.owned = not ray.is_initialized()  # a session the caller started is the caller's to end
        why = _unreachable(address) if self.owned else None
        if why:
            raise CalibError(f"{option} {address}: no Ray cluster to connect to ({why}): start one with "
                             "'ray start --head' or give its address")
        try:
            if self.owned:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            msg = " ".join(str(exc).split())[:300]
            raise CalibError(f"{option} {address}: no Ray cluster to connect to ({msg}): start one with "
                             "'ray start --head' or give its address") from None
        self.size = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.label = f"Ray ({self.size} CPUs)"
        self._call = ray.remote(num_cpus=1)(_call)
        self._folder = ray.remote(num_cpus=1)(_Folder)
        log.info("running on %s", self.label)

    def share(self, obj):
        import ray

        return ray.put(obj)

    def _get(self, refs):
        import ray

        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:  # the worker's own error, as if raised here
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except ray.exceptions.RayError as exc:
            raise CalibError(f"{self.option}: the Ray cluster failed: {' '.join(str(exc).split())[:300]}") from None

    def map(self, fn, shared, items) -> list:
        return self._get([self._call.remote(fn, shared, item) for item in items])

    def fold(self, start, step, end, shared, items) -> list:
        import ray

        workers = [self._folder.remote(start, shared) for _ in range(self.size)]
        pending: list = []
        for i, item in enumerate(items):
            pending.append(workers[i % self.size].step.remote(step, item))
            if len(pending) >= IN_FLIGHT * self.size:  # bounded: the driver reads ahead no further
                done, pending = ray.wait(pending, num_returns=1)
                self._get(done)
        self._get(pending)
        out = self._get([w.end.remote(end) for w in workers])
        for w in workers:
            ray.kill(w)
        return out

    def close(self) -> None:
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()
