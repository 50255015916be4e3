#!/usr/bin/env bash
# The GPU measurements behind benchmarks/RESULTS_TRT.md, on a machine with an NVIDIA GPU, TensorRT 8.6 and the
# requirements-device.txt wheels for Python 3.10, from the repository root:
#   bash benchmarks/run_gpu.sh tests|table|table2|table-fallback|table-eq|sens-engine|yolo OUT PHOTOS
# PHOTOS: the 256 golden photos (tests/golden/trt86-h200/make_calib_data.py writes them).
#   bash benchmarks/run_gpu.sh yolov8n OUT [MODEL] [LEVEL]   recipes/yolov8n.yaml's engines (engine_order.py)
#   bash benchmarks/run_gpu.sh qdq OUT MODEL [JOBS]     issue 22's table for one model (mbv2|yolov3-tiny|yolov8n);
#   JOBS: a comma list of fp16,implicit,calib-qdq,calib-qdq-like,modelopt-qdq,rank-ALGO (built in that order;
#   default the first four); QDQ_LEVEL: builder optimization level (3), QDQ_BATCH: batch (0: the model's). Data: what
#   benchmarks/qdq_prepare.py wrote, staged as an extra (/opt/extra/qdq22, or $QDQ_DATA). Results accumulate in
#   /tmp/qdq22/MODEL across calls on one machine (engines already measured are kept); each call copies them to
#   OUT/qdq-MODEL/ (table.json, table.md, layers.json, profile.json) and logs to OUT/qdq-MODEL.log.
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
  table2)  # the other calib algorithms, and the fallback lists with every other quantizable layer pinned to INT8
    only=fp16,int8-minmax,int8-entropy,int8-mse
    args=()
    for f in benchmarks/mbv2/fallback-*.txt; do n=${f##*/fallback-}; n=${n%.txt}; args+=(--fallback "$n=$f"); only+=",int8-$n-pin"; done
    timeout 540 $py benchmarks/trt_table.py --photos "$photos" --out "$out/mbv2b" --opt-level 3 --only "$only" \
      "${args[@]}" > "$out/table2.log" 2>&1; tail -20 "$out/table2.log"
    ;;
  table-eq)  # calib's cross-layer equalization: every algorithm, the per-tensor mix, the fallback lists
    only=fp16,int8-minmax,int8-entropy,int8-percentile,int8-mse,int8-pt
    args=()
    for f in benchmarks/mbv2eq/fallback-*.txt; do n=${f##*/fallback-}; n=${n%.txt}; args+=(--fallback "$n=$f"); only+=",int8-$n,int8-$n-pin"; done
    timeout 540 $py benchmarks/trt_table.py --photos "$photos" --out "$out/mbv2eq" --opt-level 3 --equalize \
      --only "$only" "${args[@]}" > "$out/table-eq.log" 2>&1; tail -20 "$out/table-eq.log"
    ;;
  sens-engine)  # calib sensitivity with backend tensorrt: the CPU search, then its bisection on engines. The CPU
    # part reuses runs/mbv2-sens/search-cache.json when it is there for the same inputs: make it on a CPU machine
    # with the same command and backend.kind=onnxruntime, and carry it, so that the GPU time goes to the engines
    timeout -s ABRT 540 $py -X faulthandler -m calib sensitivity benchmarks/mbv2_golden.yaml \
      --set calibration_data.path="$photos" --set evaluation_data.path="$photos" --set backend.kind=tensorrt \
      --set backend.timing_cache=/tmp/calib-mbv2.timing --set sensitivity.min_speedup=1.2 ${SENS_SET:-} \
      -o runs/mbv2-sens > "$out/sens.log" 2>&1
    echo "exit $?" >> "$out/sens.log"; grep -v 'it/s\|variant/s\|tensor/s' "$out/sens.log" | tail -25
    tar czf "$out/sens.tgz" --exclude='*.onnx' -C runs mbv2-sens
    ;;
  yolo)  # the default recipe end to end with the TensorRT backend; a stack dump if it runs out of time
    ls -la "${CALIB_HOME:-$HOME/.cache/calib}/zoo/yolov3-tiny" > "$out/yolo.log" 2>&1
    timeout -s ABRT 500 $py -X faulthandler -m calib run recipes/yolo.yaml --set backend.kind=tensorrt \
      --set backend.optimization_level=1 -o runs/yolo-trt >> "$out/yolo.log" 2>&1
    echo "exit $?" >> "$out/yolo.log"; tail -30 "$out/yolo.log"
    tar czf "$out/yolo-trt.tgz" --exclude='*.engine' --exclude='*.onnx' -C runs yolo-trt
    ;;
  yolov8n)  # the YOLOv8n recipe with the TensorRT backend: its engines' order for benchmarks/engine_order.py
    # (MODEL: the zoo's yolov8n-320.onnx, staged; LEVEL: builder optimization level, default 1)
    # (YOLO_S: its time limit in seconds, default 450; Y8_REFERENCE: the float engines built first, default [fp16];
    # Y8_SET: more --set options, e.g. "--set backend.predict=false": no @engine simulation rows, the evaluation's
    # 178 images then take 4 of the 8 simulations; with them, 1.56 s an image on an H100 host's 16 cores)
    model=${3:-/opt/extra/yolov8n/yolov8n-320.onnx} level=${4:-1}
    timeout -s ABRT "${YOLO_S:-450}" $py -X faulthandler -m calib run recipes/yolov8n.yaml --set backend.kind=tensorrt \
      --set backend.optimization_level="$level" --set model="$model" --set backend.trt_calibrator=null \
      --set "backend.reference=${Y8_REFERENCE:-[fp16]}" ${Y8_SET:-} -o runs/yolov8n-trt > "$out/yolov8n.log" 2>&1
    echo "exit $?" >> "$out/yolov8n.log"; grep -v 'it/s\|img/s' "$out/yolov8n.log" | tail -30
    tar czf "$out/yolov8n-trt.tgz" --exclude='*.engine' --exclude='*.onnx' -C runs yolov8n-trt
    ;;
  qdq)  # issue 22: FP16, implicit INT8 from calib's best cache, calib's and ModelOpt's Q/DQ models from it
    m=$3 res=/tmp/qdq22/$3
    timeout 560 $py benchmarks/qdq_table.py --model "$m" --data "${QDQ_DATA:-/opt/extra/qdq22}" --out "$res" \
      --opt-level "${QDQ_LEVEL:-3}" --batch "${QDQ_BATCH:-0}" --only "${4:-fp16,implicit,calib-qdq,modelopt-qdq}" \
      --deadline-s "${QDQ_DEADLINE:-480}" > "$out/qdq-$m.log" 2>&1
    echo "exit $?" >> "$out/qdq-$m.log"
    mkdir -p "$out/qdq-$m"
    for f in table.json table.md layers.json profile.json; do [ -f "$res/$f" ] && cp "$res/$f" "$out/qdq-$m/"; done
    grep -v 'it/s' "$out/qdq-$m.log" | tail -14
    ;;
esac
