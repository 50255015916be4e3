"""calib.evaluate(): FP32 vs INT8 (simulated on the CPU with Q/DQ) per layer, per output and on the task."""
from __future__ import annotations

import logging
import time
from pathlib import Path


from calib.data.groups import group_of
from calib.data.rebatch import FixedBatches
from calib.errors import DataError, called
from calib.evaluate import confidence
from calib.evaluate.detect import DetectionTally
from calib.evaluate.heads import image_hw
from calib.evaluate.layerwise import Comparison, Simulator
from calib.evaluate.metrics import Classification
from calib.evaluate.postprocess import load as load_hook
from calib.evaluate.recall import figures as recall_figures
from calib.evaluate.scores.tally import ScoreTally
from calib.evaluate.scores.user import load_metric
from calib.evaluate.tasks import check_task
from calib.io.memory import Budget
from calib.io.progress import bar
from calib.quantize.model import inspect_model
from calib.quantize.shapes import dims_text, fix_input_shapes, fixed_batch
from calib.runners.budget import evaluation_plan
from calib.recipe import DetectionSpec

log = logging.getLogger(__name__)


def _configs(caches, info, checks=None) -> dict:
    """name -> {tensor: amax} from cache paths (checked as every reader checks them: sidecar, model, coverage;
    `checks` a calib.quantize.cachecheck.CacheChecks for deliberate exceptions) or already-made dicts."""
    out = {}
    for name, c in caches.items():
        if isinstance(c, (str, Path)):
            from calib.quantize.cachecheck import CacheChecks, load_checked

            out[name] = load_checked(c, info, checks or CacheChecks())[0].amaxes()
        else:
            out[name] = dict(c)
    return out


def _batches(source):
    if hasattr(source, "iter_with_meta"):
        yield from source.iter_with_meta()
    else:
        for b in source:
            n = next(iter(b.values())).shape[0]
            yield b, [None] * n, [None] * n


def evaluate(model, caches: dict, source, task: str = "outputs", detection: DetectionSpec = DetectionSpec(),
             exclude: dict | None = None, layerwise: bool = True, engines: dict | None = None,
             checks=None, batch_size: int = 8, precision: dict | None = None, memory_budget: Budget | None = None,
             input_shapes: dict | None = None, option_names=None, postprocess=None, batch_axes: dict | None = None,
             consts: dict | None = None, metric=None) -> dict:
    """Compare FP32 with INT8 simulations, one per entry of `caches` (name -> cache path or {tensor: amax}), and
    with `engines` (name -> a runner of the same model, e.g. a TensorRT engine; compared on the outputs).
    Cache paths are checked like the CLI's (`checks`: a calib.quantize.cachecheck.CacheChecks for its override flags).
    `precision`: name -> a calib.deploy.precision.PrecisionModel, to simulate that configuration as the engine it
    describes runs it (default: calib's Q/DQ placement).

    `source`: a Source, or arrays as calib.calibrate takes them (an ndarray, a dict of arrays per model input, a
    .npy/.npz path), fed `batch_size` samples at a time.

    The runs hold as many samples as `memory_budget` (default 2 GB) allows, from the activation bytes per sample
    that shape inference gives (calib.runners.budget); a model with a fixed batch runs exactly that many, a
    remainder that cannot fill a run left out and said. `input_shapes` fixes dynamic input dimensions; `option_names`
    maps recipe keys to the flags the user typed, for the messages.
    `postprocess`: FILE.py:FUNCTION (or a loaded calib.evaluate.postprocess.Hook) turning a batch of outputs into
    detections, class scores, strings or (with task embedding) vectors; the task is then what it returns (`task`
    outputs), or must be. `metric`: FILE.py:FUNCTION (or a calib.evaluate.scores.user.Metric) scoring each sample
    of a configuration against FP32 (calib.evaluate.scores); its figure is named after the function and ranks the
    configurations."""
    from calib.calibrate import check_batch
    from calib.data.arrays import as_source
    from calib.runners.feed import fed
    from calib.data.feeding import laid_out
    from calib.data.folding import fold_model
    from calib.runners.reshape import reshape_model

    hook = load_hook(postprocess) if isinstance(postprocess, str) else postprocess
    user = load_metric(metric) if isinstance(metric, str) else metric
    if hook is None:
        check_task(model, task, detection.format if task == "detection" else None)
    elif task not in ("outputs", "classification", "detection", "text", "embedding"):
        raise DataError(f"{hook.label}: a postprocess hook gives detections, class scores, strings or vectors, not "
                        f"task '{task}'")
    info = fix_input_shapes(inspect_model(model), input_shapes or {}, called("input_shapes", option_names), True)
    model, info = reshape_model(model, info, called("input_shapes", option_names))
    info = laid_out(model, info, batch_axes, consts, called("inputs.batch_axis", option_names))
    model, info = fold_model(model, info, consts, called("inputs.const", option_names))
    source = as_source(source, info, batch_size, consts=consts, option_names=option_names)
    configs = _configs(caches, info, checks)
    engines = {n: fed(r, info.layout) for n, r in (engines or {}).items()}
    clash = set(engines) & set(configs)
    if clash:
        raise DataError(f"configuration name '{sorted(clash)[0]}' is both a cache and an engine")
    fixed, budget = fixed_batch(info), memory_budget or Budget()
    read = getattr(source, "batch_size", batch_size)
    switch = (option_names or {}).get("layerwise", "layerwise=False")
    plan = evaluation_plan(model, info, budget, read, fixed, 1 + len(configs), layerwise=layerwise, switch=switch,
                           engines=len(engines))
    sim = None if plan is None else Simulator(model, info, configs, exclude, layerwise, micro_batch=plan.samples,
                                              precision=precision, fixed=fixed, groups=plan.groups)
    names = list(configs) + list(engines)
    comps = {n: Comparison(n, outputs=tuple(info.outputs)) for n in names}
    cls = {n: Classification() for n in names}
    det = DetectionTally(detection, names, info.outputs, decoder=hook) if task == "detection" else None
    tally = ScoreTally(metric=user) if user is not None else None
    perturbed = {n for n, r in engines.items() if layerwise and getattr(r, "perturbed", False)}  # compare every output
    n = 0
    groups, labelled_groups = [], []  # per sample: its group (crops of one photo share one), for the bootstrap
    total = len(source) if hasattr(source, "__len__") else None
    items = FixedBatches(_batches(source), fixed) if fixed else _batches(source)
    with bar("evaluate", total=total) as pbar:
        for batch, samples, meta in items:
            if n == 0:
                check_batch(batch, info, getattr(source, "label", "evaluation data"), option_names)
            if sim is None:  # the input sizes known only now: the plan, then the sessions
                plan = evaluation_plan(model, info, budget, read, fixed, 1 + len(configs), batch, layerwise,
                                       switch, len(engines))
                sim = Simulator(model, info, configs, exclude, layerwise, micro_batch=plan.samples,
                                precision=precision, fixed=fixed, groups=plan.groups)
            gs = [group_of(s, n + j) for j, s in enumerate(samples)]
            groups += gs
            labelled_groups += [g for s, g in zip(samples, gs) if _labelled(s)]
            ref, tests = sim.compare(batch, comps, keep_reference=bool(perturbed),
                                     keep_outputs=bool(engines) or task != "outputs" or hook is not None
                                     or user is not None)
            for name, runner in engines.items():
                tests[name] = runner.run(batch, None if name in perturbed else list(info.outputs))
                comps[name].update(ref, tests[name])
            if hook is not None and n == 0:
                task = hook_task(hook, ref, task, info.outputs)
                if task == "detection" and det is None:
                    det = DetectionTally(detection, names, info.outputs, decoder=hook)
                if task in ("text", "embedding"):
                    tally = ScoreTally("text" if task == "text" else "vectors", user)
            if tally is not None:
                _tally(tally, hook, ref, tests, info.outputs)
            if task == "classification":
                labels = [getattr(s, "label", None) for s in samples]
                r = _scores(hook, ref, info.outputs)
                for name, test in tests.items():
                    cls[name].update(r, _scores(hook, test, info.outputs), labels)
            if det is not None:
                det.update(ref, tests, samples, meta, n, image_hw(batch))
            k = next(iter(batch.values())).shape[0]
            n += k
            pbar.update(k)
    if fixed:
        shape = ", ".join(f"'{x}' {dims_text(d)}" for x, d, _ in info.inputs)
        items.check(getattr(source, "label", "evaluation data"), shape, called("evaluation_data.limit", option_names))
    if n == 0:
        raise DataError("evaluation data: no samples")
    result = {"model": str(model), "model_sha256": info.sha256, "samples": n, "task": task, "configs": {}}
    det_res = det.result() if det is not None else None
    for name in names:
        c = comps[name]
        entry = {"outputs": {o: c.tensors[o].result() for o in info.outputs if o in c.tensors},
                 "layers": c.layers(info, n, groups) if (layerwise and name in configs) or name in perturbed else []}
        if name in (precision or {}):
            entry["precision_model"] = precision[name].to_json()
        if name in engines:
            entry["backend"] = getattr(engines[name], "backend", "engine")
            if name in perturbed:
                entry["perturbed"] = True  # every tensor marked as an output: not the deployed engine
        if task == "classification":
            entry["task"] = cls[name].result()
        if tally is not None:
            got = tally.entry(name)
            if tally.kind is not None:
                entry["task"] = got
            if user is not None:
                entry["scores"] = {user.key: got[user.key]}
        elif task == "embedding":
            x = confidence.sample_cosines(c)
            entry["task"] = {"mean_cosine": float(x.mean()), "min_cosine": float(x.min()), "samples": int(x.size)}
        elif det_res is not None:
            entry["task"] = det_res[name]
        result["configs"][name] = entry
    if hook is not None or det is not None:
        result["decoder"] = hook.describe() if hook is not None else det.describe()
    if user is not None:
        result["metric"] = user.describe()
    if det_res is not None:
        result["fp32_task"] = det_res["fp32"]
        result["fp32_boxes"] = det_res["fp32_boxes"]
        result["conf_threshold"] = detection.conf_threshold  # what makes a box a reference box
    _intervals(result, names, task, info.outputs, comps, cls, det, groups, labelled_groups, tally)
    return result


def hook_task(hook, ref: dict, task: str, outputs) -> str:
    """The task a postprocess hook's result on the first FP32 batch scores: detection, classification or text
    (`task` outputs takes it; another task must be it); vectors [N, D] with task embedding: embedding."""
    kind, _ = hook({o: ref[o] for o in outputs})
    if task == "embedding" and kind == "classification":
        return task
    if task not in ("outputs", kind):
        shown = "class scores [N, C]" if kind == "classification" else "detections"
        raise DataError(f"{hook.label} returned {shown}, which task '{task}' cannot score (task {kind} does)")
    return kind


def _tally(tally, hook, ref: dict, tests: dict, outputs) -> None:
    """Fold one batch into the per-sample scores: the hook's strings or vectors, the user's metric on the
    outputs."""
    r_in = {o: ref[o] for o in outputs}
    r_post = hook(r_in)[1] if hook is not None and tally.kind is not None else None
    n = len(next(iter(r_in.values())))
    for name, test in tests.items():
        t_in = {o: test[o] for o in outputs}
        t_post = hook(t_in)[1] if r_post is not None else None
        tally.update(name, r_post, t_post, r_in, t_in, n)


def _scores(hook, outputs: dict, names) -> object:
    """Class scores of a batch: the hook's where one is given, else the model's first output."""
    if hook is None:
        return outputs[names[0]]
    kind, got = hook({o: outputs[o] for o in names})
    if kind != "classification":
        raise DataError(f"{hook.label} returned detections for one batch and class scores for another")
    return got


def _labelled(sample) -> bool:
    lab = getattr(sample, "label", None)
    return lab is not None and lab >= 0


def _intervals(result: dict, names, task: str, outputs, comps, cls, det, groups=None, labelled_groups=None,
               tally=None) -> None:
    """Each configuration's figures with 95 % intervals over samples ("intervals"; over groups of samples where
    they carry groups), FP32's own figures against labels ("fp32_intervals") and every pair of configurations
    compared on the primary metric ("paired")."""
    t0 = time.perf_counter()
    figs, reps = {}, {}
    for name in names:
        f, r = confidence.output_figures(comps[name], lowest=task == "outputs", groups=groups)
        if task == "classification":
            f2, r2 = confidence.classification_figures(cls[name], groups=groups, labelled_groups=labelled_groups)
        elif task == "embedding" and not (tally is not None and tally.kind == "vectors"):
            f2, r2 = confidence.embedding_figures(comps[name], groups=groups)
        elif det is not None:
            f2, r2 = confidence.detection_figures(result["configs"][name]["task"], det.matches[name],
                                                  len(det.images), groups=groups)
            f3, r3 = recall_figures(det.recall[name], len(det.images), groups)
            f2, r2 = {**f2, **f3}, {**r2, **r3}
        else:
            f2, r2 = {}, {}
        if tally is not None:
            ft, rt = tally.figures(name, groups)
            f2, r2 = {**f2, **ft}, {**r2, **rt}
        figs[name], reps[name] = {**f2, **f}, {**r2, **r}
        result["configs"][name]["intervals"] = figs[name]
    fp32, fp32_reps = {}, {}
    if task == "classification" and names:
        x = cls[names[0]].samples("ref1")
        if x.size:
            fp32["top1"], fp32_reps["top1"] = confidence.mean_figure_reps(x, labelled_groups)
    elif det is not None and "vs_labels" in result.get("fp32_task", {}):
        f, r = confidence.detection_figures({"vs_labels": result["fp32_task"]["vs_labels"]}, det.matches["fp32"],
                                            len(det.images), groups=groups)
        fp32 = {k: v for k, v in f.items() if k.endswith("labels")}
        fp32_reps = {k: v for k, v in r.items() if k.endswith("labels")}
    for name in names:
        drop = confidence.drop_figure(task, figs[name], reps[name], fp32, fp32_reps)
        if drop is not None:
            figs[name]["drop"] = drop
    result["fp32_intervals"] = fp32
    key = (tally.primary() if tally is not None else None) or confidence.primary_metric(task, outputs)
    result["primary_metric"] = key
    result["paired"] = confidence.paired(names, figs, reps, key, cls if task == "classification" else None,
                                         groups)
    result["bootstrap"] = confidence.method(task, groups)
    log.info("intervals and paired comparisons: %.1f s", time.perf_counter() - t0)
