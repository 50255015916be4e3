"""SIGTERM as Ctrl-C, and odd places to write: a read-only file system, a read-only --out mount, a bind mount, a full
disk. Each is reported in one line naming the output folder, and leaves no lock or staging folder behind.

The file systems are real: a tmpfs mounted read-only or small, inside a private mount namespace (unshare)."""
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from calib.io.signals import GRACE_S

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
import sys, threading, time
import calib.calibrate as c
real = c.CalibrationResult.write_into
how = sys.argv.pop(1)
def slow(self, *a, **k):
    real(self, *a, **k)  # some files staged ...
    if how == "thread":  # a thread that is not a daemon and never ends (a library's, say)
        threading.Thread(target=time.sleep, args=(600,)).start()
    if how == "blocked":  # the main thread does not take the signals: the kernel hands them to another thread
        import signal
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:  # "staged" inside the try: a signal right after it must meet the except below
        print("staged", flush=True)
        time.sleep(60)  # ... and the process stopped here
    except KeyboardInterrupt:
        if how != "swallowed":
            raise
        time.sleep(60)  # the interruption lost (as one raised inside importlib's weakref callback is)
c.CalibrationResult.write_into = slow
from calib.__main__ import entry
sys.argv = ["calib", *sys.argv[1:]]
entry()
"""


def _default_sigint():
    """A suite started as a shell's background job has SIGINT ignored, and a child inherits that (Python then
    installs no handler, and calib keeps it ignored, as a background job should): give the child Ctrl-C back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child(cmd: list) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_default_sigint)


def stopped(p: subprocess.Popen, sig, code: int, within: float) -> str:
    """Send `sig`; the process must end within `within` s with `code`, one line on stderr and no traceback."""
    t0 = time.monotonic()
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"still running {within} s after {signal.Signals(sig).name}")
    took = time.monotonic() - t0
    assert p.returncode == code, (p.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return f"{took:.1f} s: {err.strip()}"


@pytest.mark.parametrize("how", ["plain", "thread", "swallowed", "blocked"])
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_terminated_run_cleans_up_like_an_interrupted_one(work, sig, code, how):
    """While the results are staged: a clean stop; and a bounded one (GRACE_S, the forced exit cleaning up the
    same way) when the main thread leaves a thread running, loses the interruption, or never takes the signal."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    before = snapshot(out)
    (work / "slow.py").write_text(SLOW_WORK)
    p = child([sys.executable, str(work / "slow.py"), how, *cli(work, out)[3:]])
    try:
        assert p.stdout.readline().strip() == "staged"
        assert leftovers(work)  # the lock and the staging folder exist now
        said = stopped(p, sig, code, within=GRACE_S + 10)
    finally:
        p.kill()
    assert leftovers(work) == [] and snapshot(out) == before, said
    if how == "swallowed":  # only the watcher can end it: its forced exit, GRACE_S after the signal
        assert f"stopped {GRACE_S:g} s after the signal" in said, said


def _watching(pid: int) -> bool:
    """calib's handlers are in place: the process catches SIGTERM (Linux's /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((l.split()[1] for l in status.splitlines() if l.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


SIGNAL_AT_LOCK = """
import os, signal, sys
import calib.io.publish as pub
real, sig = pub.lock, getattr(signal, sys.argv[1])
def lock_then_signal(home, out):
    path = real(home, out)
    os.kill(os.getpid(), sig)  # the lock file exists and the caller does not hold it yet
    return path
pub.lock = lock_then_signal
from calib.__main__ import entry
sys.argv = ["calib", *sys.argv[2:]]
entry()
"""


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_the_moment_the_lock_is_taken_leaves_no_lock(work, sig, code):
    """The window a random signal once hit (seed 204461052, run 9): between creating the lock file and holding it.
    The run stops with the signal's code and one line, and removes its lock."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    before = snapshot(out)
    (work / "at_lock.py").write_text(SIGNAL_AT_LOCK)
    p = child([sys.executable, str(work / "at_lock.py"), signal.Signals(sig).name, *cli(work, out)[3:]])
    try:
        _, err = p.communicate(timeout=GRACE_S + 30)
    finally:
        p.kill()
    assert p.returncode == code and "Traceback" not in err and len(err.strip().splitlines()) == 1, (p.returncode, err)
    assert leftovers(work) == [] and snapshot(out) == before, err


RUNS = int(os.environ.get("CALIB_SIGNAL_RUNS", "12"))  # the stress loop: CALIB_SIGNAL_RUNS=200


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_signal_at_any_moment_ends_the_run_within_seconds(work):
    """The real `calib calibrate` (start-up, the pass, publishing), each run signalled at a random moment once its
    handlers are in place: it ends within seconds, with the signal's code and one line and nothing left behind and
    the previous results as they were, or (signalled too late) with 0 and the new results whole. A hang, a traceback
    or a crash fails it. The moments and signals come from a seed that a failure prints."""
    out = work / "out"
    assert calibrate(work, 0, out).exit_code == 0
    np.save(work / "many.npy", np.random.default_rng(1).random((2000, 3, 8, 8), dtype=np.float32))
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for i in range(RUNS):
        before = snapshot(out)
        sig, code = rng.choice([(signal.SIGINT, 130), (signal.SIGTERM, 143)])
        p = child([sys.executable, "-m", "calib", "--quiet", "calibrate", str(work / "m.onnx"), "--data",
                   str(work / "many.npy"), "--algo", "minmax,entropy", "--out", str(out)])
        try:
            t0 = time.monotonic()
            while p.poll() is None and not _watching(p.pid) and time.monotonic() - t0 < 30:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 2.5))
            if p.poll() is None:
                p.send_signal(sig)
            try:
                _, err = p.communicate(timeout=GRACE_S + 10)
            except subprocess.TimeoutExpired:
                pytest.fail(f"seed {seed}, run {i}: still running after {signal.Signals(sig).name}")
        finally:
            p.kill()
        where = f"seed {seed}, run {i}, {signal.Signals(sig).name}: exit {p.returncode}, stderr {err!r}"
        assert p.returncode in (code, 0), where
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, where
        if "while publishing" in err:  # the forced exit cut a publication: the next run finishes it
            assert calibrate(work, 1, out).exit_code == 0, where
        assert leftovers(work) == [], where
        if p.returncode == code and "nothing was written" in err:
            assert snapshot(out) == before, where
        else:  # finished, or signalled once its results were published (and said so): the new results, whole
            assert p.returncode == 0 or "published whole" in err or "while publishing" in err, where
            listed = json.loads((out / ".calib-manifest.json").read_text())["files"]
            assert set(listed) | {".calib-manifest.json"} == set(snapshot(out)), where  # whole: as its manifest says


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
