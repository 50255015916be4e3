#!/usr/bin/env bash
# What deployments need, on a machine with an NVIDIA GPU, TensorRT 8.6 and the requirements-device.txt wheels for
# Python 3.10, from the repository root, with no network: the zoo models (yolov8n-320, minilm-l6) already in
# $CALIB_HOME/zoo (`calib zoo fetch` on a machine with one, then copy the folder).
#   bash benchmarks/deploy_gpu.sh OUT [LEVEL] [STEPS]
# LEVEL: TensorRT's builder optimization level (default 1: functional runs; 3 for timings you report).
# STEPS: a comma list of profiles,plugins,minilm-test,yolov8n,minilm,nms (tests = the first three; default
#   tests,yolov8n,minilm), each under its own time limit (TESTS_S, YOLO_S, MINILM_S, NMS_S seconds). Measured on an
#   H200 with TensorRT 8.6 at level 1 and the tactic sources below: a YOLOv8n (320, batch 1-16) engine builds in
#   ~80 s, a MiniLM one in 7-34 s; give each step its own device call.
#   profiles     tests/gpu/test_profiles_gpu.py: the golden CNN with a 1/8/32 batch profile, FP32 and INT8
#   plugins      tests/gpu/test_plugins_gpu.py: YOLOv8n + EfficientNMS_TRT, calibrated on the cut graph, built
#   minilm-test  tests/gpu/test_minilm_gpu.py: the sentence encoder in FP16 and INT8 Q/DQ
#                (their figures in OUT/gpu/*.json, the logs in OUT/pytest-STEP.log)
#   yolov8n  calib run recipes/yolov8n.yaml with backend tensorrt -> OUT/yolov8n.log, OUT/runs/yolov8n-trt
#   minilm   calib run recipes/minilm.yaml with backend tensorrt -> OUT/minilm.log, OUT/runs/minilm-trt
#   nms      calib run on YOLOv8n + EfficientNMS_TRT with backend tensorrt -> OUT/nms.log, OUT/runs/yolov8n-nms-trt
# benchmarks/deploy_table.py OUT turns what comes back into benchmarks/RESULTS_DEPLOY.md.
set -uo pipefail
out=$1 level=${2:-1} steps=${3:-tests,yolov8n,minilm}
py=${PYTHON:-python3.10}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CALIB_TRT_TACTIC_SOURCES=${CALIB_TRT_TACTIC_SOURCES:-EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS}
export CALIB_TEST_OPT_LEVEL=$level
mkdir -p "$out/runs"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $py -c 'import tensorrt; print("tensorrt", tensorrt.__version__)'
  echo "builder optimization level $level"; } > "$out/device.txt" 2>&1
ls -la "${CALIB_HOME:-$HOME/.cache/calib}/zoo"/* >> "$out/device.txt" 2>&1
for step in ${steps//,/ }; do
  t0=$(date +%s)
  case $step in
    tests|profiles|plugins|minilm-test)
      case $step in
        tests) files="tests/gpu/test_profiles_gpu.py tests/gpu/test_plugins_gpu.py tests/gpu/test_minilm_gpu.py" ;;
        minilm-test) files=tests/gpu/test_minilm_gpu.py ;;
        *) files=tests/gpu/test_${step}_gpu.py ;;
      esac
      CALIB_GPU_OUT=$out/gpu timeout -s ABRT ${TESTS_S:-300} $py -X faulthandler -m pytest -m gpu -p no:cacheprovider \
        -q -rs $files > "$out/pytest-$step.log" 2>&1
      echo "exit $?" >> "$out/pytest-$step.log"; tail -5 "$out/pytest-$step.log"
      ;;
    yolov8n)
      timeout -s ABRT ${YOLO_S:-400} $py -X faulthandler -m calib run recipes/yolov8n.yaml --set backend.kind=tensorrt \
        --set backend.optimization_level=$level --set "calibration.algorithms=[entropy, percentile]" \
        --set "backend.reference=[fp16]" \
        --set backend.predict=false --set backend.trt_calibrator=null -o "$out/runs/yolov8n-trt" > "$out/yolov8n.log" 2>&1
      echo "exit $?" >> "$out/yolov8n.log"; grep -v 'it/s\|img/s' "$out/yolov8n.log" | tail -15
      ;;
    minilm)
      timeout -s ABRT ${MINILM_S:-300} $py -X faulthandler -m calib run recipes/minilm.yaml --set backend.kind=tensorrt \
        --set backend.optimization_level=$level --set "calibration.algorithms=[minmax, mse]" \
        --set evaluation_data.limit=64 --set backend.predict=false -o "$out/runs/minilm-trt" > "$out/minilm.log" 2>&1
      echo "exit $?" >> "$out/minilm.log"; grep -v 'it/s\|img/s' "$out/minilm.log" | tail -15
      ;;
    nms)  # not in the default list: calib run on YOLOv8n + EfficientNMS_TRT (the cut graph calibrated, the whole built)
      $py -c 'import sys, onnx; from calib import zoo; from calib.deploy.plugins import add_efficient_nms
onnx.save(add_efficient_nms(onnx.load(str(zoo.fetch("yolov8n-320")))), sys.argv[1])' "$out/yolov8n-320-nms.onnx"
      nms_model=$(realpath "$out/yolov8n-320-nms.onnx")
      timeout -s ABRT ${NMS_S:-300} $py -X faulthandler -m calib run recipes/yolov8n.yaml --set backend.kind=tensorrt \
        --set model="$nms_model" ${NMS_SET:-} --set evaluation.detection.format=yolov3 \
        --set backend.optimization_level=$level --set "calibration.algorithms=[entropy]" --set backend.predict=false \
        --set backend.trt_calibrator=null -o "$out/runs/yolov8n-nms-trt" > "$out/nms.log" 2>&1
      echo "exit $?" >> "$out/nms.log"; grep -v 'it/s\|img/s' "$out/nms.log" | tail -15
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "$step: $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
done
find "$out/runs" \( -name '*.engine' -o -name '*.onnx' \) -delete 2>/dev/null
exit 0
