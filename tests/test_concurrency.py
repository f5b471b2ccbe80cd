"""Many processes cold-loading the same repo at once: all succeed, one download.

The 16-process check runs without torch (each child fetches, verifies and installs as a
load does, then records consent; importing torch 16 times on 2 cores is what made it
slow); the loads themselves, hubconf run in each process, are checked with 4 processes,
and with 16 in the slow set (``pytest -m slow``, which CI runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HubRepo, child_pythonpath, needs_torch, runs
from tests.support import GitHubStandIn

CHILD = """
import sys
import torch  # import before the barrier so that the loads themselves overlap
import safehub
print("ready", flush=True)
sys.stdin.readline()
model = safehub.load(sys.argv[1], "tiny", trust_repo=True, verbose=False)
print("ok", type(model).__name__, flush=True)
"""


#: As a load, up to the code: resolve, fetch, verify, install under the lock (no torch).
CHILD_NO_TORCH = """
import sys
import safehub
from safehub.hub import Hub
print("ready", flush=True)
sys.stdin.readline()
prepared = Hub().trust(sys.argv[1])
assert "torch" not in sys.modules
print("ok", prepared.tree.digest, flush=True)
"""


def run_at_once(n: int, spec: str, cwd: Path, child: str = CHILD
                ) -> list[tuple[int, str, str]]:
    """Start n loaders, wait until each is ready, release them together (no sleeps)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", child, spec], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                         env={**os.environ, "PYTHONPATH": child_pythonpath()})
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        results.append((p.returncode, out, err))
    return results


def test_16_processes_fetch_verify_and_install_with_one_download(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path, tmp_path: Path
) -> None:
    results = run_at_once(16, f"{hub_repo.spec}:v1.0", tmp_path, CHILD_NO_TORCH)
    failures = [err for code, _, err in results if code != 0]
    assert not failures, failures[0]
    assert len({out.strip() for _, out, _ in results}) == 1  # one digest for all 16
    archive_downloads = [r for r in server.requests_log if "/legacy.zip/" in r.path]
    assert len(archive_downloads) == 1
    assert server.count(server.api_url) == 2  # the tag was resolved once for all 16
    assert runs(canary) == 0  # trusting runs nothing


def check_loads(n: int, hub_repo: HubRepo, server: GitHubStandIn, canary: Path,
                tmp_path: Path) -> None:
    results = run_at_once(n, f"{hub_repo.spec}:v1.0", tmp_path)
    failures = [err for code, _, err in results if code != 0]
    assert not failures, failures[0]
    assert all(out.strip().endswith("ok Linear") for _, out, _ in results)
    archive_downloads = [r for r in server.requests_log if "/legacy.zip/" in r.path]
    assert len(archive_downloads) == 1
    assert server.count(server.api_url) == 2  # the tag was resolved once for all
    assert runs(canary) == n


@pytest.mark.slow
@needs_torch
def test_4_processes_cold_load_with_one_download(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path, tmp_path: Path
) -> None:
    check_loads(4, hub_repo, server, canary, tmp_path)


@needs_torch
@pytest.mark.slow
def test_16_processes_cold_load_with_one_download(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path, tmp_path: Path
) -> None:
    check_loads(16, hub_repo, server, canary, tmp_path)
