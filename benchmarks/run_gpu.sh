#!/usr/bin/env bash
# The GPU measurements behind benchmarks/RESULTS_TRT.md, on a machine with an NVIDIA GPU, TensorRT 8.6 and the
# requirements-device.txt wheels for Python 3.10, from the repository root:
#   bash benchmarks/run_gpu.sh tests|table|table2|table-fallback|yolo OUT PHOTOS
# PHOTOS: the 256 golden photos (tests/golden/trt86-h200/make_calib_data.py writes them).
set -uo pipefail
step=$1 out=$2 photos=${3:-photos_224.npy}
py=${PYTHON:-python3.10}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CALIB_TRT_TACTIC_SOURCES=${CALIB_TRT_TACTIC_SOURCES:-EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS}
mkdir -p "$out"
case $step in
  tests)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    CALIB_GPU_OUT=$out/gpu timeout 500 $py -m pytest -m gpu tests/gpu -p no:cacheprovider -q -rs 2>&1 | tee "$out/pytest.log"
    ;;
  table)
    timeout 540 $py benchmarks/trt_table.py --photos "$photos" --out "$out/mbv2" --opt-level 3 \
      --only fp32,fp16,int8-tensorrt-entropy2,int8-percentile 2>&1 | tee "$out/table.log"
    ;;
  table2)
    timeout 540 $py benchmarks/trt_table.py --photos "$photos" --out "$out/mbv2b" --opt-level 3 \
      --only int8-minmax,int8-entropy,int8-mse,int8+fp16-tensorrt-entropy2 2>&1 | tee "$out/table2.log"
    ;;
  table-fallback)
    args=()
    for f in benchmarks/mbv2/fallback-*.txt; do n=${f##*/fallback-}; args+=(--fallback "${n%.txt}=$f"); done
    only=int8-pt
    for f in benchmarks/mbv2/fallback-*.txt; do n=${f##*/fallback-}; only+=",int8-${n%.txt}"; done
    timeout 540 $py benchmarks/trt_table.py --photos "$photos" --out "$out/mbv2fb" --opt-level 3 --only "$only" \
      "${args[@]}" 2>&1 | tee "$out/table-fallback.log"
    ;;
  yolo)
    timeout 540 $py -m calib run recipes/yolo.yaml --set backend.kind=tensorrt --set backend.optimization_level=1 \
      -o runs/yolo-trt 2>&1 | tee "$out/yolo.log"
    tar czf "$out/yolo-trt.tgz" --exclude='*.engine' --exclude='*.onnx' -C runs yolo-trt
    ;;
esac
