"""Real hubconf.py files run by torch's own local loader under the guard, as safehub will
run them: a well-behaved repo loads under ``enforce``; a repo that installs packages,
writes outside its folder or phones home from a thread fails, even when it swallows the
refusals; a nested ``torch.hub.load`` gets its own repo's rules.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest

from safehub.errors import RuntimeGuardError
from safehub.run.runtime import RuntimeGuard, RuntimeReport, RuntimeRules

torch = pytest.importorskip("torch")

WELL_BEHAVED = '''\
import os
from mypkg.layers import make  # the repo's own package, found through sys.path

dependencies = ["torch"]
with open(os.path.join(os.path.dirname(__file__), "cache.txt"), "w") as f:
    f.write("written inside the tree")


def model(n=2):
    """A tiny model."""
    return make(n)
'''

LAYERS = '''\
import torch


def make(n):
    return torch.nn.Linear(n, n)
'''

GREEDY = '''\
import os
import subprocess
import sys
import threading

dependencies = []
OUTSIDE = {outside!r}
PORT = {port}

try:  # like yolov5's check_requirements (here a harmless stand-in for pip)
    subprocess.check_output(f"{{sys.executable}} -c pass pip install ultralytics", shell=True)
except:  # noqa: E722
    pass
try:
    with open(os.path.join(OUTSIDE, "bashrc"), "a") as f:
        f.write("export PATH=/tmp/evil:$PATH\\n")
except:  # noqa: E722
    pass


def model():
    """Phones home from a thread."""
    import socket

    def phone():
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
        except:  # noqa: E722
            pass

    t = threading.Thread(target=phone)
    t.start()
    t.join()
    return "model"
'''



@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path


def repo(root: Path, name: str, files: dict[str, str]) -> Path:
    tree = root / name
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    return tree


def load(tree: Path, model: str, rules: RuntimeRules,
         repo_name: str = "acme/models") -> tuple[RuntimeReport, Any, RuntimeGuardError | None]:
    guard = RuntimeGuard(rules, repo=repo_name, tree=tree)
    try:
        with guard.active():
            result = torch.hub.load(str(tree), model, source="local", trust_repo=True)
    except RuntimeGuardError as e:
        return guard.report, None, e
    return guard.report, result, None


@pytest.mark.usefixtures("clean_modules")
def test_a_well_behaved_repo_loads_under_enforce(place: Path) -> None:
    tree = repo(place, "good", {"hubconf.py": WELL_BEHAVED, "mypkg/__init__.py": "",
                                "mypkg/layers.py": LAYERS})
    report, model, error = load(tree, "model", RuntimeRules(mode="enforce"))
    assert error is None and isinstance(model, torch.nn.Linear)
    assert (tree / "cache.txt").exists()
    assert report.refused == [] and report.writes == [] and report.programs == []
    assert report.shadowing == [] and report.leftovers == ["mypkg", "mypkg.layers"]


@pytest.mark.usefixtures("clean_modules")
def test_a_greedy_repo_fails_although_it_swallows_every_refusal(place: Path) -> None:
    outside = place / "victim"
    outside.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        tree = repo(place, "greedy", {"hubconf.py": GREEDY.format(
            outside=str(outside), port=server.getsockname()[1])})
        report, model, error = load(tree, "model", RuntimeRules(mode="enforce"))
    assert model is None and error is not None
    assert error.action == "process" and "pip install" in error.message
    assert [e.action for e in report.refused] == ["process", "write", "network"]
    assert not (outside / "bashrc").exists()
    assert report.programs and "pip install" in report.programs[0]
    # observe without keys: everything is recorded, nothing refused
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        tree2 = repo(place, "greedy2", {"hubconf.py": GREEDY.format(
            outside=str(outside), port=server.getsockname()[1])})
        report2, model2, error2 = load(tree2, "model", RuntimeRules(mode="observe"))
        port = server.getsockname()[1]
    assert error2 is None and model2 == "model"
    assert (outside / "bashrc").exists()
    assert report2.writes == [str((outside / "bashrc").resolve())]
    assert report2.hosts == [f"127.0.0.1:{port}"]


@pytest.mark.usefixtures("clean_modules")
def test_a_nested_load_gets_its_own_rules(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = place / "outside"
    outside.mkdir()
    inner = repo(place, "inner", {"hubconf.py": (
        "dependencies = []\n"
        f"def model():\n    open({str(outside / 'inner.txt')!r}, 'w').close()\n"
        "    return 'inner'\n")})
    outer = repo(place, "outer", {"hubconf.py": (
        "import torch\n"
        "dependencies = []\n"
        "def model():\n"
        f"    inner = torch.hub.load({str(inner)!r}, 'model', source='local', trust_repo=True)\n"
        f"    open({str(outside / 'outer.txt')!r}, 'w').close()\n"
        "    return ('outer', inner)\n")})
    plain_load = torch.hub.load
    rules = {str(inner): RuntimeRules(mode="enforce", writes=(str(outside),)),
             str(outer): RuntimeRules(mode="enforce")}
    reports: dict[str, RuntimeReport] = {}

    def routed(repo_or_dir: str, model: str, *args: Any, **kwargs: Any) -> Any:
        """What safehub.install() does: every torch.hub.load goes through a guard."""
        guard = RuntimeGuard(rules[repo_or_dir], repo=Path(repo_or_dir).name,
                             tree=Path(repo_or_dir))
        reports[guard.repo] = guard.report
        with guard.active():
            return plain_load(repo_or_dir, model, *args, **kwargs)

    monkeypatch.setattr(torch.hub, "load", routed)
    with pytest.raises(RuntimeGuardError) as info:
        torch.hub.load(str(outer), "model", source="local", trust_repo=True)
    assert (outside / "inner.txt").exists()       # the inner repo's writes key allows it
    assert not (outside / "outer.txt").exists()   # the outer repo has none
    assert info.value.repo == "outer"
    assert reports["inner"].refused == []
    assert str((outside / "inner.txt").resolve()) in reports["outer"].writes
