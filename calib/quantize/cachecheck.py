"""Checks before a cache is used: its sidecar, the model it was made for, and that it scales every quantized layer.

A calib cache is one with a sidecar, or one listed in the manifest of the folder calib published it in
(calib.io.publish); a cache without either is taken for TensorRT's own, whose tensor names alone can be checked.
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import onnx

from calib.quantize.cache import (CalibrationCache, Sidecar, check_model_hash, format_cache, read_cache, read_sidecar,
                         sidecar_path, validate_against)
from calib.errors import CacheError
from calib.io.files import printable, recover_together, replace_together
from calib.io.manifest import matches, read_manifest, refresh_manifest
from calib.quantize.model import ModelInfo, load_model
from calib.quantize.qdq import Exclusions, quantized_inputs

log = logging.getLogger(__name__)
_OVERRIDE = "--ignore-sidecar to use the cache anyway"


@dataclass(frozen=True)
class CacheChecks:
    """What the user allows on purpose (the CLI flags of the same names)."""

    ignore_hash: bool = False  # a sidecar made for another model
    allow_unknown: bool = False  # tensors the model lacks
    ignore_sidecar: bool = False  # a calib cache whose sidecar is missing, malformed or disagrees with it
    allow_partial: bool = False  # quantized layers left without a scale


def _agrees(side_amax: float, scale: float) -> bool:
    return math.isclose(side_amax, scale * 127.0, rel_tol=1e-5, abs_tol=1e-30)


def checked_sidecar(path: str | Path, cache: CalibrationCache, ignore: bool = False, model_sha256: str | None = None,
                    ignore_hash: bool = False) -> dict | None:
    """The sidecar of a calib cache, checked against the folder's manifest, the model (`model_sha256`) and the
    cache; None for a cache that has none (TensorRT's), or with `ignore`."""
    path = Path(path)
    manifest = read_manifest(path.parent) or {"files": {}}
    listed = manifest["files"].get(path.name)
    try:
        if listed is not None and not matches(path, listed):
            raise CacheError(f"{path}: not the file calib wrote there (the folder's manifest has another size or sha256: "
                             f"edited, cut or from another run?); {_OVERRIDE}")
        side = read_sidecar(path)
        if side is None:
            if listed is not None:
                raise CacheError(f"{path}: calib wrote this cache with a sidecar, {sidecar_path(path).name} is "
                                 f"missing; {_OVERRIDE}")
            return None
        if model_sha256 is not None:
            check_model_hash(path, model_sha256, ignore_hash)
        amax = side["amax"]
        missing = [n for n in cache.scales if n not in amax]
        extra = [n for n in amax if n not in cache.scales]
        differ = [n for n in cache.scales if n in amax and not _agrees(amax[n], cache.scales[n])]
        if missing or extra or differ:
            n = (missing or extra or differ)[0]
            what = (f"tensor '{n}' is not in the sidecar" if missing else f"tensor '{n}' is not in the cache"
                    if extra else f"tensor '{n}': amax {cache.scales[n] * 127:.6g} in the cache, {amax[n]:.6g} in "
                                  "the sidecar")
            raise CacheError(f"{sidecar_path(path)}: disagrees with {path.name} ({len(differ)} of {len(cache.scales)} "
                             f"values differ, {len(missing)} missing, {len(extra)} extra; {what}): the files of two "
                             f"runs?; {_OVERRIDE}")
        return side
    except CacheError:
        if not ignore:
            raise
        log.warning("%s: sidecar problem ignored (--ignore-sidecar): the cache is used as it is", path)
        return None


def unscaled(cache: CalibrationCache, model: onnx.ModelProto, exclude: Exclusions = Exclusions()) -> list[str]:
    """The activation inputs of quantized layers (those not excluded) that the cache gives no scale."""
    g = model.graph
    out = []
    for ni, ii, kind in quantized_inputs(model, exclude):
        name = g.node[ni].input[ii]
        if kind == "act" and name not in cache.scales and name not in out:
            out.append(name)
    return out


def recover_cache_pair(path: str | Path) -> None:
    """Undo a cache + sidecar replacement that was killed between its two renames (calib.io.files.replace_together)."""
    path = Path(path)

    def consistent() -> bool:
        try:
            checked_sidecar(path, read_cache(path))
            return True
        except CacheError:
            return False

    if recover_together([sidecar_path(path), path], consistent):
        log.warning("%s: an interrupted replacement was undone: the previous cache and sidecar are back",
                    printable(path))


def load_checked(path: str | Path, info: ModelInfo | None = None, checks: CacheChecks = CacheChecks(),
                 exclude: Exclusions = Exclusions(), model: onnx.ModelProto | None = None):
    """Read a cache and check it (against the model of `info`, when given); returns (cache, sidecar or None)."""
    recover_cache_pair(path)
    cache = read_cache(path)
    if info is None:
        return cache, checked_sidecar(path, cache, checks.ignore_sidecar)
    validate_against(cache, info.activations, checks.allow_unknown)
    side = checked_sidecar(path, cache, checks.ignore_sidecar, info.sha256, checks.ignore_hash)
    missing = unscaled(cache, model if model is not None else load_model(info.path), exclude)
    if missing:
        msg = (f"{path}: no scale for {len(missing)} tensors feeding quantized layers (first '{missing[0]}'): "
               "a cut or partial cache?")
        if not checks.allow_partial:
            raise CacheError(f"{msg} (--allow-partial to leave those layers unscaled)")
        log.warning("%s; used anyway (--allow-partial)", msg)
    if side is None and not checks.ignore_sidecar:
        log.warning("%s: no sidecar (a TensorRT cache?): only its tensor names were checked against %s", path,
                    info.path.name)
    return cache, side


def _replaceable_sidecar(path: Path) -> None:
    """The sidecar that -o implies is replaced only if it is one (calib's, for a cache at `path`): a user's
    unrelated JSON under that name is left alone."""
    side = sidecar_path(path)
    if not (os.path.lexists(side)):
        return
    try:
        ok = not side.is_symlink() and read_sidecar(path) is not None
    except CacheError:
        ok = False
    if not ok:
        raise CacheError(f"{printable(side)}: exists and is not a calib sidecar; writing {printable(path.name)} "
                         "would replace it: move it away or choose another -o")


def write_converted(out: str | Path, cache: CalibrationCache, side: dict | None, info: ModelInfo, carrier: str,
                    version: str, source: str | Path = "") -> Path:
    """The cache under another header, with its sidecar: the source's (the algorithm, parameters and data kept),
    or for a cache without one (TensorRT's) a new one naming the model it was checked against. Both are written
    before either replaces the previous pair (calib.io.files.replace_together): a failure while writing changes nothing,
    and a run killed between the two renames gets the previous pair back at the next read (recover_cache_pair)."""
    from calib.version import __version__

    side = side or {}
    amax = cache.amaxes()
    sc = Sidecar(algorithm=side.get("algorithm", f"unknown ({cache.carrier} cache)"), params=side.get("params", {}),
                 amax=amax, model_sha256=info.sha256, data_fingerprint=side.get("data_fingerprint", ""),
                 calib_version=__version__, trt_version=version, carrier=carrier,
                 samples=side.get("samples", 0),
                 extra={**side.get("extra", {}), "converted_from": printable(Path(source).name)})
    text = format_cache(amax, version, carrier)
    side_text = json.dumps(sc.to_json(), indent=2, sort_keys=True) + "\n"
    path = Path(out)
    _replaceable_sidecar(path)
    replace_together([(sidecar_path(path), side_text.encode("utf-8", "backslashreplace")),
                      (path, text.encode("utf-8", "backslashreplace"))])
    refresh_manifest(path.parent, [path.name, sidecar_path(path).name])  # a published cache rewritten in place
    return path
