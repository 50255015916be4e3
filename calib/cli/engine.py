"""`calib build` (an engine from a model and a cache or calibrator) and `calib bench` (its latency, and whether it
pays against another engine)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from calib.cli.common import cache_checks as _cache_checks
from calib.cli.common import given_path
from calib.cli.common import handled as _handled
from calib.cli.data import data_options, with_data
from calib.errors import CalibError
from calib.runners.tensorrt.inspect import counts_text


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


@click.command()
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
@click.option("--tf32", is_flag=True,
              help="Keep TensorRT's TF32 default (FP32 convolutions and matrix products in TF32, as trtexec without "
                   "--noTF32); calib builds FP32 as FP32 otherwise.")
@_cache_checks
@_handled
@with_data
def build(model, out, cache, calibrator, data_args, precision, layer_precision, layer_precisions_file,
          constraints, batch_size, shapes, min_shapes, opt_shapes, max_shapes, workspace_mb, opt_level, timing_cache,
          tactic_sources, ignore_hash, allow_unknown, strongly_typed, tf32, ignore_sidecar, allow_partial):
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
                     strongly_typed=strongly_typed, tf32=tf32)
    cal_batch = calibration_batch(spec.profiles, batch_size)
    with materialized(data_args, model, cal_batch if calibrator else 0) as (data, preprocess):
        info = build_engine_file(model, out, spec, cache, calibrator, data, preprocess, ignore_hash, allow_unknown)
    counts = counts_text(info["layer_summary"])
    click.echo(f"wrote {out} ({'+'.join(info['precisions'])}, {info['build_seconds']:.1f} s; layers: {counts})")
    if info.get("strongly_typed"):
        click.echo(f"  strongly typed (TensorRT {info['tensorrt']}): every layer runs in the type the model gives it "
                   "(FP16 and INT8 come from the model, not from --precision)")
    if spec.profiles:
        from calib.runners.tensorrt.profiles import describe

        for k, prof in enumerate(info["profiles"]):
            click.echo(f"  profile {k}: {describe(prof)}")


@click.command()
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
