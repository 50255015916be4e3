"""Print a JSON inventory of an importable TensorRT Python module: module attributes, classes (nested ones as
'Outer.Inner'), enum members, methods with their parameters and return types, properties with their types.

    python probe.py [MODULE]      # MODULE defaults to tensorrt_bindings (the tensorrt-cu12-bindings wheel)

Signatures come from pybind11 docstrings ('name(self: T, arg: type = default) -> R', one line per overload).
Standard library only: it runs in a subprocess beside the bindings and their stub libraries.
"""
from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path

_NAME = re.compile(rb"(?<![A-Za-z0-9_])[a-z][a-z0-9_]{2,60}(?![A-Za-z0-9_])")
_SKIP = {"__class__", "__doc__", "__module__", "__dict__", "__weakref__", "__new__", "__getstate__", "__setstate__",
         "__reduce__", "__reduce_ex__", "__subclasshook__", "__init_subclass__", "__sizeof__", "__dir__",
         "__format__", "__getattribute__", "__setattr__", "__delattr__", "_pybind11_conduit_v1_"}


def short_type(text: str, prefix: str) -> str:
    return text.strip().replace(prefix, "")


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets: 'a: tuple[int, int], b: int' -> two parts."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in parts + [cur] if p.strip()]


def parse_signatures(name: str, doc: str | None, prefix: str) -> list[dict]:
    """Every 'name(params) -> returns' line of a pybind11 docstring (overloads numbered '1. ', '2. ')."""
    out = []
    pattern = re.compile(rf"^(?:\d+\.\s+)?{re.escape(name)}\((.*)\)\s*->\s*(.+)$")
    for line in (doc or "").splitlines():
        m = pattern.match(line.strip())
        if not m:
            continue
        params = []
        for p in split_top(m.group(1)):
            head, _, default = p.partition("=")
            pname, _, ptype = head.partition(":")
            params.append({"name": pname.strip(), "type": short_type(ptype, prefix), "default": bool(default)})
        if params and params[0]["name"] in ("self", "arg0") and not params[0]["default"]:
            params = params[1:]
        out.append({"params": params, "returns": short_type(m.group(2), prefix)})
    return out


def python_signature(fn) -> list[dict]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    params = [{"name": ("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "") + p.name,
               "type": "", "default": p.default is not p.empty} for p in sig.parameters.values()
              if p.name != "self"]
    return [{"params": params, "returns": ""}]


def describe(owner, name: str, value, prefix: str) -> dict:
    raw = inspect.getattr_static(owner, name, value) if isinstance(owner, type) else value
    if isinstance(raw, property):
        sig = parse_signatures("", raw.fget.__doc__ if raw.fget else None, prefix)
        return {"kind": "property", "type": sig[0]["returns"] if sig else "", "settable": raw.fset is not None}
    if isinstance(value, type):
        return {"kind": "class", "type": short_type(f"{value.__module__}.{value.__qualname__}", prefix)}
    if callable(value):
        sigs = parse_signatures(name, getattr(value, "__doc__", None), prefix)
        if not sigs and (inspect.isfunction(value) or inspect.ismethod(value)):
            sigs = python_signature(value)
        return {"kind": "method", "signatures": sigs}
    return {"kind": "value", "type": short_type(f"{type(value).__module__}.{type(value).__qualname__}", prefix)}


def is_enum(cls: type) -> bool:
    return isinstance(getattr(cls, "__members__", None), dict)


def classes_of(mod) -> dict[str, type]:
    """Every class the module defines, nested ones included, by their name inside the module."""
    found: dict[str, type] = {}

    def visit(prefix: str, cls: type) -> None:
        if prefix in found or getattr(cls, "__module__", "") != mod.__name__ + ".tensorrt" and \
                getattr(cls, "__module__", "") != mod.__name__:
            return
        found[prefix] = cls
        for key in dir(cls):
            inner = getattr(cls, key, None)
            if isinstance(inner, type) and key[0].isupper() and inner.__qualname__.endswith(key):
                visit(f"{prefix}.{key}", inner)

    for key in dir(mod):
        value = getattr(mod, key)
        if isinstance(value, type) and not key.startswith("_"):
            visit(key, value)
    return found


def inventory(mod) -> dict:
    prefix = mod.__name__ + ".tensorrt."
    module = {k: describe(mod, k, getattr(mod, k), prefix) for k in dir(mod)
              if not k.startswith("_") and not inspect.ismodule(getattr(mod, k))}
    module["__version__"] = {"kind": "value", "type": "str"}
    classes = {}
    for qual, cls in sorted(classes_of(mod).items()):
        members = {}
        for key in dir(cls):
            if key in _SKIP or key.startswith("__") and key not in ("__init__", "__call__"):
                continue
            members[key] = describe(cls, key, getattr(cls, key), prefix)
        entry = {"bases": [short_type(f"{b.__module__}.{b.__qualname__}", prefix) for b in cls.__mro__[1:]
                           if b.__module__.startswith(mod.__name__)], "members": members}
        if is_enum(cls):
            entry["enum"] = sorted(cls.__members__)
        classes[qual] = entry
    bound = set(module) | {m for c in classes.values() for m in c["members"]}
    return {"version": str(mod.__version__), "module": module, "classes": classes,
            "callbacks": sorted(extension_names(mod) - bound)}


def extension_names(mod) -> set[str]:
    """Identifier-like strings in the extension module: besides what it binds, the names of the Python methods its
    C++ trampolines call on a subclass (IInt8LegacyCalibrator.get_quantile has no binding of its own)."""
    names: set[str] = set()
    for path in getattr(mod, "__path__", []):
        for ext in Path(path).glob("tensorrt*.so"):
            names |= {m.decode() for m in _NAME.findall(ext.read_bytes())}
    return names


def main(argv: list[str]) -> int:
    mod = importlib.import_module(argv[1] if len(argv) > 1 else "tensorrt_bindings")
    json.dump(inventory(mod), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
