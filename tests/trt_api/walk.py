"""One function body walked on one TensorRT version: the TensorRT names it reaches, the problems found there,
the calib functions it refers to, and whether it always raises (see reach.py for the rules)."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from trt_api.api import MODULE, accepts, describe_signatures, display
from trt_api.conditions import COMPAT, PROBES, Conditions
from trt_api.program import Source

CONVENTIONS = {"builder": "Builder", "network": "INetworkDefinition", "cfg": "IBuilderConfig",
               "config": "IBuilderConfig", "parser": "OnnxParser", "engine": "ICudaEngine",
               "context": "IExecutionContext", "runtime": "Runtime"}
TRT_PACKAGE = "calib.runners.tensorrt"
LOADERS = {(COMPAT, "load")}
RAISE, EXIT = "raise", "exit"


@dataclass(frozen=True)
class Use:
    owner: str
    name: str
    where: str

    def __str__(self):
        return f"{display(self.owner, self.name)} ({self.where})"


@dataclass
class Result:
    uses: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    refs: set = field(default_factory=set)
    status: str | None = None


def _combine(a, b):
    if a is None or b is None:
        return None
    return RAISE if a == b == RAISE else EXIT


def _strip_optional(t: str) -> str:
    for wrap in ("typing.Optional[", "Optional["):
        if t.startswith(wrap) and t.endswith("]"):
            return t[len(wrap):-1]
    return t


class Walk(Conditions):
    """One function body on one version: its reachable TensorRT uses, problems, calib calls and exit status."""

    def __init__(self, checker, source: Source, scope, result: Result, outer: "Walk | None" = None):
        self.checker, self.api, self.source, self.scope, self.result = checker, checker.api, source, scope, result
        self.types = dict(outer.types) if outer else {}
        self.truth = dict(outer.truth) if outer else {}
        self.values = dict(outer.values) if outer else {}
        self.strings = dict(outer.strings) if outer else {}
        self.facts: dict = {}
        self.silent = False
        self.typed = source.module.startswith(TRT_PACKAGE)

    # --- names and types -------------------------------------------------------------------------------------
    def convention(self, name: str):
        if name == "trt":
            return (MODULE,)
        if self.typed and name in CONVENTIONS:
            return ("obj", CONVENTIONS[name])
        return None

    def name_type(self, name: str):
        return self.types[name] if name in self.types else self.convention(name)

    def bind_params(self, fn) -> None:
        args = fn.args
        for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
            if a is not None:
                self.forget(a.arg)
                t = self.convention(a.arg)
                if t is not None:
                    self.types[a.arg] = t

    def forget(self, name: str) -> None:
        for table in (self.types, self.truth, self.values, self.strings):
            table.pop(name, None)
        self.facts = {k: v for k, v in self.facts.items() if f"id='{name}'" not in k}

    def where(self, node) -> str:
        return f"{self.source.path}:{getattr(node, 'lineno', '?')}"

    def problem(self, text: str, node) -> None:
        if not self.silent:
            self.result.problems.append(f"TensorRT {self.api.label}: {text} ({self.where(node)})")

    # --- expressions -----------------------------------------------------------------------------------------
    def peek(self, node):
        was, self.silent = self.silent, True
        try:
            return self.expr(node)
        finally:
            self.silent = was

    def member(self, owner_t, attr: str, node, store: bool = False):
        owner = MODULE if owner_t[0] == MODULE else owner_t[1]
        info = self.api.member(owner, attr)
        if not self.silent:
            self.result.uses.append(Use(owner, attr, self.where(node)))
        if info is None:
            self.problem(f"no {display(owner, attr)}", node)
            return None
        kind = info["kind"]
        if store:
            if kind != "property" or not info.get("settable"):
                self.problem(f"{display(owner, attr)} cannot be assigned", node)
            return None
        if kind == "class":
            return ("class", info["type"])
        if kind in ("value", "property"):
            t = info.get("type", "")
            return ("obj", t) if self.api.is_class(t) else None
        if kind == "method":
            return ("func", owner, attr, owner_t[0] == "class")
        return None

    def expr(self, node):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and not self.silent:
                key = self.checker.program.resolve(self.source, node)
                if key:
                    self.result.refs.add(key)
            return self.name_type(node.id) if isinstance(node.ctx, ast.Load) else None
        if isinstance(node, ast.Attribute):
            owner = self.expr(node.value)
            if owner is not None and owner[0] in (MODULE, "class", "obj"):
                return self.member(owner, node.attr, node, isinstance(node.ctx, ast.Store))
            key = self.checker.program.resolve(self.source, node)
            if key and not self.silent:
                self.result.refs.add(key)
            return self.convention(node.attr)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BoolOp):
            stop = False if isinstance(node.op, ast.And) else True
            types = []
            for value in node.values:
                types.append(self.expr(value))
                if self.cond(value) is stop:
                    break
            return next((t for t in types if t is not None), None) if isinstance(node.op, ast.Or) else None
        if isinstance(node, ast.IfExp):
            self.expr(node.test)
            c = self.cond(node.test)
            body = self.expr(node.body) if c is not False else None
            other = self.expr(node.orelse) if c is not True else None
            return body if c is True else other if c is False else (body if body == other else None)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                self.expr(gen.iter)
                self.bind_loop(gen.target, gen.iter)
                for test in gen.ifs:
                    self.expr(test)
            for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                self.expr(part)
            return None
        if isinstance(node, ast.Lambda):
            self.expr(node.body)
            return None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
        return None

    def is_probe(self, call) -> bool:
        f = call.func
        return isinstance(f, ast.Name) and f.id in PROBES or \
            isinstance(f, ast.Attribute) and f.attr == "has" and self.checker.program.resolve(self.source, f) == (
                COMPAT, "has")

    def call(self, node):
        f, args = node.func, node.args
        if self.is_probe(node) and len(args) == 2:
            self.expr(args[0])
            return None
        if isinstance(f, ast.Name) and f.id == "getattr" and len(args) in (2, 3):
            return self.getattr(node)
        ft = self.expr(f)
        for a in args:
            self.expr(a)
        for kw in node.keywords:
            self.expr(kw.value)
        key = self.checker.program.resolve(self.source, f)
        if key in LOADERS:
            return (MODULE,)
        if ft is None or ft[0] not in ("func", "class"):
            return None
        if ft[0] == "class":
            owner, name, unbound = ft[1], "__init__", False
        else:
            owner, name, unbound = ft[1], ft[2], ft[3]
        if any(isinstance(a, ast.Starred) for a in args) or any(kw.arg is None for kw in node.keywords):
            return None
        info = self.api.member(owner, name) or {}
        sigs = info.get("signatures", [])
        if not accepts(sigs, len(args) - unbound, [kw.arg for kw in node.keywords]):
            self.problem(f"{display(owner, name if name != '__init__' else '')}".rstrip(".") +
                         f" takes {describe_signatures(sigs)}, not {len(args) - unbound} positional argument(s)" +
                         (f" and {', '.join(kw.arg for kw in node.keywords)}" if node.keywords else ""), node)
        if ft[0] == "class":
            return ("obj", owner)
        ret = _strip_optional(sigs[0]["returns"]) if sigs else ""
        return ("obj", ret) if self.api.is_class(ret) else None

    def getattr(self, node):
        obj, name = node.args[0], node.args[1]
        owner = self.expr(obj)
        if owner is None or owner[0] not in (MODULE, "class", "obj"):
            self.expr(name)
            return None
        if len(node.args) == 3:  # a probe: no use unless present
            self.expr(node.args[2])
            names = self.names(name)
            if names and len(names) == 1:
                n = next(iter(names))
                if self.exists(owner, n):
                    return self.member(owner, n, node)
            return None
        names = self.names(name)
        if names is None:
            if not self.probed(obj, name):
                self.problem(f"getattr on {display(MODULE if owner[0] == MODULE else owner[1], '?')} with a name "
                             "the checker cannot resolve: give it as a constant or probe it with hasattr", node)
            return None
        types = [self.member(owner, n, node) for n in sorted(names)]
        return types[0] if len(set(types)) == 1 else None

    def probed(self, obj, name) -> bool:
        want = (ast.dump(obj), ast.dump(name))
        for node in ast.walk(self.scope):
            if isinstance(node, ast.Call) and self.is_probe(node) and len(node.args) == 2:
                if (ast.dump(node.args[0]), ast.dump(node.args[1])) == want:
                    return True
        return False

    # --- statements ------------------------------------------------------------------------------------------
    def block(self, stmts) -> str | None:
        for s in stmts:
            status = self.stmt(s)
            if status:
                return status
        return None

    def raises(self, node) -> str | None:
        if isinstance(node, ast.Call):
            key = self.checker.program.resolve(self.source, node.func)
            if key and self.checker.analyze(key).status == RAISE:
                return RAISE
        return None

    def stmt(self, s) -> str | None:
        if isinstance(s, ast.Expr):
            self.expr(s.value)
            return self.raises(s.value)
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if s.value is None:
                return None
            t = self.expr(s.value)
            for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                self.assign(target, t, s.value if not isinstance(s, ast.AugAssign) else None)
            return self.raises(s.value)
        if isinstance(s, ast.Return):
            if s.value is not None:
                self.expr(s.value)
            return self.raises(s.value) or EXIT
        if isinstance(s, ast.Raise):
            if s.exc is not None:
                self.expr(s.exc)
            return RAISE
        if isinstance(s, ast.If):
            return self.if_(s)
        if isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter)
            self.bind_loop(s.target, s.iter)
            self.block(s.body)
            self.block(s.orelse)
            return None
        if isinstance(s, ast.While):
            self.expr(s.test)
            self.block(s.body)
            self.block(s.orelse)
            return None
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                t = self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, t, None)
            return self.block(s.body)
        if isinstance(s, ast.Try):
            self.block(s.body)
            for h in s.handlers:
                self.block(h.body)
            self.block(s.orelse)
            return self.block(s.finalbody) if s.finalbody else None
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.checker.walk_function(s, self.source, self.result, outer=self)
            return None
        if isinstance(s, ast.ClassDef):
            self.class_(s)
            return None
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.expr):
                self.expr(child)
        return None

    def if_(self, s) -> str | None:
        self.expr(s.test)
        c = self.cond(s.test)
        if c is True:
            return self.block(s.body)
        if c is False:
            return self.block(s.orelse)
        body, other = self.block(s.body), self.block(s.orelse)
        if body == RAISE and other is None:
            self.facts[ast.dump(s.test)] = False
        elif other == RAISE and body is None:
            self.facts[ast.dump(s.test)] = True
        return _combine(body, other)

    def assign(self, target, t, value) -> None:
        if isinstance(target, ast.Name):
            self.forget(target.id)
            if t is not None:
                self.types[target.id] = t
            if value is not None:
                for table, found in ((self.truth, self.cond(value)), (self.values, self.const(value)),
                                     (self.strings, self.names(value))):
                    if found is not None:
                        table[target.id] = found
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.assign(elt, None, None)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, None, None)
        else:
            self.expr(target)

    def bind_loop(self, target, iterable) -> None:
        self.assign(target, None, None)
        if isinstance(target, ast.Name):
            found = self.names(iterable) if isinstance(iterable, ast.Name) else None
            if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
                items = iterable.elts
                if items and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in items):
                    found = {e.value for e in items}
            if found:
                self.strings[target.id] = found

    def class_(self, cls) -> None:
        bases = [self.expr(b) for b in cls.bases]
        for base in (b for b in bases if b is not None and b[0] == "class"):
            for item in cls.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    self.override(cls.name, base[1], item)
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.checker.walk_function(item, self.source, self.result, outer=self)
            else:
                self.stmt(item)

    def override(self, cls_name: str, base: str, fn) -> None:
        info = self.api.member(base, fn.name)
        self.result.uses.append(Use(base, fn.name, self.where(fn)))
        if info is None or info["kind"] != "method":
            self.problem(f"{cls_name} overrides {base}.{fn.name}, which this version lacks (TensorRT never calls it)",
                         fn)
            return
        taken = len(fn.args.posonlyargs) + len(fn.args.args) - 1
        counts = {len(s["params"]) for s in info.get("signatures", [])}
        if counts and fn.args.vararg is None and taken not in counts:
            self.problem(f"{cls_name}.{fn.name} takes {taken} argument(s); TensorRT calls it with "
                         f"{describe_signatures(info['signatures'])}", fn)
