#!/usr/bin/env bash
# Issue 32's GPU work as one background pipeline on the device machine, so that no build is cut at the end of a
# device call: `start` copies the tree to /tmp/calib-run and runs the steps there one after another, detached
# (setsid: it outlives the call that starts it and runs until the machine goes back); `collect` waits for it up to
# WAIT_S seconds and packs what is there into OUT (res.tgz and progress.log, the engines and timing caches unless
# KEEP_ENGINES=0; the tables on stdout).
#   bash benchmarks/gpu_pipeline.sh start STEP[,STEP...]
#   bash benchmarks/gpu_pipeline.sh collect OUT WAIT_S
#   bash benchmarks/gpu_pipeline.sh stop
# Needs /opt/trt86.env and the extras of the staging, made on a CPU machine under benchmarks/gpu-stage/ (ignored):
#   qdq22       benchmarks/qdq_prepare.py's qdq22 folder (the models not run can stay out)
#   calib-home  zoo/yolov8n-320 and zoo/minilm-l6 (`calib zoo fetch`, copied from $CALIB_HOME/zoo) and
#               minilm_sentences192.npz (the first 192 lines of datasets/sentences.txt through the zoo tokenizer, as
#               tests/gpu/test_minilm_gpu.py reads them: input_ids, attention_mask, token_type_ids)
#   TRT_STAGE_PART_MB=36 bash <trt-device>/stage.sh -r requirements-device.txt benchmarks/gpu-stage/qdq22 \
#     benchmarks/gpu-stage/calib-home
# STEPs, in the order given:
#   functional  deploy_gpu.sh's profiles, minilm-test and plugins at builder level 1, side by side (functional
#               runs: their latencies are not timings); MiniLM's sentences from a staged .npz (no tokenizer there)
#   ranks-yolov8n  YOLOv8n's implicit engines of the four caches (qdq_table rank-*, accuracy only, two processes)
#   qdq-yolov3-tiny, qdq-yolov8n   issue 22's table at batch 4, level 1 (Y3_DEADLINE / Y8_DEADLINE s: 780 / 600);
#               YOLOv3-tiny's adds calib-qdq-stem (the stem Conv's output quantized before its LeakyRelu)
#   qdq-mbv2    MobileNetV2 at level 3, batch 32: implicit, calib-qdq, calib-qdq-like, fp16
#   minilm-run, yolov8n-run        deploy_gpu.sh's `calib run` steps (level 1)
#   order-yolov8n  run_gpu.sh yolov8n: `calib run recipes/yolov8n.yaml` on TensorRT, the four caches' implicit engines
#               (level 1), for benchmarks/engine_order.py
#   fp16-yolov3-tiny, fp16-mbv2    issue 31: the FP16+INT8 model (--float-type fp16)
#               beside the FP32-float Q/DQ model, the implicit engine and FP16 (YOLOv3-tiny level 1 batch 4;
#               MobileNetV2 level 3 batch 32)
#   l3-yolov8n  YOLOv8n-320 at level 3, batch Y8_BATCH (4): Y8_ENGINES (implicit, calib-qdq, fp16, modelopt-qdq), then
#               in turns
#   l3-yolov8n-alt  YOLOv8n-320 at level 3, batch 4: implicit, calib-qdq, then fp16, each set timed in turns
#               (benchmarks/alternate.py: plain and CUDA-graph figures); collect brings engines back (KEEP_ENGINES=0: not)
#   l3-yolov8n-resume  calib-qdq and modelopt-qdq beside the implicit and FP16 engines an earlier H100 lease
#               brought back, all in turns
#   l3-yolov8n-residual  calib-qdq-resconv and -resact (--residual-branch conv / act) beside the carried implicit,
#               FP16 and calib-qdq engines, all five in turns
#   l3-mbv2, l3-pplcnet  MobileNetV2 / PP-LCNet at level 3, batch 1 and 4 (L3_BATCHES): implicit, calib-qdq, fp16,
#               modelopt-qdq, then the built ones in turns (alternate.py: plain, CUDA graphs and the kernels one run
#               launches)
#   l3-resume   RESUME=MODEL:BATCH:CARRIED:BUILD: engines an earlier lease on the same card brought back (ENGINES_DIR,
#               with MODEL.timing where collect brought the timing cache; their rows from RESUME_RAW) beside new
#               builds, all timed in turns
#   gpu-tests   pytest -m gpu, a file of tests/gpu at a time (GPU_TESTS), each capped at TEST_FILE_S, all at TESTS_S;
#               the golden photos from calib-home/photos_224.npy; the tests' figures (CALIB_GPU_OUT) in gpu-out/
set -uo pipefail; shopt -s nullglob
P=/tmp/pipe R=/tmp/pipe/res
case $1 in
  start)  # from the tree of the call (the script's own), never from /tmp/calib-run, which this replaces
    src=$(cd "$(dirname "$0")/.." 2>/dev/null && pwd -P) || { echo "start: the script's tree is gone" >&2; exit 2; }
    [ "$src" = /tmp/calib-run ] && { echo "start: run the call's own benchmarks/gpu_pipeline.sh, not" \
      "/tmp/calib-run's (start replaces that copy)" >&2; exit 2; }
    cd "$src" && rm -rf /tmp/calib-run "$P" && mkdir -p "$R" /tmp/calib-run
    tar cf - --exclude=./.trt-stage --exclude=./.git --exclude=./.venv . | tar xf - -C /tmp/calib-run
    cd /tmp/calib-run && setsid nohup bash benchmarks/gpu_pipeline.sh run "$2" > "$P/pipeline.log" 2>&1 < /dev/null &
    sleep "${START_CHECK_S:-5}"  # a pipeline that died at once says so here, not at the end of the call
    grep -q " start " "$P/progress.log" 2>/dev/null && kill -0 "$(cat "$P/pid" 2>/dev/null)" 2>/dev/null \
      || [ -f "$P/done" ] || { echo "pipeline did not start: $2" >&2; tail -5 "$P/pipeline.log" >&2; exit 1; }
    echo "pipeline started: $2"
    ;;
  run)
    . "${TRT_ENV:-/opt/trt86.env}" || { echo "no TensorRT environment: ${TRT_ENV:-/opt/trt86.env}"; exit 1; }
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CALIB_HOME=/opt/extra/calib-home TESTS_S=${TESTS_S:-400} \
      CALIB_MINILM_NPZ=/opt/extra/calib-home/minilm_sentences192.npz
    export CALIB_TRT_TACTIC_SOURCES=${CALIB_TRT_TACTIC_SOURCES:-EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS}
    [ -f /opt/extra/calib-home/photos_224.npy ] && export CALIB_PHOTOS_224=/opt/extra/calib-home/photos_224.npy
    echo $$ > "$P/pid"
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      python3.10 -c 'import tensorrt; print("tensorrt", tensorrt.__version__)'; } > "$R/device.txt" 2>&1
    log() { echo "$(date +%T) $*" | tee -a "$P/progress.log"; }
    turns() {  # DIR ENGINES: the table's built engines timed in turns, plain and as CUDA graphs, with the kernels
      # one run launches (benchmarks/alternate.py; a table times each engine right after its build)
      timeout "${TURNS_S:-300}" python3.10 benchmarks/alternate.py "$1" --engines "$2" --repeats 40
    }
    qdq() {  # MODEL LEVEL BATCH JOBS OUTDIR [TIMEOUT]; QDQ_REDO=1: JOBS rebuilt where table.json has their rows
      timeout "${6:-600}" python3.10 benchmarks/qdq_table.py --model "$1" --data /opt/extra/qdq22 --out "$5" \
        --opt-level "$2" --batch "$3" --only "$4" --deadline-s "${QDQ_DEADLINE:-520}" \
        --estimate-scale "${QDQ_EST_SCALE:-1.25}" ${QDQ_REDO:+--redo}
    }
    for step in ${2//,/ }; do
      t0=$SECONDS; log "start $step"
      case $step in
        functional)  # the three deploy tests side by side (plugins capped at PLUGINS_S)
          bash benchmarks/deploy_gpu.sh "$R/deploy" 1 profiles > "$R/deploy-a.log" 2>&1 &
          bash benchmarks/deploy_gpu.sh "$R/deploy-minilm" 1 minilm-test > "$R/deploy-b.log" 2>&1 &
          [ "${PLUGINS_S:-260}" = 0 ] || TESTS_S=${PLUGINS_S:-260} bash benchmarks/deploy_gpu.sh "$R/deploy-plugins" 1 plugins > "$R/deploy-c.log" 2>&1 &
          wait
          ;;
        ranks-yolov8n)  # YOLOv8n's implicit engines of the four caches (accuracy only), two processes
          QDQ_DEADLINE=900 qdq yolov8n 1 4 rank-minmax,rank-entropy /tmp/qdq22/yolov8n-rank-a 640 > "$R/rank-a.log" 2>&1 &
          QDQ_DEADLINE=900 qdq yolov8n 1 4 rank-percentile,rank-mse /tmp/qdq22/yolov8n-rank-b 640 > "$R/rank-b.log" 2>&1 &
          wait
          ;;
        qdq-yolov3-tiny)  # with the stem rule (--quantize-stem-output) beside the plain placement: 6 builds
          QDQ_DEADLINE=${Y3_DEADLINE:-780} qdq yolov3-tiny 1 4 \
            implicit,calib-qdq,calib-qdq-stem,modelopt-qdq,fp16,calib-qdq-like /tmp/qdq22/yolov3-tiny 840 \
            > "$R/qdq-yolov3-tiny.log" 2>&1
          echo "exit $?" >> "$R/qdq-yolov3-tiny.log"
          ;;
        qdq-yolov8n)
          QDQ_DEADLINE=${Y8_DEADLINE:-600} qdq yolov8n 1 4 implicit,calib-qdq,modelopt-qdq,fp16,calib-qdq-like \
            /tmp/qdq22/yolov8n 660 > "$R/qdq-yolov8n.log" 2>&1
          echo "exit $?" >> "$R/qdq-yolov8n.log"
          ;;
        qdq-mbv2)  # the staging leaves out MobileNetV2's FP32 model: the tree's golden copy is the same file
          [ -f /opt/extra/qdq22/mbv2/model.onnx ] ||
            cp tests/golden/trt86-h200/mobilenet_v2/mobilenet_v2_imagenet.onnx /opt/extra/qdq22/mbv2/model.onnx
          QDQ_DEADLINE=${MBV2_DEADLINE:-420} qdq mbv2 3 32 implicit,calib-qdq,calib-qdq-like,fp16 /tmp/qdq22/mbv2 \
            > "$R/qdq-mbv2.log" 2>&1
          echo "exit $?" >> "$R/qdq-mbv2.log"
          ;;
        fp16-yolov3-tiny)  # issue 31: the FP16+INT8 model beside the FP32-float Q/DQ model and the implicit engine
          QDQ_DEADLINE=${Y3_DEADLINE:-780} qdq yolov3-tiny 1 4 \
            implicit,calib-qdq-stem,calib-qdq-stem-fp16,fp16 /tmp/qdq22/yolov3-tiny 840 \
            > "$R/fp16-yolov3-tiny.log" 2>&1
          echo "exit $?" >> "$R/fp16-yolov3-tiny.log"
          ;;
        fp16-mbv2)  # issue 31 on MobileNetV2 at level 3, batch 32
          [ -f /opt/extra/qdq22/mbv2/model.onnx ] ||
            cp tests/golden/trt86-h200/mobilenet_v2/mobilenet_v2_imagenet.onnx /opt/extra/qdq22/mbv2/model.onnx
          QDQ_DEADLINE=${MBV2_DEADLINE:-600} qdq mbv2 3 32 implicit,calib-qdq,calib-qdq-fp16,fp16 \
            /tmp/qdq22/mbv2 660 \
            > "$R/fp16-mbv2.log" 2>&1
          echo "exit $?" >> "$R/fp16-mbv2.log"
          ;;
        l3-yolov3-tiny)  # issue 40: level 3, batch 4 then 1: the default placement (stem output quantized) beside
          # --keep-stem-output-float, the implicit engine and FP16
          # (Y3_ENGINES: which, in build order; the deadline cuts the last ones)
          e=${Y3_ENGINES:-implicit,calib-qdq,calib-qdq-float-stem,fp16,modelopt-qdq}
          for b in ${L3_BATCHES:-4 1}; do
            QDQ_DEADLINE=${Y3_DEADLINE:-1500} qdq yolov3-tiny 3 "$b" "$e" /tmp/qdq22/yolov3-tiny-l3-b$b 1600 \
              > "$R/l3-yolov3-tiny-b$b.log" 2>&1
            echo "exit $?" >> "$R/l3-yolov3-tiny-b$b.log"
            turns /tmp/qdq22/yolov3-tiny-l3-b$b "$e" > "$R/alt-yolov3-tiny-b$b.log" 2>&1
          done
          ;;
        l3-yolov8n)  # issue 40: level 3 at Y8_BATCH (4): the default placement beside the implicit engine and FP16
          # (Y8_ENGINES: which, in build order; the deadline cuts the last ones)
          b=${Y8_BATCH:-4} e=${Y8_ENGINES:-implicit,calib-qdq,fp16,modelopt-qdq}
          QDQ_DEADLINE=${Y8_DEADLINE:-1500} qdq yolov8n 3 "$b" "$e" /tmp/qdq22/yolov8n-l3-b$b 1600 \
            > "$R/l3-yolov8n-b$b.log" 2>&1
          echo "exit $?" >> "$R/l3-yolov8n-b$b.log"
          turns /tmp/qdq22/yolov8n-l3-b$b "$e" > "$R/alt-yolov8n-b$b.log" 2>&1
          ;;
        l3-mbv2|l3-pplcnet)  # issue 40: a zoo classifier (MobileNetV2, PP-LCNet) at level 3, batch 1 then 4
          # (L3_BATCHES): implicit, calib's Q/DQ, FP16, ModelOpt's Q/DQ, then in turns (the staged qdq22 must hold the
          # model: qdq_prepare.py --models mbv2 / pplcnet); MBV2_DEADLINE caps each batch's builds, L3_ENGINES picks
          # them and their order (PP-LCNet's implicit build alone took 770 s on an H100)
          c=${step#l3-} engines=${L3_ENGINES:-implicit,calib-qdq,fp16,modelopt-qdq}
          for b in ${L3_BATCHES:-1 4}; do
            QDQ_DEADLINE=${MBV2_DEADLINE:-900} qdq "$c" 3 "$b" "$engines" \
              /tmp/qdq22/$c-l3-b$b 960 > "$R/l3-$c-b$b.log" 2>&1
            echo "exit $?" >> "$R/l3-$c-b$b.log"
            turns /tmp/qdq22/$c-l3-b$b "$engines" > "$R/alt-$c-b$b.log" 2>&1
          done
          ;;
        l3-yolov8n-alt)  # issue 40: level 3, batch 4: implicit and calib's default Q/DQ, timed in turns (plain and as
          # CUDA graphs: benchmarks/alternate.py), then FP16 and the three in turns
          D=/tmp/qdq22/yolov8n-l3-b4
          QDQ_DEADLINE=${Y8_DEADLINE:-1500} qdq yolov8n 3 4 implicit,calib-qdq $D 1600 > "$R/l3-yolov8n-b4.log" 2>&1
          echo "exit $?" >> "$R/l3-yolov8n-b4.log"
          timeout 300 python3.10 benchmarks/alternate.py $D --engines implicit,calib-qdq --name alternate-2 \
            > "$R/alt-yolov8n-2.log" 2>&1
          QDQ_DEADLINE=${Y8_DEADLINE:-1500} qdq yolov8n 3 4 fp16 $D 1600 >> "$R/l3-yolov8n-b4.log" 2>&1
          echo "exit $?" >> "$R/l3-yolov8n-b4.log"
          timeout 300 python3.10 benchmarks/alternate.py $D --engines implicit,calib-qdq,fp16 --name alternate-3 \
            > "$R/alt-yolov8n-3.log" 2>&1
          ;;
        l3-yolov8n-resume)  # the implicit and FP16 engines of an earlier H100 lease, carried back
          # (benchmarks/gpu-stage/engines/h100-l3-b4, the same card only): calib-qdq built beside them, all three in turns
          D=/tmp/qdq22/yolov8n-l3-b4 E=${ENGINES_DIR:-benchmarks/gpu-stage/engines/h100-l3-b4} T=benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4
          mkdir -p $D/work && cp $T/table.json $T/layers.json $T/profile.json $D/
          for n in implicit fp16; do cp $E/yolov8n-l3-b4-$n.engine $D/work/$n.engine && cp $T/$n.engine.json $D/work/; done
          QDQ_DEADLINE=5000 qdq yolov8n 3 4 calib-qdq,modelopt-qdq $D 1400 > "$R/l3-yolov8n-b4.log" 2>&1
          echo "exit $?" >> "$R/l3-yolov8n-b4.log"
          timeout 300 python3.10 benchmarks/alternate.py $D --engines implicit,calib-qdq,fp16,modelopt-qdq --name alternate-4 \
            > "$R/alt-yolov8n-3q.log" 2>&1
          ;;
        l3-yolov8n-residual)  # --residual-branch conv and act beside the carried implicit, FP16 and calib-qdq engines
          D=/tmp/qdq22/yolov8n-l3-b4 E=${ENGINES_DIR:-benchmarks/gpu-stage/engines/h100-l3-b4} T=benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4
          mkdir -p $D/work && cp $T/table.json $T/layers.json $T/profile.json $D/
          for n in implicit fp16 calib-qdq; do cp $E/yolov8n-l3-b4-$n.engine $D/work/$n.engine && cp $T/$n.engine.json $D/work/; done
          QDQ_DEADLINE=5000 qdq yolov8n 3 4 calib-qdq-resconv,calib-qdq-resact $D 1400 > "$R/l3-yolov8n-res.log" 2>&1
          echo "exit $?" >> "$R/l3-yolov8n-res.log"
          timeout 360 python3.10 benchmarks/alternate.py $D --engines implicit,calib-qdq,calib-qdq-resconv,calib-qdq-resact,fp16 \
            --name alternate-res > "$R/alt-yolov8n-res.log" 2>&1
          ;;
        l3-resume)  # engines an earlier lease on the same card brought back (collect), new builds beside them, all in
          # turns. RESUME=MODEL:BATCH:CARRIED:BUILD (e.g. yolov8n:1:implicit,calib-qdq:fp16,modelopt-qdq); the carried
          # engines in ENGINES_DIR as collect names them (MODEL-l3-bBATCH-NAME.engine), their rows from RESUME_RAW (the
          # committed raw folder of that table: table.json, layers.json, profile.json, NAME.engine.json)
          IFS=: read -r m b carried build <<< "${RESUME:?RESUME=MODEL:BATCH:CARRIED:BUILD}"
          n=$m-l3-b$b; D=/tmp/qdq22/$n E=${ENGINES_DIR:?} T=${RESUME_RAW:?} card=$(head -1 "$R/device.txt" | cut -d, -f1)
          other= bad=; mkdir -p $D/work
          for e in ${carried//,/ }; do  # each built on this card (an engine plan runs on another card, but its table
            # would mix two) and the plan its sidecar names (a missing part, a wrong file); whole, or in the parts
            # collect splits an engine over 15 MB into
            grep -q "\"gpu\": \"$card (" "$T/$e.engine.json" || other="$other $e"
            f=$D/work/$e.engine parts=("$E/$n-$e.engine".part?)
            if [ -f "$E/$n-$e.engine" ]; then cp "$E/$n-$e.engine" "$f"; else cat "${parts[@]}" /dev/null > "$f"; fi
            cp $T/$e.engine.json $D/work/
            grep -q "\"engine_sha256\": \"$(sha256sum < "$f" | cut -c1-64)\"" "$T/$e.engine.json" || bad="$bad $e"
          done
          if [ -z "$card" ] || [ -n "$other$bad" ]; then  # nothing of it left for collect to take for a table
            rm -rf $D; log "l3-resume: not resumed: built on another card than '$card':${other:- none};" \
              "not the plans their sidecars name:${bad:- none}"; continue; fi
          cp $T/table.json $T/layers.json $T/profile.json $D/
          [ -f "$E/$m.timing" ] && cp "$E/$m.timing" /tmp/qdq22/  # the timing cache collect brought back with them
          # BUILD rebuilt even where the carried table.json has its row (an engine that did not come back: without
          # --redo its old row was kept and it was left out of the turns)
          QDQ_REDO=1 QDQ_DEADLINE=${RESUME_DEADLINE:-5000} qdq "$m" 3 "$b" "$build" $D 1600 > "$R/l3-$n-resume.log" 2>&1
          echo "exit $?" >> "$R/l3-$n-resume.log"
          turns $D "$carried,$build" > "$R/alt-$n-resume.log" 2>&1
          ;;
        gpu-tests)  # the GPU tests of the tree (level 1), a file at a time: each capped at TEST_FILE_S, all at TESTS_S;
          # failures are printed when they happen (CALIB_GPU_INSTAFAIL) and the tests' figures go to gpu-out/
          start=$SECONDS end=$((SECONDS + ${TESTS_S:-400}))
          for f in ${GPU_TESTS:-tests/gpu/test_*.py}; do
            left=$((end - SECONDS)) cap=${TEST_FILE_S:-300}
            if [ "$left" -le 10 ]; then echo "not run (TESTS_S): $f" >> "$R/pytest-gpu.log"; continue; fi
            [ "$cap" -gt "$left" ] && cap=$left
            CALIB_GPU_INSTAFAIL=1 CALIB_GPU_OUT="$R/gpu-out" timeout "$cap" python3.10 -m pytest -m gpu "$f" -v -rA \
              --durations=0 -p no:cacheprovider >> "$R/pytest-gpu.log" 2>&1
            echo "exit $? after $((SECONDS - start)) s: $f (cap $cap s)" >> "$R/pytest-gpu.log"
          done
          ;;
        minilm-run) bash benchmarks/deploy_gpu.sh "$R/deploy-run" 1 minilm > "$R/deploy-minilm-run.log" 2>&1 ;;
        yolov8n-run) bash benchmarks/deploy_gpu.sh "$R/deploy-run8" 1 yolov8n > "$R/deploy-yolov8n-run.log" 2>&1 ;;
        order-yolov8n)  # recipes/yolov8n.yaml with backend tensorrt, all four caches' implicit engines (level 1): the
          # engines' order for benchmarks/engine_order.py (report in order-yolov8n/yolov8n-trt.tgz; YOLO_S caps it,
          # Y8_REFERENCE the float engines built first: [] builds the INT8 ones only; Y8_MODEL the ONNX file: the zoo's
          # (height and width dynamic) by default, /opt/extra/qdq22/yolov8n/model.onnx is the same model at 320x320,
          # whose level-1 implicit engine ran 94 layers in INT8 where the zoo file's, through calib run, listed none)
          YOLO_S=${YOLO_S:-900} bash benchmarks/run_gpu.sh yolov8n "$R/order-yolov8n" \
            "${Y8_MODEL:-/opt/extra/calib-home/zoo/yolov8n-320/yolov8n-320.onnx}" 1 > "$R/order-yolov8n.log" 2>&1
          ;;
        *) log "unknown step $step" ;;
      esac
      log "end $step: $((SECONDS - t0)) s"
    done
    log "all done"; touch "$P/done"
    ;;
  collect)
    out=$2 end=$((SECONDS + $3))
    while [ $SECONDS -lt $end ] && [ ! -f "$P/done" ]; do sleep 2; done
    mkdir -p "$R/qdq"
    for d in /tmp/qdq22/*/; do
      n=$(basename "$d"); mkdir -p "$R/qdq/$n"
      for f in "$d"/table.json "$d"/table.md "$d"/layers.json "$d"/profile.json "$d"/alternate*.json "$d"/alternate*.md; do
        cp "$f" "$R/qdq/$n/"
      done
      for f in "$d"/work/*.engine.json; do cp "$f" "$R/qdq/$n/"; done
    done
    if [ "${KEEP_ENGINES:-1}" != 0 ]; then  # engines back, timed again later on the same card (step l3-resume);
      # KEEP_ENGINES=0 leaves them there. What comes back is at most 8 files of 16 MiB: 5 files and 48 MiB for the
      # engines, one over 15 MB in parts of 15 MB (NAME.engine.part0, part1, ...: l3-resume joins them)
      k=0 used=0
      for f in /tmp/qdq22/*/work/*.engine; do
        s=$(stat -c %s "$f") name=$(basename "$(dirname "$(dirname "$f")")")-$(basename "$f")
        parts=$(( (s + 14999999) / 15000000 ))
        [ $((k + parts)) -le 5 ] && [ $((used + s)) -le 50331648 ] || continue
        if [ "$parts" -eq 1 ]; then cp "$f" "$out/$name"; else split -b 15000000 -d -a 1 "$f" "$out/$name.part"; fi
        k=$((k + parts)) used=$((used + s))
      done
      # and each model's timing cache: l3-resume seeds the next builds with the tactic timings already measured
      for f in /tmp/qdq22/*.timing; do [ "$(stat -c %s "$f")" -lt 16000000 ] && cp "$f" "$out/"; done
    fi
    tar czf "$out/res.tgz" --exclude='*.engine' --exclude='*.onnx' --exclude='*.timing' -C "$P" res pipeline.log \
      progress.log 2>/dev/null
    cp "$P/progress.log" "$out/" 2>/dev/null
    cat "$P/progress.log" 2>/dev/null; for f in "$R"/qdq/*/table.md; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
    for f in "$R"/deploy*/pytest-*.log; do [ -f "$f" ] && { echo "== $f"; tail -4 "$f"; }; done
    [ -f "$R/pytest-gpu.log" ] && { echo "== $R/pytest-gpu.log"
      grep -E "PASSED|FAILED|SKIPPED|ERROR|^exit|^not run|^E " "$R/pytest-gpu.log" | cut -c1-300 | tail -60; }
    for f in "$R"/order-*/yolov8n.log; do
      [ -f "$f" ] && { echo "== $f"; grep -v 'it/s\|img/s' "$f" | tail -12 | cut -c1-300; }
    done
    for f in "$R"/qdq-*.log "$R"/fp16-*.log; do [ -f "$f" ] && { echo "== $f"; grep -v 'it/s' "$f" | tail -3 | cut -c1-300; }; done
    ls -la "$out"; [ -f "$P/done" ] && echo PIPELINE-DONE || echo "PIPELINE-RUNNING: $(tail -1 "$P/progress.log")"
    ;;
  stop)
    [ -f "$P/pid" ] && kill -- -"$(ps -o pgid= -p "$(cat "$P/pid")" | tr -d ' ')" && echo stopped
    ;;
esac
