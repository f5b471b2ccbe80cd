"""Signatures published as release assets, fetched as GitHub serves them (issue 10, item 5).

Since 2025 ``github.com/{owner}/{repo}/releases/download/{tag}/{asset}`` answers 302 to a
signed, expiring URL on ``release-assets.githubusercontent.com``. The stand-in does the same
(its ``release_assets`` host); these tests load a repo whose ``model.sig`` is a release asset,
signed with a key made in the test, through that redirect, and show that the redirect is
followed only to hosts safehub allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.config import Settings
from safehub.errors import FetchError, SignatureError
from safehub.store.lockfile import Lockfile
from safehub.verify.signatures import sign_directory
from tests.conftest import HUBCONF, runs
from tests.support import GitHubStandIn, Reply, git, make_repo
from tests.test_signatures import new_key
from tests.test_signed_load import policy

GITHUB_HOSTS = {"codeload.github.com", "objects.githubusercontent.com",
                "release-assets.githubusercontent.com"}


class Released:
    """``Acme/Released`` at tag v2.0, its model.sig published as a release asset only."""

    def __init__(self, root: Path, server: GitHubStandIn) -> None:
        self.path = root / "repos/Acme/Released"
        self.sha = make_repo(self.path, {"hubconf.py": HUBCONF, "pkg/__init__.py": "",
                                         "README.md": "# released\n"})
        git(self.path, "tag", "v2.0")
        server.add_repo("Acme", "Released", self.path)
        self.key, self.pub = root / "release.pem", root / "release.pub"
        self.pub.write_bytes(new_key(self.key))
        self.bundle = sign_directory(self.path, self.key, out=root / "model.sig").read_bytes()
        self.url = server.add_release_asset("Acme", "Released", "v2.0", "model.sig",
                                            self.bundle)

    def rule(self, signature: str = "required", where: str = "release:model.sig") -> str:
        return (f"[[allow]]\nrepo = 'acme/*'\nsignature = '{signature}'\n"
                f"keys = ['{self.pub}']\nsignature_url = '{where}'\n")


@pytest.fixture
def released(server: GitHubStandIn, tmp_path: Path) -> Released:
    return Released(tmp_path, server)


def hops(server: GitHubStandIn) -> list[tuple[str, str]]:
    """(role, path without query) of each request for the signature, in order."""
    return [(r.role, r.path.split("?")[0]) for r in server.requests_log
            if "/releases/" in r.path or r.role in ("release_assets", "foreign")]


def test_release_asset_signature_through_githubs_redirect(
    released: Released, server: GitHubStandIn, isolated: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy(isolated, released.rule())
    monkeypatch.setenv("CI", "true")  # the policy's allow rule is the consent
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_not_for_asset_hosts")
    server.clear_log()
    assert safehub.load("acme/released:v2.0", "echo") == ((), {})
    assert runs(canary) == 1
    web, asset = hops(server)
    assert web == ("web", "/web/acme/released/releases/download/v2.0/model.sig")
    assert asset[0] == "release_assets"
    assert asset[1].startswith("/github-production-release-asset/")
    sent = {r.role: r.authorization for r in server.requests_log}
    assert sent["release_assets"] is None and sent["web"] is None  # the token: API only
    audit = (isolated / "state/safehub/log/audit.jsonl").read_text()
    assert f'"signature": "verified (key {released.pub})"' in audit
    # Warm: the verdict for (commit, digest, policy) is recorded; nothing is fetched.
    server.clear_log()
    assert safehub.load("acme/released:v2.0", "echo") == ((), {})
    assert server.requests_log == [] and runs(canary) == 2
    # lock and verify find it where loads do, and the lockfile names the signer.
    assert main(["lock", "acme/released:v2.0"]) == 0
    entry = Lockfile.load(Path.cwd() / "safehub.lock").entries["acme/released:v2.0"]
    assert (entry.signer, entry.repo) == (f"key {released.pub}", "Acme/Released")
    server.clear_log()
    assert main(["verify", "acme/released:v2.0"]) == 0
    assert [role for role, _ in hops(server)] == ["web", "release_assets"]
    assert server.server_errors == []


def test_a_locked_load_in_a_fresh_cache_fetches_the_asset_by_githubs_spelling(
    released: Released, server: GitHubStandIn, isolated: Path, tmp_path: Path,
    canary: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy(isolated, released.rule())
    assert main(["lock", "ACME/released:v2.0"]) == 0
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "node-data"))  # no verdicts yet
    server.clear_log()
    assert safehub.load("acme/released:v2.0", "echo", trust_repo=True) == ((), {})
    assert hops(server)[0] == ("web", "/web/Acme/Released/releases/download/v2.0/model.sig")
    assert server.count(server.api_url) == 0 and runs(canary) == 1


@pytest.mark.parametrize("signature", ["required", "if-present"])
@pytest.mark.parametrize("hop", ["web", "release_assets"])
def test_an_asset_redirected_to_a_host_not_allowed_is_refused(
    released: Released, server: GitHubStandIn, isolated: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch, signature: str, hop: str,
) -> None:
    """The same valid bundle, offered from a host that is not allowed: refused at that hop
    (never treated as "no signature", which ``if-present`` would accept), nothing runs."""
    server.add_static("/elsewhere/model.sig", released.bundle)
    server.intercept(lambda r: r.role == hop and ("/releases/download/" in r.path
                                                  or r.role == "release_assets"),
                     Reply.redirect(f"{server.foreign_url}/elsewhere/model.sig"))
    policy(isolated, released.rule(signature))
    with pytest.raises(FetchError, match=r"refused to fetch signature from '127\.0\.0\.5', "
                       r"which is not an allowed host") as err:
        safehub.load("acme/released:v2.0", "echo", trust_repo=True)
    assert not isinstance(err.value, SignatureError)
    assert "SAFEHUB_ALLOWED_HOSTS" in (err.value.hint or "")
    assert runs(canary) == 0
    assert [role for role, _ in hops(server)][-1] != "foreign"  # never connected to it
    # The fix the hint names works: the host, once allowed, serves the same bundle.
    monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS",
                       ",".join((*server.redirect_hosts, server.host("foreign"))))
    assert safehub.load("acme/released:v2.0", "echo", trust_repo=True) == ((), {})
    assert hops(server)[-1] == ("foreign", "/elsewhere/model.sig") and runs(canary) == 1


def test_without_the_release_assets_host_githubs_redirect_is_refused(
    released: Released, server: GitHubStandIn, isolated: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What safehub did on real GitHub before it allowed release-assets.githubusercontent.com
    (only objects.githubusercontent.com): the redirect GitHub now sends is refused."""
    monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS", server.host("codeload"))
    policy(isolated, released.rule())
    with pytest.raises(FetchError, match="127.0.0.4.*not an allowed host"):
        safehub.load("acme/released:v2.0", "echo", trust_repo=True)
    assert runs(canary) == 0


def test_an_expired_or_forged_asset_url_is_a_fetch_error_not_a_missing_signature(
    released: Released, server: GitHubStandIn, isolated: Path, canary: Path,
) -> None:
    """The asset host answers 403 (an XML error) to a URL whose signature does not match:
    safehub reports it, and ``if-present`` does not load the repo as if unsigned."""
    def forged(record):  # type: ignore[no-untyped-def]
        reply = server.route(record)
        location = dict(reply.headers)["Location"]
        return Reply.redirect(location.replace("sig=", "sig=0"))

    server.intercept(lambda r: r.role == "web" and "/releases/download/" in r.path, forged)
    policy(isolated, released.rule("if-present"))
    with pytest.raises(FetchError, match="403") as err:
        safehub.load("acme/released:v2.0", "echo", trust_repo=True)
    assert not isinstance(err.value, SignatureError)
    assert runs(canary) == 0


def test_a_missing_asset_follows_the_policy(released: Released, server: GitHubStandIn,
                                            isolated: Path, canary: Path) -> None:
    policy(isolated, released.rule("required", "release:other.sig"))
    with pytest.raises(SignatureError, match=r"has no signature \(release:other.sig\)"):
        safehub.load("acme/released:v2.0", "echo", trust_repo=True)
    assert runs(canary) == 0
    policy(isolated, released.rule("if-present", "release:other.sig"))
    assert safehub.load("acme/released:v2.0", "echo", trust_repo=True) == ((), {})


def test_github_com_allows_the_hosts_github_redirects_to() -> None:
    on_github = Settings.from_env({})
    assert on_github.allowed_hosts == {"api.github.com", "github.com", *GITHUB_HOSTS}
    enterprise = Settings.from_env({"SAFEHUB_GITHUB_URL": "https://ghe.example.com",
                                    "SAFEHUB_GITHUB_API_URL": "https://ghe.example.com/api/v3"})
    assert enterprise.allowed_hosts == {"ghe.example.com"}
    mirror = Settings.from_env({"SAFEHUB_GITHUB_URL": "https://mirror.example.com/gh"})
    assert mirror.allowed_hosts == {"api.github.com", "mirror.example.com"}
    extra = Settings.from_env({"SAFEHUB_ALLOWED_HOSTS": " Assets.Example.com ,"})
    assert extra.allowed_hosts == {"api.github.com", "github.com", *GITHUB_HOSTS,
                                   "assets.example.com"}
