"""The `calib` command line: thin wrappers that parse, call the API and print."""
from __future__ import annotations

from pathlib import Path

import click

from calib.cli.cache import cache
from calib.cli.engine import bench, build
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
    from calib.deploy.precision import float_input_writers
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
    float_writers = float_input_writers(proto, float_layers)
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
              "exclude": list(exclude), "float_layers": float_layers, "float_writers": float_writers,
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


main.add_command(build)
main.add_command(bench)
main.add_command(cache)
main.add_command(recover)
main.add_command(zoo)

