"""YAML for recipes: yaml.safe_load's types, with duplicate keys refused and alias expansion bounded.

PyYAML builds an alias as a reference to the anchored object, so a few lines of nested aliases ("billion laughs")
load quickly and then grow without bound in whoever walks or copies the result. Here the document's size with
every alias expanded is counted on the node graph (linear in the file) before anything is built.
"""
from __future__ import annotations

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_ALIASES = 1000
MAX_NODES = 100_000  # scalars, sequences and mappings with every alias expanded
_MERGE = "tag:yaml.org,2002:merge"


class YamlLimitError(ValueError):
    """A YAML document that is too large once expanded, or has a duplicate key; `line` is 1-based (0: unknown)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.line = line


class _Loader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.alias_uses = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.alias_uses += 1
            if self.alias_uses > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise YamlLimitError(f"more than {MAX_ALIASES} aliases", mark.line + 1)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: SafeLoader reports it
                    continue
                if dup:
                    raise YamlLimitError(f"duplicate key '{key}'", key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


def expanded_size(node: Node, limit: int = MAX_NODES) -> int:
    """How many nodes the document has with every alias expanded (stops counting past `limit`)."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(n: Node) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in busy:
            raise YamlLimitError("an alias refers to a node that contains it (a recursive document)",
                                 n.start_mark.line + 1)
        busy.add(id(n))
        total = 1
        if isinstance(n, SequenceNode):
            children = n.value
        elif isinstance(n, MappingNode):
            children = [c for kv in n.value for c in kv]
        else:
            children = []
        for c in children:
            total += size(c)
            if total > limit:
                raise YamlLimitError(f"more than {limit} values once aliases are expanded (an alias bomb?)",
                                     c.start_mark.line + 1)
        busy.discard(id(n))
        sizes[id(n)] = total
        return total

    return size(node)


def load_yaml(text: str):
    """yaml.safe_load(text), bounded; raises yaml.YAMLError or YamlLimitError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
