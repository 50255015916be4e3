"""Engines calib has timed on real GPUs, by the sha256 of the ONNX model they were built from: the report's "Is INT8
worth it" for those models and the speeds of its placement rows. Each entry is one table of benchmarks/RESULTS_QDQ.md
(`raw`: its table.json, whose engine names `names` maps where they differ); `ms` holds the median latency per
engine:

    fp16            the FP32 model built with FP16 enabled
    implicit        implicit INT8 (+FP16) from calib's cache
    qdq             calib's Q/DQ model as `calib cache convert` wrote it by default when timed (+FP16; its
                    placement forms: QDQ_FORMS, the residual branch float, which `labels` says where it matters)
    qdq-stem-float  the same with --keep-stem-output-float (YOLOv3-tiny: the stem Conv's output left float)
    qdq-residual-conv, qdq-residual-act   the same with --residual-branch conv / act (YOLOv8n's bottleneck Adds)
    modelopt        ModelOpt's Q/DQ model from the same cache (+FP16)

`timing` "CUDA graph": the engines' work launched as one CUDA graph per run (`calib bench --cuda-graph`), the GPU's
time alone, read from the raw table's `graph_median_ms`; else runs enqueued one by one, whose figure includes the
host's cost of launching every kernel (on YOLOv8n-320 at batch 4 about half of it). "in turns": the engines timed
alternately, group by group (benchmarks/alternate.py: its `cuda_graph` or `plain` mode), not one after the other.
"""
from __future__ import annotations

from calib.deploy.worth import TOLERANCE, verdict

YOLOV3_TINY = ("22c32d2dda45d26c1d03a5b2af025030d5823c8a5ff42d226e6746fe56235b17",)
# the zoo's yolov8n-320 as nudenet ships it, and the copy with its input fixed to 320x320 that was built
YOLOV8N_320 = ("c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
               "e4d8156372c5f0122447e8104264672d836b3ce2e175a5adb4ff5b5411656f44")
MOBILENET_V2 = ("bc184dda468378e679fbcfb3852a2d104a59f3069296c961abed85d697080aa8",)

# YOLOv8n's `qdq` engines were made with the residual branch float, the default until these tables showed conv faster
RESIDUAL_FLOAT = {"qdq": "calib's Q/DQ model, residual branch float"}
RESIDUAL_NAMES = {"qdq": "calib-qdq", "qdq-residual-conv": "calib-qdq-resconv", "qdq-residual-act": "calib-qdq-resact"}

MBV2_ENQUEUED = ("each engine timed right after its build, not in turns: the Q/DQ engine's same kernels took 1.5-2 us "
                 "more per layer, a host that enqueued more slowly; timed in turns on another H100 (2026-12-07, batch "
                 "1) it enqueued 1.02x the implicit engine")

Y3_B32 = ("at batch 32 TensorRT 8.6 ran the Q/DQ engine's fused Conv+LeakyRelu layers with Ampere (sm80) kernels where "
          "the implicit engine ran Hopper (sm90) ones on five of them; at batch 1 and 4 it was as fast or faster. The "
          "implicit engine from the same cache (`calib build --cache`) is the faster one here, at the same accuracy "
          "(box SQNR 36.4 against 36.0 dB, mAP50 vs FP32 0.770 against 0.774)")

Y3_B32_REBUILD = ("the same two engines rebuilt on another H100 the same day: the Q/DQ engine got the same kernels "
                  "(Ampere on the same five fused Conv+LeakyRelu layers) and ran as before (1.064 against 1.067 ms as "
                  "CUDA graphs); the implicit engine's figure moved 3 % (1.015 to 1.050 ms, its FP32 box-decoding "
                  "layers). Over two builds the Q/DQ engine is 0.95-0.99x: at batch 32 the implicit engine from the "
                  "same cache (`calib build --cache`) is the at-least-as-fast one, at the same accuracy")

Y3_B32_FP16 = ("the rebuilt implicit and Q/DQ engines timed in turns a third time, later the same day, beside an FP16 "
               "engine built on the same card: INT8 pays at batch 32 (1.13x FP16's speed enqueued, 1.14x as CUDA "
               "graphs, for the implicit engine; 1.12x for the Q/DQ one), at mAP50 vs FP32 0.770 and 0.774 where FP16 "
               "keeps 1.000; the Q/DQ engine ran 0.99x the implicit one again")

Y3_B32_MODELOPT = ("ModelOpt's Q/DQ model from the same cache, built on the same card beside the carried implicit and"
                   " Q/DQ engines and timed in turns with them: 0.59x the implicit engine both ways (1.773 against "
                   "1.047 ms as CUDA graphs), slower than the FP16 engine timed beside those two earlier the same day"
                   " (1.210 ms); it leaves the stem Conv's output float: mAP50 vs FP32 0.851, where the implicit and "
                   "calib's Q/DQ engines have 0.770 and 0.774; calib's Q/DQ engine ran 0.99x the implicit one a "
                   "fourth time")

Y3_B1_TURNS = ("FP16, implicit and calib's Q/DQ engines built on one H100 and timed in turns four times (40, 40, 200 "
               "and 100 groups of 50 runs; ModelOpt's built before the last): INT8 pays at batch 1 (1.22x FP16's "
               "speed as CUDA graphs, 1.08x enqueued, for the implicit engine; 1.25x and 1.10x for calib's Q/DQ one) "
               "at mAP50 vs FP32 0.786 and 0.774 where FP16 keeps 1.000; calib's Q/DQ engine ran 1.02-1.03x the "
               "implicit one in all four timings; ModelOpt's, which leaves the stem Conv's output float (mAP50 vs "
               "FP32 0.851), ran 0.74x the implicit one as CUDA graphs, slower than FP16")

Y3_B4_TURNS = ("the implicit and calib's Q/DQ engines built on one H100 and timed in turns (40 groups of 50 runs), "
               "then with an FP16 engine built beside them (40 and 200 groups): INT8 pays at batch 4 (1.13x FP16's "
               "speed enqueued and as CUDA graphs for the implicit engine; 1.13x and 1.12x for calib's Q/DQ one) at "
               "mAP50 vs FP32 0.828 and 0.774 where FP16 keeps 1.000; calib's Q/DQ engine ran 0.98-1.02x the "
               "implicit one in all three timings, where its placement before the stem rule ran 0.75x (2026-12-06)")

Y3_B4_STEM = ("ModelOpt's Q/DQ model and calib's with --keep-stem-output-float built on a tenth H100 lease beside the "
              "carried implicit and default Q/DQ engines, with FP16 rebuilt, the five timed in turns twice (40 and 200 "
              "groups of 50 runs): the stem-float form buys accuracy (mAP50 vs FP32 0.845 against the default's 0.774, "
              "box SQNR 41.7 against 36.0 dB) at 0.72x the implicit engine's speed as CUDA graphs (0.76-0.78x "
              "enqueued), slower than FP16, which keeps 1.000; ModelOpt's, which leaves the stem output float too "
              "(0.851), ran 0.67x; calib's default ran 0.98-1.02x the implicit engine again")

Y3_B1_STEM = ("calib's Q/DQ model with --keep-stem-output-float built on a tenth H100 lease beside the carried "
              "implicit and default Q/DQ engines, the three timed in turns twice (40 and 200 groups): 0.82x the "
              "implicit engine as CUDA graphs (0.97-0.99x enqueued, where the host's launches hide it), about the "
              "speed of the FP16 engine of the eighth lease's turns (0.1711 ms), at mAP50 vs FP32 0.845 (box SQNR "
              "41.7 dB) against the default's 0.774 (36.0 dB); the default ran 1.03x the implicit one as CUDA graphs "
              "again")

PEER_NAMES = {"qdq": "calib-qdq", "modelopt": "modelopt-qdq"}
STEM_NAMES = {**PEER_NAMES, "qdq-stem-float": "calib-qdq-float-stem"}


def _in_turns(model: str, sha256: tuple, batch: int, folder: str, names: dict, graph_ms: dict, plain_ms: dict,
              **extra) -> list[dict]:
    """One table of engines timed in turns on an H100 at level 3 (2026-12-07), as its two entries: the CUDA-graph
    figures and the enqueued ones, from benchmarks/trt86-h100/FOLDER/alternate.json."""
    return [{"model": model, "sha256": sha256, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3, "batch": batch,
             "date": "2026-12-07", "raw": f"benchmarks/trt86-h100/{folder}/alternate.json", "timing": timing,
             "ms": ms, "names": names, **extra}
            for timing, ms in (("CUDA graph, in turns", graph_ms), ("in turns", plain_ms))]


TABLES = [
    {"model": "YOLOv3-tiny", "sha256": YOLOV3_TINY, "card": "NVIDIA H200", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h200/qdq-l3-stem/table.json",
     "ms": {"fp16": 0.2940, "implicit": 0.2682, "qdq": 0.2645, "qdq-stem-float": 0.3483},
     "names": {"qdq": "calib-qdq", "qdq-stem-float": "calib-qdq-float-stem"}},
    {"model": "YOLOv3-tiny", "sha256": YOLOV3_TINY, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 1, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3/yolov3-tiny-l3-b1/table.json",
     "ms": {"implicit": 0.2212, "qdq": 0.1699}, "names": {"qdq": "calib-qdq"},
     "note": "each engine timed right after its build, enqueued one by one: at 0.2 ms per run mostly the host's noise; "
             "timed in turns on another H100 (2026-12-07, below) the Q/DQ engine ran 1.02-1.03x the implicit one"},
    {"model": "YOLOv3-tiny", "sha256": YOLOV3_TINY, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 1,
     "batch": 4, "date": "2026-12-05", "raw": "benchmarks/trt86-h100/qdq-b4-stem/yolov3-tiny/table.json",
     "ms": {"fp16": 0.3079, "implicit": 0.2735, "qdq": 0.2752, "qdq-stem-float": 0.3824, "modelopt": 0.4128},
     "names": {"qdq": "calib-qdq-stem", "qdq-stem-float": "calib-qdq", "modelopt": "modelopt-qdq"}},
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3/yolov8n-l3-b4/table.json",
     "ms": {"implicit": 0.8727, "qdq": 0.9356}, "names": {"qdq": "calib-qdq"}, "labels": RESIDUAL_FLOAT,
     "note": "enqueued one by one in two processes: mostly launch cost and noise; timed in turns as CUDA graphs "
             "(below) calib's Q/DQ model runs 0.99x the implicit engine"},
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4/table.json",
     "timing": "CUDA graph", "ms": {"fp16": 0.4924, "implicit": 0.4422}},
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4/alternate-4.json",
     "timing": "CUDA graph, in turns", "ms": {"fp16": 0.5271, "implicit": 0.4823, "qdq": 0.4886, "modelopt": 0.5374},
     "names": {"qdq": "calib-qdq", "modelopt": "modelopt-qdq"}, "labels": RESIDUAL_FLOAT},
    # the same engines with the two other residual forms, in turns twice (the second in another order)
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4/alternate-res2.json",
     "timing": "CUDA graph, in turns", "labels": RESIDUAL_FLOAT,
     "ms": {"fp16": 0.5358, "implicit": 0.4645, "qdq": 0.4885, "qdq-residual-conv": 0.4538, "qdq-residual-act": 0.4468},
     "names": RESIDUAL_NAMES},
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": 4, "date": "2026-12-06", "raw": "benchmarks/trt86-h100/qdq-l3-graph/yolov8n-l3-b4/alternate-res.json",
     "timing": "CUDA graph, in turns", "labels": RESIDUAL_FLOAT,
     "ms": {"fp16": 0.5437, "implicit": 0.4805, "qdq": 0.4869, "qdq-residual-conv": 0.4499, "qdq-residual-act": 0.4475},
     "names": RESIDUAL_NAMES},
    {"model": "YOLOv8n-320", "sha256": YOLOV8N_320, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 1,
     "batch": 4, "date": "2026-12-05", "raw": "benchmarks/trt86-h100/qdq-b4-stem/yolov8n/table.json",
     "ms": {"fp16": 0.7188, "implicit": 0.6701, "qdq": 0.9861, "modelopt": 0.7376},
     "names": {"qdq": "calib-qdq", "modelopt": "modelopt-qdq"}, "labels": RESIDUAL_FLOAT},
    {"model": "MobileNetV2", "sha256": MOBILENET_V2, "card": "NVIDIA H200", "tensorrt": "8.6.0", "level": 3,
     "batch": 32, "date": "2026-12-04", "raw": "benchmarks/trt86-h200/qdq/table.json",
     "ms": {"fp16": 0.6550, "implicit": 0.4723, "qdq": 0.4764, "modelopt": 0.4788},
     "names": {"qdq": "calib-qdq", "modelopt": "modelopt-qdq"}},
] + [  # MobileNetV2 at batch 1 and 4: each engine timed after its build, enqueued one by one and as CUDA graphs
    {"model": "MobileNetV2", "sha256": MOBILENET_V2, "card": "NVIDIA H100", "tensorrt": "8.6.0", "level": 3,
     "batch": b, "date": "2026-12-06", "raw": f"benchmarks/trt86-h100/qdq-l3-mbv2/mbv2-l3-b{b}/table.json",
     "ms": ms, "names": {"qdq": "calib-qdq"}, **({"timing": "CUDA graph"} if graph else {"note": MBV2_ENQUEUED})}
    for b, graph, ms in ((1, True, {"fp16": 0.1587, "implicit": 0.1759, "qdq": 0.1532}),
                         (4, True, {"fp16": 0.2148, "implicit": 0.1942, "qdq": 0.1922}),
                         (1, False, {"fp16": 0.2233, "implicit": 0.2406, "qdq": 0.2997}),
                         (4, False, {"fp16": 0.2771, "implicit": 0.2595, "qdq": 0.3593}))] + [
    # MobileNetV2 at batch 1 on another H100 lease: the four engines timed in turns, as CUDA graphs and enqueued
    *_in_turns("MobileNetV2", MOBILENET_V2, 1, "qdq-l3-mbv2-b1-turns/mbv2-l3-b1", PEER_NAMES,
               {"fp16": 0.1688, "implicit": 0.1685, "qdq": 0.1668, "modelopt": 0.1758},
               {"fp16": 0.2268, "implicit": 0.2355, "qdq": 0.2315, "modelopt": 0.2394}),
    # MobileNetV2 at batch 4 and 32 on a third H100 lease: the four engines of each batch timed in turns
    *_in_turns("MobileNetV2", MOBILENET_V2, 4, "qdq-l3-mbv2-b4-b32-turns/mbv2-l3-b4", PEER_NAMES,
               {"fp16": 0.2062, "implicit": 0.1999, "qdq": 0.1857, "modelopt": 0.2000},
               {"fp16": 0.2583, "implicit": 0.2548, "qdq": 0.2432, "modelopt": 0.2622}),
    *_in_turns("MobileNetV2", MOBILENET_V2, 32, "qdq-l3-mbv2-b4-b32-turns/mbv2-l3-b32", PEER_NAMES,
               {"fp16": 0.6041, "implicit": 0.4133, "qdq": 0.4107, "modelopt": 0.4180},
               {"fp16": 0.6564, "implicit": 0.4643, "qdq": 0.4673, "modelopt": 0.4728}),
    # YOLOv3-tiny at batch 32 on a fourth H100 lease: the implicit engine and calib's default Q/DQ engine in turns
    # (FP16, ModelOpt's and the stem-float engine not built: the device time ran out)
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 32, "qdq-l3-yolov3-tiny-b32/yolov3-tiny-l3-b32", {"qdq": "calib-qdq"},
               {"implicit": 1.0151, "qdq": 1.0673}, {"implicit": 1.0588, "qdq": 1.1109}, note=Y3_B32),
    # the same two engines rebuilt on another H100 and timed in turns (FP16 and ModelOpt's not built: the time ran out)
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 32, "qdq-l3-yolov3-tiny-b32-rebuild/yolov3-tiny-l3-b32",
               {"qdq": "calib-qdq"}, {"implicit": 1.0498, "qdq": 1.0638}, {"implicit": 1.1118, "qdq": 1.1193},
               note=Y3_B32_REBUILD),
    # those two engines carried to a seventh H100 lease, an FP16 engine built beside them, the three in turns
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 32, "qdq-l3-yolov3-tiny-b32-fp16/yolov3-tiny-l3-b32", {"qdq": "calib-qdq"},
               {"fp16": 1.2096, "implicit": 1.0599, "qdq": 1.0755}, {"fp16": 1.2507, "implicit": 1.1097, "qdq": 1.1188},
               note=Y3_B32_FP16),
    # ModelOpt's Q/DQ engine built beside those two on an eighth H100 lease, the three in turns (FP16's engine did not
    # come back, so it is not in these turns)
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 32, "qdq-l3-yolov3-tiny-b32-modelopt/yolov3-tiny-l3-b32", PEER_NAMES,
               {"implicit": 1.0472, "qdq": 1.0568, "modelopt": 1.7733},
               {"implicit": 1.0881, "qdq": 1.1032, "modelopt": 1.8319}, note=Y3_B32_MODELOPT),
    # YOLOv3-tiny at batch 1 on the same lease: FP16, implicit, calib's and ModelOpt's Q/DQ engines in turns
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 1, "qdq-l3-yolov3-tiny-b1-fp16/yolov3-tiny-l3-b1", PEER_NAMES,
               {"fp16": 0.1711, "implicit": 0.1402, "qdq": 0.1366, "modelopt": 0.1884},
               {"fp16": 0.2716, "implicit": 0.2513, "qdq": 0.2461, "modelopt": 0.3102}, note=Y3_B1_TURNS),
    # YOLOv3-tiny at batch 4 on a ninth H100 lease: FP16, implicit and calib's Q/DQ engines in turns (ModelOpt's and
    # the stem-float engine not built: the device time ran out)
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 4, "qdq-l3-yolov3-tiny-b4/yolov3-tiny-l3-b4", {"qdq": "calib-qdq"},
               {"fp16": 0.2594, "implicit": 0.2299, "qdq": 0.2325},
               {"fp16": 0.3140, "implicit": 0.2767, "qdq": 0.2776}, note=Y3_B4_TURNS),
    # YOLOv3-tiny at batch 4 and 1 on a tenth H100 lease: the placement choice's other form (stem output float) and
    # ModelOpt's beside the carried engines, in turns (200 groups)
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 4, "qdq-l3-yolov3-tiny-b4-stem/yolov3-tiny-l3-b4", STEM_NAMES,
               {"fp16": 0.2525, "implicit": 0.2294, "qdq": 0.2323, "qdq-stem-float": 0.3175, "modelopt": 0.3415},
               {"fp16": 0.3029, "implicit": 0.2819, "qdq": 0.2775, "qdq-stem-float": 0.3601, "modelopt": 0.3936},
               note=Y3_B4_STEM),
    *_in_turns("YOLOv3-tiny", YOLOV3_TINY, 1, "qdq-l3-yolov3-tiny-b1-stem/yolov3-tiny-l3-b1", STEM_NAMES,
               {"implicit": 0.1399, "qdq": 0.1357, "qdq-stem-float": 0.1702},
               {"implicit": 0.2204, "qdq": 0.2113, "qdq-stem-float": 0.2217}, note=Y3_B1_STEM),
    # YOLOv8n-320 at batch 1 on a fifth H100 lease: the implicit engine and calib's default Q/DQ engine (residual
    # branch at the Conv) in turns (FP16 and ModelOpt's not built: the device time ran out)
    *_in_turns("YOLOv8n-320", YOLOV8N_320, 1, "qdq-l3-yolov8n-b1/yolov8n-l3-b1", {"qdq-residual-conv": "calib-qdq"},
               {"implicit": 0.4333, "qdq-residual-conv": 0.4377}, {"implicit": 0.9993, "qdq-residual-conv": 0.9893})]
LABELS = {"fp16": "FP16", "implicit": "implicit INT8", "qdq": "calib's Q/DQ model",
          "qdq-stem-float": "calib's Q/DQ model, stem output float", "modelopt": "ModelOpt's Q/DQ model",
          "qdq-residual-conv": "calib's Q/DQ model, residual branch at the Conv (the default)",
          "qdq-residual-act": "calib's Q/DQ model, residual branch at the activation"}


# the placement forms the `qdq` engines of these tables have (calib.evaluate.placement_rows.FORMS); other forms are
# keyed qdq-<choice>-<form>
QDQ_FORMS = {"stem": "int8", "residual": "float"}


def placement_speeds(choice: str, sha256: str | None) -> dict | None:
    """The speeds of a placement choice's forms from one table that timed two or more of them: this model's own
    where there is one (the highest level, in turns, with FP16 beside them, the latest; CUDA-graph figures first),
    else another model's. None where none did."""
    def forms(t):
        ms = t["ms"]
        got = {f: ms[f"qdq-{choice}-{f}"] for f in ("int8", "float", "conv", "act") if f"qdq-{choice}-{f}" in ms}
        if "qdq" in ms:
            got.setdefault(t.get("qdq_forms", QDQ_FORMS)[choice], ms["qdq"])
        return got

    timed = [t for t in TABLES if len(forms(t)) > 1]
    if not timed:
        return None
    t = max(timed, key=lambda t: (bool(sha256) and sha256 in t["sha256"], t["level"], t.get("timing", "") != "",
                                  "fp16" in t["ms"], t["date"]))
    return {"ms": forms(t), "implicit": t["ms"]["implicit"], "fp16": t["ms"].get("fp16"),
            "where": f"{t['model']} ({where(t)})", "raw": t["raw"]}


def tables(sha256: str | None) -> list[dict]:
    """The measured tables of the model with this sha256 (none for a model calib has not timed)."""
    return [t for t in TABLES if sha256 and sha256 in t["sha256"]]


def where(t: dict) -> str:
    timing = t.get("timing", "")
    turns = " in turns" if "in turns" in timing else ""
    how = f", timed as CUDA graphs{turns}" if timing.startswith("CUDA graph") else f", enqueued{turns}" if turns else ""
    return f"{t['card']}, TensorRT {t['tensorrt']}, builder level {t['level']}, batch {t['batch']}{how}"


def raw_field(t: dict) -> str:
    """The field of the raw table.json that holds this table's medians."""
    return "graph_median_ms" if t.get("timing") == "CUDA graph" else "median_ms"


def raw_engines(t: dict, raw: dict) -> dict:
    """The engines' entries of the raw file: a qdq_table table.json, or benchmarks/alternate.py's figures (the CUDA
    graph mode's, or the plain mode's for runs enqueued in turns)."""
    timing = t.get("timing", "")
    if "in turns" not in timing:
        return raw["engines"]
    return raw["modes"]["cuda_graph" if timing.startswith("CUDA graph") else "plain"]


def verdicts(t: dict, tolerance: float = TOLERANCE) -> list[dict]:
    """Each INT8 engine of one table against FP16 (against the implicit engine where FP16 was not timed)."""
    ms = t["ms"]
    base = "fp16" if "fp16" in ms else "implicit"
    return [{"engine": name, "against": base, "ms": v, "other_ms": ms[base], "speedup": round(ms[base] / v, 3),
             "verdict": verdict(ms[base] / v, tolerance)} for name, v in ms.items() if name not in ("fp16", base)]


def sentence(t: dict, v: dict) -> str:
    a, b = (t.get("labels", {}).get(k, LABELS[k]) for k in (v["engine"], v["against"]))
    said = ({"pays": "pays", "same": f"does not pay (within {TOLERANCE:.0%})", "slower": "does not pay: slower"}
            if v["against"] == "fp16" else
            {"pays": "faster", "same": f"as fast (within {TOLERANCE:.0%})", "slower": "slower"})
    return (f"{a} {v['ms']:.4f} ms against {b} {v['other_ms']:.4f} ms, {v['speedup']:.2f}x: "
            f"{said[v['verdict']]}")


def from_batch(found: list[dict], tolerance: float = TOLERANCE) -> list[str]:
    """Where one card, TensorRT version, builder level and timing has FP16 and an INT8 engine at two or more batch
    sizes: from which batch that INT8 engine pays against FP16 (the latest table per batch)."""
    groups: dict[tuple, dict[int, dict]] = {}
    for t in sorted(found, key=lambda t: t["date"]):
        if "fp16" in t["ms"]:
            groups.setdefault((t["card"], t["tensorrt"], t["level"], t.get("timing", "")), {})[t["batch"]] = t
    lines = []
    for key, by_batch in sorted(groups.items()):
        if len(by_batch) < 2:
            continue
        ts = [by_batch[b] for b in sorted(by_batch)]
        head = where(ts[0]).replace(f", batch {ts[0]['batch']}", "") + ("" if key[3] else ", enqueued one by one")
        for name in dict.fromkeys(k for t in ts for k in t["ms"] if k != "fp16"):
            got = [(t["batch"], verdict(t["ms"]["fp16"] / t["ms"][name], tolerance)) for t in ts if name in t["ms"]]
            if len(got) < 2:
                continue
            label, batches = ts[0].get("labels", {}).get(name, LABELS[name]), ", ".join(str(b) for b, _ in got)
            pays = [b for b, v in got if v == "pays"]
            if not pays:
                said = f"pays against FP16 at none of the batches timed ({batches})"
            elif all(v == "pays" for b, v in got if b >= pays[0]):
                said = f"pays against FP16 from batch {pays[0]} on (batches timed: {batches})"
            else:
                said = f"pays against FP16 at batch {', '.join(map(str, pays))} only (batches timed: {batches})"
            lines.append(f"{head}: {label} {said}")
    return lines


def worth_blocks(report: dict) -> list[tuple]:
    """The report's section for a model with measured tables: from which batch each INT8 engine pays against FP16
    (where two or more batches were timed), then per table each INT8 engine against FP16, said plainly, and where
    INT8 pays at no batch timed."""
    found = tables(report.get("model_sha256"))
    if not found:
        return []
    items, paid = [], False
    for t in sorted(found, key=lambda t: (t["card"], t["level"], t["batch"])):
        vs = verdicts(t)
        paid |= any(v["verdict"] == "pays" and v["against"] == "fp16" for v in vs)
        items += [f"{where(t)} ({t['date']}; calib's `{t['raw']}`): " + "; ".join(sentence(t, v) for v in vs)
                  + (f" ({t['note']})" if t.get("note") else "")]
    timed = sorted({t["batch"] for t in found if "fp16" in t["ms"]})
    tail = ("" if paid or not timed else
            f" INT8 pays at none of the batch sizes timed against FP16 ({', '.join(map(str, timed))}): "
            "build FP16 there, or time a larger batch with `calib bench INT8.engine --against FP16.engine`.")
    text = (f"This model's engines were timed on real GPUs (medians; INT8 against FP16, within {TOLERANCE:.0%} "
            "is no difference). Your card, TensorRT version and batch decide: time your own engines with "
            "`calib bench INT8.engine --against FP16.engine`." + tail)
    by_batch = from_batch(found)  # the plain answer first, then every table it rests on
    return ([("h2", "Is INT8 worth it: engines timed on GPUs"), ("p", text)]
            + ([("p", "By batch size:"), ("list", by_batch)] if by_batch else [])
            + [("p", "Each table timed:" if by_batch else "Tables timed:"), ("list", items)])
