"""Which TensorRT names calib's code reaches on one TensorRT version, and what that version lacks of them.

An AST walk over calib/ with one version's API inventory (probe.py). TensorRT objects are recognised by name:
`trt` (a variable, parameter or `x.trt`) is the tensorrt module everywhere; inside calib.runners.tensorrt the
names in walk.CONVENTIONS hold the objects they say; a value assigned from a typed call takes the call's return type
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

from trt_api.api import Api
from trt_api.program import Program, Source
from trt_api.walk import Result, Use, Walk


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
