"""What the TensorRT stand-in (tests/standin) offers at a version that the real bindings of that version lack.

The stand-in is walked as calib meets it: its module namespace, its enums and classes, and the live objects of one
build (builder, network, parser, layer, tensor, config, profile, timing cache, runtime, engine, context, inspector)
made from a real ONNX model. Every public name must exist on the real class, and every method's parameters must be
those of a real signature (leading ones, the rest defaulted). Names in the stand-in's STANDIN_ONLY are its own
bookkeeping, read by tests only.
"""
from __future__ import annotations

import enum
import inspect

from trt_api.api import MODULE, Api, describe_signatures, display


def live_objects(t, model_path: str) -> dict:
    """Real class name -> a stand-in object of that class, from one FP32 build of `model_path`."""
    logger = t.Logger()
    builder = t.Builder(logger)
    explicit = getattr(t.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    flags = 1 << int(explicit) if explicit is not None and int(t.__version__.split(".")[0]) < 10 else 0
    network = builder.create_network(flags)
    parser = t.OnnxParser(network, logger)
    if not parser.parse_from_file(model_path):
        raise RuntimeError(f"the stand-in cannot parse {model_path}")
    cfg = builder.create_builder_config()
    objects = {"Builder": builder, "INetworkDefinition": network, "OnnxParser": parser, "IBuilderConfig": cfg,
               "ILayer": network.get_layer(0), "ITensor": network.get_layer(0).get_output(0),
               "IOptimizationProfile": builder.create_optimization_profile(),
               "ITimingCache": cfg.create_timing_cache(b"")}
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = tuple(1 if d < 0 else d for d in tensor.shape)
        profile.set_shape(tensor.name, shape, shape, shape)
    cfg.add_optimization_profile(profile)
    runtime = t.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(builder.build_serialized_network(network, cfg))
    objects.update({"Runtime": runtime, "ICudaEngine": engine, "IExecutionContext": engine.create_execution_context(),
                    "EngineInspector": engine.create_engine_inspector()})
    return objects


def _params(fn) -> list[str] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        return None
    return [n for n in sig.parameters if n != "self"]


def _matches(params: list[str], signatures: list[dict]) -> bool:
    for sig in signatures:
        real = sig["params"]
        if len(params) <= len(real) and [p["name"] for p in real[:len(params)]] == params and \
                all(p["default"] for p in real[len(params):]):
            return True
    return not signatures


def _check_callable(api: Api, owner: str, name: str, fn, problems: list) -> None:
    info = api.member(owner, name)
    params = _params(fn)
    if info is None or params is None or info["kind"] != "method":
        return
    if not _matches(params, info.get("signatures", [])):
        problems.append(f"stand-in {display(owner, name)}({', '.join(params)}): the real one takes "
                        f"{describe_signatures(info['signatures'])}")


def _check_names(api: Api, owner: str, names, values, skip: set, problems: list) -> None:
    for name in sorted(set(names) - skip):
        if api.member(owner, name) is None:
            problems.append(f"the stand-in offers {display(owner, name)}, TensorRT {api.label} has no such name")
        elif callable(values(name)) and not isinstance(values(name), type):
            _check_callable(api, owner, name, values(name), problems)


def _check_class(api: Api, qual: str, cls: type, skip: dict, problems: list) -> None:
    if issubclass(cls, enum.Enum):
        real = api.enum_members(qual)
        extra = sorted(set(cls.__members__) - set(real or ()))
        if real is None or extra:
            problems.append(f"the stand-in's {qual} has {', '.join(extra) or 'members'}, TensorRT {api.label}'s "
                            f"has not")
        return
    names = [n for n in vars(cls) if not n.startswith("_")]
    _check_names(api, qual, names, lambda n: getattr(cls, n), skip.get(qual, set()), problems)
    for n in names:
        inner = getattr(cls, n)
        if isinstance(inner, type) and api.is_class(f"{qual}.{n}"):
            _check_class(api, f"{qual}.{n}", inner, skip, problems)
    init = vars(cls).get("__init__")
    if init is not None:
        _check_callable(api, qual, "__init__", init, problems)


def problems(t, api: Api, model_path: str, skip: dict) -> list[str]:
    """Everything the stand-in `t` offers that the real version (`api`) lacks; `skip`: {class or "module": names}."""
    found: list[str] = []
    public = {n: v for n, v in vars(t).items() if not n.startswith("_")}
    _check_names(api, MODULE, public, public.get, skip.get(MODULE, set()), found)
    for name, value in public.items():
        if name in skip.get(MODULE, set()) or api.member(MODULE, name) is None:
            continue
        if isinstance(value, type):
            _check_class(api, name, value, skip, found)
        elif api.is_class(name) and callable(value):  # a factory standing in for the class: its constructor
            _check_callable(api, name, "__init__", value, found)
    for qual, obj in live_objects(t, model_path).items():
        names = [n for n in dir(obj) if not n.startswith("_")]
        _check_names(api, qual, names, lambda n, o=obj: getattr(o, n), skip.get(qual, set()), found)
    return found
