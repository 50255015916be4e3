"""SIGTERM as Ctrl-C, and odd places to write: a read-only file system, a read-only --out mount, a bind mount, a full
disk. Each is reported in one line naming the output folder, and leaves no lock or staging folder behind.

The file systems are real: a tmpfs mounted read-only or small, inside a private mount namespace (unshare)."""
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reliability.test_publish import calibrate, leftovers, snapshot, work  # noqa: F401  (work: a fixture)

ROOT = Path(__file__).resolve().parents[2]  # this checkout's calib, not an installed one


def cli(work, out, data=1):
    return [sys.executable, "-m", "calib", "--quiet", "calibrate", str(work / "m.onnx"), "--data",
            str(work / f"x{data}.npy"), "--algo", "minmax,entropy", "--out", str(out)]


def _can_mount() -> bool:
    import tempfile

    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", d], capture_output=True)
    return p.returncode == 0


mounts = pytest.mark.skipif(not _can_mount(), reason="needs unshare and mounts in a user namespace")


def in_namespace(setup: str, cmd: list[str]) -> subprocess.CompletedProcess:
    """Run `setup` (mounts) then `cmd` in a private mount namespace; the mounts vanish with it."""
    script = f"set -e; {setup}; set +e; {shlex.join(cmd)}"
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def one_line(p: subprocess.CompletedProcess, *needles) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stdout + p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


SLOW_WORK = """
import sys, time
import calib.calibrate as c
real = c.CalibrationResult.write_into
def slow(self, *a, **k):
    real(self, *a, **k)  # some files staged ...
    print("staged", flush=True)
    time.sleep(60)  # ... and the process stopped here
c.CalibrationResult.write_into = slow
from calib.cli.main import entry
sys.argv = ["calib", *sys.argv[1:]]
entry()
"""


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_terminated_run_cleans_up_like_an_interrupted_one(work, sig, code):
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    before = snapshot(out)
    (work / "slow.py").write_text(SLOW_WORK)
    p = subprocess.Popen([sys.executable, str(work / "slow.py"), *cli(work, out)[3:]], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().strip() == "staged"
        assert leftovers(work)  # the lock and the staging folder exist now
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert leftovers(work) == [] and snapshot(out) == before


@mounts
def test_a_read_only_file_system_names_the_output_folder(work):
    ro = work / "ro"
    ro.mkdir()
    out = ro / "out"
    p = in_namespace(f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(ro))}", cli(work, out))
    one_line(p, str(out), "read-only")
    assert ".lock" not in p.stderr


@mounts
def test_a_read_only_output_mount_leaves_nothing_behind(work):
    """--out an existing folder bind-mounted read-only (a container's volume): its parent is writable."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    before = snapshot(out)
    q = shlex.quote(str(out))
    p = in_namespace(f"mount --bind {q} {q}; mount -o remount,ro,bind {q}", cli(work, out))
    one_line(p, str(out), "read-only")
    assert leftovers(work) == [] and snapshot(out) == before


@mounts
def test_a_writable_bind_mount_is_published_into(work):
    """A bind mount of the same file system, which os.path.ismount does not see: the folder cannot be renamed
    (EBUSY), so the files are moved in."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    q = shlex.quote(str(out))
    p = in_namespace(f"mount --bind {q} {q}", cli(work, out, data=1))
    assert p.returncode == 0, p.stderr
    assert leftovers(work) == [] and leftovers(out) == []
    assert calibrate(work, 1, work / "probe").exit_code == 0
    assert snapshot(out) == snapshot(work / "probe")


@mounts
@pytest.mark.parametrize("room_kb", [0, 4, 12])
def test_a_full_disk_names_the_output_folder_and_leaves_nothing(work, room_kb):
    """A small tmpfs holding the previous results, filled up to `room_kb` KiB of room."""
    disk = work / "disk"
    disk.mkdir()
    out = disk / "out"
    d, o = shlex.quote(str(disk)), shlex.quote(str(out))
    fill = (f"dd if=/dev/zero of={d}/filler bs=4096 count=1000 2>/dev/null || true; "
            f"rm -f {d}/filler; dd if=/dev/zero of={d}/filler bs=1024 count=$(( $(df -k {d} | tail -1 | "
            f"awk '{{print $4}}') - {room_kb} )) 2>/dev/null || true")
    first = shlex.join(cli(work, out, data=0))
    check = f"{sys.executable} -c " + shlex.quote(
        "import hashlib, pathlib, sys, json; o = pathlib.Path(sys.argv[1]); "
        "print(json.dumps({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(o.iterdir())}))")
    before = in_namespace(f"mount -t tmpfs -o size=512k tmpfs {d}; {first} >/dev/null; {fill}",
                          ["sh", "-c", f"{check} {o}; {shlex.join(cli(work, out))} ; echo rc=$? >&2; "
                                       f"{check} {o}; ls -a {d}"])
    lines = before.stdout.splitlines()
    assert lines[0] == lines[1], "the previous results changed"
    listing = set(lines[2:])
    assert listing == {".", "..", "out", "filler"}, listing  # no lock, no staging folder
    err = [l for l in before.stderr.splitlines() if l.strip()]
    assert err[-1] == "rc=2" and len(err) == 2, before.stderr
    assert str(out) in err[0] and "No space left on device" in err[0], err[0]
