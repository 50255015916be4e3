#!/usr/bin/env bash
# The CPU half of a GPU lease for benchmarks/gpu_pipeline.sh, from a fresh checkout: everything the device needs
# under benchmarks/gpu-stage/ (ignored), then the parts in .trt-stage/ (the trt-device kit's stage.sh).
#   bash benchmarks/gpu_stage.sh TRT_DEVICE_DIR [MODELS [MODELOPT_PYTHON [QDQ_PREPARE_ARGS...]]]
# TRT_DEVICE_DIR  the folder of the trt-device kit (stage.sh, assemble.sh)
# MODELS          benchmarks/qdq_prepare.py's --models (default mbv2; mbv2,yolov3-tiny,yolov8n for every table)
# MODELOPT_PYTHON python of an environment with nvidia-modelopt[onnx] (ModelOpt's Q/DQ rows; '' leaves them out)
# QDQ_PREPARE_ARGS more arguments for qdq_prepare.py, e.g. --cache yolov3-tiny=percentile (the cache of the
#                 earlier YOLOv3-tiny tables; the tree's simulation now picks mse there)
# calib-home always holds what tests/gpu needs: the zoo's yolov8n-320 (plugin test) and minilm-l6 with its
# sentences as arrays (no tokenizer there: CALIB_MINILM_NPZ), the third-party MTCNN P-Net (sensitivity test) and the
# golden photos_224.npy. MINILM=0 leaves MiniLM out (about 90 MB less to send); HOME_ITEMS picks what of calib-home
# travels (zoo thirdparty photos_224.npy minilm_sentences192.npz).
set -euo pipefail
kit=${1:?usage: gpu_stage.sh TRT_DEVICE_DIR [MODELS [MODELOPT_PYTHON [QDQ_PREPARE_ARGS...]]]}
models=${2:-mbv2}
mo=${3:-}
shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "no $py: run 'make .venv/.installed' first (or set PYTHON)" >&2; exit 2; }
out=benchmarks/gpu-stage
home=$out/calib-home
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$home"
export CALIB_HOME=$work/calib-home  # downloads and conversions here; only the models are copied into the staging

"$py" -m calib zoo fetch yolov8n-320 > /dev/null
"$py" -c 'from calib.zoo.thirdparty import fetch; fetch("mtcnn-pnet")'
if [ "${MINILM:-1}" != 0 ]; then
  minilm=$("$py" -m calib zoo fetch minilm-l6 | tail -1)
  "$py" - "$minilm" "$home/minilm_sentences192.npz" <<'EOF'
import sys
from pathlib import Path

import numpy as np

from calib.data.text import TextSource, read_lines
from calib.quantize.model import inspect_model

model, out = Path(sys.argv[1]), sys.argv[2]
lines = read_lines(Path("datasets/sentences.txt"))[:192]  # as tests/gpu/test_minilm_gpu.py tokenizes them
batch = next(iter(TextSource(lines, model.parent / "tokenizer.json", inspect_model(model).inputs, batch_size=192)))
np.savez(out, **batch)
EOF
fi
rm -rf "$home/zoo" "$home/thirdparty"
cp -r "$CALIB_HOME/zoo" "$CALIB_HOME/thirdparty" "$home/"
rm -rf "$home/thirdparty/archives"
"$py" tests/golden/trt86-h200/make_calib_data.py "$work" 256 1 > /dev/null
cp "$work/photos_224.npy" "$home/"

"$py" benchmarks/qdq_prepare.py --out "$out" --models "$models" --photos224 "$home/photos_224.npy" \
  ${mo:+--modelopt-python "$mo"} "$@"
# what travels: the models asked for (qdq22 keeps earlier ones) and calib-home's HOME_ITEMS (default all; e.g.
# HOME_ITEMS=thirdparty for the P-Net sensitivity test alone: 24 parts with one model instead of 32 with three)
send=$work/send
mkdir -p "$send/qdq22" "$send/calib-home"
cp "$out/qdq22/manifest.json" "$send/qdq22/"
for m in ${models//,/ }; do cp -r "$out/qdq22/$m" "$send/qdq22/"; done
for item in ${HOME_ITEMS:-zoo thirdparty photos_224.npy minilm_sentences192.npz}; do
  if [ -e "$home/$item" ]; then cp -r "$home/$item" "$send/calib-home/"; fi
done
rm -rf .trt-stage
bash "$kit/stage.sh" -r requirements-device.txt "$send/qdq22" "$send/calib-home"
