"""IInt8Calibrator implementations: TensorRT's own algorithms fed from calib's data sources, and a cache-fed
calibrator that hands TensorRT the scales calib computed.

TensorRT reads a cache through `read_calibration_cache` without asking for a batch only when the cache header
names the algorithm of the calibrator class returning it, so the cache-fed calibrator derives from the class
whose algorithm its header names (relabelling the header when asked to). Exceptions raised inside get_batch are
swallowed by TensorRT; they are recorded here and re-raised by the builder once the build returns.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

from calib.errors import CacheError, CalibError, DataError
from calib.io.files import atomic_write_bytes
from calib.io.fingerprint import fingerprint_update
from calib.quantize import cache as cachefmt
from calib.runners.tensorrt import compat
from calib.version import __version__

log = logging.getLogger(__name__)


class Rebatcher:
    """Re-cuts a Source's batches into batches of exactly `batch` samples; a short last batch is padded with
    copies of its own samples (logged), so every sample is seen and every batch has the engine's shape."""

    def __init__(self, source, inputs: dict, batch: int):
        self.source, self.inputs, self.batch = source, inputs, batch  # inputs: name -> (sample shape, dtype)
        self.samples = 0
        self.padded = 0
        self.digest = hashlib.sha256()

    def _check(self, b: dict) -> None:
        for name, (shape, dtype) in self.inputs.items():
            if name not in b:
                raise DataError(f"calibration batch lacks engine input '{name}' (has {sorted(b)})")
            if tuple(b[name].shape[1:]) != tuple(shape):
                raise DataError(f"calibration input '{name}': sample shape {list(b[name].shape[1:])}, "
                                f"the engine wants {list(shape)}")

    def __iter__(self):
        pending: dict[str, list] = {n: [] for n in self.inputs}
        have = 0
        for b in self.source:
            self._check(b)
            for name in self.inputs:
                fingerprint_update(self.digest, name, b[name])
                pending[name].append(np.asarray(b[name]).astype(self.inputs[name][1], copy=False))
            n = int(next(iter(b.values())).shape[0])
            have += n
            self.samples += n
            while have >= self.batch:
                cat = {k: np.concatenate(v) for k, v in pending.items()}
                yield {k: v[:self.batch] for k, v in cat.items()}
                pending = {k: [v[self.batch:]] for k, v in cat.items()}
                have -= self.batch
        if have:
            self.padded = self.batch - have
            log.info("last calibration batch: %d samples padded to %d with copies of its own", have, self.batch)
            cat = {k: np.concatenate(v) for k, v in pending.items()}
            yield {k: np.resize(v, (self.batch, *v.shape[1:])) for k, v in cat.items()}

    @property
    def fingerprint(self) -> str:
        return self.digest.hexdigest()


def sample_shapes(source, names) -> dict:
    """name -> (sample shape, dtype) of each input, from the source's first batch (float64 fed as float32)."""
    first = next(iter(source), None)
    if first is None:
        raise DataError("calibration data: no samples")
    missing = [n for n in names if n not in first]
    if missing:
        raise DataError(f"calibration batch lacks input '{missing[0]}' (has {sorted(first)})")
    return {n: (tuple(first[n].shape[1:]), np.float32 if first[n].dtype == np.float64 else first[n].dtype)
            for n in names}


class _Feed:
    """get_batch over a Rebatcher, one device buffer per input; read/write of calib cache files."""

    def _setup(self, kind, source, inputs: dict, batch: int, cuda, cache_path, model_sha256):
        self.kind, self.cuda, self.batch = kind, cuda, batch
        self.cache_path = Path(cache_path) if cache_path else None
        self.model_sha256 = model_sha256
        self.rebatcher = Rebatcher(source, inputs, batch)
        self.batches = None
        self.buffers = {}
        self.calls = 0
        self.error: BaseException | None = None
        self.reused = False
        self.written: Path | None = None

    def get_batch_size(self):
        return self.batch

    def get_batch(self, names):
        try:
            if self.batches is None:
                self.batches = iter(self.rebatcher)
            b = next(self.batches, None)
            if b is None:
                return None
            ptrs = []
            for name in names:
                if name not in b:
                    raise DataError(f"TensorRT asked for input '{name}', the data has {sorted(b)}")
                if name not in self.buffers:
                    self.buffers[name] = self.cuda.malloc(b[name].nbytes)
                self.cuda.to_device(self.buffers[name], b[name])
                ptrs.append(self.buffers[name])
            self.calls += 1
            return ptrs
        except BaseException as exc:  # TensorRT would swallow it: keep it for the builder
            self.error = exc
            return None

    def read_calibration_cache(self):
        p = self.cache_path
        if p is None or not p.is_file():
            return None
        side = cachefmt.read_sidecar(p)
        if side is None or side.get("model_sha256") != self.model_sha256 or side.get("algorithm") != f"trt-{self.kind}":
            log.info("%s: not a TensorRT %s cache of this model; calibrating", p, self.kind)
            return None
        c = cachefmt.read_cache(p)
        self.reused = True
        log.info("%s: reusing TensorRT's %s cache (%d tensors), no calibration pass", p, self.kind, len(c.scales))
        return c.text(compat.CARRIER_OF[self.kind]).encode()

    def write_calibration_cache(self, cache):
        if self.cache_path is None or self.reused:
            return
        try:
            raw = bytes(cache)
            c = cachefmt.parse_cache(raw.decode("utf-8"), "TensorRT's calibration cache")
            atomic_write_bytes(self.cache_path, raw)  # TensorRT's own bytes, once they parse
            side = cachefmt.Sidecar(f"trt-{self.kind}", {}, c.amaxes(), self.model_sha256, self.rebatcher.fingerprint,
                                    __version__, c.version, c.carrier, self.rebatcher.samples,
                                    {"padded_samples": self.rebatcher.padded, "batch": self.batch})
            cachefmt.write_sidecar(self.cache_path, side)
            self.written = self.cache_path
        except BaseException as exc:
            self.error = exc

    def release(self) -> None:
        for ptr in self.buffers.values():
            self.cuda.free(ptr)
        self.buffers = {}

    # Legacy calibrator only
    def get_quantile(self):
        return 0.9999

    def get_regression_cutoff(self):
        return 1.0

    def read_histogram_cache(self, length):
        return None

    def write_histogram_cache(self, data, length):
        return None


def make_calibrator(kind: str, source, inputs: dict, batch: int, cuda, cache_path=None, model_sha256: str = "",
                    trt=None):
    """A TensorRT calibrator of `kind` (entropy2, minmax, entropy, legacy) fed from a calib Source."""
    trt = trt or compat.load()
    base = compat.calibrator_base(trt, kind)
    if compat.version(trt)[0] < 10:  # TensorRT 8/9 take an int64 ONNX input as int32: feed it that way
        inputs = {n: (s, np.int32 if np.dtype(dt) == np.int64 else dt) for n, (s, dt) in inputs.items()}

    def __init__(self):
        base.__init__(self)
        self._setup(kind, source, inputs, batch, cuda, cache_path, model_sha256)

    cls = type(f"Calib{base.__name__[5:]}", (_Feed, base), {"__init__": __init__})
    return cls()


class _FromCache:
    """Hands TensorRT a cache; any get_batch call means TensorRT refused it."""

    def _setup(self, text: str):
        self.text = text
        self.calls = 0
        self.error = None
        self.reused = True

    def get_batch_size(self):
        return 1

    def get_batch(self, names):
        self.calls += 1
        self.error = CacheError("TensorRT ignored the calibration cache and asked for data: its header does not "
                                "name the calibrator's algorithm")
        return None

    def read_calibration_cache(self):
        return self.text.encode()

    def write_calibration_cache(self, cache):
        return None

    def release(self) -> None:
        return None

    get_quantile = _Feed.get_quantile
    get_regression_cutoff = _Feed.get_regression_cutoff
    read_histogram_cache = _Feed.read_histogram_cache
    write_histogram_cache = _Feed.write_histogram_cache


def cache_calibrator(cache: cachefmt.CalibrationCache | dict, trt=None, carrier: str | None = None):
    """A calibrator that gives TensorRT `cache` (a parsed cache or {tensor: amax}) and never asks for data.

    The class derives from the calibrator whose algorithm the header names; with `carrier` the header is
    relabelled first (a percentile or MSE cache travels under any header, the sidecar keeps the truth)."""
    trt = trt or compat.load()
    if isinstance(cache, dict):
        cache = cachefmt.parse_cache(cachefmt.format_cache(cache, compat.cache_version(trt),
                                                           carrier or cachefmt.DEFAULT_CARRIER))
    carrier = carrier or cache.carrier
    if carrier not in compat.KIND_OF_CARRIER:
        raise CalibError(f"cache header algorithm '{carrier}' has no TensorRT calibrator")
    base = compat.calibrator_base(trt, compat.KIND_OF_CARRIER[carrier])
    text = cache.text(carrier, compat.cache_version(trt))

    def __init__(self):
        base.__init__(self)
        self._setup(text)

    cls = type(f"FromCache{base.__name__[5:]}", (_FromCache, base), {"__init__": __init__})
    return cls()
