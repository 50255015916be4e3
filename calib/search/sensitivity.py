"""`calib sensitivity`: rank layers by how much INT8 hurts them, then find the fewest to keep in FP16/FP32."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import onnx

from calib.algorithms import registry
from calib.calibrate import collect, compute_all, fingerprint_update, needs_tensorrt_grid
from calib.data.rebatch import FixedBatches
from calib.data.sources import make_source
from calib.errors import CalibError
from calib.evaluate.postprocess import load as load_hook
from calib.evaluate.report import _png
from calib.io.files import atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file
from calib.io.manifest import record, replaceable
from calib.io.memory import Budget, parse_size
from calib.io.reading import read_json
from calib.pipeline import staged
from calib.quantize.cache import Sidecar, write_cache, write_sidecar
from calib.quantize.model import initializers_not_inputs, inspect_model
from calib.quantize.qdq import Exclusions, insert_qdq, quantizable_layers
from calib.quantize.shapes import fix_input_shapes, fixed_batch
from calib.recipe import Recipe, input_paths
from calib.runners.tensorrt.inspect import counts_text
from calib.search.fallback import Scorer, best_of, budget_target, layer_inputs, layer_precisions, rank, search
from calib.version import __version__
from calib.zoo.registry import resolve

log = logging.getLogger(__name__)


def _chart(curve, fp32: float, target: float, metric: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ks, vs = zip(*curve)
    ax.plot(ks, vs, "o-", label="INT8 with the k most sensitive layers in float")
    if fp32 < 1e9:
        ax.axhline(fp32, color="k", lw=1, label="FP32")
    ax.axhline(target, color="tab:red", ls="--", lw=1, label="budget")
    ax.set_xlabel("layers kept in higher precision", fontsize=10)
    ax.set_ylabel(metric, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)  # the report's charts' sizes: nothing below 9 pt
    return _png(fig)


def _per_tensor(scorer, model, ranking, target, found, amaxes, spec):
    """Best-of per tensor on the inputs of the most sensitive layers still in INT8, then the search again with
    those scales: a different algorithm for a few tensors can spare layers from the float fallback."""
    floats = set(found["float_layers"])
    still_int8 = [r["layer"] for r in ranking if r["layer"] not in floats][:spec.per_tensor_layers]
    tensors = layer_inputs(model, still_int8)
    cands = {a: amaxes[a] for a in spec.per_tensor if a != spec.algorithm}
    res = best_of(scorer, cands, tensors, tuple(found["float_layers"]))
    overrides = {t: v for t, (_, v) in res["choices"].items()}
    again = search(scorer, ranking, target, overrides) if overrides else found
    log.info("per-tensor algorithms on %d tensors: %d changed, %s %.4g -> %.4g; fallback %d -> %d layers",
             len(tensors), len(overrides), spec.metric, res["before"], res["after"], len(found["float_layers"]),
             len(again["float_layers"]))
    better = (again["met"], -len(again["float_layers"]), again["score"]) > \
        (found["met"], -len(found["float_layers"]), found["score"])
    info = {"tensors_tried": tensors, "choices": res["choices"], "score_before": res["before"],
            "score_after": res["after"], "used": bool(overrides) and better}
    if not info["used"]:
        info["choices"] = {}
        return found, info
    return again, info


def _split_md(split: dict, metric: str) -> str:
    q, w, a = split["int8"], split["weights_only"], split["activations_only"]
    which = "weights" if w["sqnr_db"] < a["sqnr_db"] else "activations"
    return (f"Where the INT8 loss comes from, in plain fake quantization (the ranking and search use ONNX "
            f"Runtime's INT8 kernels, which round differently): all in INT8 {metric} {q['score']:.4g} "
            f"({q['sqnr_db']:.1f} dB output SQNR); weights alone in INT8 {w['score']:.4g} ({w['sqnr_db']:.1f} dB), "
            f"activations alone {a['score']:.4g} ({a['sqnr_db']:.1f} dB): mostly the {which}.\n")


def _engine_md(e: dict, spec, target: float) -> str:
    lines = [f"\n## On TensorRT engines (batch {e['batch']}, FP16 engine {e['fp16_ms']:.4f} ms"
             f"{', other layers pinned to INT8' if e['pin_int8'] else ''})\n",
             f"Keep {len(e['float_layers'])} layers in {spec.precision}: {spec.metric} {e['score']:.4g} on the engine "
             f"({'meets' if e['met'] else 'misses'} the budget {target:.4g}), {e['median_ms']:.4f} ms = "
             f"{e['speedup_vs_fp16']:.2f}x the FP16 engine"
             + (f" (asked: {spec.min_speedup:.2f}x, {'met' if e['speed_met'] else 'missed'})" if spec.min_speedup
                else "") + ".\n"]
    f, q = e.get("fastest_meeting_budget"), e.get("best_meeting_speed")
    if f:
        lines.append(f"Fastest variant within the budget: {f['float_layers']} layers in float, {f['engine_score']:.4g} at "
                     f"{f['speedup_vs_fp16']:.2f}x FP16.\n")
    if spec.min_speedup:
        lines.append(f"Best variant at >= {spec.min_speedup:.2f}x FP16: " + (
            f"{q['float_layers']} layers in float, {q['engine_score']:.4g} at {q['speedup_vs_fp16']:.2f}x.\n" if q
            else "none of those measured.\n"))
    lines += ["Simulation: the implicit engine predicted; as built: the engine's own layer precisions and INT8 tensors "
              "(TensorRT's choice per build).\n",
              "| layers in float | simulation | as built | engine | ms | x FP16 | engine layers |",
              "|---|---|---|---|---|---|---|"]
    for r in e["variants"]:
        summ = counts_text(r["engine_layers"])
        built = r.get("as_built_score")
        lines.append(f"| {r['float_layers']} | {r['sim_score']:.4g} | {'-' if built is None else f'{built:.4g}'} | "
                     f"{r['engine_score']:.4g} | {r['median_ms']:.4f} | {r['speedup_vs_fp16']:.2f} | {summ} |")
    return "\n".join(lines) + "\n"


def run_sensitivity(recipe: Recipe, out: str | Path | None = None, verbose: bool = False, pool=None) -> Path:
    """pool: a calib.scale pool whose workers run the statistics pass and measure the variants (the same
    result as without)."""
    out = Path(out) if out else Path(recipe.output) / "sensitivity"
    return staged(out, lambda stage: _sensitivity(recipe, stage, out, pool), verbose, "sensitivity",
                  input_paths(recipe))


SEARCH_CACHE = "search-cache.json"
SEARCH_CACHE_FORMAT = 2  # 2: with the error split


def _hook_fingerprint(hook: str | None) -> str | None:
    """The postprocess hook and its file's contents: a changed hook is another search."""
    if not hook:
        return None
    path = Path(hook.rpartition(":")[0])
    return f"{hook} {sha256_file(path) if path.is_file() else 'missing'}"


def _search_key(recipe: Recipe, model_sha256: str, calib_fingerprint: str, batches: list) -> str:
    """What the CPU ranking and search depend on: the model, the calibration data and settings (so the scales,
    up to the last bits that another CPU may round differently), the evaluation samples, the budget and search
    settings, calib's version. The same on any machine, so a search made on one can serve an engine search on
    another."""
    spec = recipe.sensitivity
    h = hashlib.sha256()
    settings = {k: v for k, v in dataclasses.asdict(spec).items() if k not in ("pin_int8", "min_speedup")}
    h.update(json.dumps({"calib": __version__, "format": SEARCH_CACHE_FORMAT, "spec": settings,
                         "detection": dataclasses.asdict(recipe.evaluation.detection),
                         "postprocess": _hook_fingerprint(recipe.evaluation.postprocess),
                         "calibration": dataclasses.asdict(recipe.calibration),
                         "preprocess": dataclasses.asdict(recipe.preprocess),
                         "model": model_sha256, "calibration_data": calib_fingerprint},
                        sort_keys=True, default=str).encode())
    for feed, boxes in batches:
        for k in sorted(feed):
            fingerprint_update(h, k, feed[k])
        h.update(json.dumps(boxes, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)).encode())
    return h.hexdigest()


def _cached_search(out: Path, key: str) -> dict | None:
    p = out / SEARCH_CACHE
    if not p.is_file():
        return None
    try:
        got = read_json(p, 256 << 20, "search cache")  # bounded in size and nesting, as every input
    except (OSError, ValueError, CalibError) as exc:
        log.warning("%s: unreadable (%s); searching again", p, exc)
        return None
    if not isinstance(got, dict) or not all(k in got for k in ("key", "ranking", "found", "per_tensor", "split")) \
            or not isinstance(got["ranking"], list) or not isinstance(got["found"], dict):
        log.warning("%s: not a search cache of this calib version; searching again", p)
        return None
    if got.get("key") != key:
        log.info("%s: made for another model, data or settings; searching again", p)
        return None
    log.info("reusing the ranking and search of %s (same model, data and settings)", p)
    return got


def _sensitivity(recipe: Recipe, stage: Path, out: Path, pool=None) -> None:
    spec = recipe.sensitivity
    if spec.algorithm not in registry.names():  # before the pass, not after it
        raise CalibError(f"{recipe.source}: sensitivity.algorithm: unknown algorithm '{spec.algorithm}' "
                         f"(choose from {', '.join(registry.names())})")
    for a in spec.per_tensor:
        if a not in registry.names():
            raise CalibError(f"{recipe.source}: sensitivity.per_tensor: unknown algorithm '{a}'")
    from calib.pipeline import check_backend

    model_path = resolve(recipe.model)
    check_backend(recipe, model_path)
    hook = load_hook(recipe.evaluation.postprocess, f"{recipe.source}: evaluation.postprocess") \
        if recipe.evaluation.postprocess else None
    info = fix_input_shapes(inspect_model(model_path), recipe.input_shapes, f"{recipe.source}: input_shapes")
    memory = Budget(parse_size(recipe.memory_budget, "memory_budget"), "memory_budget")
    csrc = make_source(recipe.calibration_data, recipe.preprocess, info.inputs, recipe.calibration.batch_size)
    esrc = make_source(recipe.evaluation_data or recipe.calibration_data, recipe.preprocess, info.inputs,
                       recipe.evaluation.batch_size)  # a bad offset or path: before the pass
    equalized = None
    if recipe.calibration.equalize:
        from calib.pipeline import equalize_model

        model_path, info, equalized = equalize_model(model_path, csrc, stage)
        info = fix_input_shapes(info, recipe.input_shapes)
    algos = list(dict.fromkeys([spec.algorithm, *spec.per_tensor]))
    info, stats, samples, calib_fp = collect(model_path, csrc, label=recipe.calibration_data.path, info=info,
                                             skip_nonfinite=recipe.calibration_data.skip_nonfinite,
                                             tensorrt_grid=needs_tensorrt_grid(algos), budget=memory,
                                             allow_qdq=recipe.calibration.allow_qdq, pool=pool)
    amaxes, _, _ = compute_all(stats, info.activations, algos,
                               {"percentile": {"percentile": recipe.calibration.percentile}}, model=model_path)
    amax = amaxes[spec.algorithm]
    batches, n = [], 0
    fixed = fixed_batch(info)  # a model's fixed batch: runs of exactly that many samples
    for feed, _, boxes in FixedBatches(esrc.iter_with_meta(), fixed) if fixed else esrc.iter_with_meta():
        step = fixed or len(boxes)
        batches += [({k: v[lo:lo + step] for k, v in feed.items()}, boxes[lo:lo + step])
                    for lo in range(0, len(boxes), step)]
        n += len(boxes)
        if n >= spec.samples:
            break
    model = initializers_not_inputs(onnx.load(str(model_path)))
    scorer = Scorer(model, amax, batches, spec.metric, recipe.evaluation.detection, hook, pool=pool)
    layers = quantizable_layers(model)
    target = budget_target(spec.metric, scorer.fp32_score, spec.max_drop, spec.min_sqnr_db)
    key = _search_key(recipe, info.sha256, calib_fp, batches)
    cached = _cached_search(out, key)
    if cached is not None:
        ranking, found, per_tensor, split = cached["ranking"], cached["found"], cached["per_tensor"], cached["split"]
    else:
        split = scorer.split()
        already = scorer.score(()) >= target  # all INT8 meets the budget: nothing to search
        if already:
            log.info("%s: all INT8 %.4g meets the budget %.4g: no layer needs float", spec.metric,
                     scorer.score(()), target)
        ranking = rank(scorer, layers, spec.both) if not already else []
        found = search(scorer, ranking, target)
        per_tensor = None
        if spec.per_tensor and not already:
            found, per_tensor = _per_tensor(scorer, model, ranking, target, found, amaxes, spec)
        # into the output folder at once: an engine search that fails or runs out of time keeps the CPU part
        out.mkdir(parents=True, exist_ok=True)
        if replaceable(out, SEARCH_CACHE):  # never over a file calib did not write
            atomic_write_json(out / SEARCH_CACHE, {"key": key, "ranking": ranking, "found": found,
                                                   "per_tensor": per_tensor, "split": split})
            record(out, [SEARCH_CACHE])  # calib's, provably: the publication below replaces it
    atomic_write_json(stage / SEARCH_CACHE, {"key": key, "ranking": ranking, "found": found,
                                             "per_tensor": per_tensor, "split": split})  # published with the rest
    overrides = None
    if per_tensor is not None:
        overrides = {t: v for t, (_, v) in per_tensor["choices"].items()} or None
        amax = {**amax, **(overrides or {})}
        c = recipe.calibration
        p = write_cache(stage / "per_tensor.cache", amax, c.trt_version, c.carrier)
        chosen = {t: a for t, (a, _) in per_tensor["choices"].items()}
        write_sidecar(p, Sidecar(f"per-tensor:{spec.algorithm}", {"choices": chosen}, amax, info.sha256, calib_fp,
                                 __version__, c.trt_version, c.carrier, samples))
    engine = None
    if recipe.backend.kind == "tensorrt":
        from calib.search.engines import engine_search

        engine = engine_search(scorer, ranking, target, model_path, amaxes[spec.algorithm], recipe, overrides)
    log.info("%s: FP32 %.4g, INT8 %.4g; %d layers in %s reach %.4g (budget %.4g)", spec.metric,
             found["fp32_score"], found["int8_score"], len(found["float_layers"]), spec.precision, found["score"],
             target)
    result = {"recipe": recipe.name, "algorithm": spec.algorithm, "metric": spec.metric, "max_drop": spec.max_drop,
              "samples": n, "calibration_samples": samples, "layers": len(layers), "error_split": split,
              "ranking": ranking, **found}
    if equalized is not None:
        result["equalization"] = {k: v for k, v in equalized.items() if k != "layers"}
    if per_tensor is not None:
        result["per_tensor"] = {**per_tensor, "choices": {t: a for t, (a, _) in per_tensor["choices"].items()}}
    if engine is not None:
        result["engine"] = engine
    atomic_write_json(stage / "sensitivity.json", result)
    deploy = engine["float_layers"] if engine is not None else found["float_layers"]  # TensorRT: what it measured
    atomic_write_text(stage / "layer_precisions.txt", layer_precisions(deploy, spec.precision))
    atomic_write_text(stage / "exclude.txt", "".join(f"{n}\n" for n in found["float_layers"]))
    q = insert_qdq(model, amax, Exclusions(tuple(found["float_layers"])))
    atomic_write_bytes(stage / f"{Path(model_path).stem}.{spec.algorithm}.fallback.qdq.onnx", q.SerializeToString())
    rows = "\n".join(f"| `{r['layer']}` | {r['all_but_this']:.4g} | {r.get('only_this', float('nan')):.4g} | "
                     f"{r['gain']:+.4g} |" for r in ranking[:20])
    md = (f"# Sensitivity: {recipe.name}\n\n{spec.metric} on {n} images, {spec.algorithm} scales: FP32 "
          f"{found['fp32_score']:.4g}, INT8 {found['int8_score']:.4g}, budget {target:.4g}.\n\n"
          f"Keep {len(found['float_layers'])} of {len(layers)} layers in {spec.precision}: "
          f"{', '.join(found['float_layers']) or '(none)'} -> {found['score']:.4g} "
          f"({'meets' if found['met'] else 'misses'} the budget).\n\n{_split_md(split, spec.metric)}\n"
          f"| layer | score with it in float | score with only it in INT8 | gain |\n|---|---|---|---|\n{rows}\n")
    if engine is not None:
        md += _engine_md(engine, spec, target)
    atomic_write_text(stage / "sensitivity.md", md)
    png = _chart(found["curve"], found["fp32_score"], target, spec.metric)
    atomic_write_text(stage / "sensitivity.html", f'<!doctype html><meta charset="utf-8"><title>sensitivity</title>'
                      f'<body style="font-family:sans-serif;max-width:1000px;margin:2em">'
                      f'<img src="data:image/png;base64,{png}"><pre>{md}</pre></body>')
