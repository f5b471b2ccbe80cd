"""Which entrypoints a hubconf.py defines, read from its syntax tree (nothing is run).

torch.hub's entrypoints are the module's public callables. Without running the module
safehub can tell for certain only what its top level binds by name: functions, classes,
assignments, names imported from modules. Names that cannot be callable are left out: a
plain ``import x`` binds a module, and a name assigned a literal (``dependencies = [...]``)
is data. A star import, ``globals()`` tricks or a module ``__getattr__`` make the answer
uncertain, and it says so.

>>> found = entrypoints_of("def resnet(): pass\\nimport torch\\n_x = 1\\ndependencies = []\\n")
>>> sorted(found.names), found.certain
(['resnet'], True)
>>> entrypoints_of("from models import *\\n").certain
False
"""

from __future__ import annotations

import ast

from safehub._internal.frozen import Frozen

__all__ = ["Found", "entrypoints_of"]


class Found(Frozen):
    """Public names hubconf.py binds at its top level; ``certain`` False says why not."""

    names: frozenset[str]
    certain: bool
    why: str = ""


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return [n for elt in node.elts for n in _targets(elt)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


_DATA = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp,
         ast.DictComp, ast.SetComp)


def _bound(node: ast.stmt) -> tuple[list[str], str]:
    """Names a top-level statement binds, and why the answer is uncertain (or "")."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name], ""
    if isinstance(node, ast.Assign):
        if isinstance(node.value, _DATA):  # never callable
            return [], ""
        return [n for t in node.targets for n in _targets(t)], ""
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        if isinstance(node, ast.AnnAssign) and (node.value is None
                                                or isinstance(node.value, _DATA)):
            return [], ""
        return _targets(node.target), ""
    if isinstance(node, ast.Import):  # a module is never callable
        return [], ""
    if isinstance(node, ast.ImportFrom):
        if any(a.name == "*" for a in node.names):
            return [], f"`from {node.module or '.'} import *` (line {node.lineno})"
        return [a.asname or a.name for a in node.names], ""
    if isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While | ast.AsyncFor
                  | ast.AsyncWith):
        names: list[str] = []
        if isinstance(node, ast.For | ast.AsyncFor):
            names += _targets(node.target)
        elif isinstance(node, ast.With | ast.AsyncWith):
            names += [n for item in node.items if item.optional_vars is not None
                      for n in _targets(item.optional_vars)]
        why = ""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                more, reason = _bound(child)
                names += more
                why = why or reason
            elif isinstance(child, ast.ExceptHandler):
                for stmt in child.body:
                    more, reason = _bound(stmt)
                    names += more
                    why = why or reason
        return names, why
    return [], ""


def entrypoints_of(source: str) -> Found:
    """The public names ``source`` binds at its top level (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return Found(frozenset(), False, f"hubconf.py does not parse ({type(e).__name__})")
    names: set[str] = set()
    why = ""
    for node in tree.body:
        more, reason = _bound(node)
        names.update(more)
        why = why or reason
    dynamic = {"__getattr__"} & names
    if dynamic:
        why = why or "hubconf.py defines a module __getattr__"
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and \
                call.func.id in ("globals", "exec", "eval", "setattr", "vars", "__import__"):
            why = why or f"hubconf.py calls {call.func.id}() (line {call.lineno})"
            break
        if isinstance(call, ast.Global | ast.NamedExpr | ast.Match):
            kind = {ast.Global: "a global statement", ast.NamedExpr: "an := expression",
                    ast.Match: "a match statement"}[type(call)]
            why = why or f"hubconf.py binds names with {kind} (line {call.lineno})"
            break
    public = frozenset(n for n in names if not n.startswith("_"))
    return Found(public, not why, why)
