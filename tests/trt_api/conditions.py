"""The branch tests the version decides: probes of a name, version comparisons, calib's one-line predicates.
Mixed into walk.Walk; three-valued (True, False, None where the version does not decide)."""
from __future__ import annotations

import ast
import operator

from trt_api.api import MODULE

COMPAT = "calib.runners.tensorrt.compat"
VERSION = (COMPAT, "version")
PROBES = {"has", "hasattr"}
_COMPARE = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}


def all_of(values):
    return False if any(v is False for v in values) else True if all(v is True for v in values) else None


def any_of(values):
    return True if any(v is True for v in values) else False if all(v is False for v in values) else None


class Conditions:
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
            return all_of(values) if isinstance(node.op, ast.And) else any_of(values)
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

