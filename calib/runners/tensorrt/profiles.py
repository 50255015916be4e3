"""Optimization profiles: for each input a (min, opt, max) shape, one or more profiles per engine.

TensorRT tunes its kernels for each profile's opt shape and runs any shape between min and max. Profiles come
from `calib build --min-shape/--opt-shape/--max-shape NAME=1x3x224x224` (the n-th shape given for an input in
each of the three options belongs to profile n) or a recipe's `backend.profiles`, and are checked against the
model's inputs before TensorRT sees them. Pure Python: no TensorRT here.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from calib.errors import CalibError


@dataclass(frozen=True)
class ShapeRange:
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_dict(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """min, opt and max without repeats (a fixed profile has one shape)."""
        return tuple(dict.fromkeys((self.min, self.opt, self.max)))


Profile = tuple[tuple[str, ShapeRange], ...]  # (input name, shapes) in the order given


def parse_dims(text: str, what: str) -> tuple[int, ...]:
    """'1x3x224x224' -> (1, 3, 224, 224); every dimension a positive integer."""
    try:
        dims = tuple(int(d) for d in str(text).lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise CalibError(f"{what}: '{text}' is not a shape like 1x3x224x224 (positive integers)")
    return dims


def parse_item(item: str, option: str) -> tuple[str, tuple[int, ...]]:
    """'NAME=1x3x224x224' -> (NAME, shape); the name may itself hold '='."""
    name, sep, dims = str(item).rpartition("=")
    if not sep or not name:
        raise CalibError(f"{option} '{item}': expected NAME=1x3x224x224")
    return name, parse_dims(dims, f"{option} {name}")


def from_options(mins: Sequence[str], opts: Sequence[str], maxs: Sequence[str]) -> tuple[Profile, ...]:
    """Profiles from the three repeatable options: the n-th shape given for an input in each option belongs to
    profile n, so an input needs as many --min-shape as --opt-shape and --max-shape."""
    given = {}
    for option, items in (("--min-shape", mins), ("--opt-shape", opts), ("--max-shape", maxs)):
        per_name: dict[str, list] = {}
        for item in items:
            name, shape = parse_item(item, option)
            per_name.setdefault(name, []).append(shape)
        given[option] = per_name
    names = list(dict.fromkeys(n for per in given.values() for n in per))
    count = 0
    for name in names:
        counts = [len(given[o].get(name, [])) for o in given]
        if len(set(counts)) != 1:
            raise CalibError(f"input '{name}': {counts[0]} --min-shape, {counts[1]} --opt-shape, {counts[2]} "
                             "--max-shape: give the three once per profile")
        count = max(count, counts[0])
    profiles = []
    for k in range(count):
        profiles.append(tuple((n, ShapeRange(*(given[o][n][k] for o in given))) for n in names
                              if k < len(given["--opt-shape"][n])))
    return tuple(profiles)


def _range(value, where: str) -> ShapeRange:
    if isinstance(value, ShapeRange):
        return value
    if isinstance(value, Mapping):
        missing = [k for k in ("min", "opt", "max") if k not in value]
        if missing:
            raise CalibError(f"{where}: missing '{missing[0]}' (give min, opt and max)")
        value = (value["min"], value["opt"], value["max"])
    elif hasattr(value, "opt"):  # a recipe's ShapeRangeSpec
        value = (value.min, value.opt, value.max)
    try:
        lo, opt, hi = value
        return ShapeRange(*(tuple(int(d) for d in s) for s in (lo, opt, hi)))
    except (TypeError, ValueError):
        raise CalibError(f"{where}: expected (min, opt, max) shapes, got {value!r}") from None


def normalize(profiles) -> tuple[Profile, ...]:
    """Profiles as given by a caller (a sequence of {input: (min, opt, max) | {min:, opt:, max:}} mappings, or
    already normalized) -> a hashable tuple of profiles."""
    out = []
    for k, prof in enumerate(profiles or ()):
        items = prof.items() if isinstance(prof, Mapping) else prof
        out.append(tuple((str(n), _range(r, f"profile {k} input '{n}'")) for n, r in items))
    return tuple(out)


def check(profiles: Sequence[Profile], inputs: Mapping[str, Sequence[int]], label: str = "model") -> None:
    """Every dynamic input has a shape in every profile; ranks match the model; min <= opt <= max; fixed
    dimensions equal the model's. `inputs`: name -> dims, a negative dim dynamic."""
    for k, prof in enumerate(profiles):
        where = f"profile {k}"
        names = [n for n, _ in prof]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise CalibError(f"{where}: input '{dup}' given twice")
        for name, r in prof:
            if name not in inputs:
                raise CalibError(f"{where}: '{name}' is not an input of the {label} (inputs: "
                                 f"{', '.join(inputs)})")
            dims = tuple(inputs[name])
            for tag, shape in (("min", r.min), ("opt", r.opt), ("max", r.max)):
                if len(shape) != len(dims):
                    raise CalibError(f"{where} input '{name}': {tag} shape {list(shape)} has rank {len(shape)}, "
                                     f"the {label} takes rank {len(dims)} {_dims(dims)}")
                fixed = [i for i, d in enumerate(dims) if d >= 0 and shape[i] != d]
                if fixed:
                    raise CalibError(f"{where} input '{name}': {tag} shape {list(shape)} changes dimension "
                                     f"{fixed[0]}, fixed at {dims[fixed[0]]} in the {label} {_dims(dims)}")
            bad = next((i for i in range(len(dims)) if not r.min[i] <= r.opt[i] <= r.max[i]), None)
            if bad is not None:
                raise CalibError(f"{where} input '{name}': min {list(r.min)}, opt {list(r.opt)}, max "
                                 f"{list(r.max)} break min <= opt <= max at dimension {bad}")
        for name, dims in inputs.items():
            if any(d < 0 for d in dims) and name not in names:
                raise CalibError(f"{where}: dynamic input '{name}' {_dims(dims)} has no shapes: give its min, "
                                 "opt and max")


def _dims(dims) -> str:
    return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


def to_json(profiles: Sequence[Profile]) -> list[dict]:
    return [{n: r.as_dict() for n, r in prof} for prof in profiles]


def describe(profile: Mapping[str, Mapping]) -> str:
    """'input 1x3x64x64..32x3x64x64 (opt 8x3x64x64)' for a profile as the sidecar holds it."""
    def text(s):
        return "x".join(map(str, s))

    return ", ".join(f"{n} {text(r['min'])}..{text(r['max'])} (opt {text(r['opt'])})" for n, r in profile.items())


def calibration_batch(profiles: Sequence[Profile], default: int) -> int:
    """The batch of TensorRT's calibration profile: the first profile's opt batch (else `default`)."""
    if not profiles or not profiles[0]:
        return default
    return int(profiles[0][0][1].opt[0])
