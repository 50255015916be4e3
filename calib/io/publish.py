"""Publishing a run's outputs as a whole: the previous results stay until the new ones replace them in one step.

A run writes into a hidden staging folder on the same filesystem as `out` (a sibling of `out`; inside `out` when
`out` is a mount point or its parent is not writable), then ends with a manifest `.calib-manifest.json` listing
every file it wrote with its sha256. Publishing then

- renames the staging folder to `out` when `out` does not exist;
- swaps the two folders in one atomic rename (Linux renameat2 RENAME_EXCHANGE; elsewhere two renames) when `out`
  holds only a previous run's files (those of its manifest): the old folder is then deleted;
- otherwise (files of others in `out`, a mount point, the working directory) moves the files into `out` one by
  one, removes the previous run's files the new run did not write, and writes the manifest last. A staging
  folder holding a manifest is a commitment: if the run is killed while moving, the next run on `out` finishes
  the move before anything else (readers check a cache against the manifest meanwhile).

One run at a time per `out` (a lock file beside the staging folders); staging folders left by killed runs are
removed, or finished as above, by the next run on the same `out`.
"""
from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import atomic_write_json, read_bounded, sha256_file

log = logging.getLogger(__name__)

MANIFEST = ".calib-manifest.json"
PREVIOUS = ".calib-previous.json"  # in a staging folder: the manifest it replaces (for an interrupted move)
_STAGE = "calib-stage"
_OLD = "calib-old"
_LEGACY_STAGE = r"^\.{name}\.[a-z0-9_]{{8}}$"  # the tempfile.mkdtemp staging folders of earlier versions


def read_manifest(folder: str | Path) -> dict | None:
    """The manifest of a published folder ({'files': {name: sha256}, ...}), None without one or if unreadable."""
    p = Path(folder) / MANIFEST
    try:
        doc = json.loads(read_bounded(p, 16 << 20, "manifest"))
    except (OSError, ValueError, CalibError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return doc


def write_manifest(stage: Path, command: str = "") -> dict:
    """List every file under `stage` with its sha256 (the last file written by a run)."""
    from calib.version import __version__

    files = {}
    for p in sorted(stage.rglob("*")):
        rel = p.relative_to(stage).as_posix()
        if p.is_file() and rel not in (MANIFEST, PREVIOUS):
            files[rel] = sha256_file(p)
    doc = {"files": files, "calib_version": __version__, "command": command}
    atomic_write_json(stage / MANIFEST, doc)
    return doc


def refresh_manifest(folder: Path, names) -> None:
    """After rewriting files a manifest lists (cache convert onto a published cache), record their new sha256."""
    doc = read_manifest(folder)
    if doc is None or not any(n in doc["files"] for n in names):
        return
    for n in names:
        if n in doc["files"] and (folder / n).is_file():
            doc["files"][n] = sha256_file(folder / n)
    atomic_write_json(folder / MANIFEST, doc)


def _top(files) -> set[str]:
    return {f.split("/", 1)[0] for f in files}


def _own(name: str) -> bool:
    return name in (MANIFEST, PREVIOUS) or name.startswith(f".{_STAGE}-") or name == ".calib.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock(home: Path, out: Path) -> Path:
    """An exclusive lock file in `home`; a second run on the same `out` refuses (a dead owner's lock is taken)."""
    path = home / (f".{out.name}.lock" if home != out else ".calib.lock")
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
            return path
        except FileExistsError:
            try:
                pid = int(path.read_text() or 0)
            except (ValueError, FileNotFoundError):
                pid = 0
            if pid and _pid_alive(pid):
                raise CalibError(f"{out}: another calib run (pid {pid}) is writing this folder") from None
            path.unlink(missing_ok=True)  # left by a run that died
    raise CalibError(f"{out}: cannot take the lock {path}")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False  # a filesystem without exchange: two renames instead
    raise OSError(err, os.strerror(err), str(b))


def _stage_home(out: Path) -> Path:
    """Where staging folders go: beside `out` on the same filesystem, else inside `out`."""
    parent = out.parent
    if out.is_dir():
        if os.path.ismount(out) or out.stat().st_dev != parent.stat().st_dev or not os.access(parent, os.W_OK):
            return out
    return parent


def _stages(home: Path, out: Path) -> list[Path]:
    if home == out:
        pat = re.compile(rf"^\.{_STAGE}-\d+-[0-9a-f]+$")
    else:
        name = re.escape(out.name)
        pat = re.compile(rf"^\.{name}\.({_STAGE}|{_OLD})-\d+-[0-9a-f]+$|" + _LEGACY_STAGE.format(name=name))
    try:
        return sorted(p for p in home.iterdir() if p.is_dir() and not p.is_symlink() and pat.match(p.name))
    except OSError:
        return []


def recover(home: Path, out: Path) -> None:
    """Deal with the staging folders of runs that died (call with the lock held): finish a commitment to move
    files into `out`, put back a previous `out` moved aside, remove the rest."""
    for st in _stages(home, out):
        if f".{_OLD}-" in st.name:
            if not out.exists():
                log.warning("%s: putting back the previous results (a run died while replacing them)", out)
                os.rename(st, out)
                continue
        elif (st / MANIFEST).is_file() and (st / PREVIOUS).is_file():  # a move into out had begun
            log.warning("%s: finishing the publication of a run that died while moving its files", out)
            _move_in(st, out)
            continue
        log.info("removing %s, left by a calib run that did not finish", st)
        shutil.rmtree(st, ignore_errors=True)


def _move_in(stage: Path, out: Path) -> None:
    """Move a staged run's files into an existing `out`, remove the previous run's other files, manifest last.
    Idempotent: a run killed half-way is finished by calling it again."""
    new = read_manifest(stage) or {"files": {}}
    old = None
    if (stage / PREVIOUS).is_file():
        try:
            old = json.loads((stage / PREVIOUS).read_text()).get("files") or {}
        except (OSError, ValueError, AttributeError):
            old = {}
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(_top(new["files"])):
        src, dst = stage / name, out / name
        if not os.path.lexists(src):
            continue  # moved already, before an interruption
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        os.replace(src, dst)
    for name in sorted(_top(old or {}) - _top(new["files"])):
        dst = out / name
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst, ignore_errors=True)
        elif os.path.lexists(dst):
            dst.unlink()
    os.replace(stage / MANIFEST, out / MANIFEST)
    shutil.rmtree(stage, ignore_errors=True)


def _swappable(out: Path) -> bool:
    """`out` holds nothing but a previous run's published files (so a folder swap loses nothing)."""
    if os.path.ismount(out):
        return False
    try:
        cwd = Path.cwd().resolve()
        if cwd == out.resolve() or out.resolve() in cwd.parents:
            return False
    except OSError:
        return False
    listed = _top((read_manifest(out) or {"files": {}})["files"])
    return all(e.name in listed or _own(e.name) for e in out.iterdir())


def commit(stage: Path, out: Path) -> None:
    """Publish a finished staging folder (manifest written) as `out` (see the module's docstring)."""
    if stage.parent == out:  # staged inside out: move the files
        old = read_manifest(out)
        atomic_write_json(stage / PREVIOUS, old or {"files": {}})
        _move_in(stage, out)
        return
    if not out.exists():
        os.rename(stage, out)
        return
    if not _swappable(out):
        old = read_manifest(out)
        atomic_write_json(stage / PREVIOUS, old or {"files": {}})
        _move_in(stage, out)
        return
    if _exchange(stage, out):
        shutil.rmtree(stage, ignore_errors=True)  # the previous results, now under the staging name
        return
    aside = out.parent / f".{out.name}.{_OLD}-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(out, aside)
    os.rename(stage, out)
    shutil.rmtree(aside, ignore_errors=True)


def publish(out: str | Path, work: Callable[[Path], object], command: str = "", on_stage=None) -> Path:
    """Call work(stage) on a new staging folder; publish what it wrote as `out` only if it returns.

    on_stage(stage) / on_stage(None): called once the folder exists and again before publishing (run.log)."""
    if not str(out).strip():
        raise CalibError("output folder: empty path")
    out = Path(os.path.abspath(Path(out).expanduser()))
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CalibError(f"{out}: output must be a folder, not a link or a file")
    out.parent.mkdir(parents=True, exist_ok=True)
    home = _stage_home(out)
    held = lock(home, out)
    stage = None
    try:
        recover(home, out)
        prefix = f".{_STAGE}-" if home == out else f".{out.name}.{_STAGE}-"
        stage = home / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
        stage.mkdir()
        if on_stage is not None:
            on_stage(stage)
        try:
            work(stage)
        finally:
            if on_stage is not None:
                on_stage(None)
        write_manifest(stage, command)
        staged, stage = stage, None  # from here on, an interrupted publication is finished by the next run
        commit(staged, out)
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        held.unlink(missing_ok=True)
    return out
