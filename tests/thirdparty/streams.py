"""Inputs that are not a folder of photos, and the checks of their models with each package's own decoding:
silero-vad on a real recording (pyannote.audio's sample.wav), ppocr-rec on text pieces cut from a real page
(scikit-image's `page`, datasets/photos/page.jpg).

silero-vad: the recording is streamed through the FP32 model as the package's OnnxWrapper does (512-sample chunks
with the previous chunk's last 64 samples in front, the state fed back), and each chunk's input and the state it
was fed are written as one sample of an .npz laid out as ONNX Runtime takes the model (input [N, 576], state
[2, N, 128]); the first half of the recording calibrates (every 4th chunk), the second half evaluates. The check
streams the whole recording again through a Q/DQ model, with its own state, and turns the probabilities into
speech segments with the package's own `get_speech_timestamps_from_probs`, read from the wheel's source.
"""
from __future__ import annotations

import ast
import sys
import wave
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PAGE = HERE.parents[1] / "datasets" / "photos" / "page.jpg"
CHUNK, CONTEXT, RATE = 512, 64, 16000
# text bands of page.jpg (rows), cut at word gaps into pieces of at most 6 times their height (the package
# feeds 48 x 320 to a batch whose widest piece is within 320 / 48)
BANDS = ((10, 36), (46, 65), (64, 84), (82, 101), (99, 118), (116, 136), (174, 191))


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768


def stream(model: Path, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs [N, 576], states fed [2, N, 128], speech probabilities [N]) of `audio` through `model`, chunk by
    chunk as silero_vad's OnnxWrapper runs it (the last chunk zero-padded, as get_speech_timestamps pads it)."""
    import onnxruntime as ort

    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    n = -(-len(audio) // CHUNK)
    audio = np.pad(audio, (0, n * CHUNK - len(audio)))
    state, ctx = np.zeros((2, 1, 128), np.float32), np.zeros((1, CONTEXT), np.float32)
    xs, states, probs = [], [], []
    for i in range(n):
        x = np.concatenate([ctx, audio[None, i * CHUNK:(i + 1) * CHUNK]], 1)
        xs.append(x[0])
        states.append(state[:, 0])
        p, state = s.run(None, {"input": x, "state": state, "sr": np.array(RATE, np.int64)})
        probs.append(float(p[0, 0]))
        ctx = x[:, -CONTEXT:]
    return np.stack(xs), np.stack(states, 1), np.array(probs)


def vad_data(model: Path, wav: Path, folder: Path) -> tuple[Path, Path]:
    """calibration.npz (every 4th chunk of the first half) and evaluation.npz (the second half)."""
    x, state, _ = stream(model, read_wav(wav))
    half = len(x) // 2
    folder.mkdir(parents=True, exist_ok=True)
    cal, ev = folder / "calibration.npz", folder / "evaluation.npz"
    np.savez(cal, input=x[:half:4], state=state[:, :half:4], sr=np.array(RATE, np.int64))
    np.savez(ev, input=x[half:], state=state[:, half:], sr=np.array(RATE, np.int64))
    return cal, ev


def package_timestamps(wheel: Path):
    """silero_vad's own get_speech_timestamps_from_probs, compiled from the wheel's utils_vad.py (the module
    imports torch at its top; this function does not use it)."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read("silero_vad/utils_vad.py").decode()
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_speech_timestamps_from_probs")
    space = {"List": list, "warnings": __import__("warnings"), "make_visualization": None}
    exec(compile(ast.Module([fn], []), "silero_vad/utils_vad.py", "exec"), space)
    return space["get_speech_timestamps_from_probs"]


def frames(segments: list, n: int) -> np.ndarray:
    """Per 512-sample chunk: whether a segment covers its middle."""
    mid = np.arange(n) * CHUNK + CHUNK // 2
    out = np.zeros(n, bool)
    for s in segments:
        out |= (mid >= s["start"]) & (mid < s["end"])
    return out


def reference_frames(rttm: str, n: int) -> np.ndarray:
    """Per chunk: whether sample.rttm's speaker turns (the recording's annotation) cover its middle."""
    segs = []
    for line in rttm.splitlines():
        f = line.split()
        if len(f) > 4 and f[0] == "SPEAKER":
            segs.append({"start": float(f[3]) * RATE, "end": (float(f[3]) + float(f[4])) * RATE})
    return frames(segs, n)


def vad_check(model: Path, qdq: dict, wav: Path, wheel: Path, rttm: str) -> dict:
    """Per Q/DQ model: the package's speech segments from its streamed probabilities against FP32's: chunk
    agreement (speech or not), segments, and each one's agreement with the recording's own annotation."""
    decode = package_timestamps(wheel)
    audio = read_wav(wav)
    _, _, p32 = stream(model, audio)
    ref = decode(list(p32), sampling_rate=RATE, audio_length_samples=len(audio))
    f32 = frames(ref, len(p32))
    truth = reference_frames(rttm, len(p32))
    out = {"chunks": len(p32), "fp32_segments": len(ref), "fp32_vs_annotation": float((f32 == truth).mean()),
           "configs": {}}
    for name, path in qdq.items():
        _, _, p = stream(path, audio)
        segs = decode(list(p), sampling_rate=RATE, audio_length_samples=len(audio))
        f = frames(segs, len(p))
        out["configs"][name] = {"segments": len(segs), "chunk_agreement": float((f == f32).mean()),
                                "decision_agreement": float(((p >= 0.5) == (p32 >= 0.5)).mean()),
                                "vs_annotation": float((f == truth).mean())}
    return out


# --- ppocr-rec: text pieces of a real page, the package's own preprocessing and CTC decoding ---

def text_pieces(gray: np.ndarray, max_ratio: float = 6.0, gap: int = 6) -> list[tuple]:
    """(y0, y1, x0, x1) of the text pieces of `gray`: each band of BANDS cut at column gaps wider than `gap`,
    the words joined while the piece stays within `max_ratio` times its height."""
    import cv2

    ink = gray < cv2.GaussianBlur(gray, (31, 31), 0).astype(np.int16) - 25
    out = []
    for y0, y1 in BANDS:
        cols = np.flatnonzero(ink[y0:y1].sum(0) > 0)
        if not len(cols):
            continue
        words, start, prev = [], cols[0], cols[0]
        for c in cols[1:]:
            if c - prev > gap:
                words.append((start, prev + 1))
                start = c
            prev = c
        words.append((start, prev + 1))
        cur = None
        for a, b in words:
            if cur is None:
                cur = [a, b]
            elif (b - cur[0] + 4) / (y1 - y0) <= max_ratio:
                cur[1] = b
            else:
                out.append((y0, y1, max(int(cur[0]) - 2, 0), int(cur[1]) + 2))
                cur = [a, b]
        out.append((y0, y1, max(int(cur[0]) - 2, 0), int(cur[1]) + 2))
    return out


def text_folders(folder: Path, calibration: int = 6, evaluation: int = 12) -> tuple[Path, Path]:
    """The pieces of page.jpg as PNG files: every 4th into calibration/, the next `evaluation` others into
    evaluation/."""
    import cv2

    bgr = cv2.imread(str(PAGE), cv2.IMREAD_COLOR)
    pieces = text_pieces(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
    cal, ev = folder / "calibration", folder / "evaluation"
    cal.mkdir(parents=True, exist_ok=True)
    ev.mkdir(parents=True, exist_ok=True)
    cal_pieces = [p for i, p in enumerate(pieces) if i % 4 == 0][:calibration]
    ev_pieces = [p for i, p in enumerate(pieces) if i % 4 != 0][:evaluation]
    for k, (y0, y1, x0, x1) in enumerate(cal_pieces):
        cv2.imwrite(str(cal / f"page_{k:02d}.png"), bgr[y0:y1, x0:x1])
    for k, (y0, y1, x0, x1) in enumerate(ev_pieces):
        cv2.imwrite(str(ev / f"page_{k:02d}.png"), bgr[y0:y1, x0:x1])
    return cal, ev


def charset(model: Path, out: Path) -> Path:
    """The model's metadata 'character' (one character a line) as a --charset file."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    chars = {p.key: p.value for p in m.metadata_props}["character"].splitlines()
    out.write_text("\n".join(chars) + "\n", encoding="utf-8")
    return out


def _package_decoder(wheel: Path, model: Path):
    """rapidocr's own CTCLabelDecode (ch_ppocr_rec/utils.py, read from the wheel; it needs numpy only), with the
    characters the package reads from the model's metadata."""
    import importlib.util
    import tempfile

    with zipfile.ZipFile(wheel) as z:
        source = z.read("rapidocr_onnxruntime/ch_ppocr_rec/utils.py")
    tmp = Path(tempfile.mkdtemp()) / "rapidocr_rec_utils.py"
    tmp.write_bytes(source)
    spec = importlib.util.spec_from_file_location("rapidocr_rec_utils", tmp)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["rapidocr_rec_utils"] = mod
    spec.loader.exec_module(mod)
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    return mod.CTCLabelDecode(character={p.key: p.value for p in m.metadata_props}["character"].splitlines())


def package_line(bgr: np.ndarray, max_wh_ratio: float) -> np.ndarray:
    """TextRecognizer.resize_norm_img: height 48, width ceil(48 w / h) within 48 * max_wh_ratio, padded with 0."""
    import math

    import cv2

    width = int(48 * max_wh_ratio)
    h, w = bgr.shape[:2]
    resized_w = min(width, int(math.ceil(48 * w / h)))
    x = cv2.resize(bgr, (resized_w, 48)).astype(np.float32).transpose(2, 0, 1) / 255
    x = (x - 0.5) / 0.5
    out = np.zeros((3, 48, width), np.float32)
    out[:, :, :resized_w] = x
    return out


def rec_check(model: Path, qdq: dict, photos: list, wheel: Path) -> dict:
    """Per Q/DQ model: exact match and character error rate of its strings against FP32's, both made by the
    package's own preprocessing (one batch, max ratio 320 / 48 as the package starts from) and CTCLabelDecode."""
    import cv2
    import onnxruntime as ort

    decode = _package_decoder(wheel, model)
    imgs = [cv2.imread(str(p), cv2.IMREAD_COLOR) for p in photos]
    ratio = max([320 / 48] + [i.shape[1] / i.shape[0] for i in imgs])
    x = np.stack([package_line(i, ratio) for i in imgs])

    def texts(path):
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return [t for t, _ in decode(s.run(None, {"x": x})[0])]

    ref = texts(model)
    out = {"fp32": ref, "configs": {}}
    for name, path in qdq.items():
        got = texts(path)
        edits = sum(_edits(a, b) for a, b in zip(ref, got))
        out["configs"][name] = {"exact_match": float(np.mean([a == b for a, b in zip(ref, got)])),
                                "cer": edits / max(1, sum(len(a) for a in ref)), "texts": got}
    return out


def _edits(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]
