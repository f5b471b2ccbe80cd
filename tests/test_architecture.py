"""The layering rule and size limits of docs/architecture.md, checked on the source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "safehub"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts}


def layers() -> dict[str, int]:
    table = (ROOT / "docs/architecture.md").read_text().split("## Module map", 1)[1]
    return {m: int(layer) for m, layer in re.findall(r"^\| `([\w.]+)` \| (\d) \|", table, re.M)}


def imports(path: Path) -> set[str]:
    """safehub modules imported at run time (not those only for type checking)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "safehub":
                continue
            for alias in node.names:  # `from safehub import operations` imports a module
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in modules() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "safehub"}
    return found


def test_every_module_is_on_the_map() -> None:
    missing = set(modules()) - set(layers())
    assert not missing, f"add these to docs/architecture.md's module map: {sorted(missing)}"


def test_every_module_the_page_names_exists() -> None:
    """The map, the separations and every module, folder or test the page names in full
    are there: the page cannot name a module that was renamed or never written."""
    text = (ROOT / "docs/architecture.md").read_text()
    named = set(layers()) | {m for rule in separations() for m in rule}
    named |= {m for m in re.findall(r"`(safehub(?:\.\w+)*)`", text)
              if m.rsplit(".", 1)[-1] not in ("lock", "toml")}  # safehub.lock is a file
    missing = sorted(named - set(modules()))
    missing += sorted(p for p in re.findall(r"`(safehub/[\w/.]*)`", text)
                      if not (ROOT / p).exists())
    missing += sorted(f"tests/{t}.py" for t in re.findall(r"`(test_\w+)`", text)
                      if not (ROOT / "tests" / f"{t}.py").exists())
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_no_import_runs_back_up_the_layers() -> None:
    layer = layers()
    wrong = []
    for name, path in modules().items():
        for imported in imports(path):
            if imported != name and layer[imported] > layer[name]:
                wrong.append(f"{name} (layer {layer[name]}) imports {imported} "
                             f"(layer {layer[imported]})")
    assert not wrong, "\n".join(wrong)


def separations() -> list[tuple[str, str]]:
    text = (ROOT / "docs/architecture.md").read_text()
    return re.findall(r"^- `([\w.]+)` must not import `([\w.]+)`", text, re.M)


def test_the_separations_hold() -> None:
    """What a layer order cannot say (docs/architecture.md, "Folders and layers")."""
    rules = separations()
    assert len(rules) >= 5
    wrong = []
    for name, path in modules().items():
        for imported in imports(path):
            for low, high in rules:
                if (name == low or name.startswith(low + ".")) and (
                        imported == high or imported.startswith(high + ".")):
                    wrong.append(f"{name} imports {imported}")
    assert not wrong, "\n".join(wrong)


def test_size_limits() -> None:
    too_big = []
    for name, path in modules().items():
        text = path.read_text()
        if len(text.splitlines()) > 500:
            too_big.append(f"module {name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                limit = 300 if isinstance(node, ast.ClassDef) else 120
                if size > limit:
                    too_big.append(f"{name}.{node.name}: {size} lines (limit {limit})")
    assert not too_big, "\n".join(too_big)


def test_import_safehub_stays_cheap() -> None:
    import subprocess
    import sys

    code = ("import sys, safehub, safehub.policy, safehub.config; "
            "print(sorted(m for m in ('torch', 'requests', 'sigstore', 'pydantic', "
            "'model_signing', 'cryptography') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_fixes_are_data_not_hint_strings() -> None:
    """An error carries its fix as data (``fix=fixes.run(...)``...), rendered per surface by
    ``fixes.render``; no ``hint=`` text is passed anywhere (``SafehubError.hint`` is the fix
    rendered, read-only)."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                        *(ROOT / "bench").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        found += [f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"
                  for node in ast.walk(tree) if isinstance(node, ast.Call)
                  for keyword in node.keywords if keyword.arg == "hint"]
    assert not found, f"hint= strings where a fix value belongs: {found}"


def test_one_answer_to_is_this_path_inside_that_folder() -> None:
    """Every "is this path inside that folder" is ``safehub._internal.fsutil.within``: a copy
    (``is_relative_to``, ``commonpath``, a ``startswith`` on the folder plus a separator)
    is where two answers drift apart (one without the separator check takes ``/data2`` for
    ``/data``). The warm path's prefix tuples (``startswith(prefixes)``, each ending in a
    separator, built by ``store.cache.warm``) are its argued exception."""
    copy = re.compile(r"\.is_relative_to\(|commonpath\(|startswith\([^)]*\+ ?os\.sep\)")
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "fsutil.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if copy.search(line)]
    assert not found, f"use safehub._internal.fsutil.within: {found}"


def test_no_import_cycle_between_modules() -> None:
    """No module imports, even lazily inside a function, a module that imports it back
    (directly or through others): each concern sits below those that use it, and a cycle
    is where a layer order stops meaning anything. (Type-checking-only imports do not
    count: they never run.)"""
    graph = {name: imports(path) - {name} for name, path in modules().items()}
    cycles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append(" -> ".join([*path[path.index(name):], name]))
            return
        if name in done:
            return
        for imported in sorted(graph.get(name, ())):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _memory(path: Path) -> list[str]:
    """What a module keeps for the life of the process: names it rebinds with ``global``,
    module-level empty containers it fills, functions memoised with ``lru_cache``."""
    tree = ast.parse(path.read_text())
    found = {name for node in ast.walk(tree) if isinstance(node, ast.Global)
             for name in node.names}
    for node in tree.body:
        target, value = ((node.targets[0], node.value) if isinstance(node, ast.Assign)
                         else (node.target, node.value) if isinstance(node, ast.AnnAssign)
                         else (None, None))
        empty = (isinstance(value, ast.Dict) and not value.keys) or (
            isinstance(value, ast.List | ast.Set) and not value.elts) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("dict", "list", "set") and not value.args)
        if isinstance(target, ast.Name) and empty:
            found.add(target.id)
    found |= {node.name for node in tree.body
              if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
              and any("lru_cache" in ast.unparse(d) or ast.unparse(d).endswith("cache")
                      for d in node.decorator_list)}
    return sorted(found)


def test_process_wide_state_lives_in_warm_or_is_argued_there() -> None:
    """What a process remembers is one object (``store.cache.warm.STATE``); every other
    module-level memory is named, with why it is not a memory of a load, in warm's
    docstring (huggingface_hub's file_download keeps its cache rules in one place too)."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "store/cache/warm.py").read_text())) or ""
    unargued = [f"{name}: {kept}" for name, path in sorted(modules().items())
                if name != "safehub.store.cache.warm" and (kept := _memory(path))
                and f"``{name if name != 'safehub' else 'safehub.__init__'}``" not in doc]
    assert not unargued, f"state outside store.cache.warm, not argued there: {unargued}"
