"""The `calib` command line: thin wrappers that parse, call the API and print."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from calib.cli.cache import cache
from calib.cli.common import cache_checks as _cache_checks
from calib.cli.common import given_path, pool_for, ray_option
from calib.cli.common import handled as _handled
from calib.cli.recover import recover
from calib.cli.data import CLI_NAMES, data_options, feed_options, make_cli_source, model_options, with_data
from calib.cli.data import input_shapes as parse_shapes
from calib.cli.task import choose_task, task_options
from calib.cli.data import memory_budget as parse_budget
from calib.cli.zoo import zoo
from calib.errors import CalibError
from calib.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="calib")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars or log lines.")
@click.option("--verbose", "-v", is_flag=True, help="Debug log lines.")
@click.pass_context
def main(ctx, quiet, verbose):
    """calib: INT8 calibration workbench for NVIDIA TensorRT."""
    from calib.io.progress import set_quiet, setup_logging

    set_quiet(quiet)
    setup_logging(verbose)
    ctx.obj = {"verbose": verbose}


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--out", "-o", type=click.Path(file_okay=False), help="Output folder (default: the recipe's).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe key (repeatable).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars or log lines.")
@click.pass_context
@_handled
def run(ctx, recipe, out, overrides, quiet):
    """Run a whole RECIPE: calibrate, simulate INT8, compare with FP32, write caches and report."""
    from calib.evaluate.report import ship_line
    from calib.evaluate.report_doc import shown_path
    from calib.evaluate.verdict import verdict_line
    from calib.io.progress import set_quiet
    from calib.io.reading import read_json
    from calib.pipeline import run_recipe
    from calib.recipe import load_recipe

    if quiet:
        set_quiet(True)
    given_path(out, "--out")
    r = load_recipe(recipe, overrides)
    path = run_recipe(r, out, verbose=ctx.obj["verbose"])
    rep = read_json(Path(path) / "report.json", 256 << 20, "report")
    click.echo(ship_line(rep))
    click.echo(verdict_line(rep))
    click.echo(f"wrote {shown_path(Path(path) / 'report.html')}")


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--out", "-o", type=click.Path(file_okay=False), help="Output folder (default: <output>/sensitivity).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe key (repeatable).")
@ray_option("the calibration pass and the variants' evaluations")
@click.pass_context
@_handled
def sensitivity(ctx, recipe, out, overrides, ray_address):
    """Rank layers of RECIPE's model by INT8 sensitivity and find the fewest to keep in FP16/FP32."""
    from calib.recipe import load_recipe
    from calib.scale.pool import check as check_ray
    from calib.search.sensitivity import run_sensitivity

    given_path(out, "--out")
    check_ray(ray_address)
    r = load_recipe(recipe, overrides)
    with pool_for(ray_address) as pool:
        path = run_sensitivity(r, out, verbose=ctx.obj["verbose"], pool=pool)
    click.echo(f"wrote {Path(path) / 'sensitivity.md'}")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@data_options()
@click.option("--algo", default="minmax,entropy,percentile,mse", show_default=True,
              help="Comma-separated, from minmax, entropy, percentile, mse and entropy-stable.")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(1))
@click.option("--percentile", default=99.99, show_default=True, type=click.FloatRange(0, 100, min_open=True))
@click.option("--trt-version", default="8600", show_default=True, help="Digits of the cache header.")
@click.option("--carrier", default="EntropyCalibration2", show_default=True,
              help="Calibrator algorithm named in the cache header (the class that will read it).")
@click.option("--equalize", is_flag=True,
              help="Cross-layer equalization first; the caches are then for OUT/<model>.equalized.onnx.")
@click.option("--skip-nonfinite", is_flag=True, help="Leave out samples holding NaN or Inf (default: an error).")
@click.option("--allow-qdq", is_flag=True, help="Calibrate a model that holds Q/DQ nodes already (default: refused).")
@model_options
@ray_option("the statistics pass")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False))
@_handled
@with_data
def calibrate(model, data_args, algo, batch_size, percentile, trt_version, carrier, equalize, skip_nonfinite,
              allow_qdq, input_shapes, batch_axes, consts, memory_budget, ray_address, out):
    """Calibrate MODEL on --data in one pass; write OUT/<algo>.cache and OUT/<algo>.json per algorithm."""
    from calib.algorithms import registry
    from calib.stats import warmup

    algos = [a.strip() for a in algo.split(",") if a.strip()]
    if not algos:
        raise CalibError("--algo: no algorithm named")
    for a in algos:  # before the data is opened
        registry.get(a)
    from calib.scale.pool import check as check_ray

    check_ray(ray_address)
    warmup.start()  # before the imports and the model: they overlap
    from calib.calibrate import calibrate as run_calibration
    from calib.quantize.model import inspect_model
    from calib.quantize.shapes import fix_input_shapes

    shapes, budget = parse_shapes(input_shapes), parse_budget(memory_budget)
    info = fix_input_shapes(inspect_model(model), shapes, "--input-shape", override=True)
    info, const_values = feed_options(model, info, batch_axes, consts)
    data = make_cli_source(data_args, info, batch_size, consts=const_values)
    with pool_for(ray_address) as pool:
        res = run_calibration(model, data, algos, {"percentile": {"percentile": percentile}}, batch_size,
                              "none", out, trt_version, carrier, skip_nonfinite=skip_nonfinite, equalize=equalize,
                              give_back=False, allow_qdq=allow_qdq,  # the process ends after writing the caches
                              input_shapes=shapes, memory_budget=budget, option_names=CLI_NAMES,
                              batch_axes=dict(info.layout.inputs + info.layout.outputs), consts=const_values,
                              pool=pool)
    if res.equalized:
        click.echo(f"{Path(out) / res.equalized['file']}  ({res.equalized['equalized']} of {res.equalized['pairs']} "
                   "Conv pairs equalized)")
    if res.left_out:
        click.echo(f"left out {len(res.left_out)} samples holding NaN or Inf", err=True)
    skipped = getattr(data, "bad", None)
    if skipped:
        click.echo(f"{len(skipped)} unreadable images skipped", err=True)
    for a in algos:
        click.echo(f"{Path(out) / (a + '.cache')}  ({len(res.amax[a])} tensors)")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--cache", "caches", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Calibration cache (ours or TensorRT's); repeat to compare several.")
@data_options()
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(1))
@task_options
@click.option("--ignore-hash", is_flag=True, help="Use a cache whose sidecar names another model.")
@click.option("--allow-unknown", is_flag=True, help="Use a cache naming tensors the model lacks (ignored).")
@click.option("--exclude", multiple=True,
              help="Keep in float (per-layer precision): node/output name glob or op:<OpType>; repeatable.")
@click.option("--layerwise/--no-layerwise", default=True, show_default=True, help="Compare every tensor.")
@_cache_checks
@click.option("--deploy", type=click.Choice(["implicit", "qdq"]), default="implicit", show_default=True,
              help="The build to simulate (the one to deploy): implicit INT8 from the cache, or the Q/DQ model.")
@click.option("--engine-layers", type=click.Path(exists=True, dir_okay=False),
              help="An engine's JSON sidecar or inspector JSON: simulate what that engine runs in INT8/FP16/FP32.")
@click.option("--allow-qdq", is_flag=True, help="Evaluate a model that holds Q/DQ nodes already (default: refused).")
@click.option("--float-type", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="fp16: also compare, per cache, its Q/DQ model as written (FP32 float layers) and its FP16+INT8 "
                   "model (strongly typed TensorRT 10/11; FP16 rounding emulated on the CPU) with FP32.")
@model_options
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False))
@_handled
@with_data
def evaluate(model, caches, data_args, batch_size, task, head, charset, metric, postprocess, ignore_hash,
             allow_unknown, exclude,
             layerwise, ignore_sidecar, allow_partial, deploy, engine_layers, allow_qdq, float_type, input_shapes,
             batch_axes, consts, memory_budget, out):
    """Compare MODEL in FP32 with its INT8 simulation under each --cache; write a report to OUT."""
    from calib.data.folding import keep_derived
    from calib.evaluate.api import evaluate as run_eval
    from calib.evaluate.report import ship_line, summary, write_reports
    from calib.evaluate.verdict import verdict_line
    from calib.evaluate.tasks import detection_format, output_shapes
    from calib.io.publish import publish
    from calib.pipeline import deployed_precision
    from calib.quantize.cachecheck import CacheChecks, load_checked
    from calib.quantize.model import check_fp32, inspect_model, load_model
    from calib.quantize.patterns import check_exclusions, excluded_layers
    from calib.quantize.shapes import fix_input_shapes
    from calib.stats.histogram import HistogramCollector

    chosen = choose_task(task, head, charset, metric, postprocess)
    task, head, hook, user = chosen.task, chosen.head, chosen.hook, chosen.user
    proto = load_model(model)
    check_fp32(proto, model, allow_qdq)
    _, detection = chosen.detection(proto, model)
    if task == "outputs" and not hook and detection_format(output_shapes(proto)):
        click.echo(f"note: {model} is a detector: --task detection adds mAP against FP32's boxes to the report; "
                   "this one compares the outputs only", err=True)
    shapes, budget = parse_shapes(input_shapes), parse_budget(memory_budget)
    info = fix_input_shapes(inspect_model(model, proto), shapes, "--input-shape", override=True)
    info, const_values = feed_options(proto, info, batch_axes, consts)
    built = info.path  # the model simulated: `model` with an overridden shape, an If --const decides folded
    if Path(built) != Path(model):
        proto = load_model(built)
    ex = check_exclusions(proto, exclude, model)
    float_layers = excluded_layers(proto, ex)
    del proto
    checks = CacheChecks(ignore_hash, allow_unknown, ignore_sidecar, allow_partial)
    configs, calib_samples = {}, set()
    for c in caches:
        cf, side = load_checked(c, info, checks, ex)
        name = Path(c).stem
        configs[name if name not in configs else c] = cf.amaxes()
        calib_samples.add((side or {}).get("samples"))
    src = make_cli_source(data_args, info, batch_size, consts=const_values)
    pm = deployed_precision(built, deploy, engine_layers, "--engine-layers")
    engines, fp16 = {}, []
    if float_type == "fp16":
        from calib.evaluate.fp16_rows import fp16_engines

        engines, fp16 = fp16_engines(load_model(built), configs, ex, model)
    res = run_eval(model, configs, src, task, detection, exclude={n: ex for n in configs}, layerwise=layerwise,
                   precision={n: pm for n in configs}, memory_budget=budget, input_shapes=shapes,
                   option_names=CLI_NAMES, postprocess=hook, engines=engines, metric=user,
                   batch_axes=dict(info.layout.inputs + info.layout.outputs), consts=const_values)
    shared = ([a for s in input_shapes for a in ("--input-shape", s)] + [a for s in batch_axes for a in ("--batch-axis", s)]
              + [a for s in consts for a in ("--const", s)]
              + (["--memory-budget", memory_budget] if memory_budget != "2GB" else [])
              + (["--charset", charset] if charset else []) + (["--metric", metric] if metric else []))
    report = {"recipe": Path(model).stem, "model": str(model), "model_sha256": info.sha256,
              "calibration": {"samples": calib_samples.pop() if len(calib_samples) == 1 else None},
              "evaluation": {"samples": res["samples"], "configs": res["configs"]},
              "exclude": list(exclude), "float_layers": float_layers,
              "precision_model": {**pm.to_json(), "text": pm.describe()},
              "fp32_task": res.get("fp32_task"), "summary": summary(res, candidates=list(configs)),
              "files": ["report.json", "report.md", "report.html"],
              "model_file": str(model if Path(built) == Path(model) else Path(out) / Path(built).name),
              "caches": {name: str(c) for name, c in zip(configs, caches)}, "out_dir": str(out),
              "decoder": res.get("decoder"),
              "rerun": _rerun(model, data_args, batch_size, res["task"], head, postprocess, deploy, engine_layers,
                              {"--ignore-hash": ignore_hash, "--allow-unknown": allow_unknown,
                               "--ignore-sidecar": ignore_sidecar, "--allow-partial": allow_partial,
                               "--no-layerwise": not layerwise, "--allow-qdq": allow_qdq},
                              shared + (["--float-type", float_type] if float_type != "fp32" else [])),
              "recover": "calib recover" + _rerun(model, data_args, batch_size, res["task"], head, postprocess,
                                                  deploy, engine_layers, {}, shared)[len("calib evaluate"):]}
    from calib.quantize.cache import sidecar_path

    if fp16:
        report["fp16"] = fp16
    inputs = [model, engine_layers, data_args.data, *caches, *(sidecar_path(c) for c in caches)]
    def write(stage):
        keep_derived(built, model, stage)  # the model the deploy commands build: folded, reshaped
        write_reports(stage, report, HistogramCollector(), {})

    publish(out, write, "evaluate", inputs=inputs)
    click.echo(ship_line(report))
    click.echo(verdict_line(report))
    click.echo(f"wrote {Path(out) / 'report.html'}")


def _rerun(model, data_args, batch_size, task, head, postprocess, deploy, engine_layers, flags,
           model_args=()) -> str:
    """This evaluation as a command line without its caches (the report adds the one to ship): the verdict's
    next step runs it again with a layer kept in float. `model_args`: --input-shape and --memory-budget as given."""
    import dataclasses
    import shlex

    args = ["calib", "evaluate", str(model)]
    for f in dataclasses.fields(data_args):
        v = getattr(data_args, f.name)
        if v is None or v is False or v == f.default:
            continue
        flag = "--" + f.name.replace("_", "-")
        args += [flag] if v is True else [flag, str(v)]
    extra = [("--batch-size", batch_size if batch_size != 8 else None), ("--task", task if task != "outputs" else None),
             ("--head", head if head != "auto" else None), ("--postprocess", postprocess),
             ("--deploy", deploy if deploy != "implicit" else None), ("--engine-layers", engine_layers)]
    args += [a for k, v in extra if v is not None for a in (k, str(v))]
    return shlex.join(args + list(model_args) + [k for k, v in flags.items() if v])


def _has_tensorrt() -> bool:
    """Whether `import tensorrt` can work (without importing it); a module put in sys.modules counts."""
    import sys

    if "tensorrt" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("tensorrt") is not None
    except (ImportError, ValueError):
        return False


def _shapes(items) -> tuple:
    out = []
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape:
            raise click.BadParameter(f"'{item}': expected NAME=1x3x224x224", param_hint="--shape")
        out.append((name, shape))
    return tuple(out)


def _engine_outputs_not_inputs(model, out, cache, calibrator, data, layer_precisions_file, timing_cache) -> None:
    """The engine, its .json and the calibrator's cache must not be files `calib build` reads."""
    from calib.io.inputs import refuse_overwrite
    from calib.quantize.cache import sidecar_path

    outputs = [(out, "-o"), (f"{out}.json", "the engine's sidecar")]
    if calibrator:
        outputs.append((Path(out).with_suffix(".cache"), "the calibrator's cache"))
    inputs = [(model, "the model"), (data, "--data"), (layer_precisions_file, "--layer-precisions-file"),
              (timing_cache, "--timing-cache")]
    if cache:
        inputs += [(cache, "--cache"), (sidecar_path(cache), "--cache's sidecar")]
    refuse_overwrite(outputs, inputs)
    side = Path(f"{out}.json")
    if side.exists() or side.is_symlink():  # replaced with the engine: only if it is an engine sidecar
        from calib.io.files import read_bounded

        try:
            doc = json.loads(read_bounded(side, 64 << 20, "engine sidecar")) if not side.is_symlink() else None
        except (OSError, ValueError, RecursionError, CalibError):
            doc = None
        if not isinstance(doc, dict) or "engine_sha256" not in doc:
            raise CalibError(f"{side}: exists and is not an engine sidecar calib wrote; building {Path(out).name} "
                             "would replace it: move it away or choose another -o")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="Engine file to write (+ .json).")
@click.option("--cache", type=click.Path(dir_okay=False), help="Calibration cache for implicit INT8 (calib's or TensorRT's).")
@click.option("--calibrator", type=click.Choice(["entropy2", "minmax", "entropy", "legacy"]),
              help="Calibrate with TensorRT's own algorithm over --data instead of a cache.")
@data_options(required=False, help_data="Samples for --calibrator: .npy/.npz, image folder, YOLO folder or COCO json.")
@click.option("--precision", default="int8,fp16", show_default=True, help="Comma-separated: fp32, fp16, int8.")
@click.option("--layer-precision", "layer_precision", multiple=True, metavar="PATTERN=PREC",
              help="Per-layer precision (name glob, re:REGEX or op:OpType = fp16|fp32|int8); repeatable.")
@click.option("--layer-precisions-file", type=click.Path(dir_okay=False), help="One PATTERN=PREC per line.")
@click.option("--constraints", default="prefer", show_default=True, type=click.Choice(["prefer", "obey", "none"]))
@click.option("--batch-size", default=1, show_default=True, type=click.IntRange(1), help="For a dynamic batch dim.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=AxBxC", help="Fixed shape of an input; repeatable.")
@click.option("--min-shape", "min_shapes", multiple=True, metavar="NAME=AxBxC",
              help="Optimization profile: smallest shape of an input; repeatable (see --opt-shape).")
@click.option("--opt-shape", "opt_shapes", multiple=True, metavar="NAME=AxBxC",
              help="Optimization profile: the shape TensorRT tunes for; repeatable. The n-th --min/--opt/--max-shape "
                   "of an input belong to profile n; calibration runs at profile 0's opt shape.")
@click.option("--max-shape", "max_shapes", multiple=True, metavar="NAME=AxBxC",
              help="Optimization profile: largest shape of an input; repeatable (see --opt-shape).")
@click.option("--workspace-mb", default=4096, show_default=True, type=click.IntRange(16))
@click.option("--opt-level", type=click.IntRange(0, 5), help="builder_optimization_level (TensorRT's default 3).")
@click.option("--timing-cache", type=click.Path(dir_okay=False), help="Read before and written after the build.")
@click.option("--tactic-sources", help="Comma-separated TacticSource names.")
@click.option("--ignore-hash", is_flag=True, help="Use a cache whose sidecar names another model.")
@click.option("--allow-unknown", is_flag=True, help="Use a cache naming tensors the model lacks (ignored).")
@click.option("--strongly-typed/--weakly-typed", "strongly_typed", default=None,
              help="Network typing (default: weakly typed on TensorRT 10.x so that fp16 is honoured; TensorRT 11 "
                   "types every network strongly; a strongly typed FP32 model with fp16 is refused).")
@_cache_checks
@_handled
@with_data
def build(model, out, cache, calibrator, data_args, precision, layer_precision, layer_precisions_file,
          constraints, batch_size, shapes, min_shapes, opt_shapes, max_shapes, workspace_mb, opt_level, timing_cache,
          tactic_sources, ignore_hash, allow_unknown, strongly_typed, ignore_sidecar, allow_partial):
    """Build a TensorRT engine from MODEL (FP32/FP16, INT8 from a cache, TensorRT's calibrator or Q/DQ)."""
    given_path(out)
    _engine_outputs_not_inputs(model, out, cache, calibrator, data_args.data, layer_precisions_file, timing_cache)
    if cache:  # the sidecar, the model and every quantized layer's scale, before TensorRT is loaded
        from calib.quantize.cachecheck import CacheChecks, load_checked
        from calib.quantize.model import inspect_model

        checks = CacheChecks(ignore_hash, allow_unknown, ignore_sidecar, allow_partial)
        load_checked(cache, inspect_model(model), checks)
        ignore_hash = ignore_hash or ignore_sidecar  # checked above; an ignored sidecar is not read again
    from calib.cli.data import materialized
    from calib.quantize.model import load_model
    from calib.quantize.patterns import check_layer_precisions
    from calib.runners.tensorrt.builder import BuildSpec, read_layer_precisions
    from calib.runners.tensorrt.profiles import calibration_batch, from_options

    rules = tuple(layer_precision) + tuple(read_layer_precisions(layer_precisions_file) if layer_precisions_file else ())
    if rules:  # against the ONNX model's nodes, before TensorRT is loaded (no GPU needed to find a typo)
        check_layer_precisions(load_model(model), rules, model)
    from calib.deploy.engine_file import build_engine_file, refuse_implicit_int8

    if (cache or calibrator) and _has_tensorrt():
        from calib.runners.tensorrt import compat  # TensorRT 11 has no implicit INT8: said before the data is read

        refuse_implicit_int8(compat.load(), model, out, cache, calibrator, data_args.data)
    spec = BuildSpec(precisions=tuple(p.strip() for p in precision.split(",") if p.strip()), layer_precisions=rules,
                     constraints=constraints, workspace_mb=workspace_mb, optimization_level=opt_level,
                     timing_cache=timing_cache, batch_size=batch_size, shapes=_shapes(shapes),
                     profiles=from_options(min_shapes, opt_shapes, max_shapes),
                     tactic_sources=tuple(t.strip() for t in tactic_sources.split(",")) if tactic_sources else None,
                     strongly_typed=strongly_typed)
    cal_batch = calibration_batch(spec.profiles, batch_size)
    with materialized(data_args, model, cal_batch if calibrator else 0) as (data, preprocess):
        info = build_engine_file(model, out, spec, cache, calibrator, data, preprocess, ignore_hash, allow_unknown)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(info["layer_summary"].items()))
    click.echo(f"wrote {out} ({'+'.join(info['precisions'])}, {info['build_seconds']:.1f} s; layers: {counts})")
    if info.get("strongly_typed"):
        click.echo(f"  strongly typed (TensorRT {info['tensorrt']}): every layer runs in the type the model gives it "
                   "(FP16 and INT8 come from the model, not from --precision)")
    if spec.profiles:
        from calib.runners.tensorrt.profiles import describe

        for k, prof in enumerate(info["profiles"]):
            click.echo(f"  profile {k}: {describe(prof)}")


@main.command()
@click.argument("engine", type=click.Path(dir_okay=False))
@click.option("--batch-size", type=click.IntRange(1), help="Time this batch (other dims at the profile's opt shape).")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=AxBxC",
              help="Time this input shape (repeatable; other inputs at the profile's opt shape). Default: the min, "
                   "opt and max shapes of every optimization profile.")
@click.option("--profile", type=click.IntRange(0), help="Optimization profile to time (default: every profile; "
                                                        "with --shape or --batch-size, profile 0).")
@click.option("--iters", default=50, show_default=True, type=click.IntRange(1), help="Runs per timed group.")
@click.option("--repeats", default=15, show_default=True, type=click.IntRange(1), help="Timed groups (median).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
@click.option("--layers", is_flag=True, help="Also profile every engine layer (IProfiler): time, precision, tactic.")
@click.option("--top", default=25, show_default=True, type=click.IntRange(1), help="With --layers: rows shown.")
@click.option("--against", type=click.Path(dir_okay=False), default=None,
              help="Another engine of the same model (FP16, as a rule): timed at the same shapes, and whether "
                   "ENGINE pays against it said per shape, and from which batch.")
@click.option("--cuda-graph", is_flag=True,
              help="Time launches of a CUDA graph of the engine's work: the GPU's time without the host's per-kernel "
                   "launch cost, which can hide a small engine's (trtexec --useCudaGraph).")
@_handled
def bench(engine, batch_size, shapes, profile, iters, repeats, as_json, layers, top, against, cuda_graph):
    """Latency and throughput of a TensorRT ENGINE (CUDA events, median of groups after warm-up), a row per
    optimization profile and shape. With --against, the two engines are timed in turns, group by group."""
    from calib.deploy.engine_file import bench_engine_file

    rows = bench_engine_file(engine, batch_size, iters=iters, repeats=repeats, layers=layers,
                             shapes=dict(_shapes(shapes)), profile=profile, cuda_graph=cuda_graph)
    worth = _worth(engine, rows, against, iters, repeats, cuda_graph) if against else None
    if worth is not None:  # the alternated figures replace the first ones: both engines under the same conditions
        rows = [dict(r, **{k: v for k, v in a.items() if k in TIMED}) for r, a in zip(rows, worth.pop("mine"))]
    if as_json:
        click.echo(json.dumps({"rows": rows, "against": worth} if worth is not None else rows, indent=2))
        return
    for r in rows:
        dims = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in r["shapes"].items())
        click.echo(f"{engine}: profile {r['profile']} {r['point']} ({dims}): median {r['median_ms']:.4f} ms "
                   f"(min {r['min_ms']:.4f}, max {r['max_ms']:.4f}), {r['throughput_per_s']:.0f} samples/s")
        if layers:
            from calib.runners.tensorrt.profile import format_table

            click.echo(format_table(r["layers"], top))
    if worth is not None:
        for line in worth["said"]:
            click.echo(line)


TIMED = ("median_ms", "min_ms", "max_ms", "throughput_per_s", "runs", "cuda_graph", "alternated")


def _worth(engine, rows, against, iters, repeats, cuda_graph=False) -> dict:
    """`--against`: both engines timed in turns at each of ENGINE's shapes, and the sentences of calib.deploy.worth
    ("mine": ENGINE's alternated rows, in the order of `rows`)."""
    from calib.deploy.engine_file import alternate_engines
    from calib.deploy.worth import compare, sentences

    mine, other = [], []
    for r in rows:
        point = {n: tuple(s) for n, s in r["shapes"].items()}
        a, b = alternate_engines([engine, against], point, iters=iters, repeats=repeats, cuda_graph=cuda_graph)
        mine.append(a)
        other.append(b)
    found = compare(mine, other)
    return {"engine": str(against), "rows": other, "compared": found, "mine": mine,
            "said": sentences(found, Path(engine).name, Path(against).name)}


main.add_command(cache)
main.add_command(recover)
main.add_command(zoo)

