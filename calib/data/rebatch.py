"""Batches cut to a model's fixed batch: a model exported with batch N runs N samples at a time, whatever the
batch the data is read in. Samples carry over from one read batch to the next; what is left at the end (fewer than
N) cannot fill a run and is left out, counted in `left_out`, for the caller to say so."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import numpy as np

from calib.errors import DataError

log = logging.getLogger(__name__)


def rows(batch: dict) -> int:
    return int(next(iter(batch.values())).shape[0])


class FixedBatches:
    """Iterate (batch, samples, meta) triples of `items` re-cut to a multiple of `n` samples each (samples and
    meta: per-sample lists, or None)."""

    def __init__(self, items: Iterable[tuple[dict, list | None, list | None]], n: int):
        self.items, self.n = items, n
        self.read = 0  # samples that came in
        self.left_out = 0  # samples at the end that could not fill a run

    def __iter__(self) -> Iterator[tuple[dict, list | None, list | None]]:
        self.read = self.left_out = 0
        parts: list = []
        have = 0
        for batch, samples, meta in self.items:
            k = rows(batch)
            self.read += k
            if not parts and k % self.n == 0:
                yield batch, samples, meta
                continue
            parts.append((batch, samples, meta))
            have += k
            if have >= self.n:
                take = have - have % self.n
                joined = _join(parts)
                yield _cut(joined, 0, take)
                rest = _cut(joined, take, have)
                parts, have = ([rest], have - take) if have > take else ([], 0)
        self.left_out = have

    def check(self, label: str, shape: str, hint: str) -> None:
        """After the loop: data that could not fill one run is an error; a remainder left out is said.
        `shape`: the model's inputs, `hint`: the option that picks the samples (as the user calls it)."""
        if self.read and self.read < self.n:
            raise DataError(f"{label}: {self.read} samples cannot fill one run of the model's fixed batch of "
                            f"{self.n} (input {shape}): give at least {self.n} samples ({hint}), or export the "
                            "model with a dynamic batch")
        if self.left_out:
            log.warning("%s: the model's fixed batch of %d takes %d of the %d samples; the last %d are left out "
                        "(a multiple of %d samples uses them all: %s)", label, self.n, self.read - self.left_out,
                        self.read, self.left_out, self.n, hint)


def _join(parts: list) -> tuple:
    if len(parts) == 1:
        return parts[0]
    batch = {k: np.concatenate([p[0][k] for p in parts]) for k in parts[0][0]}
    lists = []
    for i in (1, 2):
        if all(p[i] is None for p in parts):
            lists.append(None)
        else:
            lists.append([x for p in parts for x in (p[i] if p[i] is not None else [None] * rows(p[0]))])
    return batch, lists[0], lists[1]


def _cut(item: tuple, lo: int, hi: int) -> tuple:
    batch, samples, meta = item
    return ({k: v[lo:hi] for k, v in batch.items()}, None if samples is None else samples[lo:hi],
            None if meta is None else meta[lo:hi])
