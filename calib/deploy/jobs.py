"""`calib run` with `backend: tensorrt`: build the engines a recipe asks for, from calib's caches and TensorRT's
own calibrator, run them on the evaluation data and time them; write the best INT8 engine with its sidecar."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from calib.deploy.precision import from_inspector, implicit_rules
from calib.errors import RecipeError
from calib.io.files import atomic_write_text
from calib.quantize.patterns import pinned_to_float
from calib.quantize.qdq import Exclusions, quantizable_layers
from calib.quantize.ties import Graph
from calib.recipe import Recipe
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.builder import (BuildSpec, Built, build, read_layer_precisions, recipe_shapes,
                                            write_engine)
from calib.runners.tensorrt.calibrators import cache_calibrator, make_calibrator, sample_shapes
from calib.runners.tensorrt.inspect import counts_text, node_precisions
from calib.runners.tensorrt.profile import format_table, profile_layers
from calib.runners.tensorrt.profiles import calibration_batch, normalize, to_json
from calib.runners.tensorrt.runner import TrtRunner, graph_latency

log = logging.getLogger(__name__)
MARKED = "-marked"  # suffix of a perturbed engine: every tensor marked as an output, for layer-wise comparison


@dataclass
class EngineSet:
    runners: dict = field(default_factory=dict)  # name -> TrtRunner
    built: dict = field(default_factory=dict)  # name -> Built
    caches: dict = field(default_factory=dict)  # name -> the cache file an INT8 engine was built from
    predict: dict = field(default_factory=dict)  # "<algo>@engine" -> (algo, Exclusions)
    precision: dict = field(default_factory=dict)  # "<algo>@engine" -> its engine's calib.deploy.precision.PrecisionModel
    info: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)  # INT8 engine name -> its per-layer profile
    files: list = field(default_factory=list)  # files written into the run's folder (the Q/DQ models built)


def layer_precision_rules(recipe: Recipe) -> tuple[str, ...]:
    b = recipe.backend
    rules = list(b.layer_precisions)
    if b.layer_precisions_file:
        rules += read_layer_precisions(b.layer_precisions_file)
    return tuple(rules)


def check(recipe: Recipe) -> None:
    """What can be checked before the statistics pass."""
    unknown = [a for a in recipe.backend.layerwise if a not in recipe.calibration.algorithms]
    if unknown:
        raise RecipeError(f"{recipe.source}: backend.layerwise: '{unknown[0]}' is not one of the recipe's "
                          f"algorithms ({', '.join(recipe.calibration.algorithms)})")


def build_engines(recipe: Recipe, model_path: Path, info, amax: dict, calib_source, stage: Path,
                  trt=None, cuda=None, extra_outputs: tuple = ()) -> EngineSet:
    """The recipe's engines of `model_path`; `extra_outputs`: tensors marked as engine outputs too (a plugin
    model's plugin inputs, which calib evaluates on)."""
    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
    b = recipe.backend
    from calib.zoo.registry import home

    def timing(precisions) -> str:
        """The recipe's timing cache, else one per model, precision set and INT8 cache: on TensorRT 8.6 a cache
        written by a build of another graph (another model, the same model in another precision, or with another
        calibration cache) made Myelin refuse it ("Myelin error from unknown graph") on YOLOv8n and MiniLM."""
        if b.timing_cache:
            return b.timing_cache
        return str(home() / "timing" / f"trt-{trt.__version__}-{info.sha256[:16]}-{'+'.join(precisions)}.timing")

    profiles = normalize(b.profiles)
    _check_batch(profiles, b.batch_size, recipe.source)
    shapes = ()
    if recipe.input_shapes:  # the dims of the file built (info holds them fixed already)
        from calib.quantize.model import inspect_model

        dims = inspect_model(model_path).input_dims
        shapes = recipe_shapes(recipe.input_shapes, dims, b.batch_size)
    base = dict(batch_size=b.batch_size, workspace_mb=b.workspace_mb, optimization_level=b.optimization_level,
                tactic_sources=tuple(b.tactic_sources) or None, profiles=profiles, shapes=shapes,
                mark_outputs=tuple(extra_outputs))
    rules = layer_precision_rules(recipe)
    out = EngineSet()
    jobs = []
    for ref in b.reference:
        prec = ("fp32",) if ref == "fp32" else ("fp32", "fp16")
        jobs.append((f"trt-{ref}", BuildSpec(precisions=prec, timing_cache=timing(prec), **base), lambda: None, None))
    qdq_files = {}
    int8 = BuildSpec(precisions=tuple(b.precision), layer_precisions=rules, constraints=b.constraints, **base)
    marked = replace(int8, mark_outputs=("*", *extra_outputs))
    # every INT8 job gets a timing cache of its own
    own = lambda spec, *key: replace(spec, timing_cache=timing((*b.precision, *key)))  # noqa: E731
    for algo, am in amax.items():  # a timing cache per cache: on YOLOv8n (an H100, TensorRT 8.6) the entropy build
        # could not read back the one the minmax build had written ("Myelin error from unknown graph")
        feed = lambda am=am: cache_calibrator(am, trt, recipe.calibration.carrier)  # noqa: E731
        jobs.append((f"trt-int8-{algo}", own(int8, algo), feed, f"{algo}.cache"))
        if algo in b.layerwise:  # every layer an output: another graph
            jobs.append((f"trt-int8-{algo}{MARKED}", own(marked, algo, "marked"), feed, f"{algo}.cache"))
    if b.qdq:  # explicit INT8: calib's Q/DQ model of each algorithm, built with no calibrator
        from calib.io.files import atomic_write_bytes
        from calib.quantize.qdq import insert_qdq

        proto = _onnx(model_path)
        for algo, am in amax.items():
            path = stage / f"{Path(model_path).stem}.{algo}.qdq.onnx"
            atomic_write_bytes(path, insert_qdq(proto, am).SerializeToString())
            qdq_files[f"trt-qdq-{algo}"] = path
            spec = own(int8, "qdq", algo)  # another graph: its own cache
            jobs.append((f"trt-qdq-{algo}", spec, lambda: None, f"{algo}.cache"))
        del proto
    if b.trt_calibrator:
        kind = b.trt_calibrator
        inputs = sample_shapes(calib_source, [n for n, _, _ in info.inputs])
        cache = stage / f"tensorrt-{kind}.cache"
        jobs.append((f"trt-int8-tensorrt-{kind}", own(int8, f"tensorrt-{kind}"),
                     lambda: make_calibrator(kind, calib_source, inputs, calibration_batch(profiles, b.batch_size),
                                             cuda, cache, info.sha256, trt),
                     cache.name))
    out.files = [p.name for p in qdq_files.values()]
    proto = _onnx(model_path)
    nodes = quantizable_layers(proto)
    # the precisions of the nodes of engine layers that list none, for the @engine simulations
    predicted = implicit_rules(proto, pinned_to_float(rules)) if b.predict else None
    for name, spec, make, cache_name in jobs:
        log.info("building %s", name)
        built: Built = build(qdq_files.get(name, model_path), spec, make(), trt, cuda)
        if name.startswith(("trt-int8", "trt-qdq")) and not name.endswith(MARKED):
            note = no_int8_note(built, proto, implicit=not name.startswith("trt-qdq") and not b.qdq)
            if note:
                log.warning("%s: %s", name, note)
        out.built[name] = built
        out.runners[name] = TrtRunner(built.plan, trt, cuda, label=name)
        out.runners[name].perturbed = name.endswith(MARKED)  # evaluate() compares its every output per layer
        if cache_name:
            out.caches[name] = cache_name
        algo = name[len("trt-int8-"):]
        if b.predict and name.startswith("trt-int8-") and algo in amax and not name.endswith(MARKED):
            kept, unknown = kept_in_float(built.layers, nodes)
            out.predict[f"{algo}@engine"] = (algo, Exclusions(names=kept))
            if built.layers:
                out.precision[f"{algo}@engine"] = from_inspector(built.layers, proto, "implicit", name, predicted)
            log.info("%s: TensorRT kept %d of %d quantizable layers in float%s", name, len(kept), len(nodes), unknown)
    out.info = {"tensorrt": trt.__version__, "gpu": cuda.name(), "batch": b.batch_size,
                "profiles": to_json(profiles),
                "layer_precisions": list(rules), "engines": {}}
    return out


def _known_without_int8(layers: list[dict]) -> bool:
    """Whether an engine's layers give precisions ('?': unknown) and none of them is INT8."""
    known = [la.get("precision") for la in layers if la.get("precision") not in (None, "?")]
    return bool(known) and "int8" not in known


def kept_in_float(layers: list[dict], nodes) -> tuple[tuple, str]:
    """The quantizable nodes an engine ran in float, and what to say of those its layers give no precision for ('' where
    they give all). Such a node (folded, inside a layer TensorRT named otherwise, or in a layer without formats)
    counts as INT8 beside INT8 layers or where no layer has a precision, and as float where layers have precisions
    and none is INT8."""
    prec = node_precisions(layers, nodes)
    fallback = "fp32" if _known_without_int8(layers) else "int8"
    kept = tuple(n for n in nodes if prec.get(n, fallback) != "int8")
    unknown = sum(1 for n in nodes if n not in prec)
    return kept, f" ({unknown} without a precision in its layers, counted as {fallback.upper()})" if unknown else ""


def no_int8_note(built: Built, proto, implicit: bool) -> str | None:
    """What to say of an INT8 engine that ran no layer in INT8 (None where it ran some, or where its layers carry no
    precision: an inspector that gave names only or no formats tells nothing either way): the engine's layer counts,
    and, for an implicit engine of a model with attention (a MatMul of two activations and a Softmax), that TensorRT
    8.6 gives attention to Myelin, which takes no implicit INT8 (MiniLM's engine: one Myelin layer in FP16)."""
    if not _known_without_int8(built.layers):
        return None
    counts = counts_text(built.info.get("layer_summary", {}))
    level = built.info.get("optimization_level")
    at = "" if level is None else f"; builder level {level}"
    text = f"TensorRT ran no layer in INT8 (engine layers: {counts}{at})"
    g = Graph.of(proto)
    attention = any(n.op_type == "Softmax" for n in g.nodes) and any(
        n.op_type == "MatMul" and all(t not in g.constants for t in n.input[:2]) for n in g.nodes)
    if implicit and attention:
        text += ("; a transformer's attention goes to Myelin, which takes no implicit INT8 in TensorRT 8.6: set "
                 "backend.qdq to build the Q/DQ models")
    return text


def _check_batch(profiles, batch: int, recipe_file: str) -> None:
    """Engines are evaluated and timed on profile 0 at backend.batch_size: it must fit under its max batch."""
    for name, r in profiles[0] if profiles else ():
        if batch > r.max[0]:
            raise RecipeError(f"{recipe_file}: backend.batch_size {batch} is above the max batch {r.max[0]} of "
                             f"input '{name}' in backend.profiles[0]")


def _onnx(path):
    import onnx

    return onnx.load(str(path), load_external_data=False)


def time_engines(es: EngineSet, source, batch_size: int) -> None:
    """Median latency of every engine on one evaluation batch of `batch_size` (tiled if the data is shorter)."""
    first = next(iter(source))
    batch = {k: np.resize(v, (batch_size, *v.shape[1:])) for k, v in first.items()}
    for name, r in es.runners.items():
        built = es.built[name]
        es.info["engines"][name] = {"precisions": built.info["precisions"], "layer_summary": built.info["layer_summary"],
                                    "build_seconds": built.info["build_seconds"], "layers_set": built.info["layers_set"],
                                    "calibrator": built.info["calibrator"], "cache": es.caches.get(name),
                                    "latency": r.latency(batch)}
        graph = graph_latency(r, batch, name)  # the GPU's time, without the host's per-kernel launch cost
        if graph is not None:
            es.info["engines"][name]["graph_latency"] = graph
        log.info("%s: %.4f ms per batch of %d", name, es.info["engines"][name]["latency"]["median_ms"], batch_size)
        if name.startswith("trt-int8-") and not name.endswith(MARKED):
            prof = profile_layers(r, batch, runs=10, warmup=3)
            top = sorted(prof["layers"], key=lambda row: -row["ms"])[:15]
            es.info["engines"][name]["profile"] = {**{k: v for k, v in prof.items() if k != "layers"},
                                                   "slowest_layers": top}
            es.profiles[name] = prof


def write_profiles(es: EngineSet, stage: Path) -> list[str]:
    """engine-profile.md: per-layer time, precision and tactic of every INT8 engine (IProfiler), slowest first."""
    if not es.profiles:
        return []
    parts = ["# Per-layer profile of the INT8 engines", "",
             "TensorRT's IProfiler over profiled runs (synchronous, so the sum is a little above the engine's latency); "
             "precision and tactic from the engine inspector. Fused network layers are named inside each engine layer.",
             ""]
    for name, prof in es.profiles.items():
        parts += [f"## {name}", "", format_table(prof, 30), ""]
    atomic_write_text(stage / "engine-profile.md", "\n".join(parts))
    return ["engine-profile.md"]


def write_best(es: EngineSet, evaluation: dict, stage: Path, stem: str, score: Callable[[dict], float]) -> str | None:
    """Write the INT8 engine whose evaluation entry `score` (the evaluator's task score) rates best, with its
    sidecar; returns its file name."""
    int8 = [n for n in es.built if n.startswith("trt-int8-") and not n.endswith(MARKED) and n in evaluation["configs"]]
    if not int8:
        return None
    best = max(int8, key=lambda n: score(evaluation["configs"][n]))
    name = f"{stem}.{best[len('trt-int8-'):]}.engine"
    extra = {"cache": es.caches.get(best), **{k: v for k, v in es.info["engines"].get(best, {}).items()
                                              if k in ("latency",)}}
    write_engine(stage / name, es.built[best], extra)
    es.info["best_engine"] = best
    return name


def close(es: EngineSet) -> None:
    for r in es.runners.values():
        r.close()
