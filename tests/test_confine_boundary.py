"""Nothing a confined job writes is trusted by a later run: under ``safehub run --confine``
the cache, every record, the policy files, the lockfile, torch's checkpoint folder and the
audit log are read-only to the job; a cache miss is fetched by ``safehub run`` itself (the
broker), and the job's audit lines reach the log through it. Grants are opened without
following links, and a grant that holds what a later run trusts is refused.

On real parts: the machine's kernel (Landlock), the loopback stand-in, real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from safehub.config import Settings
from safehub.errors import ConfineError
from safehub.policy import Policy
from safehub.policy.schema import parse_text
from safehub.run.confine.plan import plan
from tests.conftest import HUBCONF, needs_torch
from tests.test_confine import job, listener, needs_landlock  # noqa: F401 - fixtures
from tests.test_weights import weights  # noqa: F401 - the fixture

TAMPER = '''import json, os, sys
from pathlib import Path
results = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write("tampered = True\\n")
        results[name] = "written"
    except OSError as e:
        results[name] = f"refused: {type(e).__name__}: errno {e.errno}"
print("RESULTS " + json.dumps(results))
'''

LOAD = '''import json, sys, torch
out = {}
for spec in sys.argv[1:]:
    try:
        out[spec] = type(torch.hub.load(spec, "tiny", verbose=False)).__name__
    except Exception as e:
        out[spec] = f"refused: {type(e).__name__}: {e}"
print("RESULTS " + json.dumps(out))
'''


def _policy(isolated: Path, text: str) -> Path:
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(text)
    return policy


def _run(tmp_path: Path, program: str, *args: str, confine: bool = True
         ) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    script = tmp_path / "job.py"
    script.write_text(program)
    env = {**os.environ, "CI": "true", "SAFEHUB_TEST_CANARY": os.devnull}
    done = subprocess.run(
        [sys.executable, "-m", "safehub", "run", *(["--confine"] if confine else []), "--",
         sys.executable, str(script), *args],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, (done.stdout, done.stderr)
    return json.loads(line[len("RESULTS "):]), done


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_a_confined_job_changes_nothing_a_later_run_trusts(
        make_hub_repo: Any, server: Any, isolated: Path, tmp_path: Path) -> None:
    import safehub

    make_hub_repo("acme", "models", {"hubconf.py": HUBCONF})
    _policy(isolated, f'[[allow]]\nrepo = "acme/models"\n[confine]\n'
                      f'connect_ports = [{server.port}]\n')
    safehub.load("acme/models:v1.0", "tiny", verbose=False)  # cached, verified, pinned
    settings = Settings.from_env()
    commit_dir = next((settings.cache_dir / "v1" / "commits").iterdir())
    hubconf = commit_dir / "tree" / "hubconf.py"
    record = next((settings.data_dir / "verified").iterdir())
    before = {p: p.read_bytes() for p in (hubconf, record)}
    targets = {
        "cached hubconf": str(hubconf),
        "a new cache entry": str(settings.cache_dir / "v1" / "commits" / ("f" * 40) / "x"),
        "the verified record": str(record),
        "a consent": str(settings.data_dir / "trust" / "acme" / "models.json"),
        "a weights pin": str(settings.data_dir / "weights" / "pins.json"),
        "the project policy": str(Path.cwd() / "safehub.toml"),
        "the lockfile": str(Path.cwd() / "safehub.lock"),
        "the user policy": str(isolated / "config" / "safehub" / "policy.toml"),
        "the audit log": str(settings.log_dir / "audit.jsonl"),
        "torch's checkpoints": str(isolated / "cache" / "torch" / "hub" / "checkpoints" / "x.pt"),
    }
    results, done = _run(tmp_path, TAMPER, json.dumps(targets))
    assert done.returncode == 0, done.stderr
    assert all(r.startswith("refused: PermissionError") for r in results.values()), results
    assert {p: p.read_bytes() for p in before} == before
    assert not (Path.cwd() / "safehub.toml").exists()
    # Without confinement the same job could: the kernel, not the job's manners, held it.
    free = {"the project policy": targets["the project policy"]}
    assert _run(tmp_path, TAMPER, json.dumps(free), confine=False)[0] == {
        "the project policy": "written"}


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_a_confined_job_loads_what_safehub_run_fetches_for_it(
        make_hub_repo: Any, server: Any, isolated: Path, tmp_path: Path) -> None:
    """The honest job: a load that misses the read-only cache is fetched and verified by
    ``safehub run`` outside the sandbox; the job's audit lines reach the real log."""
    make_hub_repo("acme", "models", {"hubconf.py": HUBCONF})
    _policy(isolated, f'[[allow]]\nrepo = "acme/models"\n[confine]\n'
                      f'connect_ports = [{server.port}]\n')
    results, done = _run(tmp_path, LOAD, "acme/models:v1.0")
    assert results == {"acme/models:v1.0": "Linear"}, done.stderr
    settings = Settings.from_env()
    assert list((settings.cache_dir / "v1" / "commits").iterdir())  # fetched by the parent
    lines = [json.loads(x) for x in (settings.log_dir / "audit.jsonl").read_text().splitlines()]
    loads = [x for x in lines if x.get("decision") == "allow"]
    assert loads and all(x.get("confined_job") is True for x in loads), lines
    # A denied repo stays denied: the parent applies its own policy to the job's request.
    make_hub_repo("evil", "models", {"hubconf.py": HUBCONF})
    _policy(isolated, f'[safehub]\nunknown_repos = "deny"\n[[allow]]\nrepo = "acme/models"\n'
                      f'[confine]\nconnect_ports = [{server.port}]\n')
    results, _ = _run(tmp_path, LOAD, "evil/models:v1.0")
    assert results["evil/models:v1.0"].startswith("refused: PolicyDenied"), results


# -- the plan: grants that cannot move, and none that holds what a later run trusts ---------

def _plan(*texts: str, command: str = sys.executable) -> Any:
    policy = Policy.from_files([parse_text(t, f"/f{i}.toml") for i, t in enumerate(texts)])
    return plan(policy, Settings.from_env(policy=policy), [command], abi=7)


@pytest.mark.parametrize(("folder", "what"), [
    ("home", "holds"),                       # the cache, records, user policy, audit log
    ("work", "holds"),                       # the project's safehub.toml and safehub.lock
    ("cache/safehub/v1", "lies inside"),     # inside the cache
    ("cache/torch", "holds"),                # torch's checkpoint folder
])
def test_a_write_grant_that_holds_what_a_later_run_trusts_is_refused(
        isolated: Path, folder: str, what: str) -> None:
    target = {"home": isolated, "work": Path.cwd()}.get(folder, isolated / folder)
    target.mkdir(parents=True, exist_ok=True)
    with pytest.raises(ConfineError, match=what) as info:
        _plan(f'[confine]\nwrites = ["{target}"]\n')
    assert "fix:" in str(info.value)


def test_the_cache_beneath_a_moved_torch_hub_dir_is_never_granted(
        isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With TORCH_HOME moved, safehub's cache lies inside torch's hub dir: neither is
    writable to the job, so replacing the cache with a link grants nothing next time."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    ruleset = _plan("")
    cache = str(tmp_path / "torch-home" / "hub" / "safehub")
    assert cache in [g.path for g in ruleset.protected]
    assert not any(cache.startswith(g.path) for g in ruleset.writes)
    with pytest.raises(ConfineError, match="holds"):
        _plan(f'[confine]\nwrites = ["{tmp_path / "torch-home"}"]\n')


def test_a_grant_through_a_link_is_refused_and_a_nested_grant_adds_nothing(
        isolated: Path, tmp_path: Path) -> None:
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs-link").symlink_to(tmp_path / "runs")
    with pytest.raises(ConfineError, match="symbolic link") as info:
        _plan(f'[confine]\nwrites = ["{tmp_path / "runs-link"}"]\n')
    assert str(tmp_path / "runs") in str(info.value)  # the fix names the real folder
    ruleset = _plan(f'[confine]\nwrites = ["{tmp_path / "runs"}", "{tmp_path / "runs" / "a"}"]\n')
    assert [g.path for g in ruleset.writes if "[confine]" in g.why] == [str(tmp_path / "runs")]


def test_a_listed_program_the_job_could_replace_is_refused(isolated: Path,
                                                           tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    tool = tools / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    with pytest.raises(ConfineError, match="replace"):
        _plan(f'[confine]\nwrites = ["{tools}"]\nexec = ["{tool}"]\n')


def test_the_job_gets_its_own_temp_dir_not_the_shared_one(isolated: Path) -> None:
    import tempfile

    ruleset = _plan("")
    granted = [g.path for g in ruleset.writes]
    assert tempfile.gettempdir() not in granted and ruleset.job in granted
    assert "read-only to the job" in ruleset.text()


WEIGHTS_JOB = '''import json, sys, torch
try:
    out = sorted(torch.hub.load("acme/weighted:v1.0", "weighted", sys.argv[1], verbose=False))
except Exception as e:
    out = f"refused: {type(e).__name__}: {e}"
print("RESULTS " + json.dumps({"load": out}))
'''


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_weights_are_downloaded_outside_the_job_and_read_inside_it(
        weights: str, server: Any, isolated: Path, tmp_path: Path) -> None:  # noqa: F811
    """torch's checkpoint folder is read-only to the job (a later run pins what it finds
    there): a download into it is refused by name, with the fix; once the model was loaded
    outside, the job reads the pinned file."""
    import safehub

    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.write_text(policy.read_text() + f"[confine]\nconnect_ports = [{server.port}]\n")
    results, done = _run(tmp_path, WEIGHTS_JOB, weights)
    assert results["load"].startswith("refused: ConfineError"), (results, done.stderr)
    assert "read-only inside `safehub run --confine`" in results["load"]
    assert "safehub load SPEC ENTRYPOINT" in results["load"]
    assert not (isolated / "cache" / "torch" / "hub" / "checkpoints" / "w.pth").exists()
    safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)  # the fix
    assert _run(tmp_path, WEIGHTS_JOB, weights)[0] == {"load": ["w"]}


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_a_refused_metadata_change_is_named_in_the_loads_record(
        job: dict[str, Any], isolated: Path) -> None:  # noqa: F811
    """seccomp refuses chmod everywhere (it cannot see paths): the job sees EPERM, and the
    record of the load says that confinement refused it and which engine."""
    from tests.test_confine import run as run_job

    job["checkpoints"].mkdir()
    target = job["checkpoints"] / "model.pt"
    target.write_bytes(b"x")
    target.chmod(0o600)
    results, done = run_job(job, [("chmod", [str(target)])], "--confine")
    assert results["chmod"].startswith("refused: PermissionError: [Errno 1]"), done.stderr
    assert target.stat().st_mode & 0o777 == 0o600
    lines = [json.loads(x) for x in (isolated / "state" / "safehub" / "log" / "audit.jsonl")
             .read_text().splitlines()]
    kernel = [k for x in lines if "runtime" in x for k in x["runtime"]["kernel"]]
    assert any("os.chmod" in k and "seccomp" in k and "--confine" in k for k in kernel), kernel
