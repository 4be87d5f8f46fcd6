"""Ansible's YAML inventory, read from PyYAML's node tree (``yaml.compose`` with the safe loader).

The nodes keep their line, so every refusal names ``FILE:LINE``; nothing is constructed
beyond the strings sgpatch reads (no tags, no objects), and the walk is bounded: a file of
aliases that expands to millions of nodes is refused, not followed.

    all:
      vars: {ansible_user: deploy}
      children:
        gpu:
          hosts:
            gpu-01:
            gpu-02: {ansible_host: 10.0.0.2, ansible_port: 2222}
"""

from __future__ import annotations

from typing import Any

from sgpatch.deployed.inventory_raw import InventoryError, RawInventory, expand, split_port

MAX_NODES = 200_000
MAX_DEPTH = 64
GROUP_KEYS = ("hosts", "vars", "children")
NULL = "tag:yaml.org,2002:null"


class _Walk:
    def __init__(self, raw: RawInventory) -> None:
        self.raw = raw
        self.nodes = 0

    def line(self, node: Any) -> int:
        return int(node.start_mark.line) + 1

    def visit(self, node: Any) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.raw.error(self.line(node), f"more than {MAX_NODES} YAML nodes: not a host list")

    def is_null(self, node: Any) -> bool:
        import yaml

        return isinstance(node, yaml.ScalarNode) and node.tag == NULL

    def mapping(self, node: Any, what: str) -> list[tuple[str, Any, int]]:
        """A mapping's (key, value node, line) with string keys; a null node is an empty mapping."""
        import yaml

        self.visit(node)
        if self.is_null(node):
            return []
        if not isinstance(node, yaml.MappingNode):
            raise self.raw.error(self.line(node), f"{what}: expected a mapping")
        out = []
        for key, value in node.value:
            self.visit(key)
            if not isinstance(key, yaml.ScalarNode) or self.is_null(key):
                raise self.raw.error(self.line(key), f"{what}: expected a name as the key")
            out.append((str(key.value), value, self.line(key)))
        return out

    def scalar(self, node: Any) -> object:
        """A variable's value: the scalar's text (a number stays text: the checks read it), or a marker
        for a list or mapping (sgpatch reads no such variable; a checked one is refused)."""
        import yaml

        self.visit(node)
        if isinstance(node, yaml.ScalarNode):
            return None if self.is_null(node) else str(node.value)
        return node  # not a string: refused if sgpatch reads this variable

    def group(self, name: str, node: Any, line: int, depth: int) -> None:
        raw = self.raw
        if depth > MAX_DEPTH:
            raise raw.error(line, f"groups nested more than {MAX_DEPTH} deep")
        raw.group(name, line)
        for key, value, where in self.mapping(node, f"group {name}"):
            if key not in GROUP_KEYS:
                raise raw.error(where, f"group {name}: {key!r} is not hosts, vars or children")
            if key == "vars":
                for var, v, at in self.mapping(value, f"{name}.vars"):
                    raw.groups[name].vars[var] = (self.scalar(v), at)
            elif key == "hosts":
                for host, v, at in self.mapping(value, f"{name}.hosts"):
                    variables = {var: (self.scalar(x), vat) for var, x, vat in self.mapping(v, f"host {host}")}
                    for expanded in _expand(host, raw, at):
                        raw.add_host(expanded, at, name, variables)
            else:
                for child, v, at in self.mapping(value, f"{name}.children"):
                    if child == "all":
                        raise raw.error(at, "group all cannot be a child")
                    raw.groups[name].children.setdefault(child, at)
                    self.group(child, v, at, depth + 1)


def _expand(host: str, raw: RawInventory, line: int) -> list[str]:
    name, port = split_port(host)
    if port is not None:
        raise raw.error(line, f"{host!r}: give the port as ansible_port in a YAML inventory")
    return expand(name, raw, line)


def parse_yaml(text: str, path: str, raw: RawInventory) -> RawInventory:
    """Fill ``raw`` from a YAML inventory's text."""
    try:
        import yaml
    except ImportError:  # a dependency of sgpatch: missing only in a broken environment
        raise InventoryError(f"{path}: a YAML inventory needs PyYAML", hint="pip install pyyaml") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise raw.error(line, f"not YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise raw.error(1, f"not YAML: {exc}") from None
    except RecursionError:
        raise raw.error(1, "YAML nested too deep") from None
    if root is None:
        return raw
    walk = _Walk(raw)
    for name, node, line in walk.mapping(root, "the inventory"):
        walk.group(name, node, line, 0)
    return raw
