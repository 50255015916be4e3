"""Results published as a whole: a fault at any write or rename leaves the previous results intact (or, once the
new ones are committed, the new ones whole), never a mix; staging stays on out's filesystem; leftovers cleaned."""
import errno
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from calib.cli import main
import calib.io.publish as pub
from conftest import conv_relu_gap
from reliability.test_bad_inputs import one_line_failure


class Killed(BaseException):
    """Stands for the process dying at that instant (no except clause of calib's catches it)."""


def snapshot(folder: Path) -> dict:
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(home: Path) -> list:
    return [p.name for p in home.iterdir() if "calib-stage" in p.name or "calib-old" in p.name or
            p.name.endswith(".lock")]


@pytest.fixture
def work(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(tmp_path / f"x{i}.npy", (rng.random((6, 3, 8, 8), dtype=np.float32) * (i + 1)).astype(np.float32))
    return tmp_path


def calibrate(work, i, out, *extra):
    return CliRunner().invoke(main, ["--quiet", "calibrate", str(work / "m.onnx"), "--data", str(work / f"x{i}.npy"),
                                     "--algo", "minmax,entropy", "--out", str(out), *extra])


def count_calls(monkeypatch, kill_at=None, exc=None):
    """Wrap every rename calib can do (os.replace, os.rename, the folder exchange); raise at call `kill_at`."""
    calls = {"n": 0}

    def wrap(fn):
        def f(*a, **k):
            calls["n"] += 1
            if calls["n"] == kill_at:
                raise (exc or Killed)()
            return fn(*a, **k)
        return f

    monkeypatch.setattr(os, "replace", wrap(os.replace))
    monkeypatch.setattr(os, "rename", wrap(os.rename))
    monkeypatch.setattr(pub, "_exchange", wrap(pub._exchange))
    return calls


def published(work, d, foreign) -> dict:
    """What `calibrate` on data `d` publishes (into a fresh folder), plus the user's file when there is one."""
    probe = work / f"probe{d}"
    if not probe.exists():
        assert calibrate(work, d, probe).exit_code == 0
    s = snapshot(probe)
    if foreign:
        s["notes.txt"] = hashlib.sha256(b"the user's own file").hexdigest()
    return s


@pytest.mark.parametrize("foreign", [False, True], ids=["folder-swap", "move-into-shared-folder"])
def test_killed_at_every_rename(work, monkeypatch, foreign):
    out = work / "out"
    out.mkdir()
    if foreign:
        (out / "notes.txt").write_text("the user's own file")
    assert calibrate(work, 0, out).exit_code == 0
    assert snapshot(out) == published(work, 0, foreign)
    with monkeypatch.context() as m:
        calls = count_calls(m)
        assert calibrate(work, 1, out).exit_code == 0
        n = calls["n"]
    assert snapshot(out) == published(work, 1, foreign)
    assert n >= (11 if foreign else 6)  # 4 files + manifest, then a swap; or a journal, 4 moves and the manifest
    inspect = ["cache", "inspect", str(out / "entropy.cache"), "--model", str(work / "m.onnx")]
    for k in range(1, n + 1):
        before = snapshot(out)
        d = 2 if k % 2 else 0  # every run changes every file
        with monkeypatch.context() as m:
            count_calls(m, kill_at=k)
            with pytest.raises(Killed):
                calibrate(work, d, out)
        if snapshot(out) == before:
            assert CliRunner().invoke(main, inspect).exit_code == 0
        else:  # killed while moving files into a folder shared with other files: readers refuse the mix ...
            assert foreign, k
            one_line_failure(CliRunner().invoke(main, inspect), "entropy.cache")
        pub.recover(work, out)  # ... and the next run on out finishes the move first
        assert snapshot(out) in (before, published(work, d, foreign)), k
        assert CliRunner().invoke(main, inspect).exit_code == 0
        assert leftovers(work) == [] and leftovers(out) == []


def test_disk_full_at_every_write_keeps_the_previous_results(work, monkeypatch):
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    old = snapshot(out)
    real = os.fdopen
    writes = {"n": 0, "fail_at": None}

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, *a, **k):
        fh = real(fd, *a, **k)
        if "w" not in (a[0] if a else k.get("mode", "r")):
            return fh
        writes["n"] += 1
        return Full(fh) if writes["n"] == writes["fail_at"] else fh

    monkeypatch.setattr(os, "fdopen", fdopen)
    assert calibrate(work, 1, work / "probe").exit_code == 0
    n = writes["n"]
    assert n >= 5  # two caches, two sidecars, the manifest
    for k in range(1, n + 1):
        writes.update(n=0, fail_at=k)
        r = calibrate(work, 1, out)
        one_line_failure(r, "No space left on device")
        assert snapshot(out) == old and leftovers(work) == [], k


def test_out_on_its_own_filesystem_never_renames_across(work, monkeypatch):
    """--out a mount point (a container volume): staging inside it, nothing renamed in or out of it."""
    out = work / "vol"
    out.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real_ismount(p))

    def same_side(a, b):
        inside = [Path(os.path.abspath(p)).is_relative_to(out) and Path(os.path.abspath(p)) != out for p in (a, b)]
        if inside[0] != inside[1]:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

    for name in ("replace", "rename"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda a, b, _r=real, **k: (same_side(a, b), _r(a, b, **k))[1])
    monkeypatch.setattr(pub, "_exchange", lambda a, b: (_ for _ in ()).throw(OSError(errno.EXDEV, "cross-device")))
    assert calibrate(work, 0, out).exit_code == 0
    first = snapshot(out)
    r = calibrate(work, 1, out)
    assert r.exit_code == 0, r.output
    assert snapshot(out) != first and "minmax.cache" in snapshot(out) and leftovers(out) == []


def test_stale_staging_folders_are_removed(work):
    """Folders a killed run left (marked as calib's, for this out) are removed; folders under a staging name that
    calib did not make (no marker, a marker for another folder, an older calib's mkdtemp name) are left alone."""
    out = work / "out"
    for name in (".out.calib-stage-999999-abcd", ".out.calib-stage-1-00"):
        (work / name).mkdir()
        pub.mark_stage(work / name, out)
        (work / name / "minmax.cache").write_text("half written")
    for name in (".out.calib-stage-2-beef", ".out.k2j4_x9a"):
        (work / name).mkdir()
        (work / name / "photo.jpg").write_text("someone's")
    (work / ".out.calib-stage-3-cafe").mkdir()
    pub.mark_stage(work / ".out.calib-stage-3-cafe", work / "elsewhere")
    (work / ".out.lock").write_text("999999999")  # its owner is dead
    (work / "keep.me").mkdir()
    assert calibrate(work, 0, out).exit_code == 0
    assert sorted(leftovers(work)) == [".out.calib-stage-2-beef", ".out.calib-stage-3-cafe"]
    assert (work / ".out.k2j4_x9a" / "photo.jpg").is_file() and (work / "keep.me").is_dir()


def test_interrupted_swap_is_undone(work):
    """Killed between the two renames of a swap (filesystems without an atomic exchange): out comes back."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    old = snapshot(out)
    aside = work / ".out.calib-old-999999-ab"
    os.rename(out, aside)
    pub.recover(work, out)
    assert snapshot(out) == old and leftovers(work) == []


def test_output_in_the_working_directory_keeps_it(work, monkeypatch):
    """--out . : files moved in, the folder itself (the shell's working directory) never swapped away."""
    monkeypatch.chdir(work)
    inode = os.stat(work).st_ino
    r = CliRunner().invoke(main, ["--quiet", "calibrate", "m.onnx", "--data", "x0.npy", "--algo", "minmax",
                                  "--out", "."])
    assert r.exit_code == 0, r.output
    assert os.stat(work).st_ino == inode and (work / "minmax.cache").is_file() and (work / "m.onnx").is_file()


def test_empty_output_path_is_refused(work):
    one_line_failure(calibrate(work, 0, ""), "empty path")


KILLER = """
import os, sys
import calib.io.publish as pub
at, calls = int(os.environ["KILL_AT"]), [0]

def wrap(fn):
    def f(*a, **k):
        calls[0] += 1
        if calls[0] == at:
            os._exit(137)  # no finally, no cleanup: as a SIGKILL would
        return fn(*a, **k)
    return f

os.replace, os.rename, pub._exchange = wrap(os.replace), wrap(os.rename), wrap(pub._exchange)
from calib.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("foreign,kill_at", [(False, 6), (True, 7), (True, 9)],
                         ids=["at-the-swap", "before-the-moves", "mid-move"])
def test_real_kill_then_the_next_run_recovers(work, foreign, kill_at):
    """A process really killed (os._exit) at a rename: previous results or a mix readers refuse; the next run
    finishes or removes what it left (staging folder, journal, lock) and publishes whole."""
    import subprocess
    import sys

    out = work / "out"
    out.mkdir()
    if foreign:
        (out / "notes.txt").write_text("the user's own file")
    assert calibrate(work, 0, out).exit_code == 0
    old = snapshot(out)
    (work / "killer.py").write_text(KILLER)
    root = Path(__file__).resolve().parents[2]  # this checkout's calib, not an installed one
    p = subprocess.run([sys.executable, str(work / "killer.py"), "--quiet", "calibrate", str(work / "m.onnx"),
                        "--data", str(work / "x2.npy"), "--algo", "minmax,entropy", "--out", str(out)],
                       env={**os.environ, "KILL_AT": str(kill_at), "PYTHONPATH": str(root)}, capture_output=True,
                       text=True, cwd=root)
    assert p.returncode == 137, p.stderr
    assert leftovers(work)  # it left its staging folder and its lock behind
    assert (snapshot(out) != old) == (kill_at == 9)  # only a kill among the moves changes out
    if snapshot(out) != old:
        one_line_failure(CliRunner().invoke(main, ["cache", "inspect", str(out / "entropy.cache"), "--model",
                                                   str(work / "m.onnx")]), "entropy.cache")
    assert calibrate(work, 1, out).exit_code == 0
    assert snapshot(out) == published(work, 1, foreign) and leftovers(work) == [] and leftovers(out) == []
