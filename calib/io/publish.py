"""Publishing a run's outputs as a whole: the previous results stay until the new ones replace them in one step.

A run writes into a hidden staging folder on the same filesystem as `out` (a sibling of `out`; inside `out` when
`out` is a mount point or its parent is not writable), marked as calib's (`.calib-stage.json`: the `out` it is for
and the folder's own device and inode, so a copied or hand-made folder is not taken for one), then ends with a
manifest `.calib-manifest.json` listing every file it wrote with its size and sha256 (calib.io.manifest).
Publishing then

- renames the staging folder to `out` when `out` does not exist;
- swaps the two folders in one atomic rename (Linux renameat2 RENAME_EXCHANGE; elsewhere two renames) when `out`
  holds only a previous run's files, unchanged (name, size and sha256 as its manifest lists them): the old
  folder is then deleted;
- otherwise (files of others in `out`, a mount point, the working directory) moves the files into `out` one by
  one, removes the previous run's files the new run did not write, and writes the manifest last. A staging
  folder holding a manifest is a commitment: if the run is killed while moving, the next run on `out` finishes
  the move before anything else (readers check a cache against the manifest meanwhile).

Nothing is deleted or replaced unless calib can prove it wrote it: a file of `out` only while it matches the
previous manifest (a new file whose name is taken by any other file is refused before anything changes), a staging
folder only when its marker checks out; the rest is left where it is, with a warning naming it. A file of `out`
that is an input of the run (same device and inode) is never replaced or removed.

One run at a time per `out` (a lock file beside the staging folders); staging folders left by killed runs are
removed, or finished as above, by the next run on the same `out`.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import atomic_write_json, printable
from calib.io.inputs import identities, inputs_in
from calib.io.manifest import (MANIFEST, MARKER, PREVIOUS, matches, read_manifest, refresh_manifest,
                               remove_folder, remove_listed, write_manifest)
from calib.io.signals import (deferred, no_forced_exit_cleanup, note_publication, on_forced_exit,
                               terminate_as_interrupt)
from calib.io.staging import drop_marker, lock, mark_stage, marked, mount_point, stage_home, writable

__all__ = ["MANIFEST", "PREVIOUS", "publish", "read_manifest", "refresh_manifest", "recover", "mark_stage"]

log = logging.getLogger(__name__)

_STAGE = "calib-stage"
_OLD = "calib-old"
_LEGACY_STAGE = r"^\.{name}\.[a-z0-9_]{{8}}$"  # the tempfile.mkdtemp staging folders of earlier versions
_FULL = (errno.EROFS, errno.ENOSPC, errno.EDQUOT)  # writing anything into the output folder fails


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


def _stages(home: Path, out: Path) -> list[Path]:
    if home == out:
        pat = re.compile(rf"^\.{_STAGE}-[0-9]+-[0-9a-f]+$")
    else:
        name = re.escape(out.name)
        pat = re.compile(rf"^\.{name}\.({_STAGE}|{_OLD})-[0-9]+-[0-9a-f]+$")
        legacy = re.compile(_LEGACY_STAGE.format(name=name))
    try:
        entries = sorted(p for p in home.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    if home != out:
        for p in entries:
            if legacy.match(p.name):
                log.warning("%s: left where it is: it may be the staging folder of an earlier calib version, "
                            "which cannot be told from a folder of yours; remove it if it is", printable(p))
    return [p for p in entries if pat.match(p.name)]


def _whole(folder: Path) -> dict | None:
    """The manifest's files of a folder that holds a published run and nothing else, unchanged; else None."""
    m = read_manifest(folder)
    if m is None:
        return None
    for e in folder.iterdir():
        if e.name not in (MANIFEST, MARKER) and not matches(e, m["files"].get(e.name)):
            return None
    return m["files"]


def recover(home: Path, out: Path, keep=()) -> None:
    """Deal with the staging folders of runs that died (call with the lock held): finish a commitment to move
    files into `out`, put back a previous `out` moved aside, remove the rest; only folders that are provably
    calib's (see the module's docstring); the others are left where they are and named."""
    if out.is_dir():
        drop_marker(out)
    for st in _stages(home, out):
        if marked(st, out, st.name.rsplit("-", 1)[-1]):
            if read_manifest(st) is not None and (st / PREVIOUS).is_file():  # a move into out had begun
                log.warning("%s: finishing the publication of a run that died while moving its files", out)
                _move_in(st, out, keep, {}, finishing=True)
                continue
            log.info("removing %s, left by a calib run that did not finish", st)
            remove_folder(st, None)
            continue
        files = _whole(st)  # a previous `out` swapped or moved aside by a run that died
        if files is None:
            log.warning("%s: left where it is: not a staging folder calib made for %s (no marker of its own, or "
                        "files calib did not write)", printable(st), printable(out))
        elif f".{_OLD}-" in st.name and not out.exists():
            log.warning("%s: putting back the previous results (a run died while replacing them)", out)
            os.rename(st, out)
        else:
            log.info("removing %s, previous results left by a calib run that died", st)
            remove_folder(st, files)


def _conflicts(stage: Path, out: Path, new: dict, old: dict, keep) -> list[str]:
    """The new files whose place in `out` holds something calib cannot prove it wrote (or an input)."""
    bad = []
    for name in sorted(new):
        dst = out / name
        if os.path.lexists(stage / name) and os.path.lexists(dst) and (name in keep or not matches(dst, old.get(name))):
            bad.append(name)
    return bad


def _refuse(out: Path, bad: list[str], keep) -> CalibError:
    name = bad[0]
    more = f" (and {len(bad) - 1} more: {', '.join(bad[1:4])})" if len(bad) > 1 else ""
    if name in keep:
        return CalibError(f"{printable(out / name)}: an input of this command{more}: calib does not write over "
                          "its inputs; choose another output folder")
    return CalibError(f"{printable(out / name)}: not a file calib wrote there (no manifest lists it, or it changed "
                      f"since){more}; calib replaces only its own files: move it away or choose another output folder")


def _move_in(stage: Path, out: Path, keep, state: dict, finishing: bool = False) -> None:
    """Move a staged run's files into an existing `out`, remove the previous run's other files (those that still
    match), manifest last. Idempotent: a run killed half-way is finished by calling it again."""
    new = read_manifest(stage) or {"files": {}}
    old = (read_manifest(stage, PREVIOUS) or {"files": {}})["files"]
    bad = _conflicts(stage, out, new["files"], old, keep)
    if bad:
        if not finishing:
            raise _refuse(out, bad, keep)
        for name in bad:
            log.warning("%s: left alone (not calib's, or an input); the new %s stays unpublished",
                        printable(out / name), name)
        new = {**new, "files": {n: e for n, e in new["files"].items() if n not in bad}}
        atomic_write_json(stage / MANIFEST, new)
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(new["files"]):
        src = stage / name
        if not os.path.lexists(src):
            continue  # moved already, before an interruption
        os.replace(src, out / name)
        state["changed"] = True
    remove_listed(out, {n: e for n, e in old.items() if n not in new["files"]}, keep)
    os.replace(stage / MANIFEST, out / MANIFEST)
    state["changed"] = True
    remove_folder(stage, None)


def _swappable(out: Path, keep) -> bool:
    """`out` holds nothing but a previous run's published files, unchanged (so a folder swap loses nothing)."""
    if mount_point(out) or keep:
        return False
    try:
        cwd = Path.cwd().resolve()
        if cwd == out.resolve() or out.resolve() in cwd.parents:
            return False
    except OSError:
        return False
    return _whole(out) is not None or not any(True for _ in out.iterdir())


def _commit_moving(stage: Path, out: Path, keep, state: dict) -> None:
    old = read_manifest(out) or {"files": {}}
    bad = _conflicts(stage, out, (read_manifest(stage) or {"files": {}})["files"], old["files"], keep)
    if bad:
        raise _refuse(out, bad, keep)  # before the journal: nothing has changed
    atomic_write_json(stage / PREVIOUS, old)
    _move_in(stage, out, keep, state)


def commit(stage: Path, out: Path, keep=(), state: dict | None = None) -> None:
    """Publish a finished staging folder (manifest written) as `out` (see the module's docstring). `keep`: names
    of files in `out` that are inputs of the run. state['changed'] is set once `out` has changed."""
    state = {} if state is None else state
    if stage.parent == out or (out.exists() and not _swappable(out, keep)):
        _commit_moving(stage, out, keep, state)
        return
    try:
        if not out.exists():
            os.rename(stage, out)
            state["changed"] = True
            drop_marker(out)
            return
        old = read_manifest(out) or {"files": {}}
        if _exchange(stage, out):
            state["changed"] = True
            drop_marker(out)
            remove_folder(stage, old["files"])  # the previous results, now under the staging name
            return
        aside = out.parent / f".{out.name}.{_OLD}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(out, aside)
        state["changed"] = True
    except OSError as exc:
        if state.get("changed") or exc.errno not in (errno.EBUSY, errno.EXDEV):
            raise
        _commit_moving(stage, out, keep, state)  # a mount point os.path.ismount cannot see (a bind mount)
        return
    os.rename(stage, out)
    drop_marker(out)
    remove_folder(aside, old["files"])


def _output_error(exc: OSError, out: Path, ours: list) -> CalibError | None:
    """An OSError that is about writing the output (a full disk, a read-only mount) as an error naming `out`:
    any error on the staging folder or the lock (`ours`), a write error on `out`, a failed write() (no name)."""
    name = str(exc.filename or "")

    def under(p) -> bool:
        return name == str(p) or name.startswith(f"{p}{os.sep}")

    writing = exc.errno in _FULL + (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV)
    if (name and any(under(p) for p in ours)) or (writing and under(out)) or (exc.errno in _FULL and not name):
        return CalibError(f"{out}: cannot write the output folder ({exc.strerror or exc})")
    return None


class _Undo:
    """What a forced exit (calib.io.signals) removes of a publication: its lock, and its staging folder until the
    publication begins to change `out` (a staging folder holding a manifest is then a commitment that the next run
    on `out` finishes, as after any kill). Runs on the watcher thread: no imports, no logging."""

    def __init__(self, out: Path):
        self.out, self.stage, self.held, self.committing = out, None, None, False

    def __call__(self) -> str | None:
        line = None
        if self.stage is not None and not self.committing:
            shutil.rmtree(self.stage, ignore_errors=True)
        elif self.committing:
            line = f"interrupted while publishing {printable(self.out)}: the next calib run on it finishes that"
        if self.held is not None:
            try:
                self.held.unlink()
            except OSError:
                pass
        return line


def publish(out: str | Path, work: Callable[[Path], object], command: str = "", on_stage=None,
            inputs=()) -> Path:
    """Call work(stage) on a new staging folder; publish what it wrote as `out` only if it returns.

    on_stage(stage) / on_stage(None): called once the folder exists and again before publishing (run.log).
    inputs: the files the command reads; none of them is replaced or removed in `out`."""
    if not str(out).strip():
        raise CalibError("output folder (-o/--out, output in a recipe): empty path")
    out = Path(os.path.abspath(Path(out).expanduser()))
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CalibError(f"{out}: output must be a folder, not a link or a file")
    ids = identities(inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CalibError(f"{out}: cannot create the output folder ({exc.strerror or exc})") from None
    writable(out)
    home = stage_home(out)
    undo = _Undo(out)
    with terminate_as_interrupt(), on_forced_exit(undo):
        stage, held, state = None, None, {}
        try:
            with deferred():  # a signal waits until the lock file is held, else the file is left behind
                held = undo.held = lock(home, out)
            recover(home, out, inputs_in(out, ids))
            prefix = f".{_STAGE}-" if home == out else f".{out.name}.{_STAGE}-"
            stage = home / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
            stage.mkdir()
            undo.stage = stage
            mark_stage(stage, out)
            if on_stage is not None:
                on_stage(stage)
            try:
                work(stage)
            finally:
                if on_stage is not None:
                    on_stage(None)
            write_manifest(stage, command)
            with no_forced_exit_cleanup():  # from here on a forced exit leaves the staging folder to the next run
                undo.committing = True
                note_publication(printable(out), "committing")
            with deferred():  # a signal now waits for the renames: the results published whole, and said so
                commit(stage, out, inputs_in(out, ids), state)
                note_publication(printable(out), "done")
        except OSError as exc:
            err = _output_error(exc, out, [p for p in (stage, held) if p is not None])
            if err is None:
                raise
            raise err from None
        finally:
            if stage is not None and not state.get("changed") and stage.is_dir():
                try:
                    remove_folder(stage, None)  # ours, and out is as it was
                except OSError:
                    log.warning("%s: could not remove this staging folder", printable(stage))
            if held is not None:
                held.unlink(missing_ok=True)
    return out
