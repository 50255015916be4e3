"""Registry of calibration algorithms. Each maps a Histogram (and keyword parameters) to an amax."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from calib.errors import CalibError


@dataclass(frozen=True)
class Algorithm:
    name: str
    fn: Callable
    defaults: dict
    check: Callable | None = None  # params -> a message saying what is wrong with them, or None

    def __call__(self, hist, **params) -> float:
        return float(self.fn(hist, **{**self.defaults, **params}))


def _build() -> dict[str, Algorithm]:
    from calib.algorithms import entropy, entropy_stable, minmax, mse, percentile

    out = {}
    for mod in (minmax, entropy, percentile, mse, entropy_stable):
        fn = mod.compute_amax
        sig = inspect.signature(fn)
        defaults = {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
        out[mod.NAME] = Algorithm(mod.NAME, fn, defaults, getattr(mod, "check", None))
    return out


ALGORITHMS: dict[str, Algorithm] = {}


def _registry() -> dict[str, Algorithm]:
    if not ALGORITHMS:
        ALGORITHMS.update(_build())
    return ALGORITHMS


def names() -> list[str]:
    return list(_registry())


def get(name: str) -> Algorithm:
    reg = _registry()
    if name not in reg:
        raise CalibError(f"unknown algorithm '{name}' (choose from {', '.join(reg)})")
    return reg[name]


def check_params(name: str, params: dict) -> dict:
    algo = get(name)
    unknown = sorted(set(params) - set(algo.defaults))
    if unknown:
        raise CalibError(f"algorithm '{name}' has no parameter '{unknown[0]}' (has {', '.join(algo.defaults)})")
    full = {**algo.defaults, **params}
    problem = algo.check(**full) if algo.check is not None else None
    if problem:
        raise CalibError(f"algorithm '{name}': {problem}")
    return full


def compute(name: str, hist, **params) -> float:
    return get(name)(hist, **params)
