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


def _put(q: queue.Queue, stop: threading.Event, item) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _read(q: queue.Queue, stop: threading.Event, source: Iterable, each: Callable | None) -> None:
    try:
        for item in source:
            if each is not None:
                each(item)
            if not _put(q, stop, item):
                return
        _put(q, stop, _END)
    except BaseException as exc:  # handed to the consumer, raised there
        _put(q, stop, _Failed(exc))


class prefetch:
    """Iterate `source` in a reader thread, `depth` items ahead; `each(item)` runs there too, in order. Reading
    starts at once (so that it overlaps what the caller sets up before its loop); close(), leaving the loop or
    dropping the object stops the reader (which holds no reference to this object)."""

    def __init__(self, source: Iterable, depth: int = 2, each: Callable | None = None):
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._reader = threading.Thread(target=_read, args=(self._q, self._stop, source, each), name="calib-reader",
                                        daemon=True)
        self._reader.start()

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._q.get()
        if item is _END or isinstance(item, _Failed):
            self.close()
            if item is _END:
                raise StopIteration
            raise item.exc
        return item

    def close(self) -> None:
        self._done = True
        self._stop.set()
        if self._reader.is_alive():
            self._reader.join()

    def __del__(self) -> None:
        self.close()
