"""The drop-in contract: same signatures as torch.hub, cheap import, every error type a
SafehubError exported from the package root, install()/uninstall()."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import safehub
from tests.conftest import HubRepo, runs

torch = pytest.importorskip("torch")

DROP_IN = ["load", "list", "help", "get_dir", "set_dir", "download_url_to_file",
           "load_state_dict_from_url"]


@pytest.mark.parametrize("name", DROP_IN)
def test_signatures_match_installed_torch_hub(name: str) -> None:
    ours = inspect.signature(getattr(safehub, name))
    theirs = inspect.signature(getattr(torch.hub, name))
    shape = [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == shape
    for p in theirs.parameters.values():
        if p.annotation is not inspect.Parameter.empty and name != "load_state_dict_from_url":
            assert ours.parameters[p.name].annotation is not inspect.Parameter.empty


def test_import_is_cheap() -> None:
    code = ("import sys, safehub; bad = [m for m in ('torch', 'requests', 'sigstore', "
            "'pydantic', 'model_signing') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_error_is_a_safehub_error() -> None:
    for name in safehub.__all__:
        obj = getattr(safehub, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, safehub.SafehubError)


@pytest.mark.parametrize("name", ["TamperedError", "RepoMovedError", "OfflineError"])
def test_error_types_are_exported(name: str) -> None:
    from safehub import errors

    assert name in safehub.__all__ and getattr(safehub, name) is getattr(errors, name)


def test_get_dir_and_set_dir_are_torchs(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.hub, "_hub_dir", torch.hub._hub_dir)  # restored afterwards
    safehub.set_dir(tmp_path / "hub")
    assert safehub.get_dir() == torch.hub.get_dir() == str(tmp_path / "hub")


def test_the_code_cache_follows_torchs_hub_dir_where_the_user_moved_it(
        hub_repo: HubRepo, tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.cli import main

    monkeypatch.setattr(torch.hub, "_hub_dir", torch.hub._hub_dir)  # restored afterwards
    default = isolated / "cache" / "safehub"
    assert safehub.Hub().settings.cache_dir == default  # torch's dir where torch puts it
    safehub.set_dir(tmp_path / "moved")
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True, verbose=False)
    ours = tmp_path / "moved" / "safehub"
    assert (ours / "v1/commits" / hub_repo.sha / "tree" / "hubconf.py").is_file()
    assert not (default / "v1/commits" / hub_repo.sha).exists()
    assert main(["cache", "ls"]) == 0
    assert "which torch.hub.set_dir() moved" in capsys.readouterr().out
    assert main(["policy", "show"]) == 0
    assert f"the cache: {ours}" in capsys.readouterr().out

    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    assert safehub.Hub().settings.cache_dir == tmp_path / "th" / "hub" / "safehub"
    assert "TORCH_HOME" in safehub.Hub().settings.cache_source
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "mine"))  # the user's own choice
    assert safehub.Hub().settings.cache_dir == tmp_path / "mine"
    assert safehub.Hub().settings.cache_source == "SAFEHUB_CACHE_DIR"


def test_install_routes_torch_hub_through_safehub(
    hub_repo: HubRepo, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    from torch.hub import load as bound_before_install  # a library's early binding

    safehub.install()
    try:
        safehub.install()  # twice is harmless
        with pytest.raises(safehub.UntrustedRepoError):
            bound_before_install(f"{hub_repo.spec}:v1.0", "tiny")  # routed all the same
        with pytest.raises(safehub.UntrustedRepoError):
            torch.hub.load(f"{hub_repo.spec}:v1.0", "tiny")  # code you do not own
        assert runs(canary) == 0
        model = torch.hub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
        assert isinstance(model, torch.nn.Linear)
        assert torch.hub.list(f"{hub_repo.spec}:v1.0") == ["echo", "tiny"]
    finally:
        safehub.uninstall()
    assert "safehub" not in repr(torch.hub.load.__wrapped__ if hasattr(
        torch.hub.load, "__wrapped__") else "")
    with pytest.raises(ValueError, match="Unknown source"):  # torch's own behaviour again
        torch.hub.load(f"{hub_repo.spec}:v1.0", "tiny", source="nowhere")


def test_dir_shows_the_api_and_nothing_else() -> None:
    import safehub

    shown = dir(safehub)
    assert shown == sorted([*safehub.__all__, "__version__"])
    for helper in ("Any", "Callable", "TYPE_CHECKING", "annotations", "builtins", "errors"):
        assert helper not in shown
    assert all(callable(getattr(safehub, name)) for name in safehub.__all__)


#: ``safehub.X`` in the docs that is not a Python name: files, an audit event, a key path.
NOT_NAMES = {"lock": "the lockfile, safehub.lock", "toml": "the project policy, safehub.toml",
             "fork_exec": "the audit event safehub.fork_exec",
             "final": "a key as an error names it (safehub.final: [safehub] final)"}


def _said_to_users() -> dict[str, str]:
    """What README.md and docs/ show users as code (code blocks and `inline` spans), per
    page; docs/architecture.md is the contributors' module map, and docs/api.md's own
    section on internals names the internal packages on purpose."""
    root = Path(__file__).parents[1]
    pages = {"README.md": (root / "README.md").read_text()}
    for path in sorted((root / "docs").glob("*.md")):
        if path.name != "architecture.md":
            pages[f"docs/{path.name}"] = path.read_text().split(
                "## Everything else is internal")[0]
    return {name: "\n".join(re.findall(r"```.*?```|`[^`\n]+`", text, re.S))
            for name, text in pages.items()}


def test_the_docs_send_users_only_to_public_names() -> None:
    """Every ``safehub.X`` the docs show as code is exported by ``safehub`` (its ``__all__``,
    docs/api.md): no page sends users into an internal submodule."""
    wrong = sorted({f"{page}: safehub.{name}" for page, code in _said_to_users().items()
                    for name in re.findall(r"(?<![\w./-])safehub\.(\w+)", code)
                    if name not in (*safehub.__all__, "__all__", *NOT_NAMES)})
    assert not wrong, f"not public (docs/api.md): {wrong}"


def test_docs_api_lists_the_public_names() -> None:
    """docs/api.md's tables name exactly ``safehub.__all__``."""
    text = (Path(__file__).parents[1] / "docs/api.md").read_text()
    listed = re.findall(r"^\| `safehub\.(\w+)` \|", text, re.M)
    assert sorted(listed) == sorted(safehub.__all__)
