"""`--data` and its preprocessing options, shared by `calib calibrate`, `calib evaluate` and `calib build`.

--data takes a .npy/.npz array (preprocessed already, or uint8 images; an .npz of one array per model input for a
model of several inputs), an image folder (flat, or one subfolder per class), a YOLO folder (images/ and labels/,
or .txt labels beside the images), a COCO json (images beside it, in images/ next to it, or in --images) or a .txt
file of text lines (with --tokenizer). Images go through the recipes' Preprocessor: --resize (default: the
model's input size), --letterbox, --crop, --mean/--std and --layout (default: the model's)."""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import click

from calib.errors import DataError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_DTYPE = {1: "float32", 10: "float16", 2: "uint8"}  # ONNX elem_type -> PreprocessSpec.dtype


# what the command line calls the options that recipes name by key (for messages from below the CLI)
CLI_NAMES = {"preprocess.resize": "--resize", "input_shapes": "--input-shape", "memory_budget": "--memory-budget",
             "calibration_data.limit": "--limit", "evaluation_data.limit": "--limit", "preprocess.scale": "--scale",
             "preprocess.color": "--bgr", "preprocess.letterbox_anchor": "--letterbox-anchor",
             "layerwise": "--no-layerwise", "inputs.batch_axis": "--batch-axis", "inputs.const": "--const"}


def model_options(fn):
    """--input-shape, --batch-axis, --const and --memory-budget, for the commands that run the model on the CPU."""
    fn = click.option("--const", "consts", multiple=True, metavar="NAME=VALUE",
                      help="Feed input NAME one value with every sample: a number (sr=16000), a list ([0.5, 1]) or a "
                           ".npy file (state=h0.npy: one sample's value, or one run's with 1 on the batch axis); "
                           "repeatable.")(fn)
    fn = click.option("--batch-axis", "batch_axes", multiple=True, metavar="NAME=AXIS",
                      help="The axis of input (or output) NAME that carries the samples, e.g. state=1 for a state "
                           "[2, B, 128]; none: one value for every sample [default: from the model's dims]; "
                           "repeatable.")(fn)
    fn = click.option("--memory-budget", default="2GB", show_default=True, metavar="SIZE",
                      help="Peak memory to keep within (e.g. 2GB, 512MB): runs hold as many samples as fit, from "
                           "the activation bytes per sample shape inference gives; too small for one sample is an "
                           "error before any work.")(fn)
    return click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=DIMS",
                        help="Fix an input's dynamic or placeholder dimensions, e.g. images=1x3x640x640 (like "
                             "trtexec's --shapes; repeatable); images are resized to it. A batch given here is "
                             "the samples per run.")(fn)


def input_shapes(items) -> dict[str, tuple[int, ...]]:
    """NAME=DIMS (or NAME:DIMS, as trtexec writes it) items of --input-shape as input -> dims."""
    out = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep:
            name, sep, dims = item.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise click.BadParameter(f"'{item}': expected NAME=DIMS such as images=1x3x640x640",
                                     param_hint="--input-shape")
        if name in out and out[name] != shape:  # not the last one silently
            raise DataError(f"--input-shape: input '{name}' given twice ({'x'.join(map(str, out[name]))} and "
                            f"{'x'.join(map(str, shape))}): give one shape per input")
        out[name] = shape
    return out


def memory_budget(text: str):
    """The --memory-budget as a calib.io.memory.Budget named by its flag."""
    from calib.io.memory import Budget, parse_size

    return Budget(parse_size(text, "--memory-budget"), "--memory-budget")


def data_options(required: bool = True, help_data: str | None = None):
    """The --data option and the preprocessing options, as one decorator."""
    opts = [
        click.option("--data", required=required, type=click.Path(),
                     help=help_data or (".npy/.npz array, image folder, YOLO folder (images/ + labels/), COCO json or "
                           ".txt of text lines (with --tokenizer).")),
        click.option("--images", type=click.Path(file_okay=False),
                     help="With a COCO json: the folder of its images (default: beside it, or images/)."),
        click.option("--preprocess", default=None, type=click.Choice(["none", "unit", "imagenet"]),
                     help="none: values as they are; unit: /255; imagenet: unit then ImageNet mean/std. "
                          "[default: none for arrays, unit for images]"),
        click.option("--resize", metavar="N|HxW",
                     help="Images: N = shorter side (with --letterbox: NxN), HxW = exact size [default: the "
                          "model's input size]."),
        click.option("--letterbox", is_flag=True, help="Images: keep the aspect ratio and pad (YOLO).",),
        click.option("--pad-value", default=114, show_default=True, type=click.IntRange(0, 255),
                     help="With --letterbox: the padding's pixel value."),
        click.option("--letterbox-anchor", type=click.Choice(["center", "top-left"]), default="center",
                     show_default=True, help="With --letterbox: where the image sits; top-left pads right and bottom "
                                             "only (YOLOX)."),
        click.option("--crop", metavar="N|HxW", help="Images: center crop after --resize."),
        click.option("--bgr", is_flag=True, help="Images: feed channels in BGR order (models trained with OpenCV)."),
        click.option("--scale", type=float, help="Images: multiply pixel values (0-255) by this before --mean/--std "
                                                  "(e.g. 1 for 0-255 input) [default: from --preprocess]."),
        click.option("--mean", metavar="M[,M,M]",
                     help="Subtracted after scaling (per channel, in the order fed: RGB, or BGR with --bgr)."),
        click.option("--std", metavar="S[,S,S]", help="Divided by after --mean (per channel, in the order fed)."),
        click.option("--layout", type=click.Choice(["NCHW", "NHWC"]),
                     help="Layout fed to the model [default: the model input's]."),
        click.option("--tokenizer", type=click.Path(dir_okay=False),
                     help="Text (.txt, one sample per line): the Hugging Face tokenizer.json (the text extra)."),
        click.option("--max-length", type=click.IntRange(1),
                     help="Text: tokens per sample, padded or truncated [default: the model's sequence length, "
                          "else 128]."),
        click.option("--limit", type=click.IntRange(1), help="Use this many samples (a seeded random subset)."),
        click.option("--offset", default=0, show_default=True, type=click.IntRange(0),
                     help="Skip this many samples of the seeded order first (to keep calibration and evaluation "
                          "apart: --limit 32 for one, --limit 32 --offset 32 for the other)."),
    ]

    def wrap(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


@dataclass(frozen=True)
class DataArgs:
    data: str
    images: str | None = None
    preprocess: str | None = None
    resize: str | None = None
    letterbox: bool = False
    pad_value: int = 114
    letterbox_anchor: str = "center"
    crop: str | None = None
    bgr: bool = False
    scale: float | None = None
    mean: str | None = None
    std: str | None = None
    layout: str | None = None
    tokenizer: str | None = None
    max_length: int | None = None
    limit: int | None = None
    offset: int = 0

    @classmethod
    def pop(cls, kwargs: dict) -> DataArgs:
        """Take this class's options out of a click command's keyword arguments."""
        return cls(**{k: kwargs.pop(k) for k in cls.__dataclass_fields__})

    def image_options(self) -> list[str]:
        given = [("--resize", self.resize), ("--letterbox", self.letterbox), ("--crop", self.crop),
                 ("--mean", self.mean), ("--std", self.std), ("--images", self.images), ("--bgr", self.bgr),
                 ("--letterbox-anchor", self.letterbox_anchor != "center"), ("--scale", self.scale is not None)]
        return [name for name, v in given if v]


def _size(text: str | None, flag: str) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = text.lower().replace(",", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) not in (1, 2) or any(d < 1 for d in dims):
        raise click.BadParameter(f"'{text}': expected N or HxW (e.g. 416 or 416x416)", param_hint=flag)
    return dims


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if not text:
        return None
    try:
        vals = tuple(float(p) for p in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) not in (1, 3):
        raise click.BadParameter(f"'{text}': expected one number or three (R,G,B)", param_hint=flag)
    if flag == "--std" and any(v == 0 for v in vals):
        raise click.BadParameter(f"'{text}': a standard deviation of 0", param_hint=flag)
    return vals * 3 if len(vals) == 1 else vals


def model_layout(dims: tuple) -> str | None:
    """NCHW or NHWC from a 4-d input shape whose channel dimension is 1 or 3; None if it cannot tell."""
    if len(dims) != 4:
        return None
    if dims[1] in (1, 3):
        return "NCHW"
    if dims[3] in (1, 3):
        return "NHWC"
    return None


def preprocess_spec(args: DataArgs, input_dims: tuple, elem_type: int):
    """The PreprocessSpec for image data: presets, options, and the model's size and layout where not given."""
    from calib.recipe import PreprocessSpec

    layout = args.layout or model_layout(input_dims) or "NCHW"
    preset = args.preprocess or "unit"
    resize = _size(args.resize, "--resize")
    if resize is None and len(input_dims) == 4:
        hw = input_dims[2:4] if (model_layout(input_dims) or layout) == "NCHW" else input_dims[1:3]
        resize = tuple(hw) if all(isinstance(d, int) and d > 0 for d in hw) else None
    if resize is None and args.letterbox:
        raise click.BadParameter("the model's input size is dynamic: give the size (or fix it with --input-shape)",
                                 param_hint="--resize")
    if args.letterbox_anchor != "center" and not args.letterbox:
        raise click.BadParameter("places a letterboxed image: give --letterbox too", param_hint="--letterbox-anchor")
    if args.scale is not None and (args.scale == 0 or args.scale != args.scale or abs(args.scale) == float("inf")):
        raise click.BadParameter(f"'{args.scale}': must be a finite number other than 0", param_hint="--scale")
    if resize is not None and args.letterbox and len(resize) == 1:
        resize = (resize[0], resize[0])
    mode = "letterbox" if args.letterbox else ("shorter" if resize is not None and len(resize) == 1 else "exact")
    mean = _floats(args.mean, "--mean") or (IMAGENET_MEAN if preset == "imagenet" else (0.0, 0.0, 0.0))
    std = _floats(args.std, "--std") or (IMAGENET_STD if preset == "imagenet" else (1.0, 1.0, 1.0))
    scale = args.scale if args.scale is not None else (1.0 if preset == "none" else 1.0 / 255.0)
    spec = PreprocessSpec(resize=resize, mode=mode, crop=_size(args.crop, "--crop"), pad_value=args.pad_value,
                          color="BGR" if args.bgr else "RGB", letterbox_anchor=args.letterbox_anchor, scale=scale,
                          mean=mean, std=std, layout=layout, dtype=_DTYPE.get(elem_type, "float32"))
    fault = spec.normalization_fault()
    if fault:
        raise DataError(f"--{fault[0].split('[')[0]}: {fault[1]}")
    return spec


def _coco_images(annotations: Path, given: str | None) -> Path:
    if given:
        return Path(given)
    from calib.data.annotations import read_coco

    coco = read_coco(annotations)
    if not coco.images:
        return annotations.parent  # coco_samples says what is wrong with the file
    first = coco.images[next(iter(coco.images))]
    for d in (annotations.parent, annotations.parent / "images", annotations.parent.parent / "images",
              annotations.parent.parent):
        if (d / first).is_file():
            return d
    raise DataError(f"{annotations}: its first image '{first}' is not beside it nor in images/; give --images DIR")


def data_kind(path: Path) -> str:
    """npy | npz | coco | yolo | folder | text, from what is on disk."""
    from calib.data.images import IMAGE_EXT

    if path.is_dir():
        if (path / "images").is_dir() and (path / "labels").is_dir():
            return "yolo"
        if any(p.suffix.lower() in IMAGE_EXT and p.with_suffix(".txt").is_file() for p in path.iterdir()):
            return "yolo"
        return "folder"
    if not path.exists():
        raise DataError(f"{path}: data file not found")
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz", ".json", ".txt"):
        return {".npy": "npy", ".npz": "npz", ".json": "coco", ".txt": "text"}[suffix]
    raise DataError(f"{path}: expected a .npy/.npz array, an image folder, a YOLO folder, a COCO .json or a .txt "
                    "of text lines")


def _inputs_source(args: DataArgs, arrays: dict, images_only: list, batch_size: int):
    """An .npz of one array per model input, fed as they are (with --limit/--offset)."""
    from calib.data.arrays import InputsSource
    from calib.data.sources import picked
    from calib.recipe import DataSpec

    flags = images_only + (["--preprocess"] if (args.preprocess or "none") != "none" else []) + \
        (["--layout"] if args.layout else [])
    if flags:
        raise DataError(f"{args.data}: {', '.join(flags)} apply to one image input; the arrays of a model of "
                        f"{len(arrays)} inputs are fed as they are")
    n = next(iter(arrays.values())).shape[0]
    if n == 0:
        raise DataError(f"{args.data}: no samples")
    idx = picked(DataSpec(kind="npz", path=args.data, limit=args.limit, offset=args.offset), list(range(n)))
    return InputsSource(arrays, batch_size, idx, label=args.data)


def _text_source(args: DataArgs, info, images_only: list, batch_size: int):
    """Lines of text through --tokenizer, fed to the model's input_ids / attention_mask / token_type_ids."""
    from calib.data.sources import make_source
    from calib.recipe import DataSpec, PreprocessSpec

    if not args.tokenizer:
        raise click.BadParameter("text data needs a tokenizer.json", param_hint="--tokenizer")
    if not Path(args.tokenizer).is_file():
        raise click.BadParameter(f"tokenizer file not found: {args.tokenizer}", param_hint="--tokenizer")
    flags = images_only + (["--preprocess"] if args.preprocess else []) + (["--layout"] if args.layout else [])
    if flags:
        raise DataError(f"{args.data}: {', '.join(flags)} apply to images, not to text")
    spec = DataSpec(kind="text", path=args.data, tokenizer=args.tokenizer, max_length=args.max_length,
                    limit=args.limit, offset=args.offset)
    return make_source(spec, PreprocessSpec(), info.inputs, batch_size)


def feed_options(model, info, batch_axes, consts):
    """(info with its layout, consts) from --batch-axis and --const as typed."""
    from calib.data.feeding import laid_out, parse_consts
    from calib.data.folding import fold_model
    from calib.runners.reshape import reshape_model
    from calib.quantize.layout import batch_axes_text

    values = parse_consts(consts, "--const")
    path, info = reshape_model(info.path, info, "--input-shape")  # a dimension the model fixes, overridden
    info = laid_out(path, info, batch_axes_text(batch_axes, "--batch-axis"), values, "--batch-axis")
    return fold_model(path, info, values, "--const")[1], values  # an If --const decides: its branch inlined


def make_cli_source(args: DataArgs, info, batch_size: int, input_index: int = 0, consts=None):
    """A Source over --data for `info` (a ModelInfo): an .npz feeds each model input the array of its name (laid
    out as info.layout says); other data feeds the input `input_index`; `consts` (input -> value, --const) feed
    one value with every sample."""
    from calib.data.arrays import ArraySource, load_inputs
    from calib.data.feeding import canonical, const_rows, with_consts
    from calib.data.sources import ArrayImageSource, make_source, picked
    from calib.data.transforms import Preprocessor
    from calib.recipe import DataSpec

    rows = const_rows(consts, info, CLI_NAMES, "--const") if consts else {}
    inputs = [i for i in info.inputs if i[0] not in rows]
    if not inputs:
        raise DataError("--const: every input of the model is given one value; --data must feed at least one")
    name, dims, elem_type = inputs[min(input_index, len(inputs) - 1)]
    path = Path(args.data)
    kind = data_kind(path)
    if kind != "coco" and args.images:
        raise click.BadParameter("only with a COCO json as --data", param_hint="--images")
    images_only = [o for o in args.image_options() if o != "--images" or kind != "coco"]
    text_only = [f for f, v in (("--tokenizer", args.tokenizer), ("--max-length", args.max_length)) if v]
    if kind == "text":
        return with_consts(_text_source(args, info, images_only, batch_size), rows)
    if text_only:
        raise click.BadParameter("only with text data (a .txt of lines) as --data", param_hint=text_only[0])
    if kind in ("npy", "npz"):
        arrays = load_inputs(path, [n for n, _, _ in inputs])
        if len(arrays) > 1 or not info.layout.identity:
            arrays, found = canonical(arrays, info, str(path), CLI_NAMES)
            rows = {**found, **rows}
        if len(arrays) > 1:
            return with_consts(_inputs_source(args, arrays, images_only, batch_size), rows)
        name = next(iter(arrays))
        arr = arrays[name]
        if args.limit or args.offset:
            arr = arr[picked(DataSpec(kind=kind, path=str(path), limit=args.limit, offset=args.offset),
                             list(range(arr.shape[0])))]
        if not images_only:
            layout = args.layout or model_layout(dims) or "NCHW"
            return with_consts(ArraySource(arr, name, batch_size, args.preprocess or "none",
                                           channels_first=layout == "NCHW", label=str(path)), rows)
        if arr.dtype != "uint8" or arr.ndim != 4 or arr.shape[-1] not in (1, 3):
            raise DataError(f"{path}: {', '.join(images_only)} apply to images (uint8 [N, H, W, C]); it holds "
                            f"{arr.dtype} {list(arr.shape)}: use --preprocess alone")
        return with_consts(ArrayImageSource(arr, Preprocessor(preprocess_spec(args, dims, elem_type)), name,
                                            batch_size, range(arr.shape[0]), str(path)), rows)
    if len(inputs) > 1:
        from calib.quantize.layout import fix_hint

        raise DataError(f"{path}: {kind} data feeds one input; the model takes {[n for n, _, _ in inputs]} (give an "
                        f".npz with one array per input, or {fix_hint(inputs[1][0], CLI_NAMES)})")
    spec = DataSpec(kind=kind, path=str(_coco_images(path, args.images) if kind == "coco" else path),
                    annotations=str(path) if kind == "coco" else None, limit=args.limit, offset=args.offset)
    return with_consts(make_source(spec, preprocess_spec(args, dims, elem_type), [inputs[0]], batch_size,
                                   CLI_NAMES), rows)


@contextlib.contextmanager
def materialized(args: DataArgs, model, batch_size: int):
    """(path, preset) for an API that reads a .npy/.npz file: --data as given where it is an array with no image
    option, else its preprocessed samples written to a temporary .npy (removed afterwards). batch_size 0: the
    data is not needed (left as given, for the API's own error)."""
    path = args.data
    if path and batch_size:
        from calib.quantize.model import inspect_model

        n = len(inspect_model(model).inputs)
        if n > 1:
            raise DataError(f"{path}: the model takes {n} inputs; TensorRT's own calibration here feeds one: "
                            "calibrate with calib calibrate, then build with --cache")
    if not path or not batch_size or (data_kind(Path(path)) in ("npy", "npz") and not args.image_options()
                                      and not args.limit and not args.offset and not args.layout):
        yield path, args.preprocess or "none"
        return
    import tempfile

    import numpy as np

    from calib.quantize.model import inspect_model

    src = make_cli_source(args, inspect_model(model), batch_size)
    with tempfile.TemporaryDirectory(prefix="calib-data-") as tmp:
        target = Path(tmp) / "samples.npy"
        out, n = None, 0
        for batch in src:
            x = next(iter(batch.values()))
            if out is None:
                out = np.lib.format.open_memmap(target, "w+", x.dtype, (len(src), *x.shape[1:]))
            out[n:n + len(x)] = x
            n += len(x)
        if out is None:
            raise DataError(f"{path}: no samples")
        out.flush()
        del out
        arr = np.load(target, mmap_mode="r")
        if n < arr.shape[0]:  # unreadable images were skipped
            np.save(Path(tmp) / "kept.npy", arr[:n])
            target = Path(tmp) / "kept.npy"
        del arr
        yield str(target), "none"


def with_data(fn):
    """For a click command taking `data_options()`: its callback gets `data_args` (a DataArgs) instead."""

    @functools.wraps(fn)
    def wrapper(*a, **kwargs):
        return fn(*a, data_args=DataArgs.pop(kwargs), **kwargs)

    return wrapper
