"""A verified tree's modules compiled once per user: the store in the user's data dir.

A fresh process that loads a cached repo takes each module's code from the user's store
(``safehub.store.bytecode``) instead of compiling it again, keyed by the exact source
bytes read; the source is still read and checked as it is opened. Every case runs real
Python processes against the loopback GitHub stand-in, and counts compilations by
instrumenting the loader (never by timing).
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from safehub.config import Settings
from safehub.store.bytecode import BytecodeStore
from tests.conftest import HubRepo
from tests.test_confine import needs_landlock

pytest.importorskip("torch")  # torch's own loader runs the verified tree
pytestmark = pytest.mark.slow  # child Pythons importing torch

SPEC = "acme/shapes:v1.0"

FILES: dict[str, str | bytes] = {
    "hubconf.py": (
        "dependencies = []\n"
        "import shapes\n"
        "from shapes.deep import leaf\n\n\n"
        "def model():\n"
        "    return {'value': leaf.VALUE, 'where': shapes.where(), 'trace': shapes.failing()}\n\n\n"
        "def reader():\n"
        "    return shapes.read_data  # called after the load returns: the tree's own frame\n"),
    "shapes/__init__.py": (
        "import os\nimport traceback\n\nimport helper\n\n\n"
        "def where():\n"
        "    return where.__code__.co_filename\n\n\n"
        "def failing():\n"
        "    try:\n"
        "        helper.boom()\n"
        "    except ValueError as e:\n"
        "        last = traceback.extract_tb(e.__traceback__)[-1]\n"
        "        return [last.filename, last.line]\n\n\n"
        "def read_data():\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'data.txt')) as f:\n"
        "        return f.read()\n"),
    "shapes/data.txt": "verified data\n",
    "shapes/deep/__init__.py": "",
    "shapes/deep/leaf.py": "VALUE = 'source'\n",
    "helper.py": "def boom():\n    raise ValueError('from the tree')\n",
}
MODULES = ("hubconf.py", "shapes/__init__.py", "shapes/deep/__init__.py", "shapes/deep/leaf.py",
           "helper.py")

#: A fresh process: one load, its compilations and store hits counted by wrapping the
#: loader's compile step and the store's read; a callable result is called after the load.
PROGRAM = '''import json, sys
import safehub
from safehub.run import bytecode
from safehub.store.bytecode import BytecodeStore

compiled, served = [], []
compile_source, read = bytecode.StoredLoader.source_to_code, BytecodeStore.read


def counted(self, data, path, *args, **kwargs):
    compiled.append(path)
    return compile_source(self, data, path, *args, **kwargs)


def reading(self, name):
    code = read(self, name)
    if code is not None:
        served.append(code.co_filename)
    return code


bytecode.StoredLoader.source_to_code, BytecodeStore.read = counted, reading
out = {"compiled": compiled, "served": served}
try:
    result = safehub.load(sys.argv[1], sys.argv[2], verbose=False)
    out["result"] = result() if callable(result) else result
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
if len(sys.argv) > 3:  # a confined job: may it write the store itself?
    try:
        with open(sys.argv[3], "wb") as f:
            f.write(b"planted")
        out["write"] = "written"
    except OSError as e:
        out["write"] = f"refused: {type(e).__name__}"
print("RESULT " + json.dumps(out))
'''


@pytest.fixture
def shapes(make_hub_repo: Any, isolated: Path) -> HubRepo:
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text('[[allow]]\nrepo = "acme/shapes"\n')
    repo: HubRepo = make_hub_repo("acme", "shapes", FILES)
    return repo


def fresh(tmp_path: Path, entrypoint: str = "model", *, confine: bool = False,
          write: str = "") -> dict[str, Any]:
    """What a new Python process that loads ``SPEC`` reports (``confine``: as the job of
    ``safehub run --confine``; ``write``: a path it then tries to write)."""
    script = tmp_path / "fresh.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, str(script), SPEC, entrypoint, *([write] if write else [])]
    if confine:
        command = [sys.executable, "-m", "safehub", "run", "--confine", "--", *command]
    done = subprocess.run(command, env={**env, "CI": "true"}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, (done.stdout, done.stderr)
    out: dict[str, Any] = json.loads(line[len("RESULT "):])
    return out


def tree() -> Path:
    commits = Settings.from_env().cache_dir / "v1" / "commits"
    return next(commits.iterdir()) / "tree"


def store() -> BytecodeStore:
    return BytecodeStore(Settings.from_env().data_dir)


def entry_of(module: str) -> Path:
    """The store's entry whose code was compiled from ``module`` of the tree."""
    kept = store()
    path = str(tree() / module)
    found = [p for p in kept.root.iterdir()
             if (code := kept.read(p.name)) is not None and code.co_filename == path]
    assert len(found) == 1, found
    return found[0]


def rewrite(path: Path, data: bytes) -> None:
    """Write a read-only file in place (its mode, then restored, and its content)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode | stat.S_IWUSR)
    path.write_bytes(data)
    path.chmod(mode)


EXPECTED = "source"


@pytest.mark.parametrize("runtime", ["observe", "enforce", "off"])
def test_a_second_fresh_process_compiles_none_of_the_trees_modules(
        shapes: HubRepo, isolated: Path, tmp_path: Path, runtime: str) -> None:
    """The store is written as safehub's own work: in every runtime mode the guard neither
    refuses nor records it."""
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.write_text(f'[safehub]\nruntime = "{runtime}"\n' + policy.read_text())
    first = fresh(tmp_path)
    root = tree()
    assert sorted(first["compiled"]) == sorted(str(root / m) for m in MODULES), first
    assert first["served"] == []
    assert first["result"]["value"] == EXPECTED
    kept = store()
    assert stat.S_IMODE(kept.root.stat().st_mode) == 0o700
    entries = list(kept.root.iterdir())
    assert len(entries) == len(MODULES)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o400 for p in entries)
    assert not list(root.rglob("__pycache__")) and not list(root.rglob("*.pyc"))
    audit = (Settings.from_env().log_dir / "audit.jsonl").read_text()
    assert str(kept.root) not in audit  # not the repo's writes: none recorded

    second = fresh(tmp_path)
    assert second["compiled"] == [], second
    assert sorted(second["served"]) == sorted(str(root / m) for m in MODULES)
    assert second["result"] == first["result"]


def test_code_from_the_store_carries_the_trees_real_paths(
        shapes: HubRepo, tmp_path: Path) -> None:
    """co_filename and tracebacks name the tree's files (the runtime guard tells the tree's
    frames by co_filename; a traceback shows the source line)."""
    fresh(tmp_path)
    result = fresh(tmp_path)["result"]
    root = tree()
    assert result["where"] == str(root / "shapes" / "__init__.py")
    assert result["trace"] == [str(root / "helper.py"), "raise ValueError('from the tree')"]


def test_the_guard_still_knows_the_trees_frames_in_code_from_the_store(
        shapes: HubRepo, tmp_path: Path) -> None:
    """After the load returns, a read by the tree's own code (its frame, code taken from
    the store) is still checked on open: a file changed in the cache is refused."""
    assert fresh(tmp_path, "reader")["result"] == "verified data\n"
    rewrite(tree() / "shapes" / "data.txt", b"changed in the cache\n")
    later = fresh(tmp_path, "reader")
    assert later["compiled"] == [] and later["served"], later
    assert later.get("error", "").startswith("TamperedError"), later


def test_a_tree_file_changed_in_the_cache_is_refused_whatever_the_store_holds(
        shapes: HubRepo, tmp_path: Path, canary: Path) -> None:
    fresh(tmp_path)
    leaf = tree() / "shapes" / "deep" / "leaf.py"
    rewrite(leaf, b"import os\nopen(os.environ['SAFEHUB_TEST_CANARY'], 'a').write('ran')\n"
                  b"VALUE = 'tampered'\n")
    later = fresh(tmp_path)
    assert later.get("error", "").startswith("TamperedError"), later
    assert str(leaf) in later["error"] and "result" not in later
    assert not canary.exists()


def test_a_corrupt_store_entry_is_compiled_again_and_replaced(
        shapes: HubRepo, tmp_path: Path) -> None:
    fresh(tmp_path)
    entry = entry_of("shapes/deep/leaf.py")
    whole = entry.read_bytes()
    cut = entry.parent / "cut"
    cut.write_bytes(whole[: len(whole) // 2])
    os.replace(cut, entry)  # cut short, as by a crash
    later = fresh(tmp_path)
    assert later["compiled"] == [str(tree() / "shapes/deep/leaf.py")], later
    assert later["result"]["value"] == EXPECTED
    assert entry.read_bytes() == whole  # written again
    (entry.parent / "other").write_bytes(marshal.dumps({"not": "code"}))
    os.replace(entry.parent / "other", entry)  # data of another type: the same
    assert fresh(tmp_path)["compiled"] == [str(tree() / "shapes/deep/leaf.py")]


def test_an_entry_planted_in_the_users_store_runs_as_a_planted_record_would(
        shapes: HubRepo, tmp_path: Path) -> None:
    """The store is the user's own, as the consent records beside it: whoever can write
    it (this user) could as well record consent for any repo, or edit the user's
    site-packages. docs/threat-model.md says so; this shows what such a write does."""
    fresh(tmp_path)
    entry = entry_of("shapes/deep/leaf.py")
    planted = compile("VALUE = 'planted'\n", str(tree() / "shapes/deep/leaf.py"), "exec")
    (entry.parent / "planted").write_bytes(marshal.dumps(planted))
    os.replace(entry.parent / "planted", entry)
    assert fresh(tmp_path)["result"]["value"] == "planted"


@needs_landlock
def test_a_confined_job_cannot_write_the_store_and_still_loads(
        shapes: HubRepo, tmp_path: Path) -> None:
    fresh(tmp_path)  # cached and verified; the store filled
    store().clear()
    target = str(store().root / ("0" * 64))
    job = fresh(tmp_path, confine=True, write=target)
    assert job.get("result", {}).get("value") == EXPECTED, job
    assert len(job["compiled"]) == len(MODULES)  # compiled, as without a store
    assert job["write"] == "refused: PermissionError"
    assert list(store().root.iterdir()) == []  # nothing the job compiled was kept
    assert fresh(tmp_path)["served"] == []  # the next run compiles, and keeps it
    assert fresh(tmp_path)["compiled"] == []


def test_cache_clear_empties_the_store_too(shapes: HubRepo, tmp_path: Path) -> None:
    from safehub._cli import main

    fresh(tmp_path)
    assert len(list(store().root.iterdir())) == len(MODULES)
    commit = tree().parent.name
    assert main(["cache", "clear", commit[:8]]) == 0
    assert list(store().root.iterdir()) == []
    assert fresh(tmp_path)["result"]["value"] == EXPECTED  # fetched, compiled, kept again
    assert len(list(store().root.iterdir())) == len(MODULES)
    assert main(["cache", "clear", "--yes"]) == 0
    assert list(store().root.iterdir()) == []


def test_the_store_is_one_of_the_users_own_places(tmp_path: Path) -> None:
    """What a confined job may never change and what safehub's own work may write during a
    load are read from one list (``Settings.own_places``): the store is in it."""
    from safehub._internal.fsutil import within_any

    settings = Settings(cache_dir=tmp_path / "c", data_dir=tmp_path / "d", log_dir=tmp_path / "l")
    kept = str(BytecodeStore(settings.data_dir).root)
    assert within_any(kept, [str(p.path) for p in settings.own_places()])
    assert not within_any(kept, [str(settings.cache_dir)])


def test_torch_hub_imports_a_hubconf_outside_every_tree_as_it_always_did(
        shapes: HubRepo, tmp_path: Path) -> None:
    """Routing torch.hub's ``_import_module`` changes nothing for a folder no load served:
    the program's own ``torch.hub.load(source="local")`` is compiled by Python as before,
    and nothing of it reaches the store."""
    import torch.hub

    from safehub.run import torchhub

    fresh(tmp_path)  # the store in use
    before = sorted(p.name for p in store().root.iterdir())
    torchhub.original("load")  # routed
    local = tmp_path / "mine"
    local.mkdir()
    (local / "hubconf.py").write_text("dependencies = []\n\n\ndef mine():\n    return 'mine'\n")
    assert torch.hub.load(str(local), "mine", source="local") == "mine"
    assert sorted(p.name for p in store().root.iterdir()) == before


def test_routing_survives_safehub_imported_afresh(tmp_path: Path) -> None:
    """torch.hub's functions are routed once per process; where safehub's modules are
    imported again (``importlib.reload``, a program forgetting modules), the new routing
    still knows torch's own code (not a copy of its trampoline, which would dispatch back
    to itself for ever)."""
    local = tmp_path / "mine"
    local.mkdir()
    (local / "hubconf.py").write_text("dependencies = []\n\n\ndef mine():\n    return 'mine'\n")
    program = (
        "import sys, torch.hub\n"
        "from safehub.run import torchhub\n"
        "torchhub.original('load')\n"
        "for name in [m for m in sys.modules if m.startswith('safehub')]:\n"
        "    del sys.modules[name]\n"
        "from safehub.run import torchhub as again\n"
        "assert again is not torchhub\n"
        "print(torch.hub.load(sys.argv[1], 'mine', source='local'),\n"
        "      again.original('load').__code__.co_filename.endswith('hub.py'),\n"
        "      again.original('_import_module').__code__.co_filename.endswith('hub.py'))\n")
    done = subprocess.run([sys.executable, "-c", program, str(local)], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.stdout.split() == ["mine", "True", "True"], done.stderr[-2000:]
