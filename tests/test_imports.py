"""Every calib module imports without tensorrt, cuda and torch, and never loads them."""
import pkgutil
import subprocess
import sys

import calib

HEAVY = ("tensorrt", "cuda", "torch", "torchvision", "pycuda", "tokenizers", "ray")


def _modules():
    return sorted(m.name for m in pkgutil.walk_packages(calib.__path__, "calib."))


def test_import_everything_stays_light():
    code = ("import sys, importlib\n"
            f"for m in {_modules()!r}: importlib.import_module(m)\n"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cli_help_stays_light():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom calib.cli import main\n"
            "r = CliRunner().invoke(main, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "assert 'calibrate' in r.output and 'run' in r.output\n"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\nassert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_module_list_is_complete():
    mods = _modules()
    for m in ("calib.cli", "calib.stats.histogram", "calib.quantize.cache", "calib.quantize.qdq", "calib.zoo", "calib.zoo.darknet",
              "calib.runners.onnxruntime", "calib.evaluate.metrics", "calib.data.images"):
        assert m in mods


def test_calibrate_loads_no_report_or_metric_libraries(tiny_model, tiny_data, tmp_path):
    """Start-up of `calib calibrate`: matplotlib (reports) and pycocotools (mAP) stay unloaded."""
    code = ("import sys\nfrom calib.cli import main\n"
            f"try:\n    main(['-q', 'calibrate', {str(tiny_model)!r}, '--data', {str(tiny_data)!r}, '-o', "
            f"{str(tmp_path / 'out')!r}], standalone_mode=False)\nexcept SystemExit as e:\n    assert not e.code\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'pycocotools', 'torch')]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "mse.cache").is_file()


def test_compiled_loops_spin_briefly_then_sleep_unless_the_user_chose():
    """The histogram loops' OpenMP threads spin a little, then sleep between loops (spinning ones took the cores
    from ONNX Runtime and from any other process: 7-20x slower loops on a busy 2-core machine; purely passive ones
    pay a wake-up per loop); a user's own setting of either variable is kept."""
    import os

    code = ("import os, calib.stats.kernels; "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    for extra, want in (({}, "PASSIVE 500"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
                        ({"GOMP_SPINCOUNT": "9"}, "None 9")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **extra})
        assert r.returncode == 0 and r.stdout.strip() == want, (extra, r.stdout, r.stderr)


def test_kernels_load_on_the_warm_up_thread():
    """calib.stats.warmup.start() imports numba and loads the pass's kernels on a thread (numba's OpenMP settings made
    on the caller's thread first); a second start() is a no-op."""
    import os

    code = ("import os, sys\nfrom calib.stats import warmup\nwarmup.start()\nt = warmup._thread\nwarmup.start()\n"
            "assert warmup._thread is t\nassert os.environ['GOMP_SPINCOUNT'] == '500'\nt.join()\n"
            "import calib.stats.kernels as K\n"
            "for f in (K.range_stats, K.histogram_pass, K.kl_divergences_tensorrt, K.mse_errors):\n"
            "    assert f.signatures, f\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr


def test_the_calib_process_ends_with_its_command_status(tiny_model, tiny_data, tmp_path):
    """`python -m calib` (and the `calib` script) leaves by os._exit after the command: the status, the output and
    the files are the command's."""
    ok = subprocess.run([sys.executable, "-m", "calib", "-q", "calibrate", str(tiny_model), "--data", str(tiny_data),
                         "--algo", "minmax,entropy", "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert [ln.split("  (")[0] for ln in lines] == [str(tmp_path / "out" / f"{a}.cache") for a in ("minmax", "entropy")]
    assert all(ln.endswith(" tensors)") for ln in lines)
    assert (tmp_path / "out" / "entropy.cache").is_file()
    bad = subprocess.run([sys.executable, "-m", "calib", "calibrate", str(tmp_path / "missing.onnx"), "--data",
                          str(tiny_data), "-o", str(tmp_path / "out2")], capture_output=True, text=True)
    assert bad.returncode != 0 and "missing.onnx" in bad.stderr and not (tmp_path / "out2").exists()
    usage = subprocess.run([sys.executable, "-m", "calib", "no-such-command"], capture_output=True, text=True)
    assert usage.returncode == 2 and "no-such-command" in usage.stderr


def test_the_pass_waits_for_the_warm_up_only_while_it_compiles(monkeypatch):
    """settle(): where the thread compiles the kernels (none on disk), the pass waits for it, so that the compiler's
    memory is not added to the pass's peak; with the kernels on disk it does not wait."""
    import threading

    from calib.stats import warmup

    release = threading.Event()
    t = threading.Thread(target=release.wait, daemon=True)
    t.start()
    monkeypatch.setattr(warmup, "_thread", t)
    monkeypatch.setattr(warmup, "_cold", False)
    warmup.settle()
    assert t.is_alive()  # returned at once
    monkeypatch.setattr(warmup, "_cold", True)
    threading.Timer(0.2, release.set).start()
    warmup.settle()
    assert not t.is_alive()
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/elsewhere")
    assert warmup._compiled_on_disk()
