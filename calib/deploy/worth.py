"""Is INT8 worth it: an INT8 engine's latency against another engine's (FP16, as a rule) at the same input shapes,
said plainly per shape, and from which batch INT8 starts to pay. Pure: rows in (calib.deploy.engine_file's
bench rows), sentences out."""
from __future__ import annotations

TOLERANCE = 0.03  # closer than 3 % is no difference: timings on one card move that much from build to build


def _key(row: dict) -> tuple:
    return tuple(sorted((n, tuple(s)) for n, s in row["shapes"].items()))


def _batch(row: dict) -> int | None:
    dims = [s[0] for s in row["shapes"].values() if s]
    return dims[0] if dims and all(d == dims[0] for d in dims) else None


def verdict(speedup: float, tolerance: float = TOLERANCE) -> str:
    """"pays" (faster by the tolerance or more), "slower" (slower by as much) or "same"."""
    return "pays" if speedup >= 1 + tolerance else "slower" if speedup <= 1 - tolerance else "same"


def compare(rows: list[dict], other: list[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """One entry per shape timed on both engines: the two medians, speed-up (other / this) and whether it pays."""
    theirs = {_key(r): r for r in other}
    out = []
    for r in rows:
        o = theirs.get(_key(r))
        if o is None:
            continue
        speedup = o["median_ms"] / r["median_ms"]
        out.append({"shapes": r["shapes"], "batch": _batch(r), "ms": r["median_ms"], "other_ms": o["median_ms"],
                    "speedup": round(speedup, 3), "verdict": verdict(speedup, tolerance)})
    return sorted(out, key=lambda e: (e["batch"] is None, e["batch"] or 0))


def sentences(found: list[dict], this: str, other: str, tolerance: float = TOLERANCE) -> list[str]:
    """What to tell the user: a line per shape, then the batch from which this engine pays, or that it never does."""
    lines = []
    for e in found:
        at = f"batch {e['batch']}" if e["batch"] is not None else ", ".join(
            f"{n} {'x'.join(map(str, s))}" for n, s in e["shapes"].items())
        ratio = f"{e['ms']:.4f} ms against {e['other_ms']:.4f} ms, {e['speedup']:.2f}x"
        if e["verdict"] == "pays":
            lines.append(f"{at}: {this} pays: {ratio} {other}'s speed")
        elif e["verdict"] == "same":
            lines.append(f"{at}: {this} does not pay: {ratio} (within {tolerance:.0%} of {other})")
        else:
            lines.append(f"{at}: {this} does not pay: slower than {other} ({ratio})")
    batched = [e for e in found if e["batch"] is not None]
    if not found:
        return [f"no input shape was timed on both {this} and {other}: nothing to compare"]
    if all(e["verdict"] != "pays" for e in found):
        lines.append(f"{this} does not pay at any shape timed: build {other} instead")
    elif batched and batched[-1]["verdict"] == "pays":
        first = next(i for i in range(len(batched)) if all(e["verdict"] == "pays" for e in batched[i:]))
        lines.append(f"{this} pays from batch {batched[first]['batch']} on (of the batches timed)")
    return lines
