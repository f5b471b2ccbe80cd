"""Shared fixtures: an isolated home, a loopback GitHub stand-in, hub repos with a canary.

No test touches the network beyond the loopback addresses of the stand-in (127.0.0.1-6), or
the user's real cache, config or data: every directory safehub, torch and git could use
points into the test's tmp_path. The stand-in itself lives in tests/support.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from safehub.policy import files as policy_files
from tests.support import GitHubStandIn, TLSFiles, commit_files, git, make_repo, make_tls

#: torch is installed (CI also runs the suite on the oldest Python the project claims, where
#: this machine has no CPU build of torch: tests that reach torch are skipped there).
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch (not installed)")


def _from_missing_torch(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "torch":
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, None]:
    """Without torch, a test that reaches torch is skipped, not failed."""
    outcome = yield
    report = outcome.get_result()
    if not HAVE_TORCH and report.failed and call.excinfo is not None and \
            _from_missing_torch(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: needs torch")


HUBCONF = '''\
import os

with open(os.environ["SAFEHUB_TEST_CANARY"], "a") as _f:
    _f.write("ran\\n")

dependencies = ["torch"]


def tiny(n=2, bias=True):
    """A tiny linear model."""
    import torch

    return torch.nn.Linear(n, n, bias=bias)


def echo(*args, **kwargs):
    """Return what it was given."""
    return args, kwargs


def _private():
    return None
'''


@dataclass
class HubRepo:
    """A git repo served by the stand-in as owner/name."""

    owner: str
    name: str
    path: Path
    sha: str

    @property
    def spec(self) -> str:
        return f"{self.owner}/{self.name}"

    def commit(self, files: dict[str, str | bytes], message: str = "change", **kw: object) -> str:
        self.sha = commit_files(self.path, files, message, **kw)  # type: ignore[arg-type]
        return self.sha

    def tag(self, name: str, ref: str = "HEAD") -> None:
        git(self.path, "tag", "-f", name, ref)

    def git(self, *args: str) -> str:
        return git(self.path, *args)


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls(tmp_path_factory.mktemp("tls"))


ROOT = Path(__file__).resolve().parents[1]
SITEHOOK = Path(__file__).resolve().parent / "sitehook"


def child_pythonpath(*more: str) -> str:
    """PYTHONPATH for a child Python: this checkout first, then the hook that keeps the
    machine's /etc/xdg/safehub out of sight (tests/sitehook), then ``more``."""
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and p not in (str(ROOT), str(SITEHOOK))]
    return os.pathsep.join([str(ROOT), str(SITEHOOK), *more, *keep])


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME, XDG dirs, torch's hub dir and safehub's cache into tmp_path."""
    for var in list(os.environ):
        if var.startswith(("SAFEHUB_", "XDG_")) or var in (
            "GITHUB_TOKEN", "CI", "REQUESTS_CA_BUNDLE", "TORCH_HOME",
        ):
            monkeypatch.delenv(var)
    home = tmp_path / "home"
    for sub in ("cache", "config", "data", "state", "site"):
        (home / sub).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(home / "site"))
    # torch's own default beneath XDG_CACHE_HOME, set so no test sees the real one; being
    # the default, it does not move safehub's cache (a TORCH_HOME elsewhere would).
    monkeypatch.setenv("TORCH_HOME", str(home / "cache" / "torch"))
    monkeypatch.setenv("SAFEHUB_BACKOFF", "0")
    # A test that forgets the stand-in must fail on loopback, never reach GitHub.
    monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", "https://127.0.0.1:9/no-stand-in")
    monkeypatch.setenv("SAFEHUB_GITHUB_URL", "https://127.0.0.1:9/no-stand-in")
    monkeypatch.setenv("SAFEHUB_TEST_CANARY", str(tmp_path / "canary"))
    # The fixed admin folder (/etc/xdg) is read whatever XDG_CONFIG_DIRS says: here and in
    # every child Python (tests/sitehook, kept by child_env()) it is a temporary folder.
    monkeypatch.setattr(policy_files, "SYSTEM_CONFIG_DIR", home / "etc-xdg")
    monkeypatch.setenv("SAFEHUB_TEST_SYSTEM_CONFIG_DIR", str(home / "etc-xdg"))
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


@pytest.fixture
def clean_modules() -> Iterator[None]:
    """Forget the modules a test imported (a repo's), and restore sys.path, so no other
    test sees them; torch's own stay (they cannot be imported twice)."""
    before, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - before:
        if not name.startswith(("torch", "_torch")):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """The file hubconf.py appends to on import: it proves whether untrusted code ran."""
    return tmp_path / "canary"


def runs(canary: Path) -> int:
    """How many times a test hubconf.py was imported."""
    return len(canary.read_text().splitlines()) if canary.exists() else 0


@pytest.fixture
def server(tls: TLSFiles, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHubStandIn]:
    # 404 for a name that is no branch or tag (GitHub answers 422) until the client
    # resolves names through git/ref instead of commits/{name}.
    with GitHubStandIn(tls) as srv:
        monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", srv.api_url)
        monkeypatch.setenv("SAFEHUB_GITHUB_URL", srv.web_url)
        # What safehub adds by itself for github.com: the codeload and release-asset hosts.
        monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS", ",".join(srv.redirect_hosts))
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(srv.ca_cert))
        yield srv


@pytest.fixture
def make_hub_repo(server: GitHubStandIn, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Create a git repo with a hubconf.py and serve it: make_hub_repo("acme", "models")."""

    def make(owner: str = "acme", name: str = "models", files: dict[str, str | bytes] | None = None,
             *, fork_of: HubRepo | None = None, tag: str | None = "v1.0") -> HubRepo:
        path = tmp_path / "repos" / owner / name
        if fork_of is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            git(tmp_path, "clone", "-q", str(fork_of.path), str(path))
            sha = git(path, "rev-parse", "HEAD")
            server.add_repo(owner, name, path, fork_of=(fork_of.owner, fork_of.name))
        else:
            content: dict[str, str | bytes] = {"hubconf.py": HUBCONF, "README.md": "# hub\n"}
            content.update(files or {})
            sha = make_repo(path, content)
            server.add_repo(owner, name, path)
        repo = HubRepo(owner, name, path, sha)
        if tag:
            repo.tag(tag)
        return repo

    return make


@pytest.fixture
def hub_repo(make_hub_repo) -> HubRepo:  # type: ignore[no-untyped-def]
    repo: HubRepo = make_hub_repo()
    return repo


# -- the stand-in's own tests (tests/test_standin*.py) ----------------------------------------


@dataclass(frozen=True)
class World:
    """An upstream repo and a fork of it, with the shas the stand-in's tests expect."""

    tls: TLSFiles
    upstream: Path
    fork: Path
    c1: str  # main~1, tag v1 (lightweight), base of feature/x and b1..b3, refs/pull/7/head
    c2: str  # main, tag v2 (annotated)
    feature: str  # feature/x
    evil: str  # only in the fork: fork's main, evil-branch, evil-tag


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("standin")
    up = root / "upstream"
    c1 = make_repo(
        up,
        {"hubconf.py": "dependencies = []\n", "README.md": "hello\n",
         "scripts/run.sh": "#!/bin/sh\necho hi\n"},
        executable=["scripts/run.sh"],
        symlinks={"link": "README.md"},
    )
    git(up, "tag", "v1")
    git(up, "checkout", "-q", "-b", "feature/x")
    feature = commit_files(up, {"feature.txt": "f\n"}, "feature work")
    git(up, "checkout", "-q", "main")
    c2 = commit_files(up, {"README.md": "hello again\n"}, "second\n\nwith a body")
    git(up, "tag", "-a", "v2", "-m", "release v2")
    for branch in ("b1", "b2", "b3"):
        git(up, "branch", branch, c1)
    git(up, "update-ref", "refs/pull/7/head", c1)  # a hidden namespace, as on GitHub
    fork = root / "fork"
    git(root, "clone", "-q", str(up), str(fork))
    evil = commit_files(fork, {"hubconf.py": "import os\n"}, "evil")
    git(fork, "branch", "evil-branch")
    git(fork, "tag", "evil-tag")
    return World(make_tls(root / "tls"), up, fork, c1, c2, feature, evil)


_SESSION = requests.Session()  # keep-alive across requests keeps the stand-in's tests fast


def fetch(gh: GitHubStandIn, url: str, **kwargs: object) -> requests.Response:
    """GET ``url`` from the stand-in ``gh``, trusting its CA (redirects followed unless told)."""
    kwargs.setdefault("timeout", 10)
    return _SESSION.get(url, verify=str(gh.ca_cert), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def gh(world: World) -> Iterator[GitHubStandIn]:
    """The stand-in serving ``Org/Vision`` (id 42) and its fork ``mallory/vision``."""
    with GitHubStandIn(world.tls) as server:
        server.add_repo("Org", "Vision", world.upstream, repo_id=42)
        server.add_repo("mallory", "vision", world.fork, fork_of=("org", "vision"))
        yield server
    assert server.server_errors == []
