"""A runner fed calib's canonical batches (samples on axis 0 for every input) where the model takes its samples
elsewhere (calib.quantize.layout): the feed is laid out as the model takes it, the outputs come back with their
samples first."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from calib.quantize.layout import Layout


class Fed:
    """`runner` (any object with run(batch, outputs)) behind `layout`; everything else is the runner's."""

    def __init__(self, runner, layout: Layout):
        self.runner, self.layout = runner, layout

    def run(self, batch: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None, **kwargs) -> dict:
        return self.layout.from_model(self.runner.run(self.layout.to_model(batch), outputs, **kwargs))

    def __getattr__(self, name: str):
        if name in ("runner", "layout"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.runner, name)


def fed(runner, layout: Layout | None):
    """`runner` as it is where the layout is calib's own, else behind it."""
    return runner if layout is None or layout.identity else Fed(runner, layout)
