"""calib's Python sources as the reachability checker sees them: modules, their functions and methods, what each
module imports under which name, and which functions other modules (or module-level code) refer to."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Source:
    module: str  # dotted name: calib.runners.tensorrt.compat
    path: str  # shown in messages: calib/runners/tensorrt/compat.py
    tree: ast.Module
    functions: dict = field(default_factory=dict)  # "f" or "Class.m" -> FunctionDef
    modules: dict = field(default_factory=dict)  # local alias -> dotted module name
    names: dict = field(default_factory=dict)  # local name -> (module, name) from `from M import name`
    strings: dict = field(default_factory=dict)  # module-level dict/tuple of strings -> its strings

    def __post_init__(self):
        package = self.module.rsplit(".", 1)[0]
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found = _strings(node.value)
                if found is not None:
                    self.strings[node.targets[0].id] = found
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [base]).strip(".")
                for a in node.names:
                    self.names[a.asname or a.name] = (base, a.name)


def _strings(node) -> set | None:
    """The string values of a dict or the strings of a tuple/list literal; None if it holds anything else."""
    if isinstance(node, ast.Dict):
        items = node.values
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    else:
        return None
    if items and all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in items):
        return {v.value for v in items}
    return None


class Program:
    def __init__(self, sources: list[Source]):
        self.sources = {s.module: s for s in sources}

    @classmethod
    def from_files(cls, root: Path, package: str = "calib", extra: dict | None = None) -> "Program":
        """Every .py file under root/package, plus `extra` {dotted module: source text} (for tests of the checker)."""
        sources = []
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            module = ".".join(rel.with_suffix("").parts)
            module = module[:-len(".__init__")] if module.endswith(".__init__") else module
            sources.append(Source(module, rel.as_posix(), ast.parse(path.read_text(), str(rel))))
        for module, text in (extra or {}).items():
            path = module.replace(".", "/") + ".py"
            sources.append(Source(module, path, ast.parse(text, path)))
        return cls(sources)

    def resolve(self, source: Source, node) -> tuple[str, str] | None:
        """The (module, function) a Name or `alias.attr` refers to, where calib defines it."""
        if isinstance(node, ast.Name):
            if node.id in source.functions:
                return source.module, node.id
            target = source.names.get(node.id)
            if target and target[0] in self.sources and target[1] in self.sources[target[0]].functions:
                return target
            if target and f"{target[0]}.{target[1]}" in self.sources:  # `from pkg import module`
                return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = self._module_alias(source, node.value.id)
            if module in self.sources and node.attr in self.sources[module].functions:
                return module, node.attr
        return None

    def _module_alias(self, source: Source, name: str) -> str | None:
        if name in source.modules:
            return source.modules[name]
        target = source.names.get(name)
        if target:
            dotted = f"{target[0]}.{target[1]}"
            if dotted in self.sources:
                return dotted
        return None

    def function(self, key: tuple[str, str]):
        return self.sources[key[0]].functions[key[1]]

    def roots(self) -> set[tuple[str, str]]:
        """Where calib's TensorRT code may be entered: every method, every function another module or module-level
        code refers to, and every function nothing refers to. A function used only inside its own module is
        reached only through the call sites that are reachable on the version checked."""
        referenced_outside, referenced = set(), set()
        for source in self.sources.values():
            inside = {id(n) for f in source.functions.values() for n in ast.walk(f)}
            for node in ast.walk(source.tree):
                if not isinstance(node, (ast.Name, ast.Attribute)):
                    continue
                key = self.resolve(source, node)
                if key is None:
                    continue
                referenced.add(key)
                if key[0] != source.module or id(node) not in inside:
                    referenced_outside.add(key)
        roots = set()
        for source in self.sources.values():
            for name in source.functions:
                key = (source.module, name)
                if "." in name or key in referenced_outside or key not in referenced:
                    roots.add(key)
        return roots
