"""Which TensorRT names calib's code reaches on one TensorRT version, and what that version lacks of them.

An AST walk over calib/ with one version's API inventory (probe.py). TensorRT objects are recognised by name:
`trt` (a variable, parameter or `x.trt`) is the tensorrt module everywhere; inside calib.runners.tensorrt the
names in CONVENTIONS hold the objects they say; a value assigned from a typed call takes the call's return type
(`prof = builder.create_optimization_profile()`), read from the real docstrings.

Only code reachable on the version counts. The walk follows the branches the version decides:
- probes: `has(obj, "name")`, `hasattr(...)`, `getattr(obj, "name", default)`, `callable(getattr(...))`;
- version tests: `compat.version(trt)[0] >= 11`, and names bound to them (`major = compat.version(trt)[0]`);
- one-line predicates in calib (`def f(...): return <test>`), evaluated with their arguments;
- a call to a function that always raises on the version (compat.require_weak_typing on 11) ends the path,
  and `if TEST: <raises>` makes TEST false for the rest of the block.
Anything else (a test on user data) keeps both branches. A function only its own module calls is reached only
from reachable call sites; every other function and method is an entry point.

Reported: a name the version lacks, a call no signature of the version takes, a write to a read-only property,
an override of a method the TensorRT base class lacks, and a getattr whose name cannot be resolved nor probed.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

from trt_api.api import MODULE, Api, accepts, describe_signatures, display
from trt_api.program import Program, Source

CONVENTIONS = {"builder": "Builder", "network": "INetworkDefinition", "cfg": "IBuilderConfig",
               "config": "IBuilderConfig", "parser": "OnnxParser", "engine": "ICudaEngine",
               "context": "IExecutionContext", "runtime": "Runtime"}
TRT_PACKAGE = "calib.runners.tensorrt"
COMPAT = "calib.runners.tensorrt.compat"
LOADERS = {(COMPAT, "load")}
VERSION = (COMPAT, "version")
PROBES = {"has", "hasattr"}
RAISE, EXIT = "raise", "exit"
_COMPARE = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}


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


def _all(values):
    return False if any(v is False for v in values) else True if all(v is True for v in values) else None


def _any(values):
    return True if any(v is True for v in values) else False if all(v is False for v in values) else None


def _strip_optional(t: str) -> str:
    for wrap in ("typing.Optional[", "Optional["):
        if t.startswith(wrap) and t.endswith("]"):
            return t[len(wrap):-1]
    return t


class Walk:
    """One function body on one version: its reachable TensorRT uses, problems, calib calls and exit status."""

    def __init__(self, checker: "Checker", source: Source, scope, result: Result, outer: "Walk | None" = None):
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

    def names(self, node) -> set | None:
        """The strings an expression can be (a constant, a bound name, a conditional of both, a module dict's value)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.IfExp):
            a, b = self.names(node.body), self.names(node.orelse)
            return a | b if a is not None and b is not None else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            return self.source.strings.get(node.value.id)
        return None

    def exists(self, owner_t, name: str) -> bool:
        return self.api.member(MODULE if owner_t[0] == MODULE else owner_t[1], name) is not None

    # --- conditions ------------------------------------------------------------------------------------------
    def cond(self, node):
        """True or False where the version decides the test, None where it does not."""
        dump = ast.dump(node)
        if dump in self.facts:
            return self.facts[dump]
        if isinstance(node, ast.Constant):
            return bool(node.value)
        if isinstance(node, ast.Name):
            return self.truth.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            c = self.cond(node.operand)
            return None if c is None else not c
        if isinstance(node, ast.BoolOp):
            values = [self.cond(v) for v in node.values]
            return _all(values) if isinstance(node.op, ast.And) else _any(values)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.Call):
            return self.call_cond(node)
        return None

    def probe_value(self, node):
        """Whether `getattr(obj, "name", default)` finds the name: True/False, None if not such a probe."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                len(node.args) == 3:
            owner, names = self.peek(node.args[0]), self.names(node.args[1])
            if owner is not None and owner[0] in (MODULE, "class", "obj") and names and len(names) == 1:
                return self.exists(owner, next(iter(names)))
        return None

    def compare(self, node):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and \
                isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None:
            found = self.probe_value(node.left)
            return None if found is None else found == isinstance(node.ops[0], ast.IsNot)
        values = [self.const(node.left)] + [self.const(c) for c in node.comparators]
        if any(v is None for v in values) or not all(type(op) in _COMPARE for op in node.ops):
            return None
        return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:]))

    def call_cond(self, node):
        if self.is_probe(node) and len(node.args) == 2:
            owner, names = self.peek(node.args[0]), self.names(node.args[1])
            if owner is None or owner[0] not in (MODULE, "class", "obj") or not names or len(names) != 1:
                return None
            return self.exists(owner, next(iter(names)))
        if isinstance(node.func, ast.Name) and node.func.id == "callable" and len(node.args) == 1:
            return self.probe_value(node.args[0])
        key = self.checker.program.resolve(self.source, node.func)
        if key is None:
            return None
        return self.checker.predicate(key, self, node)

    def const(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
            return node.value
        if isinstance(node, ast.Tuple):
            items = [self.const(e) for e in node.elts]
            return None if any(i is None for i in items) else tuple(items)
        if isinstance(node, ast.Name):
            return self.values.get(node.id)
        if isinstance(node, ast.Subscript):
            whole, index = self.const(node.value), self.const(node.slice)
            if isinstance(whole, tuple) and isinstance(index, int) and -len(whole) <= index < len(whole):
                return whole[index]
            return None
        if isinstance(node, ast.Call) and self.checker.program.resolve(self.source, node.func) == VERSION:
            return self.api.version
        return None

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


class Checker:
    """calib's sources against one version's API."""

    def __init__(self, program: Program, api: Api):
        self.program, self.api = program, api
        self.results: dict = {}
        self.depth = 0

    def walk_function(self, fn, source: Source, result: Result, outer: Walk | None = None) -> str | None:
        walk = Walk(self, source, fn, result, outer)
        walk.bind_params(fn)
        return walk.block(fn.body)

    def analyze(self, key) -> Result:
        if key not in self.results:
            self.results[key] = Result()  # a recursive call sees no status yet: it may fall through
            result = Result()
            result.status = self.walk_function(self.program.function(key), self.program.sources[key[0]], result)
            self.results[key] = result
        return self.results[key]

    def predicate(self, key, caller: Walk, call):
        """The value of `f(args)` where f is `return <test>` and the version decides the test; else None."""
        fn = self.program.function(key)
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None or self.depth > 8:
            return None
        walk = Walk(self, self.program.sources[key[0]], fn, Result())
        walk.silent = True
        walk.bind_params(fn)
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        for name, arg in zip(params, call.args):
            t = caller.peek(arg)
            walk.forget(name)
            if t is not None:
                walk.types[name] = t
            for table, found in ((walk.truth, caller.cond(arg)), (walk.values, caller.const(arg))):
                if found is not None:
                    table[name] = found
        self.depth += 1
        try:
            return walk.cond(body[0].value)
        finally:
            self.depth -= 1

    def run(self) -> tuple[list[Use], list[str]]:
        """The uses reachable on this version and the problems found there."""
        todo, seen = sorted(self.program.roots()), set()
        uses, problems = [], []
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            result = self.analyze(key)
            uses += result.uses
            problems += result.problems
            todo += sorted(result.refs - seen)
        return uses, sorted(set(problems))


def check(program: Program, api: Api) -> tuple[list[Use], list[str]]:
    return Checker(program, api).run()
