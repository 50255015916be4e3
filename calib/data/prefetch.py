"""Read the next batches in a background thread while the current one is in the model.

Loading and preprocessing (image decoding, resizing, normalisation) run on one core; ONNX Runtime and the
statistics kernels release the GIL, so a reader thread one or two batches ahead fills the time they leave idle.
Batches come out in the source's order; an error in the source is raised in the consumer at the batch where it
happened; leaving the loop early stops the reader."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator

_END = object()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetch(source: Iterable, depth: int = 2, each: Callable | None = None) -> Iterator:
    """Iterate `source` in a reader thread, `depth` items ahead; `each(item)` runs there too, in order."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in source:
                if each is not None:
                    each(item)
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failed(exc))

    reader = threading.Thread(target=read, name="calib-reader", daemon=True)
    reader.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        reader.join()
