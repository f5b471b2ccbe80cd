"""Shared parts of the runtime tests: a repo tree, a temp dir, torch's hub dir and a
folder outside all three; a listening socket; code run under a guard as a careless repo
runs it (swallowing whatever it raises)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from safehub.errors import RuntimeGuardError
from safehub.run.runtime import RuntimeGuard, RuntimeReport, RuntimeRules

REPO = "acme/models"


@dataclass
class Place:
    tree: Path
    tmp: Path
    hub: Path
    outside: Path


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A repo tree, a temp dir, torch's hub dir, and a folder outside all three."""
    tree, tmp, outside = tmp_path / "tree", tmp_path / "tmp", tmp_path / "outside"
    for p in (tree, tmp, outside):
        p.mkdir()
    (tree / "hubconf.py").write_text("dependencies = []\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delitem(sys.modules, "torch.hub", raising=False)  # hub dir from TORCH_HOME
    return Place(tree, tmp, tmp_path / "torch" / "hub", outside)


@pytest.fixture
def port() -> Iterator[int]:
    """A listening TCP socket on 127.0.0.1 (the kernel completes connects to it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield server.getsockname()[1]


def attempt(action: Callable[[], Any]) -> BaseException | None:
    """Run ``action`` as a careless repo would: swallow whatever it raises."""
    try:
        action()
    except BaseException as e:  # a bare except in the repo's code
        return e
    return None


def guarded(place: Place, code: Callable[[], Any], mode: str = "observe",
            **keys: Any) -> tuple[RuntimeReport, RuntimeGuardError | None]:
    """Run ``code`` under a guard; return the report and the error the load ends with."""
    guard = RuntimeGuard(RuntimeRules(mode=mode, **keys), repo=REPO, tree=place.tree)  # type: ignore[arg-type]
    try:
        with guard.active():
            code()
    except RuntimeGuardError as e:
        return guard.report, e
    return guard.report, None


def connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=5).close()


def raw_connect(host: str, port: int) -> None:
    with socket.socket() as s:
        s.settimeout(5)
        s.connect((host, port))


def python(code: str = "pass") -> None:
    subprocess.run([sys.executable, "-c", code], check=True)
