"""The reader thread: same order, errors raised where they happened, no thread left after an early stop."""
import threading

import pytest

from calib.data.prefetch import prefetch


def test_order_and_each_run_in_order():
    seen = []
    assert list(prefetch(range(50), depth=3, each=seen.append)) == list(range(50))
    assert seen == list(range(50))


def test_error_in_source_is_raised_after_the_good_items():
    def source():
        yield 1
        yield 2
        raise ValueError("photo 3 is not an image")

    got = []
    with pytest.raises(ValueError, match="photo 3"):
        for x in prefetch(source()):
            got.append(x)
    assert got == [1, 2]


def test_early_stop_ends_the_reader():
    before = threading.active_count()
    read = []

    def source():
        for i in range(10_000):
            read.append(i)
            yield i

    for x in prefetch(source(), depth=2):
        if x == 3:
            break
    assert threading.active_count() == before
    assert len(read) <= 4 + 2 + 1  # the reader stayed at most `depth` (+ the one in hand) ahead


def test_consumer_error_stops_the_reader():
    before = threading.active_count()
    with pytest.raises(RuntimeError):
        for _ in prefetch(iter(range(10_000))):
            raise RuntimeError("model failed")
    assert threading.active_count() == before


def test_reading_starts_before_the_loop_and_close_stops_it():
    before = threading.active_count()
    started = threading.Event()

    def source():
        started.set()
        yield from range(10_000)

    it = prefetch(source())
    assert started.wait(5)  # read while the caller still sets up
    it.close()
    assert threading.active_count() == before
    assert list(it) == []
