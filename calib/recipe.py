"""Recipes: YAML files loaded with yaml.safe_load into typed, frozen dataclasses.

Every key is checked: an unknown or misspelt key, a wrong type or a missing file is a RecipeError naming the
recipe file and the dotted key. Relative paths resolve against the recipe's folder. `overrides` (from
`--set key=value`) replace any key before checking; values are parsed as YAML scalars/lists.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from calib.errors import CalibError, RecipeError
from calib.io.files import read_bounded
from calib.io.yamlload import YamlLimitError, load_yaml

MAX_RECIPE_BYTES = 4 << 20
PATH = {"path": True}
POSITIVE = {"min": 1}
NON_NEGATIVE = {"min": 0}
UNIT = {"min": 0.0, "max": 1.0}
ALGORITHM = {"algorithm": True}
PIL_MAX_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS
_DIMS = re.compile(r"[0-9]+(x[0-9]+)+")


@dataclass(frozen=True)
class DataSpec:
    kind: str = field(metadata={"choices": ("folder", "coco", "yolo", "npy", "npz", "torchvision", "text")})
    path: str = field(default="", metadata=PATH)
    annotations: str | None = field(default=None, metadata=PATH)  # COCO json
    key: str | None = None  # array name inside an .npz
    inputs: dict[str, str] = field(default_factory=dict)  # model input -> npz array (or text field) feeding it
    tokenizer: str | None = field(default=None, metadata=PATH)  # text: a Hugging Face tokenizer.json
    max_length: int | None = field(default=None, metadata=POSITIVE)  # text: tokens per sample (pad/truncate)
    limit: int | None = field(default=None, metadata=POSITIVE)  # seeded random subset of this size
    seed: int = field(default=0, metadata=NON_NEGATIVE)
    offset: int = field(default=0, metadata=NON_NEGATIVE)  # skip this many samples (after shuffling)
    max_bad: float = field(default=0.1, metadata=UNIT)  # share of unreadable images tolerated before the run fails
    max_pixels: int = field(default=PIL_MAX_PIXELS, metadata=POSITIVE)  # larger images are skipped as unreadable
    skip_nonfinite: bool = False  # leave out samples holding NaN/Inf (counted) instead of refusing the data
    name: str | None = None  # torchvision dataset class name
    split: str | None = None
    include: tuple[str, ...] = field(default=(), metadata=PATH)  # more folders, every image added after limit/offset
    label_regex: str | None = None  # class index from file names: group 1, e.g. '_(\d+)\.jpg$'
    category_map: str = field(default="auto", metadata={"choices": ("auto", "coco80", "identity")})  # COCO ids
    category_map_file: str | None = field(default=None, metadata=PATH)  # JSON/YAML {category_id: class_index}


@dataclass(frozen=True)
class InputSpec:
    """How one model input is fed (recipe `inputs: {NAME: {...}}`; calib.quantize.layout, calib.data.feeding)."""

    # the axis that carries the samples (`none`: one value for every sample); default: from the model's dims
    batch_axis: int | str | None = field(default=None, metadata={"min": 0, "none_word": True})
    const: object = field(default=None, metadata={"array": True})  # one value fed with every sample
    file: str | None = field(default=None, metadata=PATH)  # a .npy holding that value


@dataclass(frozen=True)
class PreprocessSpec:
    resize: tuple[int, ...] | None = field(default=None, metadata={"min": 1, "len": (1, 2)})  # (height, width)
    mode: str = field(default="shorter", metadata={"choices": ("shorter", "exact", "letterbox")})
    crop: tuple[int, ...] | None = field(default=None, metadata={"min": 1, "len": (1, 2)})  # center crop
    pad_value: int = field(default=114, metadata={"min": 0, "max": 255})
    color: str = field(default="RGB", metadata={"choices": ("RGB", "BGR")})
    # with mode letterbox: where the resized image sits; top-left pads right and bottom only (as YOLOX does)
    letterbox_anchor: str = field(default="center", metadata={"choices": ("center", "top-left")})
    scale: float = field(default=1.0 / 255.0, metadata={"nonzero": True})
    mean: tuple[float, ...] = field(default=(0.0, 0.0, 0.0), metadata={"len": (1, 3)})
    std: tuple[float, ...] = field(default=(1.0, 1.0, 1.0), metadata={"nonzero": True, "len": (1, 3)})
    layout: str = field(default="NCHW", metadata={"choices": ("NCHW", "NHWC")})
    dtype: str = field(default="float32", metadata={"choices": ("float32", "float16", "uint8")})

    def normalization_fault(self) -> tuple[str, str] | None:
        """(key, what is wrong) where scale, mean or std does not fit the type fed (calib.io.finite)."""
        from calib.io.finite import normalization_fault

        return normalization_fault(self.scale, self.mean, self.std, self.dtype)


@dataclass(frozen=True)
class CalibrationSpec:
    algorithms: tuple[str, ...] = field(default=("minmax", "entropy", "percentile", "mse"),
                                       metadata={**ALGORITHM, "len": (1, 64)})
    batch_size: int = field(default=8, metadata=POSITIVE)
    percentile: float = field(default=99.99, metadata={"above": 0.0, "max": 100.0})
    equalize: bool = False  # cross-layer range equalization of the FP32 model first (calib/equalize.py)
    int8_weights: bool = False  # the Q/DQ model stores weights as INT8 initializers behind a DequantizeLinear
    # a stem Conv's output before its LeakyRelu in the Q/DQ model: int8 (TensorRT 8.6's speed) or float (one rounding
    # fewer, a slower engine); the report shows both where the model has one (calib.quantize.placement)
    stem_output: str = field(default="int8", metadata={"choices": ("int8", "float")})
    # a residual Add's Conv branch behind an activation (YOLOv8's bottleneck) in the Q/DQ model: conv (the default:
    # quantized at the Conv's output, as the implicit engine runs it), act (at the activation's) or float (slower);
    # the report shows all three where the model has one
    residual_branch: str = field(default="conv", metadata={"choices": ("float", "conv", "act")})
    allow_float_weights: bool = False  # write the Q/DQ model even where a layer's input is quantized, its weight not
    allow_qdq: bool = False  # calibrate a model that holds Q/DQ nodes already (refused by default: not FP32)
    trt_version: str = field(default="8600", metadata={"digits": True})
    # the type of the Q/DQ model's float layers: fp16 also writes the FP16+INT8 model for strongly typed builds
    # (TensorRT 10 --stronglyTyped, 11); default: fp16 where trt_version is 11 or later, else fp32
    float_type: str | None = field(default=None, metadata={"choices": ("fp32", "fp16")})
    io_type: str = field(default="fp32", metadata={"choices": ("fp32", "fp16")})  # the FP16+INT8 model's inputs/outputs
    carrier: str = field(default="EntropyCalibration2", metadata={
        "choices": ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration")})


@dataclass(frozen=True)
class DetectionSpec:
    # the head that decodes the outputs (calib.evaluate.heads; `auto`: the one the output shapes fit)
    format: str = field(default="auto", metadata={"choices": ("auto", "boxes-scores", "yolov5", "yolox", "yolov8",
                                                              "yolov3")})
    conf_threshold: float = field(default=0.25, metadata=UNIT)
    iou_threshold: float = field(default=0.45, metadata=UNIT)
    max_detections: int = field(default=100, metadata=POSITIVE)
    class_names: str | None = field(default=None, metadata=PATH)


@dataclass(frozen=True)
class EvaluationSpec:
    task: str = field(default="outputs",
                      metadata={"choices": ("classification", "detection", "outputs", "embedding", "text")})
    batch_size: int = field(default=8, metadata=POSITIVE)
    detection: DetectionSpec = DetectionSpec()
    histograms: int = field(default=6, metadata=NON_NEGATIVE)  # tensors with a histogram plot in the report
    # the build that will be deployed, simulated to rank the algorithms: implicit INT8 from the cache (int8 + fp16)
    # or the Q/DQ model; with engine_layers (an engine's JSON sidecar or inspector JSON) its precisions are read
    # from that engine instead of predicted by rules (calib.deploy.precision)
    deploy: str = field(default="implicit", metadata={"choices": ("implicit", "qdq")})
    engine_layers: str | None = field(default=None, metadata=PATH)
    # FILE.py:FUNCTION turning a batch of outputs into detections or class scores (calib.evaluate.postprocess)
    postprocess: str | None = field(default=None, metadata={"hook": True})
    # task text without a postprocess: the built-in CTC head (greedy, blank 0) with this charset, one per line
    charset: str | None = field(default=None, metadata=PATH)
    # FILE.py:FUNCTION(fp32_outputs, int8_outputs) -> one score per sample, higher is better (ranks the caches)
    metric: str | None = field(default=None, metadata={"hook": True})


@dataclass(frozen=True)
class SensitivitySpec:
    algorithm: str = field(default="minmax", metadata=ALGORITHM)  # whose scales the search starts from
    metric: str = field(default="output_sqnr", metadata={"choices": ("top1_agreement", "map50", "output_sqnr")})
    max_drop: float = field(default=0.01, metadata=NON_NEGATIVE)  # allowed drop vs FP32 of top1 / map50 (0-1)
    min_sqnr_db: float = 25.0  # the floor for output_sqnr (FP32 against itself is infinite)
    samples: int = field(default=8, metadata=POSITIVE)  # evaluation images used by the search
    both: bool = True  # also rank with only this layer quantized
    precision: str = field(default="fp16", metadata={"choices": ("fp16", "fp32")})
    per_tensor: tuple[str, ...] = field(default=(), metadata=ALGORITHM)  # tried per tensor on the INT8 layers
    per_tensor_layers: int = field(default=12, metadata=NON_NEGATIVE)  # most sensitive INT8 layers given the choice
    pin_int8: bool = False  # backend tensorrt: ask every other quantizable layer in INT8 (TensorRT widens fallbacks)
    min_speedup: float = field(default=0.0, metadata=NON_NEGATIVE)  # backend tensorrt: INT8 vs FP16 engine


@dataclass(frozen=True)
class ShapeRangeSpec:
    """One input's shapes in an optimization profile (backend.profiles: [{input: {min, opt, max}}, ...])."""

    min: tuple[int, ...] = field(metadata=POSITIVE)
    opt: tuple[int, ...] = field(metadata=POSITIVE)
    max: tuple[int, ...] = field(metadata=POSITIVE)


@dataclass(frozen=True)
class BackendSpec:
    """Where INT8 is measured: the CPU simulation only (onnxruntime), or real TensorRT engines as well."""

    kind: str = field(default="onnxruntime", metadata={"choices": ("onnxruntime", "tensorrt")})
    precision: tuple[str, ...] = ("int8", "fp16")  # INT8 engines' allowed precisions (fp32 always is)
    layer_precisions: tuple[str, ...] = ()  # PATTERN=fp16|fp32: layer name glob, re:REGEX, op:OpType
    layer_precisions_file: str | None = field(default=None, metadata=PATH)  # e.g. sensitivity's output
    constraints: str = field(default="prefer", metadata={"choices": ("prefer", "obey", "none")})
    batch_size: int = field(default=8, metadata=POSITIVE)  # engine batch (evaluation and latency)
    profiles: tuple[dict[str, ShapeRangeSpec], ...] = ()  # optimization profiles (else the batch is fixed)
    workspace_mb: int = field(default=4096, metadata=POSITIVE)
    optimization_level: int | None = field(default=None, metadata={"min": 0, "max": 5})  # TensorRT's (default 3)
    timing_cache: str | None = field(default=None, metadata={"path": True, "output": True})
    reference: tuple[str, ...] = ("fp32", "fp16")  # engines built to compare against
    trt_calibrator: str | None = field(default="entropy2", metadata={
        "choices": (None, "entropy2", "minmax", "entropy", "legacy")})  # also TensorRT's own calibration
    tactic_sources: tuple[str, ...] = ()
    predict: bool = True  # also simulate each INT8 engine's own precision choices on the CPU
    qdq: bool = False  # also build each algorithm's Q/DQ model (explicit INT8), e.g. for a transformer: TensorRT
    # 8.6 hands attention to Myelin, which takes no implicit INT8 (a cache gives it no INT8 layer)
    layerwise: tuple[str, ...] = field(default=(), metadata=ALGORITHM)  # algorithms whose INT8 engine is also
    # built with every tensor marked as an output, for a per-layer comparison with FP32 (a perturbed engine:
    # marking changes TensorRT's fusions)


@dataclass(frozen=True)
class Recipe:
    name: str
    model: str = field(metadata=PATH)  # a .onnx path or zoo:<name>
    calibration_data: DataSpec
    evaluation_data: DataSpec | None = None
    preprocess: PreprocessSpec = PreprocessSpec()
    calibration: CalibrationSpec = CalibrationSpec()
    evaluation: EvaluationSpec = EvaluationSpec()
    sensitivity: SensitivitySpec = SensitivitySpec()
    backend: BackendSpec = BackendSpec()
    output: str = field(default="runs/out", metadata={"path": True, "output": True})
    # input -> dims fixing the model's dynamic or placeholder dimensions, e.g. {images: 1x3x640x640} (the image
    # resize follows it where preprocess.resize is not given); like trtexec's --shapes
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    memory_budget: str = field(default="2GB", metadata={"size": True})  # the peak memory every step keeps within
    # per model input (or output, batch_axis only): the axis that carries its samples, a value fed with every sample
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    source: str = ""  # the recipe file, filled in by load_recipe


class _Ctx:
    def __init__(self, file: str, base: Path):
        self.file = file
        self.base = base

    def fail(self, key: str, msg: str):
        raise RecipeError(f"{self.file}: {key}: {msg}")


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _convert(value, tp, key: str, ctx: _Ctx, meta):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        if meta.get("none_word") and isinstance(value, str):
            if value.strip().lower() != "none":
                ctx.fail(key, f"expected an integer or none, got {value!r}")
            return "none"
        return _convert(value, args[0], key, ctx, meta)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            ctx.fail(key, f"expected a mapping of {tp.__name__} keys, got {type(value).__name__}")
        return _build(tp, value, ctx, key)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        items = value if isinstance(value, list) else [value]
        if inner is int and isinstance(value, str) and _DIMS.fullmatch(value.strip().lower()):
            items = [int(d) for d in value.strip().lower().split("x")]  # 640x640, 1x3x640x640
        return tuple(_convert(v, inner, f"{key}[{i}]", ctx, meta if meta.get("path") else {})
                     for i, v in enumerate(items))
    if origin is dict:
        if not isinstance(value, dict):
            ctx.fail(key, f"expected a mapping, got {value!r}")
        kt, vt = typing.get_args(tp)
        return {_convert(k, kt, key, ctx, {}): _convert(v, vt, f"{key}.{k}", ctx, {})
                for k, v in value.items()}
    if meta.get("array"):
        return _array_value(value, key, ctx)
    if tp is bool:
        if not isinstance(value, bool):
            ctx.fail(key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            ctx.fail(key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            ctx.fail(key, f"expected a number, got {value!r}")
        if not math.isfinite(value):
            ctx.fail(key, f"expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not meta.get("path"):
            value = str(value)
        if not isinstance(value, str):
            ctx.fail(key, f"expected a string, got {value!r}")
        if meta.get("path") and not value.strip():
            ctx.fail(key, "empty path")
        if meta.get("hook"):
            return _hook_path(value, key, ctx)
        if meta.get("path") and not value.startswith("zoo:"):
            p = Path(value).expanduser()
            p = p if p.is_absolute() else ctx.base / p
            if not meta.get("output") and not p.exists():
                ctx.fail(key, f"file not found: {p}")
            return str(p)
        return value
    ctx.fail(key, f"unsupported type {_type_name(tp)}")


def _array_value(value, key: str, ctx: _Ctx):
    """A number or nested lists of numbers, as nested tuples (frozen)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        ctx.fail(key, f"expected a number or a list of numbers, got {value!r}")
    if isinstance(value, list):
        return tuple(_array_value(v, f"{key}[{i}]", ctx) for i, v in enumerate(value))
    if not math.isfinite(value):
        ctx.fail(key, f"expected a finite number, got {value!r}")
    return value


def _hook_path(value: str, key: str, ctx: _Ctx) -> str:
    """FILE.py:FUNCTION with FILE resolved against the recipe's folder and checked to exist."""
    path, sep, func = value.rpartition(":")
    if not sep or not path.endswith(".py") or not func.isidentifier():
        ctx.fail(key, f"expected FILE.py:FUNCTION, got '{value}'")
    p = Path(path).expanduser()
    p = p if p.is_absolute() else ctx.base / p
    if not p.is_file():
        ctx.fail(key, f"file not found: {p}")
    return f"{p}:{func}"


def _build(cls, raw: dict, ctx: _Ctx, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    for k in raw:
        if k not in fields:
            key = f"{prefix}.{k}" if prefix else str(k)
            near = difflib.get_close_matches(str(k), list(fields), n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else f" (known: {', '.join(fields)})"
            ctx.fail(key, f"unknown key{hint}")
    values = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in raw:
            values[name] = _convert(raw[name], hints[name], key, ctx, f.metadata)
            choices = f.metadata.get("choices")
            if choices and values[name] not in choices:
                ctx.fail(key, f"'{values[name]}' is not one of {', '.join(choices)}")
            _check(values[name], f.metadata, key, ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            ctx.fail(key, "required key is missing")
        elif f.metadata.get("path") and f.default == "":
            ctx.fail(key, "required key is missing")
        elif f.metadata.get("path") and isinstance(f.default, str):
            values[name] = _convert(f.default, hints[name], key, ctx, f.metadata)
    return cls(**values)


def _check(value, meta: dict, key: str, ctx: _Ctx) -> None:
    """The limits in a field's metadata: min, max, above (exclusive), nonzero, len, digits, algorithm."""
    if value is None or (meta.get("none_word") and value == "none"):
        return
    if isinstance(value, tuple):
        lo, hi = meta.get("len", (0, 1 << 30))
        if not lo <= len(value) <= hi:
            ctx.fail(key, f"expected {lo}{f' to {hi}' if hi != lo else ''} values, got {len(value)}")
        for i, v in enumerate(value):
            _check(v, meta, f"{key}[{i}]", ctx)
        return
    if "min" in meta and value < meta["min"]:
        ctx.fail(key, f"must be >= {meta['min']}, got {value}")
    if "max" in meta and value > meta["max"]:
        ctx.fail(key, f"must be <= {meta['max']}, got {value}")
    if "above" in meta and value <= meta["above"]:
        ctx.fail(key, f"must be > {meta['above']}, got {value}")
    if meta.get("nonzero") and value == 0:
        ctx.fail(key, "must not be 0")
    if meta.get("size"):
        from calib.io.memory import parse_size

        try:
            parse_size(value, key)
        except CalibError as exc:
            ctx.fail(key, str(exc).split(": ", 1)[-1])
    if meta.get("digits") and not (value.isascii() and value.isdigit()):
        ctx.fail(key, f"expected digits like 8600, got '{value}'")
    if meta.get("algorithm"):
        from calib.algorithms import registry

        if value not in registry.names():
            ctx.fail(key, f"unknown algorithm '{value}' (choose from {', '.join(registry.names())})")


def _apply_override(raw: dict, item: str, file: str) -> None:
    if "=" not in item:
        raise RecipeError(f"{file}: --set '{item}': expected key=value")
    key, text = item.split("=", 1)
    try:
        value = load_yaml(text) if text else ""
    except (yaml.YAMLError, YamlLimitError, RecursionError):
        value = text
    node = raw
    parts = key.strip().split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {} if node.get(p) is None else node[p]
            if not isinstance(node[p], dict):
                raise RecipeError(f"{file}: --set {key}: '{p}' is not a mapping")
        node = node[p]
    node[parts[-1]] = value


def load_recipe(path: str | Path, overrides: typing.Sequence[str] = ()) -> Recipe:
    if not str(path).strip():
        raise RecipeError("recipe: empty path")
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: recipe file not found")
    try:
        raw = load_yaml(read_bounded(path, MAX_RECIPE_BYTES, "recipe").decode("utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise RecipeError(f"{path}:{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except YamlLimitError as exc:
        raise RecipeError(f"{path}:{f' line {exc.line}' if exc.line else ''}: {exc}") from None
    except RecursionError:
        raise RecipeError(f"{path}: nested too deeply") from None
    except CalibError as exc:
        raise RecipeError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{path}: cannot read recipe ({exc})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of keys, got {type(raw).__name__}")
    raw.setdefault("name", path.stem)
    for item in overrides:
        _apply_override(raw, item, str(path))
    recipe = _build(Recipe, raw, _Ctx(str(path), path.resolve().parent))
    fault = recipe.preprocess.normalization_fault()
    if fault:
        raise RecipeError(f"{path}: preprocess.{fault[0]}: {fault[1]}")
    return dataclasses.replace(recipe, source=str(path))


def feeding(recipe: Recipe) -> tuple[dict, dict]:
    """(batch_axes, consts) of the recipe's `inputs`, as calib.calibrate and calib.evaluate take them."""
    axes, consts = {}, {}
    for name, spec in recipe.inputs.items():
        if spec.batch_axis is not None:
            axes[name] = None if spec.batch_axis == "none" else spec.batch_axis
        if spec.const is not None and spec.file is not None:
            raise RecipeError(f"{recipe.source}: inputs.{name}: give const or file, not both")
        if spec.file is not None:
            consts[name] = Path(spec.file)
        elif spec.const is not None:
            consts[name] = spec.const
    return axes, consts


def input_paths(recipe: Recipe) -> list[str]:
    """The files and folders a recipe reads (its `path` keys that are not outputs) and the recipe file itself."""
    found = [recipe.source] if recipe.source else []

    def walk(obj) -> None:
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                if f.metadata.get("path"):
                    if not f.metadata.get("output"):
                        found.extend(x for x in (v if isinstance(v, (tuple, list)) else (v,)) if isinstance(x, str))
                else:
                    walk(v)
        elif isinstance(obj, (tuple, list)):
            for x in obj:
                walk(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                walk(x)

    walk(recipe)
    return [p for p in found if p]
