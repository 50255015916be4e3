"""One TensorRT version's Python API, read from a probe.py inventory: what a name is, what a call takes."""
from __future__ import annotations

MODULE = "module"  # the type of the tensorrt module object itself


class Api:
    def __init__(self, inventory: dict):
        self.data = inventory
        self.label = str(inventory["version"])
        self.version = tuple(int(p) for p in self.label.split(".")[:3] if p.isdigit())

    def classes(self) -> dict:
        return self.data["classes"]

    def member(self, owner: str, name: str) -> dict | None:
        """`name` on the module (owner MODULE) or on class `owner` (inherited members included)."""
        if owner == MODULE:
            return self.data["module"].get(name)
        cls = self.data["classes"].get(owner)
        return None if cls is None else cls["members"].get(name)

    def is_class(self, name: str) -> bool:
        return name in self.data["classes"]

    def enum_members(self, name: str) -> list[str] | None:
        cls = self.data["classes"].get(name)
        return None if cls is None else cls.get("enum")


def display(owner: str, name: str) -> str:
    return name if owner == MODULE else f"{owner}.{name}"


def accepts(signatures: list[dict], positional: int, keywords: list[str]) -> bool:
    """Whether one of the signatures takes `positional` arguments plus `keywords` (no signatures: unknown, yes)."""
    if not signatures:
        return True
    for sig in signatures:
        params = sig["params"]
        if any(p["name"].startswith("*") for p in params):
            return True
        names = [p["name"] for p in params]
        if positional > len(params) or any(k not in names[positional:] for k in keywords):
            continue
        if all(p["default"] or i < positional or p["name"] in keywords for i, p in enumerate(params)):
            return True
    return False


def describe_signatures(signatures: list[dict]) -> str:
    return " | ".join("(" + ", ".join(p["name"] + ("=..." if p["default"] else "") for p in s["params"]) + ")"
                      for s in signatures) or "()"
