"""Turn what capture_trt.py brought back from the GPU into goldens under tests/golden/trt86-h200-entropy/.

    python benchmarks/entropy/make_goldens.py RESULTS_DIR STAGE_DIR [--out tests/golden/trt86-h200-entropy]

RESULTS_DIR: the unpacked entropy-trt.tar.gz (summary.json, models/, probes/); STAGE_DIR: the folder stage.py
wrote (manifest.json: how each model's data was made). Per model: TensorRT's caches, and golden.json saying where
the model comes from (package, file, sha256), how to rebuild the exact data fed (stage.py; sha256 of the arrays),
the batch size and what TensorRT reported. Probes: the caches and the ONNX files; their data is rebuilt by
probes.make() and checked against the sha256 recorded here. Large files (models, photos, probe arrays) are not
copied: the tests rebuild or fetch them and check their sha256.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEEP_BUILD = ("tensorrt", "gpu", "optimization_level", "seconds", "get_batch_calls", "get_batch_asked", "samples",
              "padded", "batch", "data_sha256", "input_shapes", "layer_summary", "names_asked", "model_sha256")


def build_info(p: Path) -> dict:
    info = json.loads(p.read_text())
    return {k: info[k] for k in KEEP_BUILD if k in info}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=Path)
    ap.add_argument("stage", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "trt86-h200-entropy")
    a = ap.parse_args()
    summary = json.loads((a.results / "summary.json").read_text())
    manifest = json.loads((a.stage / "manifest.json").read_text()) if (a.stage / "manifest.json").is_file() else {}
    a.out.mkdir(parents=True, exist_ok=True)
    made = []
    for mdir in sorted((a.results / "models").glob("*")):
        if not (mdir / "entropy2.cache").is_file():
            continue
        dest = a.out / mdir.name
        dest.mkdir(exist_ok=True)
        meta = {"model": f"{mdir.name}.onnx", "data": f"{mdir.name}.npz"}
        for kind in ("entropy2", "minmax"):
            if (mdir / f"{kind}.cache").is_file():
                shutil.copy(mdir / f"{kind}.cache", dest / f"{kind}.cache")
                meta[kind] = build_info(mdir / f"build-{kind}.json")
        info = json.loads((mdir / "build-entropy2.json").read_text())
        meta["model"] = Path(info["model_file"]).name
        meta["data"] = Path(info["data_file"]).name
        meta["batch"] = info["batch"]
        meta["stage"] = manifest.get("models", {}).get(mdir.name)
        meta["source"] = manifest.get("sources", {}).get(mdir.name)
        meta["photos"] = manifest.get("photos") if mdir.name in manifest.get("models", {}) else None
        meta["files_sha256"] = {k: v for k, v in manifest.get("sha256", {}).items()
                                if k in (meta["model"], meta["data"])}
        (dest / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
        made.append(mdir.name)
    pdir = a.results / "probes"
    if pdir.is_dir():
        dest = a.out / "probes"
        dest.mkdir(exist_ok=True)
        meta = {}
        for c in sorted(pdir.glob("*.cache")):
            shutil.copy(c, dest / c.name)
        for o in sorted(pdir.glob("*.onnx")):
            shutil.copy(o, dest / o.name)
        for b in sorted(pdir.glob("*-build.json")):
            meta[b.name[:-len("-build.json")]] = build_info(b)
        (dest / "probes.json").write_text(json.dumps(meta, indent=1) + "\n")
        made.append("probes")
    (a.out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "jobs"} | {
        "jobs": [{k: v for k, v in j.items() if k != "trace"} for j in summary.get("jobs", [])]}, indent=1) + "\n")
    print("goldens:", ", ".join(made), "->", a.out)


if __name__ == "__main__":
    main()
