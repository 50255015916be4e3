"""Bounded reads of the files calib is given: a size limit, a nesting limit for JSON, regular files only.

A file that is too large (or a device such as /dev/zero that never ends), a FIFO, or JSON nested thousands of levels
deep is refused with one error naming the file and the limit, before it can exhaust memory or the stack.
"""
from __future__ import annotations

import json
import os
import stat

from calib.errors import CalibError

MAX_DEPTH = 100  # nesting of JSON objects and arrays; calib's own files and COCO need fewer than 10


def printable(name) -> str:
    """A file name as text that can be printed and written anywhere: undecodable bytes become \\xNN."""
    raw = os.fsencode(name) if isinstance(name, (str, bytes, os.PathLike)) else str(name).encode()
    return raw.decode("utf-8", "backslashreplace")


def size_text(n: int) -> str:
    """2 GiB, 64 MiB, 1500 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def read_bytes(path, limit: int, what: str = "file", error: type[CalibError] = CalibError) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; otherwise `error` naming the file, `what` it
    should be and the limit. A missing file, a folder, a device or a FIFO is refused without blocking."""
    shown = printable(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{shown}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{shown}: {what} is a folder, not a file") from None
    except OSError as exc:
        raise error(f"{shown}: cannot read {what} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{shown}: {what} is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{shown}: {what} is not a regular file (a device, FIFO or socket)")
        if st.st_size > limit:
            raise error(f"{shown}: {what} larger than {size_text(limit)}")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise error(f"{shown}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > limit:  # grew while being read
        raise error(f"{shown}: {what} larger than {size_text(limit)}")
    return data


def read_text(path, limit: int, what: str = "file", error: type[CalibError] = CalibError) -> str:
    """read_bytes decoded as UTF-8 (a byte-order mark dropped); other bytes are `error` naming the offset."""
    data = read_bytes(path, limit, what, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{printable(path)}: {what} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})"
                    ) from None


def depth(obj, limit: int = MAX_DEPTH) -> int:
    """How deeply `obj` (parsed JSON) nests lists and dicts, counted up to `limit` + 1 (no recursion)."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        stack.extend((child, d + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


def parse_json(text: str | bytes, where: str, what: str = "JSON", error: type[CalibError] = CalibError,
               strict: bool = True):
    """json.loads(text) with one-line errors naming `where`: invalid JSON (line and column), nesting past
    MAX_DEPTH, numbers too long to convert."""
    try:
        doc = json.loads(text, strict=strict)
    except RecursionError:
        raise error(f"{where}: {what} nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise error(f"{where}: {what} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise error(f"{where}: {what} is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise error(f"{where}: {what} is not valid JSON ({exc})") from None
    if depth(doc) > MAX_DEPTH:
        raise error(f"{where}: {what} nested deeper than {MAX_DEPTH} levels")
    return doc


def read_json(path, limit: int, what: str = "JSON file", error: type[CalibError] = CalibError, strict: bool = True):
    """The parsed JSON of `path`, bounded in size (`limit` bytes) and nesting (MAX_DEPTH)."""
    return parse_json(read_text(path, limit, what, error), printable(path), what, error, strict)
