"""TensorRT calibration cache text format, its JSON sidecar, and validation against a model.

Format (as written by TensorRT 8.x): a header `TRT-<version digits>-<calibrator algorithm>`, then one line
`<tensor name>: <hex digits>` per tensor, the big-endian IEEE float32 of scale = amax / 127 (TensorRT writes the bits
without leading zeros: a zero scale, for a tensor that was zero on every calibration batch, is `0`; a scale of
amax / 127 with 1 to 7 digits would be a subnormal float, so anything but 8 digits or `0` is a cut line).
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calib.errors import CacheError
from calib.io.files import atomic_write_json, atomic_write_text
from calib.io.reading import read_bytes, read_json

CARRIERS = ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration")
DEFAULT_CARRIER = "EntropyCalibration2"
NATIVE_CARRIER = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration"}
_HEADER = re.compile(r"^TRT-([0-9]+)-([A-Za-z0-9]+)$")  # ASCII digits: \d takes any script's, TensorRT not
_LINE = re.compile(r"^(.+): ([0-9a-fA-F]{8}|0)$")
_TRT_INTERNAL = re.compile(r"^\(Unnamed Layer\* [0-9]+\) \[.+\]_output$")


LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # every character str.splitlines() breaks on


def check_tensor_names(names, label: str) -> None:
    """A cache holds one `name: scale` line per tensor: a name holding a line break (newline, NEL, U+2028, ...)
    would be read as other lines, by TensorRT and by calib; such a tensor is a CacheError naming it."""
    for name in names:
        bad = next((c for c in name if c in LINE_BREAKS), None)
        if bad is not None:
            raise CacheError(f"{label}: tensor {ascii(name)} holds a line break (U+{ord(bad):04X}), which would split "
                             "its calibration cache line: rename the tensor in the model")


def scale_to_hex(scale: float) -> str:
    return struct.pack(">f", np.float32(scale)).hex()


def hex_to_scale(text: str) -> float:
    return float(struct.unpack(">f", bytes.fromhex(text.rjust(8, "0")))[0])


def amax_to_hex(amax: float) -> str:
    return scale_to_hex(np.float32(amax) / np.float32(127.0))


@dataclass(frozen=True)
class CalibrationCache:
    version: str  # e.g. "8600"
    carrier: str  # calibrator algorithm in the header, e.g. "EntropyCalibration2"
    scales: dict  # tensor name -> float32 scale (amax / 127), in file order
    path: Path | None = None

    @property
    def header(self) -> str:
        return f"TRT-{self.version}-{self.carrier}"

    def amax(self, name: str) -> float:
        return self.scales[name] * 127.0

    def amaxes(self) -> dict:
        return {k: v * 127.0 for k, v in self.scales.items()}

    def text(self, carrier: str | None = None, version: str | None = None) -> str:
        """The cache file's text, optionally under another header; the scales' bits are kept exactly."""
        head = f"TRT-{version or self.version}-{carrier or self.carrier}"
        return "\n".join([head] + [f"{n}: {scale_to_hex(s)}" for n, s in self.scales.items()]) + "\n"


def format_cache(amaxes: dict, version: str = "8600", carrier: str = DEFAULT_CARRIER) -> str:
    """The cache text for per-tensor amax values (dict order is kept)."""
    if not re.fullmatch(r"[0-9]+", str(version)):
        raise CacheError(f"--trt-version (calibration.trt_version): the cache header's TensorRT version must be "
                         f"ASCII digits like 8600, got {ascii(str(version))}")
    if carrier not in CARRIERS:
        raise CacheError(f"unknown cache header algorithm '{carrier}' (choose from {', '.join(CARRIERS)})")
    lines = [f"TRT-{version}-{carrier}"]
    check_tensor_names(amaxes, "calibration cache")
    for name, amax in amaxes.items():
        if not math.isfinite(amax) or amax < 0:
            raise CacheError(f"tensor '{name}': amax {amax} is not a finite non-negative number")
        lines.append(f"{name}: {amax_to_hex(amax)}")
    return "\n".join(lines) + "\n"


def write_cache(path: str | Path, amaxes: dict, version: str = "8600", carrier: str = DEFAULT_CARRIER) -> Path:
    return atomic_write_text(path, format_cache(amaxes, version, carrier))


def parse_cache(text: str, source: str = "<cache>") -> CalibrationCache:
    lines = text.splitlines()
    if not lines:
        raise CacheError(f"{source}: empty file, expected a 'TRT-<version>-<algorithm>' header")
    m = _HEADER.match(lines[0].strip())
    if not m:
        why = "" if lines[0].isascii() else " (characters other than ASCII: TensorRT reads version digits 0-9 only)"
        raise CacheError(f"{source}: line 1: expected a header like 'TRT-8600-EntropyCalibration2', "
                         f"got {ascii(lines[0][:60])}{why}")
    scales: dict[str, float] = {}
    for no, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        lm = _LINE.match(line)
        if not lm:
            raise CacheError(f"{source}: line {no}: expected '<tensor>: <8 hex digits>', got '{line[:80]}'")
        name, hx = lm.group(1), lm.group(2)
        scale = hex_to_scale(hx)
        if not math.isfinite(scale) or scale < 0:
            raise CacheError(f"{source}: line {no}: tensor '{name}' has scale {scale} (must be finite and >= 0)")
        if name in scales:
            raise CacheError(f"{source}: line {no}: tensor '{name}' appears twice")
        scales[name] = scale
    return CalibrationCache(m.group(1), m.group(2), scales)


MAX_BYTES = 64 << 20  # a cache or sidecar larger than this is not one (reads are bounded: /dev/zero, a video...)


def read_cache(path: str | Path) -> CalibrationCache:
    path = Path(path)
    raw = read_bytes(path, MAX_BYTES, "calibration cache", CacheError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CacheError(f"{path}: not a text calibration cache (binary data)") from None
    if "\x00" in text:
        raise CacheError(f"{path}: not a text calibration cache (binary data)")
    c = parse_cache(text, str(path))
    return CalibrationCache(c.version, c.carrier, c.scales, path)


def is_trt_internal(name: str) -> bool:
    """TensorRT's own names for layers it inserts, e.g. '(Unnamed Layer* 13) [Constant]_output'."""
    return bool(_TRT_INTERNAL.match(name))


def validate_against(cache: CalibrationCache, tensor_names, allow_unknown: bool = False) -> list[str]:
    """Check every cache tensor exists in the model; returns names that TensorRT inserted (kept, unchecked)."""
    known = set(tensor_names)
    internal = []
    for name in cache.scales:
        if name in known:
            continue
        if is_trt_internal(name):
            internal.append(name)
            continue
        if not allow_unknown:
            src = cache.path or "<cache>"
            raise CacheError(f"{src}: tensor '{name}' is not in the model "
                             "(a cache for another model? --allow-unknown to keep going)")
    return internal


@dataclass(frozen=True)
class Sidecar:
    algorithm: str
    params: dict
    amax: dict
    model_sha256: str
    data_fingerprint: str
    calib_version: str
    trt_version: str
    carrier: str
    samples: int
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "algorithm": self.algorithm,
            "params": self.params,
            "amax": self.amax,
            "model_sha256": self.model_sha256,
            "data_fingerprint": self.data_fingerprint,
            "calib_version": self.calib_version,
            "trt_version": self.trt_version,
            "carrier": self.carrier,
            "samples": self.samples,
            **({"extra": self.extra} if self.extra else {}),
        }


def sidecar_path(cache_path: str | Path) -> Path:
    p = Path(cache_path)
    return p.with_suffix(".json")


def write_sidecar(cache_path: str | Path, sidecar: Sidecar) -> Path:
    return atomic_write_json(sidecar_path(cache_path), sidecar.to_json())


_SIDECAR_TYPES = {"algorithm": str, "amax": dict, "model_sha256": str, "params": dict, "data_fingerprint": str,
                  "calib_version": str, "trt_version": str, "carrier": str, "samples": int, "extra": dict}


def read_sidecar(cache_path: str | Path) -> dict | None:
    """The sidecar of a cache as a dict, None if there is none; a malformed one is a CacheError naming it."""
    p = sidecar_path(cache_path)
    if not p.exists():
        return None
    data = read_json(p, MAX_BYTES, "sidecar", CacheError)
    if not isinstance(data, dict):
        raise CacheError(f"{p}: sidecar is not a JSON object (got {type(data).__name__})")
    for key in ("algorithm", "amax", "model_sha256"):
        if key not in data:
            raise CacheError(f"{p}: sidecar lacks key '{key}'")
    for key, tp in _SIDECAR_TYPES.items():
        if key in data and (not isinstance(data[key], tp) or (tp is int and isinstance(data[key], bool))):
            raise CacheError(f"{p}: sidecar key '{key}' should be {tp.__name__}, got {type(data[key]).__name__}")
    for name, v in data["amax"].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise CacheError(f"{p}: sidecar amax of tensor '{name}' is {v!r}, not a finite number >= 0")
    return data


def check_model_hash(cache_path: str | Path, model_sha256: str, override: bool = False) -> dict | None:
    """The sidecar, after checking it names this model (override: accept another model, or a malformed sidecar)."""
    try:
        side = read_sidecar(cache_path)
    except CacheError:
        if override:
            return None
        raise
    if side is not None and side["model_sha256"] != model_sha256 and not override:
        raise CacheError(f"{sidecar_path(cache_path)}: made for model sha256 {side['model_sha256'][:12]}..., "
                         f"this model is {model_sha256[:12]}... (--ignore-hash to use it anyway)")
    return side
