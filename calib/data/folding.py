"""The model as its constant inputs fix it: an If whose condition `--const` values decide is folded before
calibration (calib.quantize.control), and what stays inside If/Loop/Scan bodies is said in one line.

The folded model is written once per process to a scratch folder (calib.io.files.scratch_dir) and, by the
commands that publish an output folder, beside the caches as <stem>.folded.onnx: the caches and Q/DQ models are for
it. The same model and constants give the same bytes, so `calib evaluate` with the same --const finds the caches'
model.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from calib.data.feeding import const_rows

log = logging.getLogger(__name__)
_SAID: set = set()  # (model, line): what stays float is said once per process (a command folds twice)


def _known(consts: Mapping[str, object], info, where: str) -> dict[str, np.ndarray]:
    """input -> the value the model is fed for every sample, as the model takes it (its batch axis of size 1)."""
    rows = const_rows(consts, info, None, where) if consts else {}
    return {k: v for k, v in info.layout.to_model({k: r[np.newaxis] for k, r in rows.items()}).items()}


def fold_model(model, info, consts: Mapping[str, object] | None = None, where: str = "--const",
               folder: str | Path | None = None):
    """(model path, info) to calibrate and simulate: `model` and `info` themselves when no If is folded, else the
    folded model written to `folder` (default: a scratch folder) and its info (inputs, their fixed shapes and
    layout as in `info`). Says what was folded, and what stays float inside bodies."""
    from calib.quantize.control import BODIES, control_flow, fold_ifs
    from calib.quantize.model import derived_model, load_model

    if not set(BODIES) & set(info.op_types.values()):  # no If, Loop or Scan in the main graph
        return model, info
    proto = load_model(model)
    folded, which = fold_ifs(proto, _known(consts or {}, info, where))
    left = control_flow(folded)
    if left is not None and (str(model), left.describe()) not in _SAID:
        _SAID.add((str(model), left.describe()))
        log.warning("%s: %s", model, left.describe())
    if not which:
        return model, info
    path, folded_info = derived_model(model, folded, info, "folded", folder)  # one per model and constants
    given = ", ".join(f"{k}={_shown(v)}" for k, v in (consts or {}).items())
    line = (f"{model}: folded " + ", ".join(f"If '{n}' to its {b} branch" for n, b in which)
            + f" (the constants{' ' + given if given else ''} decide it): the caches and Q/DQ models are for the "
            f"folded model{' ' + path.name if folder else ''}")
    if line not in _SAID:
        _SAID.add(line)
        log.info("%s", line)
    return path, folded_info


def _shown(v) -> str:
    return v.name if isinstance(v, Path) else str(v)


def keep_derived(path: Path, model, stage: Path) -> str | None:
    """Copy the model calib made of `model` (folded, reshaped: `path`, when it is not `model` itself) into the
    output `stage` under its name; that name, or None."""
    if Path(path) == Path(model):
        return None
    from calib.io.files import atomic_write_bytes

    atomic_write_bytes(Path(stage) / Path(path).name, Path(path).read_bytes())
    return Path(path).name
