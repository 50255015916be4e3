"""No command writes over one of its own inputs: a path is compared with each input by its resolved path and by
device and inode, so a symbolic link or a hard link to an input counts as the input."""
from __future__ import annotations

import os
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import printable


def identity(path) -> tuple | None:
    """(device, inode) of the file `path` names (links followed); None if there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def same_file(a, b) -> bool:
    try:
        if Path(os.path.realpath(a)) == Path(os.path.realpath(b)):
            return True
    except (OSError, ValueError):
        pass
    ia = identity(a)
    return ia is not None and ia == identity(b)


def refuse_overwrite(outputs, inputs) -> None:
    """outputs, inputs: (path, what) pairs. A CalibError naming the output if it is one of the inputs."""
    for out, out_what in outputs:
        for src, what in inputs:
            if src is not None and str(src).strip() and same_file(out, src):
                same = "" if str(out) == str(src) else f", {printable(src)}"
                raise CalibError(f"{printable(out)}: {out_what} is an input of this command ({what}{same}): calib "
                                 "does not write over its inputs; choose another path")


def identities(paths) -> set:
    """The (device, inode) of every existing regular file among `paths` (inputs of a command)."""
    out = set()
    for p in paths:
        if p is None or not str(p).strip() or str(p).startswith("zoo:"):
            continue
        ident = identity(p)
        if ident is not None and os.path.isfile(p):
            out.add(ident)
    return out


def inputs_in(folder: Path, ids: set) -> set[str]:
    """Names of the files in `folder` that are inputs (their device and inode among `ids`)."""
    if not ids or not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if identity(p) in ids}
