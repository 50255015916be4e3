"""`calib run`: a whole recipe, from data to caches, Q/DQ model and report, written all-or-nothing."""
from __future__ import annotations

import dataclasses
import logging
import time
from functools import partial
from pathlib import Path

import onnx

from calib.calibrate import collect, compute_all, needs_tensorrt_grid
from calib.data.feeding import laid_out
from calib.data.folding import fold_model
from calib.data.images import shrink_note
from calib.runners.reshape import overrides_text, reshape_model
from calib.data.sources import make_source
from calib.deploy.plugins import cut_file
from calib.errors import RecipeError
from calib.evaluate.api import evaluate
from calib.evaluate.postprocess import load as load_hook
from calib.evaluate.report import primary_score, summary, write_reports
from calib.evaluate.tasks import check_task
from calib.deploy.fp16_candidate import float_type, write_fp16
from calib.evaluate.fp16_rows import add_fp16_rows
from calib.evaluate.placement_rows import add_placement_rows
from calib.io.files import atomic_write_bytes, atomic_write_text
from calib.io.memory import Budget, parse_size
from calib.io.progress import setup_logging
from calib.io.publish import publish
from calib.quantize import cache as cachefmt
from calib.quantize.coverage import check_float_weights, weight_coverage
from calib.quantize.fp16_model import ranges_json
from calib.quantize.model import inspect_model
from calib.quantize.opset import describe_opset
from calib.quantize.qdq import insert_qdq
from calib.quantize.shapes import fix_input_shapes, fixed_batch
from calib.recipe import Recipe, feeding, input_paths
from calib.runners.budget import evaluation_plan
from calib.version import __version__
from calib.zoo.registry import resolve

log = logging.getLogger(__name__)


def _params(recipe: Recipe) -> dict:
    return {"percentile": {"percentile": recipe.calibration.percentile}}


def run_recipe(recipe: Recipe, out: str | Path | None = None, verbose: bool = False) -> Path:
    """Run `recipe`; outputs appear in `out` only once everything has succeeded."""
    final = Path(out or recipe.output)
    return staged(final, lambda stage: _run(recipe, stage, final), verbose, inputs=input_paths(recipe))


def staged(out: Path, work, verbose: bool = False, command: str = "run", inputs=()) -> Path:
    """Call work(stage) on a staging folder (with its run.log); publish it as `out` only if it succeeds
    (calib.io.publish: the previous results stay whole until then; none of `inputs` is replaced or removed)."""

    def log_to(stage):
        setup_logging(verbose, stage / "run.log" if stage is not None else None)

    return publish(out, work, command, on_stage=log_to, inputs=inputs)


def equalize_model(model_path: Path, source, stage: Path):
    """Cross-layer equalization before calibration: the caches, Q/DQ model and engines are for the file it
    writes, `<stem>.equalized.onnx`, which computes the same FP32 outputs."""
    from calib.equalize import equalize_file

    out = stage / f"{Path(model_path).stem}.equalized.onnx"
    done = equalize_file(model_path, source, out)
    log.info("equalized %d of %d Conv pairs (largest channel gain %.1f, FP32 outputs moved %.1g of their range)",
             done["equalized"], done["pairs"], done["max_gain"], done["fp32_max_rel_change"])
    return out, inspect_model(out), done


def _deployed_file(deployed: Path, model_path: Path, plugins, written: bool, out) -> Path:
    """The model the report's deploy commands build, where it lies once the run is published: the whole model
    for one with plugins (TensorRT loads them), the model the run `written` (equalized, folded) in the output folder,
    else the model."""
    if plugins:
        return deployed
    if written:
        return Path(out) / Path(model_path).name
    return Path(model_path)


def check_backend(recipe: Recipe, model_path: Path | None = None) -> None:
    """What the backend needs, checked before the statistics pass: TensorRT importable, the recipe's engine
    settings consistent, its layer precision patterns naming layers of the model."""
    if recipe.backend.kind != "tensorrt":
        return
    from calib.deploy.jobs import check, layer_precision_rules
    from calib.runners.tensorrt import compat

    check(recipe)
    rules = layer_precision_rules(recipe)
    if rules and model_path is not None:
        from calib.quantize.model import load_model
        from calib.quantize.patterns import check_layer_precisions

        check_layer_precisions(load_model(model_path), rules, str(model_path),
                               f"{recipe.source}: backend.layer_precisions:")
    compat.load()


def deployed_precision(model_path, deploy: str = "implicit", engine_layers: str | None = None,
                       where: str = "evaluation.engine_layers"):
    """The precision model of the build that will be deployed (`deploy`: implicit | qdq): read from an engine's
    inspector (`engine_layers`, an engine sidecar or inspector JSON) or predicted by rules (calib.deploy.precision)."""
    from calib.deploy import precision as pr
    from calib.errors import CalibError
    from calib.quantize.qdq import quantizable_layers

    model = onnx.load(str(model_path), load_external_data=False)
    mode = "explicit" if deploy == "qdq" else "implicit"
    rules = pr.implicit_rules(model) if mode == "implicit" else pr.explicit_rules(model)
    if not engine_layers:
        return rules
    pm = pr.from_inspector(pr.read_engine_layers(engine_layers), model, mode, Path(engine_layers).name, rules)
    q = quantizable_layers(model)
    missing = [n for n in q if n not in pm.nodes]  # a few folded away (a Flatten) are normal; most are not
    if len(missing) > len(q) // 2:
        raise CalibError(f"{where}: {engine_layers} describes {len(q) - len(missing)} of the {len(q)} quantizable "
                         f"layers of {model_path} ('{missing[0]}' is not in it): not an engine of this model")
    return pm


def check_qdq_weights(path, accept: bool, option: str) -> None:
    """Before any pass: the Q/DQ model of `path` (made with placeholder scales) has no layer with a quantized
    input and a float weight, unless `accept` (`option` names the key that accepts it)."""
    model = onnx.load(str(path))
    tensors = [i.name for i in model.graph.input] + [t for n in model.graph.node for t in n.output]
    cov = weight_coverage(insert_qdq(model, dict.fromkeys(tensors, 1.0), label=str(path)))
    check_float_weights(cov, str(path), accept, option)
    log.info("%s: %s", path, cov.describe())


def evaluation_hooks(recipe: Recipe):
    """(postprocess hook or the built-in CTC head, the user's metric) of the recipe's evaluation."""
    ev, where = recipe.evaluation, recipe.source
    hook = load_hook(ev.postprocess, f"{where}: evaluation.postprocess") if ev.postprocess else None
    if ev.charset and hook is not None:
        raise RecipeError(f"{where}: evaluation.charset: the built-in CTC head decodes the outputs; give it or "
                          "evaluation.postprocess, not both")
    if ev.charset:
        if ev.task not in ("text", "outputs"):
            raise RecipeError(f"{where}: evaluation.charset: the CTC head gives strings (evaluation.task: text), not "
                              f"task {ev.task}")
        from calib.evaluate.scores.ctc import CtcHead

        hook = CtcHead(ev.charset, flag=f"{where}: evaluation.charset")
    user = None
    if ev.metric:
        from calib.evaluate.scores.user import load_metric

        user = load_metric(ev.metric, f"{where}: evaluation.metric")
    return hook, user


def _run(recipe: Recipe, stage: Path, final: Path | None = None) -> None:
    t0 = time.perf_counter()
    model_path = original = resolve(recipe.model)
    model_path, plugins = cut_file(model_path, stage)
    if plugins:  # ONNX Runtime cannot load a plugin node: calibrate and simulate the graph before it
        log.info("%s: plugin %s; calibrating and simulating the graph before it (%s), TensorRT builds the whole "
                 "model with the plugin's inputs as extra outputs", original,
                 ", ".join(sorted({p.op_type for p in plugins})), model_path.name)
    info = fix_input_shapes(inspect_model(model_path), recipe.input_shapes, f"{recipe.source}: input_shapes", True)
    unfolded, (model_path, info) = model_path, reshape_model(model_path, info, f"{recipe.source}: input_shapes",
                                                             stage)
    batch_axes, consts = feeding(recipe)
    info = laid_out(model_path, info, batch_axes, consts, f"{recipe.source}: inputs.batch_axis")
    model_path, info = fold_model(model_path, info, consts, f"{recipe.source}: inputs", stage)
    budget = Budget(parse_size(recipe.memory_budget, "memory_budget"), "memory_budget")
    deployed = Path(original if plugins else model_path)  # what TensorRT builds and the Q/DQ model is made of
    log.info("calib %s, recipe %s, model %s (%d tensors to calibrate)", __version__, recipe.source,
             model_path, len(info.activations))
    inputs = info  # the sources feed every model input, by name, where info.layout says
    c = recipe.calibration
    check_backend(recipe, model_path)
    task = recipe.evaluation.task
    hook, user = evaluation_hooks(recipe)  # a missing function or a failing file: before the pass
    if hook is None:
        check_task(model_path, task, recipe.evaluation.detection.format if task == "detection" else None,
                   "evaluation.task", f"{recipe.source}: model {model_path}", "evaluation.detection.format")
    csrc = make_source(recipe.calibration_data, recipe.preprocess, inputs, c.batch_size, consts=consts)
    espec = recipe.evaluation_data or recipe.calibration_data
    trt_backend = recipe.backend.kind == "tensorrt"
    ebatch = recipe.backend.batch_size if trt_backend else recipe.evaluation.batch_size  # engines take their batch
    esrc = make_source(espec, recipe.preprocess, inputs, ebatch, consts=consts)  # a bad offset or path: before the pass
    # a budget too small for the evaluation's runs: said before the pass (the pass's own check is in collect)
    evaluation_plan(model_path, info, budget, ebatch, fixed_batch(info), 1 + len(c.algorithms))
    equalized = None
    if c.equalize and plugins:
        raise RecipeError(f"{recipe.source}: calibration.equalize: not for a model with plugin nodes "
                          f"({original})")
    if c.equalize:
        model_path, info, equalized = equalize_model(model_path, csrc, stage)
        info = dataclasses.replace(fix_input_shapes(info, recipe.input_shapes), layout=inputs.layout)
    pm = deployed_precision(model_path, recipe.evaluation.deploy, recipe.evaluation.engine_layers,
                            f"{recipe.source}: evaluation.engine_layers")  # a wrong file fails before the pass
    log.info("simulating the deployed build: %s", pm.describe())
    check_qdq_weights(deployed if plugins else model_path, c.allow_float_weights,
                      f"calibration.allow_float_weights: true (in {recipe.source})")
    left_out: list = []  # samples holding NaN/Inf, with calibration_data.skip_nonfinite
    info, stats, samples, fp = collect(model_path, csrc, label=recipe.calibration_data.path, info=info,
                                       skip_nonfinite=recipe.calibration_data.skip_nonfinite, dropped=left_out,
                                       allow_qdq=c.allow_qdq,
                                       tensorrt_grid=needs_tensorrt_grid(c.algorithms, _params(recipe)),
                                       budget=budget)
    if getattr(csrc, "bad", None):
        log.warning("%d unreadable images skipped", len(csrc.bad))
    amax, used, secs = compute_all(stats, info.activations, c.algorithms, _params(recipe), model=model_path)
    have = set(stats.names())
    ranges = {t: float(stats.absmax(t)) for t in info.activations if t in have}
    files = [model_path.name] if plugins else []
    files += [p.name for p in sorted(stage.glob("*.onnx")) if p.name.endswith((".reshaped.onnx", ".folded.onnx"))]
    side_extra = {"recipe": Path(recipe.source).name, "preprocess": dataclasses.asdict(recipe.preprocess)}
    for algo in c.algorithms:
        p = cachefmt.write_cache(stage / f"{algo}.cache", amax[algo], c.trt_version, c.carrier)
        sc = cachefmt.Sidecar(algo, used[algo], amax[algo], info.sha256, fp, __version__, c.trt_version,
                              c.carrier, samples, side_extra)
        cachefmt.write_sidecar(p, sc)
        files += [p.name, p.with_suffix(".json").name]
    log.info("caches written for %s (%d samples, %.1f s)", ", ".join(c.algorithms), samples,
             time.perf_counter() - t0)
    configs, exclude, engines, es, extra_precision = dict(amax), {}, {}, None, {}
    if trt_backend:
        from calib.deploy import jobs as trt_engines
        from calib.runners.budget import beside_runtime, held_now

        csrc_trt = make_source(recipe.calibration_data, recipe.preprocess, inputs, recipe.backend.batch_size, consts=consts)
        before = held_now()
        es = trt_engines.build_engines(recipe, deployed if plugins else model_path, info, amax, csrc_trt, stage,
                                       extra_outputs=tuple(info.outputs) if plugins else ())
        budget = beside_runtime(budget, before, "TensorRT, CUDA and the engines")
        engines = es.runners
        for name, (algo, excl) in es.predict.items():
            configs[name], exclude[name] = amax[algo], excl
        extra_precision = dict(es.precision)
        files += [f for f in (p.name for p in sorted(stage.glob("tensorrt-*"))) if f not in files]
        files += [f for f in es.files if f not in files]
    precision = {**{a: pm for a in c.algorithms}, **extra_precision}
    try:
        result = evaluate(model_path, configs, esrc, recipe.evaluation.task, recipe.evaluation.detection,
                          exclude=exclude, engines=engines, precision=precision, memory_budget=budget,
                          input_shapes=recipe.input_shapes, postprocess=hook, batch_axes=batch_axes, consts=consts,
                          metric=user)
        if es is not None:
            trt_engines.time_engines(es, make_source(espec, recipe.preprocess, inputs, recipe.backend.batch_size, consts=consts),
                                     recipe.backend.batch_size)
            stem = (deployed if plugins else Path(model_path)).stem
            engine_file = trt_engines.write_best(es, result, stage, stem, partial(primary_score, task=result["task"]))
            files += [engine_file, f"{engine_file}.json"] if engine_file else []
            files += trt_engines.write_profiles(es, stage)
    finally:
        if es is not None:
            trt_engines.close(es)
    skipped = {"calibration": list(getattr(csrc, "bad", [])), "evaluation": list(getattr(esrc, "bad", []))}
    summ = summary(result, candidates=list(c.algorithms))
    best = summ["best"]
    qdq_from = deployed if plugins else Path(model_path)
    qdq_name = f"{qdq_from.stem}.{best}.qdq.onnx"
    source_model = onnx.load(str(qdq_from))  # insert_qdq and the FP16+INT8 model copy it
    q = insert_qdq(source_model, amax[best], int8_weights=c.int8_weights, label=str(qdq_from),
                   stem_output=c.stem_output == "int8", residual_branch=c.residual_branch)
    atomic_write_bytes(stage / qdq_name, q.SerializeToString())
    placement = None
    if not plugins:
        placement = add_placement_rows(result, best, source_model, amax[best], q,
                                       {"stem": c.stem_output, "residual": c.residual_branch},
                                       model_path, make_source(espec, recipe.preprocess, inputs,
                                                               recipe.evaluation.batch_size, consts=consts),
                                       recipe, budget, hook, user, label=str(qdq_from), int8_weights=c.int8_weights)
        if placement:
            summ = summary(result, candidates=list(c.algorithms))  # the same decision, with the two rows
    log.info("wrote %s (%s; %s)", qdq_name, describe_opset(q), weight_coverage(q).describe())
    atomic_write_text(stage / "ranges.json", ranges_json(ranges, samples))
    files.append("ranges.json")
    fp16 = None
    if float_type(c) == "fp16":
        fp16 = write_fp16(source_model, qdq_from, amax[best], ranges, c, stage, best, plugins)
        files.append(fp16["file"])
        if fp16.get("evaluate"):
            fp16["rows"] = add_fp16_rows(result, best, q, fp16.pop("evaluate"), model_path,
                                         make_source(espec, recipe.preprocess, inputs, recipe.evaluation.batch_size,
                                                     consts=consts),
                                         recipe, budget, hook, user)
            summ = summary(result, candidates=list(c.algorithms))  # the same decision, with the two rows
    files += [f for f in (qdq_name, "report.json", "report.md", "report.html", "run.log") if f not in files]
    report = {"recipe": recipe.name, "recipe_file": recipe.source, "calib_version": __version__,
              "model": recipe.model if recipe.model.startswith("zoo:") else str(original),
              "model_sha256": info.sha256,
              "skipped_images": skipped,
              "calibration": {"samples": samples, "data_fingerprint": fp, "algorithms": list(c.algorithms),
                              "params": used, "seconds": secs, "nonfinite_left_out": left_out},
              "evaluation": {"samples": result["samples"], "configs": result["configs"]},
              "precision_model": {**pm.to_json(), "text": pm.describe()},
              "fp32_task": result.get("fp32_task"), "summary": summ, "qdq_model": qdq_name, "files": files,
              "decoder": result.get("decoder"),
              "model_file": str(_deployed_file(deployed, model_path, plugins,
                                            equalized is not None or model_path != unfolded, final or recipe.output)),
              "out_dir": str(final or recipe.output),
              "caches": {a: f"{final or recipe.output}/{a}.cache" for a in c.algorithms}}
    report["ranges"] = "ranges.json"
    note = shrink_note(esrc, "x".join(map(str, info.inputs[0][1][-2:])), f"input_shapes (in {recipe.source})")
    notes = [f"input_shapes overrides what the model fixes: {overrides_text(info)}; the caches and Q/DQ model are "
             f"for the model at that shape ({model_path.name})"] if info.overridden else []
    notes += [note] if note and not recipe.input_shapes and recipe.preprocess.resize is None else []  # its own size
    if notes:
        report["input_notes"] = notes
    if placement:
        report["placement"] = placement
    if fp16 is not None:
        report["fp16_model"] = fp16["file"]
        report["fp16"] = fp16
    if equalized is not None:
        report["equalization"] = equalized
        files.append(equalized["file"])
    if es is not None:
        report["tensorrt"] = es.info
    write_reports(stage, report, stats, amax, recipe.evaluation.histograms)
    log.info("ship %s (%s); report and caches ready (%.1f s)", best, summ["decision"]["reason"],
             time.perf_counter() - t0)
