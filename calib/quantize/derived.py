"""The model a cache is for, when the user names the model they gave calib: `calib calibrate` past placeholder dims
(--input-shape) or at constant inputs (--const) calibrates calib's own copy of the model (reshaped, folded), writes
it beside the caches and records in each sidecar which model it was made of and how. `calib cache convert`,
`migrate` and `inspect` given the user's model then use that copy, saying so, instead of refusing the hash."""
from __future__ import annotations

import logging
from pathlib import Path

from calib.errors import CacheError
from calib.io.files import sha256_file
from calib.quantize.cache import read_sidecar

log = logging.getLogger(__name__)


def derived_from(given: str | Path, given_sha256: str, derived_name: str, input_shapes: dict | None,
                 consts: dict | None, equalized: bool = False) -> dict:
    """The sidecar's record of a derived model: the given model's sha256 and name, the copy's file name, how."""
    how = []
    if input_shapes:
        how.append("reshaped at " + ", ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in input_shapes.items()))
    if consts:
        how.append("folded at constant " + ", ".join(sorted(consts)))
    if equalized:
        how.append("equalized")
    return {"sha256": given_sha256, "model": Path(given).name, "file": derived_name,
            "how": " and ".join(how) or "derived"}


def model_for_cache(cache: str | Path, model: str | Path) -> Path:
    """`model`, or calib's copy of it that the cache at `cache` is for (beside the cache); a CacheError naming the
    file to pass when that copy is not there."""
    try:
        side = read_sidecar(cache)
    except CacheError:
        return Path(model)  # the cache checks report a bad sidecar themselves
    d = ((side or {}).get("extra") or {}).get("derived_from")
    if not isinstance(d, dict) or not isinstance(d.get("file"), str) or Path(d["file"]).name != d["file"]:
        return Path(model)
    sha = sha256_file(model)
    if sha == side.get("model_sha256") or sha != d.get("sha256"):
        return Path(model)
    copy = Path(cache).parent / d["file"]
    if copy.is_file() and sha256_file(copy) == side.get("model_sha256"):
        log.info("%s: the cache is for %s, calib's copy of %s (%s): using it", cache, copy, model, d.get("how"))
        return copy
    raise CacheError(f"{cache}: is for {model} {d.get('how', 'derived')} by calib calibrate, whose copy "
                     f"{d['file']} is not beside the cache: pass --model that file")
