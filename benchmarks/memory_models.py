"""The models `bench_memory.py --models` measures: every third-party model of tests/thirdparty (its flags from
tests/thirdparty/runs.py: the photo cases, centerface, and the stream cases silero-vad and ppocr-rec) and every zoo model that installs without extras, each at its native input size, with
the `calib calibrate` and `calib evaluate` (four caches, per-layer comparison on) commands a user would type.

A job is one command in a fresh interpreter: its peak RSS is the process's own high-water mark (VmHWM after the
command; what /usr/bin/time -v calls "Maximum resident set size"); calib's estimate of that
peak is the largest `estimated peak` calib.runners.budget logged while sizing the command's runs (the same number
that refuses a run over the budget)."""
from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"
ALGOS = ("minmax", "entropy", "percentile", "mse")


@dataclass(frozen=True)
class Job:
    model: str  # its name (zoo or third-party)
    step: str  # calibrate | evaluate
    args: tuple  # calib's arguments, paths as strings


def peak_rss() -> int:
    """This process image's peak RSS: VmHWM (getrusage's maxrss keeps the forking parent's RSS across exec when
    that was larger), else getrusage."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(argv: list[str]) -> dict:
    """Run one calib command in this process: its time, this process's peak RSS and calib's largest estimate."""
    from calib.cli import main

    seen: list[int] = []
    parts: list[dict] = []

    class Estimates(logging.Handler):
        def emit(self, record):
            if hasattr(record, "estimate"):
                seen.append(int(record.estimate))
                parts.append(record.parts)

    budget_log = logging.getLogger("calib.runners.budget")
    budget_log.addHandler(Estimates(logging.DEBUG))
    budget_log.setLevel(logging.DEBUG)  # a refusal logs its estimate at debug
    t0 = time.perf_counter()
    code = 0
    try:
        main(["--quiet", *argv], standalone_mode=False)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(bool(exc.code))
    except Exception as exc:  # calib's own errors (a budget refusal): reported as the job's outcome
        code, seen_error = 2, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        print(seen_error, file=sys.stderr)
    return {"seconds": time.perf_counter() - t0, "rc": code, "peak": peak_rss(),
            "estimate": max(seen) if seen else None, "parts": parts}


def run(job: Job, script: Path) -> dict:
    """`job` in a fresh interpreter (`script --model-worker ARGS`)."""
    r = subprocess.run([sys.executable, str(script), "--model-worker", json.dumps(list(job.args))], capture_output=True,
                       text=True, cwd=ROOT)
    lines = r.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        out = {"rc": r.returncode or 1, "peak": 0, "estimate": None, "seconds": 0.0}
    if out["rc"]:
        out["error"] = (r.stderr.strip().splitlines() or ["failed"])[-1]
    return {"model": job.model, "step": job.step, "args": list(job.args), **out}


def _case_jobs(name: str, tmp: Path, root: Path | None) -> list[Job]:
    sys.path.insert(0, str(ROOT / "tests" / "thirdparty"))
    import runs

    from calib.zoo import thirdparty

    case = runs.CASES[name] if name in runs.CASES else runs.CENTERFACE
    model = thirdparty.fetch(name, root)
    d = tmp / name
    cal = runs.photo_folder(case.calibration, d / "calibration-photos", case.transpose)
    ev = runs.photo_folder(case.evaluation, d / "evaluation-photos", case.transpose)
    return [Job(name, "calibrate", tuple(map(str, runs.calibrate_args(case, model, cal, d / "cal")))),
            Job(name, "evaluate", tuple(map(str, runs.evaluate_args(case, model, d / "cal", ev, d / "eval"))))]


def _stream_jobs(name: str, tmp: Path, root: Path | None) -> list[Job]:
    """A model fed from streams.py's inputs (silero-vad's audio chunks and state, ppocr-rec's text lines)."""
    sys.path.insert(0, str(ROOT / "tests" / "thirdparty"))
    import runs

    from calib.zoo import thirdparty

    case = runs.STREAM_CASES[name]
    model = thirdparty.fetch(name, root)
    d = tmp / name
    cal, ev, extra = runs.stream_inputs(name, model, d, root)
    c, e = runs.stream_args(case, model, cal, ev, d, extra)
    return [Job(name, "calibrate", tuple(map(str, c))), Job(name, "evaluate", tuple(map(str, e)))]


def _photos(files, folder: Path) -> Path:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, folder / f.name)
    return folder


# zoo model -> (preprocessing flags, evaluate's task flags); calibration on 16 samples, evaluation on 8 others
ZOO = {
    "yolov3-tiny": (("--letterbox", "--pad-value", "127"), ("--task", "detection")),
    "yolov8n-320": (("--resize", "320", "--letterbox", "--scale", str(1 / 255)), ("--task", "detection")),
    "pplcnet-orientation": (("--resize", "256", "--crop", "224", "--preprocess", "imagenet"),
                            ("--task", "classification")),
    "minilm-l6": ((), ("--task", "embedding")),
    "mobilenet_v2": (("--resize", "256", "--crop", "224", "--preprocess", "imagenet"), ("--task", "classification")),
}
# the zoo's MobileNetV2 is exported with torch (an extra): the same weights' ONNX from the golden set stands in
GOLDEN_MOBILENET = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"


def _zoo_jobs(name: str, tmp: Path) -> list[Job]:
    from calib import zoo

    model = str(GOLDEN_MOBILENET if name == "mobilenet_v2" else zoo.fetch(name))
    pre, task = ZOO[name]
    d = tmp / name
    if name == "minilm-l6":
        lines = (DATASETS / "sentences.txt").read_text().splitlines()
        d.mkdir(parents=True, exist_ok=True)
        (d / "cal.txt").write_text("\n".join(lines[:16]) + "\n")
        (d / "eval.txt").write_text("\n".join(lines[16:24]) + "\n")
        tok = ("--tokenizer", str(zoo.tokenizer_path("zoo:minilm-l6")))
        cal, ev = (str(d / "cal.txt"), *tok), (str(d / "eval.txt"), *tok)
    else:
        crops = sorted((DATASETS / "photos_crops").glob("*.jpg"))
        cal, ev = (str(_photos(crops[:16], d / "cal-photos")),), (str(_photos(crops[16:24], d / "eval-photos")),)
    caches = [a for al in ALGOS for a in ("--cache", str(d / "cal" / f"{al}.cache"))]
    return [Job(name, "calibrate", ("calibrate", model, "--data", *cal, *pre, "-o", str(d / "cal"))),
            Job(name, "evaluate", ("evaluate", model, *caches, "--data", *ev, *pre, *task, "-o", str(d / "eval")))]


def jobs(tmp: Path, only: set | None = None, thirdparty_root: Path | None = None) -> list[Job]:
    """Every model's calibrate and evaluate jobs (`only`: those models), work files under `tmp`."""
    sys.path.insert(0, str(ROOT / "tests" / "thirdparty"))
    import runs

    out = []
    for name in [*runs.CASES, runs.CENTERFACE.name]:
        if only is None or name in only:
            out += _case_jobs(name, tmp, thirdparty_root)
    for name in runs.STREAM_CASES:
        if only is None or name in only:
            out += _stream_jobs(name, tmp, thirdparty_root)
    for name in ZOO:
        if only is None or name in only:
            out += _zoo_jobs(name, tmp)
    return out


def shown(args: list, tmp: Path) -> str:
    """The command as a user types it: `calib ...`, the work folder and the model files' folders cut away."""
    import shlex

    words = []
    for a in args:
        if a.startswith(str(tmp)):
            a = a[len(str(tmp)) + 1:]
        elif a.endswith((".onnx", ".json")) and "/" in a:
            a = Path(a).name
        words.append(a)
    return shlex.join(["calib", *words])
