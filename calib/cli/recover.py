"""`calib recover MODEL --data ... --target 'map50_95>=0.95'`: from "not close" to an INT8 configuration that
meets the target (calib.search.recover), with the model, data, preprocessing, shape, memory and task options of
`calib calibrate` and `calib evaluate`."""
from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import click

from calib.cli.common import given_path, handled, pool_for, ray_option
from calib.cli.data import CLI_NAMES, DataArgs, data_options, feed_options, make_cli_source, model_options, with_data
from calib.cli.data import input_shapes as parse_shapes
from calib.cli.data import memory_budget as parse_budget
from calib.cli.task import choose_task, task_options
from calib.errors import CalibError, DataError

STEP_NAMES = {"equalize": "equalize", "smoothquant": "smoothquant", "adaround": "adaround", "bias": "bias",
              "per-tensor": "per_tensor"}


def parse_time_budget(text: str | None) -> float | None:
    """--time-budget as seconds: 900, 900s, 15m, 1h."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text.lower())
    if m is None or float(m.group(1)) <= 0:
        raise CalibError(f"--time-budget: '{text}': expected a positive duration such as 900, 600s, 15m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def steps(text: str) -> tuple:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if names == ["none"]:
        return ()
    bad = [s for s in names if s not in STEP_NAMES]
    if bad:
        raise CalibError(f"--steps: unknown step '{bad[0]}' (choose from {', '.join(STEP_NAMES)}, or none)")
    return tuple(STEP_NAMES[s] for s in names)


def split(args: DataArgs, calib_samples: int) -> tuple[DataArgs, DataArgs]:
    """--data cut in two by the seeded order: the first --calib-samples calibrate, the rest (within --limit) are
    the held-out evaluation."""
    if args.limit is not None and args.limit <= calib_samples:
        raise CalibError(f"--limit {args.limit} leaves no evaluation samples after --calib-samples {calib_samples}: "
                         "raise --limit or lower --calib-samples")
    cal = dataclasses.replace(args, limit=calib_samples)
    ev = dataclasses.replace(args, limit=args.limit - calib_samples if args.limit else None,
                             offset=args.offset + calib_samples)
    return cal, ev


def command_line(ctx: click.Context) -> str:
    """The command as typed, from its parameters (only those not at their defaults)."""
    args = ["calib", "recover"]
    for p in ctx.command.params:
        v = ctx.params.get(p.name)
        if isinstance(p, click.Argument):
            args.append(str(v))
        elif v not in (None, False, (), p.default) and p.opts:
            flag = max(p.opts, key=len)
            if p.is_flag:
                args.append(flag)
            else:
                for x in (v if p.multiple else [v]):
                    args += [flag, str(x)]
    return shlex.join(args)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)


def _from_flags(model, data_args, calib_samples, batch_size, chosen, input_shapes, batch_axes, consts,
                memory_budget):
    """(model, info, calibration source, evaluation source, Evaluation, memory budget) from the options."""
    from calib.evaluate.tasks import detection_format, output_shapes
    from calib.quantize.model import check_fp32, inspect_model, load_model
    from calib.quantize.shapes import fix_input_shapes
    from calib.search.recover_state import Evaluation

    if not data_args.data:
        raise CalibError("--data: give the samples (calibration and held-out evaluation), or a recipe as MODEL")
    proto = load_model(model)
    check_fp32(proto, model, False)
    _, detection = chosen.detection(proto, model)
    if chosen.task == "outputs" and not chosen.hook and detection_format(output_shapes(proto)):
        click.echo(f"note: {model} is a detector: --task detection (or --head) measures mAP against FP32's boxes",
                   err=True)
    shapes, memory = parse_shapes(input_shapes), parse_budget(memory_budget)
    info = fix_input_shapes(inspect_model(model, proto), shapes, "--input-shape")
    info, const_values = feed_options(proto, info, batch_axes, consts)
    del proto
    cal_args, ev_args = split(data_args, calib_samples)
    cal = make_cli_source(cal_args, info, batch_size, consts=const_values)
    try:
        ev = make_cli_source(ev_args, info, batch_size, consts=const_values)
    except DataError as exc:
        if "skips all" not in str(exc):
            raise
        raise DataError(f"--calib-samples {calib_samples}: {data_args.data} has no samples left for the held-out "
                        "evaluation: give more data or a smaller --calib-samples") from None
    return model, info, cal, ev, Evaluation(chosen.task, detection, chosen.hook, chosen.user), memory


RECIPE_ONLY_FLAGS = ("data", "task", "head", "charset", "metric", "postprocess", "input_shapes", "batch_axes",
                     "consts", "memory_budget", "batch_size")


@click.command()
@click.argument("model", type=click.Path(dir_okay=False), metavar="MODEL|RECIPE")
@data_options(required=False)
@click.option("--target", metavar="METRIC>=VALUE",
              help="The figure to reach, named as in report.json (the _vs_fp32 suffix optional): map50_95>=0.95, "
                   "agreement_top1>=0.99, top1>=0.70 (accuracy against labels), min_output_sqnr_db>=25, "
                   "cer<=0.02, or your --metric's name. With --max-drop: METRIC alone.")
@click.option("--max-drop", type=float, help="Reach FP32's own value of the metric (default: the task's primary "
                                              "figure) minus this.")
@click.option("--calib-samples", default=32, show_default=True, type=click.IntRange(1),
              help="The first samples of --data (seeded order) calibrate; the rest are the held-out evaluation "
                   "(a recipe's evaluation_data, where it has one, is held out instead).")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(1))
@task_options
@click.option("--algo", default="minmax,entropy,percentile,mse", show_default=True,
              help="Algorithms whose scales are compared all INT8, and per tensor.")
@click.option("--percentile", default=99.99, show_default=True, type=click.FloatRange(0, 100, min_open=True))
@click.option("--steps", "step_names", default="equalize,smoothquant,adaround,bias,per-tensor", show_default=True,
              help="Recovery in INT8 tried before the fallback, each kept only where it helps (or none).")
@click.option("--rank-samples", default=16, show_default=True, type=click.IntRange(0),
              help="Held-out samples the layer ranking and the per-tensor choice are measured on (0: all; the "
                   "noise ranking: the first batch holding 4 of them); every step is judged on all of them.")
@click.option("--rank-by", type=click.Choice(["noise", "metric", "sqnr"]), default="noise",
              show_default=True,
              help="What orders the layers: the output noise each layer adds alone in INT8 (every other in "
                   "float), the target's figure with each alone in float (stops at the first that meets the "
                   "target alone), or the outputs' SQNR gain with each alone in float.")
@click.option("--precision", type=click.Choice(["fp16", "fp32"]), default="fp16", show_default=True,
              help="What the fallback keeps layers in.")
@click.option("--deploy", type=click.Choice(["implicit", "qdq", "fp16"]), default="implicit", show_default=True,
              help="The build simulated: implicit INT8 from the cache, the Q/DQ model, or the FP16+INT8 model "
                   "(fp16: TensorRT 10/11 strongly typed, the only INT8 form TensorRT 11 builds; float layers in "
                   "FP16, or FP32 with --precision fp32).")
@click.option("--backend", type=click.Choice(["onnxruntime", "tensorrt"]), default=None,
              help="tensorrt: afterwards build the FP16 engine, the all-INT8 one and the chosen configuration's with "
                   "TensorRT, and report each one's figure on the held-out samples and its latency against FP16 "
                   "(a GPU; default: onnxruntime, a recipe's backend.kind).")
@click.option("--engine-curve/--no-engine-curve", default=True, show_default=True,
              help="With --backend tensorrt: build and time an engine for every other point of the fallback curve "
                   "too (one build each, while --time-budget lasts).")
@click.option("--engine-layers", type=click.Path(exists=True, dir_okay=False),
              help="An engine's JSON sidecar or inspector JSON: simulate what that engine runs in INT8/FP16/FP32.")
@click.option("--time-budget", metavar="DURATION",
              help="Stop searching after this long (900, 15m) and publish the best configuration so far.")
@click.option("--trt-version", default="8600", show_default=True, help="Digits of the cache header.")
@click.option("--carrier", default="EntropyCalibration2", show_default=True,
              help="Calibrator algorithm named in the cache header (the class that will read it).")
@model_options
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="With a recipe: override a key.")
@ray_option("the calibration passes and the variants' evaluations")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False))
@click.pass_context
@handled
@with_data
def recover(ctx, model, data_args, target, max_drop, calib_samples, batch_size, task, head, charset, metric,
            postprocess, algo, percentile, step_names, rank_samples, rank_by, precision, deploy, backend, engine_curve,
            engine_layers, time_budget, trt_version, carrier, input_shapes, batch_axes, consts, memory_budget,
            overrides, ray_address, out):
    """Recover INT8 accuracy on MODEL (or a RECIPE's model, data and task) until --target holds: in INT8 first,
    then with the fewest layers in float."""
    from calib.algorithms import registry
    from calib.search.recover import recover as run_recovery
    from calib.search.recover_state import RecoverSpec
    from calib.search.recover_out import summary_line
    from calib.search.target import parse_target
    from calib.scale.pool import check as check_ray

    given_path(out, "--out")
    goal = parse_target(target, max_drop)  # every option checked before the model or the data is read
    check_ray(ray_address)
    budget_s = parse_time_budget(time_budget)
    chosen_steps = steps(step_names)
    algos = [a.strip() for a in algo.split(",") if a.strip()]
    if not algos:
        raise CalibError("--algo: no algorithm named")
    for a in algos:
        registry.get(a)
    names = {**CLI_NAMES, "evaluation_data.limit": "--limit"}
    if Path(model).suffix.lower() in (".yaml", ".yml"):
        from calib.recipe import load_recipe
        from calib.search.recover_recipe import recipe_inputs

        given = [p for p in ctx.command.params if p.name in RECIPE_ONLY_FLAGS + tuple(
            f.name for f in dataclasses.fields(data_args)) and _given(ctx, p.name)]
        if given:
            raise CalibError(f"{max(given[0].opts, key=len)}: {model} is a recipe: its data, preprocessing, shapes "
                             "and task come from it (change them with --set KEY=VALUE)")
        r = load_recipe(model, overrides)
        got = recipe_inputs(r, calib_samples)
        c, e = r.calibration, r.evaluation
        algos = algos if _given(ctx, "algo") else list(c.algorithms)
        percentile = percentile if _given(ctx, "percentile") else c.percentile
        deploy = deploy if _given(ctx, "deploy") else e.deploy
        engine_layers = engine_layers or e.engine_layers
        backend = backend or r.backend.kind
        trt_version = trt_version if _given(ctx, "trt_version") else c.trt_version
        carrier = carrier if _given(ctx, "carrier") else c.carrier
        model_file, info, cal, ev, evaluation, memory = got.model, got.info, got.calibration, got.evaluation, \
            got.judged, got.memory
        names, inputs = None, [model]
    else:
        if overrides:
            raise CalibError("--set: only with a recipe as MODEL")
        chosen = choose_task(task, head, charset, metric, postprocess)
        model_file, info, cal, ev, evaluation, memory = _from_flags(
            model, data_args, calib_samples, batch_size, chosen, input_shapes, batch_axes, consts, memory_budget)
        inputs = [data_args.data]
    backend = backend or "onnxruntime"
    if backend == "tensorrt":  # TensorRT and a GPU are there, said before the search rather than after it
        from calib.runners.tensorrt import compat
        from calib.runners.tensorrt.device import Cuda

        compat.load()
        Cuda()
    spec = RecoverSpec(goal, tuple(algos), percentile, chosen_steps, rank_samples=rank_samples or None,
                       rank_by=rank_by, precision=precision, deploy=deploy, backend=backend,
                       engine_curve=engine_curve,
                       engine_layers=engine_layers, time_budget=budget_s, trt_version=trt_version, carrier=carrier)
    with pool_for(ray_address) as pool:
        res = run_recovery(model_file, info, cal, ev, spec, evaluation, out, memory, batch_size, names,
                           inputs=[*inputs, engine_layers], command=command_line(ctx), pool=pool)
    click.echo(summary_line(res))
    click.echo(f"wrote {Path(out) / 'recover.md'}")
