"""The surroundings of an output folder: its lock, the marker that makes a staging folder provably calib's, where
staging folders go (beside `out` on its file system, or inside a mount point), and whether `out` can be written."""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import atomic_write_json, printable
from calib.io.manifest import MARKER, read_json

log = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_text(path: Path) -> str | None:
    """The process id in a calib lock file ('' if it died before writing it); None: not a calib lock file."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as fh:
            text = fh.read(33).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text == "" or (text.isascii() and text.isdigit() and len(text) < 20) else None


def lock(home: Path, out: Path) -> Path:
    """An exclusive lock file in `home`; a second run on the same `out` refuses (a dead owner's lock is taken)."""
    path = home / (f".{out.name}.lock" if home != out else ".calib.lock")
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            try:
                os.write(fd, str(os.getpid()).encode())
            except BaseException:  # a full disk: the lock file is not left behind
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
            os.close(fd)
            return path
        except FileExistsError:
            text = _lock_text(path)
            if text is None:
                raise CalibError(f"{printable(path)}: not a calib lock file (calib writes its process id there), "
                                 f"left alone: remove it or choose another output folder than {printable(out)}") \
                    from None
            pid = int(text or 0)
            if pid and _pid_alive(pid):
                raise CalibError(f"{out}: another calib run (pid {pid}) is writing this folder") from None
            path.unlink(missing_ok=True)  # left by a run that died
    raise CalibError(f"{out}: cannot take the lock {path}")


def mark_stage(stage: Path, out: Path) -> None:
    """Mark a new staging folder as calib's, for `out`: its name's token and its own device and inode."""
    st = stage.stat()
    atomic_write_json(stage / MARKER, {"out": str(out), "token": stage.name.rsplit("-", 1)[-1],
                                       "device": st.st_dev, "inode": st.st_ino, "pid": os.getpid()})


def marked(folder: Path, out: Path, token: str | None) -> bool:
    """`folder` holds a marker made for this very folder (not a copy) and for `out`."""
    if (folder / MARKER).is_symlink():
        return False
    m = read_json(folder / MARKER)
    try:
        st = folder.stat()
    except OSError:
        return False
    return (isinstance(m, dict) and m.get("out") == str(out) and m.get("device") == st.st_dev
            and m.get("inode") == st.st_ino and (token is None or m.get("token") == token))


def drop_marker(out: Path) -> None:
    """A staging folder renamed to `out` carries its marker: remove it (only if it is that folder's)."""
    if marked(out, out, None):
        (out / MARKER).unlink()


def mount_point(folder: Path) -> bool:
    """`folder` is a mount point, bind mounts of the same file system included (os.path.ismount misses those)."""
    if os.path.ismount(folder):
        return True
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            table = fh.read(16 << 20)
    except OSError:
        return False
    target = os.fsencode(os.path.realpath(folder))
    octal = re.compile(rb"\\([0-7]{3})")  # mountinfo writes a space in a path as \040
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) > 4 and octal.sub(lambda m: bytes([int(m.group(1), 8)]), fields[4]) == target:
            return True
    return False


def stage_home(out: Path) -> Path:
    """Where staging folders go: beside `out` on the same filesystem, else inside `out`."""
    parent = out.parent
    if out.is_dir():
        if mount_point(out) or out.stat().st_dev != parent.stat().st_dev or not os.access(parent, os.W_OK):
            return out
    return parent


def writable(out: Path) -> None:
    """Refuse, naming `out`, an output folder that cannot be written (a read-only mount), before any work."""
    target = out if out.exists() else out.parent
    try:
        ro = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    if ro or not os.access(target, os.W_OK):
        why = "read-only file system" if ro else "no permission to write"
        raise CalibError(f"{out}: cannot write the output folder ({why})")
