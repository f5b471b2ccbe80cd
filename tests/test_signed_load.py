"""Signed hub repos end to end: a key made in the test, the loopback GitHub, real torch;
``safehub verify`` prints the rule that requires the key it verified with.

Also the weights guard: URLs outside the policy, swapped weight files, pickles (redirects
and dot segments in weights URLs: tests/test_weights.py).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import urllib.request
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import IntegrityError, PolicyDenied, SignatureError
from safehub.store.lockfile import Lockfile
from safehub.verify.signatures import sign_directory
from tests.conftest import HUBCONF, runs
from tests.helpers_load import cli
from tests.support import GitHubStandIn, commit_files, git, make_repo
from tests.test_signatures import OMS, TRUST_CONFIG, new_key

torch = pytest.importorskip("torch")

WEIGHTS_HUBCONF = HUBCONF + '''

def pretrained(name="tiny.pth", weights_only=False):
    """A tiny model with downloaded weights."""
    import torch

    model = torch.nn.Linear(2, 2)
    url = os.environ["SAFEHUB_TEST_WEIGHTS"] + name
    model.load_state_dict(torch.hub.load_state_dict_from_url(url, progress=False,
                                                             weights_only=weights_only))
    return model
'''


class Signed:
    """A hub repo signed with a key generated for the test."""

    def __init__(self, root: Path, server: GitHubStandIn, name: str = "signed") -> None:
        self.path = root / "repos" / "acme" / name
        self.key = root / f"{name}.pem"
        self.pub = root / f"{name}.pub"
        self.pub.write_bytes(new_key(self.key))
        self.spec = f"acme/{name}"
        make_repo(self.path, {"hubconf.py": WEIGHTS_HUBCONF, "README.md": "# signed\n",
                              "pkg/__init__.py": "", ".gitignore": "*.pyc\n"})
        self.sha = self.sign("signed release")
        git(self.path, "tag", "v1.0")
        server.add_repo("acme", name, self.path)

    def sign(self, message: str, key: Path | None = None) -> str:
        sign_directory(self.path, key or self.key)
        return commit_files(self.path, {}, message)


def policy(home: Path, text: str) -> Path:
    path = home / "site/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def require_key(home: Path, pub: Path, extra: str = "") -> Path:
    return policy(home, f"[[allow]]\nrepo = 'acme/*'\nsignature = 'required'\n"
                  f"keys = ['{pub}']\n{extra}")


@pytest.fixture
def signed(server: GitHubStandIn, tmp_path: Path) -> Signed:
    return Signed(tmp_path, server)


def test_signed_repo_loads_and_warm_loads_do_not_verify_again(
    signed: Signed, isolated: Path, canary: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_key(isolated, signed.pub)
    monkeypatch.setenv("CI", "true")  # the policy's allow rule is the consent
    model = safehub.load(f"{signed.spec}:v1.0", "tiny")
    assert isinstance(model, torch.nn.Linear) and runs(canary) == 1
    audit = (isolated / "state/safehub/log/audit.jsonl").read_text()
    assert f'"signature": "verified (key {signed.pub})"' in audit

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("verified again on a warm load")

    with monkeypatch.context() as patched:
        patched.setattr("safehub.verify.signatures.verify.Verifier.verify_tree", boom)
        safehub.load(f"{signed.spec}:v1.0", "tiny")
    assert runs(canary) == 2
    assert main(["lock", f"{signed.spec}:v1.0"]) == 0
    entry = Lockfile.load(Path.cwd() / "safehub.lock").entries["acme/signed:v1.0"]
    assert entry.signer == f"key {signed.pub}"
    assert main(["verify", f"{signed.spec}:v1.0"]) == 0
    assert main(["verify", str(signed.path), "--key", str(signed.pub)]) == 0
    assert "valid:" in capsys.readouterr().out


def test_tampered_file_after_signing_is_refused(signed: Signed, isolated: Path,
                                                canary: Path) -> None:
    require_key(isolated, signed.pub)
    commit_files(signed.path, {"hubconf.py": WEIGHTS_HUBCONF + "\nimport os  # sneaky\n"},
                 "unsigned change")
    git(signed.path, "tag", "v1.1")
    with pytest.raises(SignatureError, match="hubconf.py differs"):
        safehub.load(f"{signed.spec}:v1.1", "tiny", trust_repo=True)
    assert runs(canary) == 0


def test_extra_unsigned_hubconf_is_refused(server: GitHubStandIn, tmp_path: Path,
                                           isolated: Path, canary: Path) -> None:
    path = tmp_path / "repos/acme/weights-only"
    make_repo(path, {"weights.txt": "data\n"})
    key = tmp_path / "k.pem"
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(key))
    sign_directory(path, key)
    commit_files(path, {"hubconf.py": HUBCONF}, "add an unsigned hubconf.py")
    git(path, "tag", "v1.0")
    server.add_repo("acme", "weights-only", path)
    require_key(isolated, pub)
    with pytest.raises(SignatureError, match="hubconf.py is not signed"):
        safehub.load("acme/weights-only:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 0


def test_wrong_key_is_refused(signed: Signed, isolated: Path, tmp_path: Path,
                              canary: Path) -> None:
    other = tmp_path / "other.pub"
    other.write_bytes(new_key(tmp_path / "other.pem"))
    require_key(isolated, other)
    with pytest.raises(SignatureError, match="another key"):
        safehub.load(f"{signed.spec}:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 0


def test_missing_and_optional_signatures(hub_repo, isolated: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                         canary: Path) -> None:
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    require_key(isolated, pub)
    with pytest.raises(SignatureError, match="has no signature"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    policy(isolated, f"[[allow]]\nrepo = 'acme/*'\nsignature = 'if-present'\nkeys = ['{pub}']\n")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo") == ((), {})  # unsigned: allowed


def test_invalid_signature_refused_even_if_present_only(
    signed: Signed, isolated: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.pub"
    other.write_bytes(new_key(tmp_path / "other.pem"))
    policy(isolated, f"[[allow]]\nrepo = 'acme/*'\nsignature = 'if-present'\n"
           f"keys = ['{other}']\n")
    with pytest.raises(SignatureError):
        safehub.load(f"{signed.spec}:v1.0", "tiny", trust_repo=True)


def test_warn_mode_logs_a_bad_signature_and_loads(signed: Signed, isolated: Path,
                                                  tmp_path: Path) -> None:
    other = tmp_path / "other.pub"
    other.write_bytes(new_key(tmp_path / "other.pem"))
    policy(isolated, f"[safehub]\nmode = 'warn'\n[[allow]]\nrepo = 'acme/*'\n"
           f"signature = 'required'\nkeys = ['{other}']\n")
    with pytest.warns(UserWarning, match="signature check failed"):
        safehub.load(f"{signed.spec}:v1.0", "tiny", trust_repo=True)


def test_keyless_signature_with_the_wrong_identity(
    server: GitHubStandIn, tmp_path: Path, isolated: Path
) -> None:
    """A real keyless OMS signature served as a hub repo: wrong identity refused; the
    right identity still refused, because 'ignore-me' is outside the signature."""
    path = tmp_path / "repos/ibm/model"
    shutil.copytree(OMS / "v1.1.0-sigstore", path)
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    make_repo(path, {})
    git(path, "tag", "v1.0")
    server.add_repo("ibm", "model", path)
    rule = ("[[allow]]\nrepo = 'ibm/*'\nsignature = 'required'\n"
            f"trust_config = '{TRUST_CONFIG}'\n[[allow.signers]]\n"
            "issuer = 'https://sigstore.verify.ibm.com/oauth2'\n")
    policy(isolated, rule + "identity = 'mallory@example.com'\n")
    with pytest.raises(SignatureError, match="identity"):
        safehub.load("ibm/model:v1.0", "tiny", trust_repo=True)
    policy(isolated, rule + "identity = 'stefanb@us.ibm.com'\n")
    with pytest.raises(SignatureError, match=r"does not cover 1 file\(s\): ignore-me"):
        safehub.load("ibm/model:v1.0", "tiny", trust_repo=True)



def test_verify_with_a_key_says_how_to_require_it(hub_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  isolated: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "signed"
    folder.mkdir()
    (folder / "hubconf.py").write_text("dependencies = []\n")
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    sign_directory(folder, tmp_path / "k.pem")
    rc, out, _ = cli(capsys, "verify", str(folder), "--key", str(pub))
    assert rc == 0
    lines = out.splitlines()
    assert "[[allow]] rule" in lines[1]
    rule = "\n".join(line.strip() for line in lines[2:])
    user_policy = isolated / "config/safehub/policy.toml"
    user_policy.parent.mkdir(parents=True, exist_ok=True)
    user_policy.write_text(f"[[allow]]\nrepo = 'acme/*'\n{rule}\n")  # as printed, in a real rule
    assert cli(capsys, "policy", "validate", str(user_policy))[0] == 0
    monkeypatch.setenv("CI", "true")
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json")
    assert json.loads(out)["requirements"]["signature"] == "required"

# -- the weights guard ---------------------------------------------------------------------------

def state_dict_bytes(value: float) -> bytes:
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, value)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getvalue()


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"echo pickle >> {os.environ['SAFEHUB_TEST_CANARY']}",))


@pytest.fixture
def weights(server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch) -> GitHubStandIn:
    server.add_static("/weights/tiny.pth", state_dict_bytes(1.0))
    server.add_static("/other/tiny.pth", state_dict_bytes(1.0))
    server.add_static("/weights/evil.pth", pickle.dumps({"weight": Evil()}))
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_cert))  # torch downloads with urllib
    urllib.request.install_opener(None)  # rebuilt with the stand-in's CA
    monkeypatch.setenv("SAFEHUB_TEST_WEIGHTS", f"https://localhost:{server.port}/weights/")
    return server


def test_weights_are_pinned_by_the_user_and_locked_by_safehub_lock(
    signed: Signed, weights: GitHubStandIn, isolated: Path
) -> None:
    require_key(isolated, signed.pub, "weights = ['https://localhost:*/weights/*']\n")
    assert main(["lock", f"{signed.spec}:v1.0"]) == 0
    lockfile = Path.cwd() / "safehub.lock"
    before = lockfile.read_bytes()
    model = safehub.load(f"{signed.spec}:v1.0", "pretrained")
    assert torch.equal(model.weight, torch.ones(2, 2))
    assert lockfile.read_bytes() == before  # a load never edits the committed lockfile
    assert main(["lock", f"{signed.spec}:v1.0"]) == 0  # asked: the pin goes in
    entry = Lockfile.load(lockfile).entries["acme/signed:v1.0"]
    url = f"https://localhost:{weights.port}/weights/tiny.pth"
    assert [(w.url, len(w.sha256)) for w in entry.weights] == [(url, 64)]
    safehub.load(f"{signed.spec}:v1.0", "pretrained")  # cached, pinned, still the same


def test_weight_url_outside_the_policy_is_refused(
    signed: Signed, weights: GitHubStandIn, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_key(isolated, signed.pub, "weights = ['https://localhost:*/weights/*']\n")
    monkeypatch.setenv("SAFEHUB_TEST_WEIGHTS", f"https://localhost:{weights.port}/other/")
    weights.clear_log()
    with pytest.raises(PolicyDenied, match="weights patterns do not allow"):
        safehub.load(f"{signed.spec}:v1.0", "pretrained")
    assert not any(r.path.startswith("/other/") for r in weights.requests_log)


def test_swapped_weight_file_is_refused(
    signed: Signed, weights: GitHubStandIn, isolated: Path
) -> None:
    require_key(isolated, signed.pub, "weights = ['https://localhost:*/weights/*']\n")
    assert main(["lock", f"{signed.spec}:v1.0"]) == 0
    safehub.load(f"{signed.spec}:v1.0", "pretrained")
    assert main(["lock", f"{signed.spec}:v1.0"]) == 0  # the weights' pin into the lockfile
    # 1. Someone replaces the file in torch's checkpoint folder.
    cached = Path(torch.hub.get_dir()) / "checkpoints/tiny.pth"
    cached.write_bytes(state_dict_bytes(6.0))
    with pytest.raises(IntegrityError, match="was pinned"):
        safehub.load(f"{signed.spec}:v1.0", "pretrained")
    assert not cached.exists()  # deleted before torch could load it
    # 2. The server now serves other bytes under the same URL.
    weights.add_static("/weights/tiny.pth", state_dict_bytes(7.0))
    with pytest.raises(IntegrityError, match="in the lockfile"):
        safehub.load(f"{signed.spec}:v1.0", "pretrained")


def test_pickles_load_weights_only(signed: Signed, weights: GitHubStandIn, isolated: Path,
                                   canary: Path) -> None:
    require_key(isolated, signed.pub)
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        safehub.load(f"{signed.spec}:v1.0", "pretrained", "evil.pth", weights_only=False)
    assert "pickle" not in (canary.read_text() if canary.exists() else "")


def test_signature_from_a_release_asset_or_a_local_path(
    server: GitHubStandIn, tmp_path: Path, isolated: Path, canary: Path
) -> None:
    """Keyless release workflows publish model.sig as a release asset (a tag cannot hold a
    file made after it); the policy says where to look."""
    path = tmp_path / "repos/acme/released"
    make_repo(path, {"hubconf.py": HUBCONF})
    git(path, "tag", "v2.0")
    server.add_repo("acme", "released", path)
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    bundle = sign_directory(path, tmp_path / "k.pem", out=tmp_path / "release-model.sig")
    rule = f"[[allow]]\nrepo = 'acme/*'\nsignature = 'required'\nkeys = ['{pub}']\n"
    policy(isolated, rule + "signature_url = 'release:model.sig'\n")
    with pytest.raises(SignatureError, match=r"has no signature \(release:model.sig\)"):
        safehub.load("acme/released:v2.0", "echo", trust_repo=True)
    server.add_release_asset("acme", "released", "v2.0", "model.sig", bundle.read_bytes())
    assert safehub.load("acme/released:v2.0", "echo", trust_repo=True) == ((), {})
    assert any("/releases/download/v2.0/model.sig" in r.path for r in server.requests_log)
    assert main(["verify", "acme/released:v2.0"]) == 0  # verify finds it where loads do
    # A local path template works too, relative to the policy file.
    sigs = isolated / "site/safehub/sigs/acme-released"
    sigs.mkdir(parents=True)
    (sigs / "v2.0.sig").write_bytes(bundle.read_bytes())
    policy(isolated, rule + "signature_url = 'sigs/{owner}-{name}/{ref}.sig'\n")
    safehub.Hub().cache.clear()
    assert safehub.load("acme/released:v2.0", "echo", trust_repo=True) == ((), {})


def test_weights_guards_may_end_in_any_order(signed: Signed, isolated: Path,
                                             tmp_path: Path) -> None:
    """Concurrent loads end out of order: each call goes to the innermost guard still
    active, and torch's own function answers again once none is."""
    from safehub.run import torchhub

    calls: list[str] = []
    a = {"download_url_to_file": lambda *args, **kw: calls.append("a")}
    b = {"download_url_to_file": lambda *args, **kw: calls.append("b")}
    ctx_a, ctx_b = torchhub.handling(a), torchhub.handling(b)
    ctx_a.__enter__()
    ctx_b.__enter__()
    torch.hub.download_url_to_file("https://h/w.pth", str(tmp_path / "w"))
    ctx_a.__exit__(None, None, None)  # the first one ends first
    torch.hub.download_url_to_file("https://h/w.pth", str(tmp_path / "w"))
    ctx_b.__exit__(None, None, None)
    assert calls == ["b", "b"]
    source = tmp_path / "src.bin"
    source.write_bytes(b"weights")
    torch.hub.download_url_to_file(source.as_uri(), str(tmp_path / "copy"), progress=False)
    assert (tmp_path / "copy").read_bytes() == b"weights" and calls == ["b", "b"]
