"""Policy files: parsing fails closed, layers merge strictest-first, final files hold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import safehub
from safehub._internal.fixes import Run
from safehub._internal.globs import Glob
from safehub.errors import PolicyError
from safehub.policy import Policy, load_policy
from safehub.spec import RepoSpec
from tests.conftest import HubRepo, runs
from tests.support import GitHubStandIn


def spec(text: str) -> RepoSpec:
    return RepoSpec.parse(text)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def site(home: Path) -> Path:
    return home / "site/safehub/policy.toml"


def user(home: Path) -> Path:
    return home / "config/safehub/policy.toml"


# -- parsing: fail closed, name the file, the key and the allowed values --------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[safehub]\nunknown_repos = 'maybe'\n",
         ["safehub.unknown_repos", "'deny', 'prompt' or 'allow'", "'maybe'"]),
        ("[safehub]\nmode = 'audit'\n", ["safehub.mode", "'enforce' or 'warn'"]),
        ("[safehub]\nversion = 2\n", ["safehub.version", "1"]),
        ("[safehub]\nunknown = 'deny'\n", ["safehub.unknown: unknown key", "unknown_repos"]),
        ("[[allow]]\nrepo = 'a/b'\npinn = 'commit'\n", ["allow[0].pinn: unknown key", "pin"]),
        ("[[allow]]\nrepo = 'a/b'\npin = 'sha'\n", ["allow[0].pin", "'none' or 'commit'"]),
        ("[[allow]]\nrefs = ['v1']\n", ["allow[0].repo", "required key is missing"]),
        ("[[allow]]\nrepo = 'pytorch'\n", ["allow[0].repo", "owner/name"]),
        ("[[allow]]\nrepo = 'руtorch/vision'\n", ["allow[0].repo", "ASCII"]),
        ("[[allow]]\nrepo = 'a/b'\nsignature = 'required'\n", ["needs at least one entry"]),
        ("[[allow]]\nrepo = 'a/b'\nkeys = ['k.pem']\n", ["signature = 'none'"]),
        ("[[allow]]\nrepo = 'a/b'\nsignature = 'required'\nsigners = [{issuer = 'x'}]\n",
         ["allow[0].signers[0].identity", "required key is missing"]),
        ("[[deny]]\nrepo = 'a/b'\nbecause = 'x'\n", ["deny[0].because: unknown key", "reason"]),
        ("[safehub]\ngithub_api_url = 'http://x'\n", ["github_api_url", "https://"]),
        ("[safehub\n", ["not valid TOML"]),
        ("allow = 3\n", ["allow"]),
    ],
)
def test_invalid_files_name_file_key_and_allowed_values(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(PolicyError) as err:
        load_policy(paths=[path])
    message = str(err.value)
    assert str(path) in message
    for part in expected:
        assert part in message
    assert "fail closed" in message


def test_missing_key_file_fails_closed(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", "[[allow]]\nrepo = 'a/b'\nsignature = 'required'\n"
                 "keys = ['nope.pem']\n")
    with pytest.raises(PolicyError, match="nope.pem"):
        load_policy(paths=[path])


def test_unreadable_and_missing_files_refuse_every_load(
    hub_repo: HubRepo, isolated: Path, monkeypatch: pytest.MonkeyPatch, canary: Path,
    server: GitHubStandIn,
) -> None:
    monkeypatch.setenv("SAFEHUB_POLICY", str(isolated / "missing.toml"))
    with pytest.raises(PolicyError, match="SAFEHUB_POLICY"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    monkeypatch.delenv("SAFEHUB_POLICY")
    write(user(isolated), b"\xff\xfe".decode("latin-1"))
    user(isolated).write_bytes(b"\xff\xfe[")
    with pytest.raises(PolicyError, match="cannot be read"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 0 and server.count() == 0


# -- deciding ---------------------------------------------------------------------------------

def test_globs_and_case() -> None:
    p = Policy.from_text("[safehub]\nunknown_repos = 'deny'\n[[allow]]\nrepo = 'MyOrg/*'\n",
                         "p.toml")
    assert p.decide(spec("myorg/models")).verdict == "allow"
    assert p.decide(spec("MYORG/Models")).verdict == "allow"
    assert p.decide(spec("myorg-evil/models")).verdict == "deny"
    assert p.decide(spec("myor/models")).verdict == "deny"


def test_a_set_range_spanning_slash_never_admits_a_nested_branch() -> None:
    """``[.-9]`` covers 0x2E..0x39, '/' included; a set still never matches '/'."""
    p = Policy.from_text("[safehub]\nunknown_repos = 'deny'\n[[allow]]\nrepo = 'acme/models'\n"
                         "refs = ['v1[.-9]*']\n", "site.toml")
    assert p.decide(spec("acme/models:v1.2")).verdict == "allow"
    assert p.decide(spec("acme/models:v10")).verdict == "allow"
    d = p.decide(spec("acme/models:v1/evil-branch"))
    assert d.verdict == "deny" and "v1[.-9]*" in d.reasons[-1]
    for pattern in ("[.-9]", "[!a]", "[+-0]", "[!.-9]", "[--9]"):
        assert not Glob(pattern).match("/") and not Glob(pattern, fold=True).match("/")


def test_no_set_ever_consumes_a_slash() -> None:
    """Property: in globs made of sets, literals, ``*`` and ``?``, a text whose extra '/'
    can only have been consumed by a set never matches; the same text with a character the
    set does admit does."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ends = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in "/[]\\-!"]
    pair = st.tuples(st.sampled_from(ends), st.sampled_from(ends)).map(sorted)
    a_set = st.tuples(st.booleans(), st.lists(
        st.one_of(st.sampled_from(ends), pair.map("-".join)),
        min_size=1, max_size=3))
    token = st.one_of(a_set, st.sampled_from(["*", "?", "/", "a", ".", "-", "9"]))

    def members(negate: bool, items: list[str]) -> list[str]:
        chars = [chr(c) for c in range(0x20, 0x7F) if chr(c) != "/"]
        inside = [c for c in chars if any(
            c == i if len(i) == 1 else i[0] <= c <= i[2] for i in items)]
        return [c for c in chars if c not in inside] if negate else inside

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.lists(token, min_size=1, max_size=6), st.data())
    def check(tokens: list[object], data: st.DataObject) -> None:
        pattern, attack, honest = "", "", ""
        for t in tokens:
            if isinstance(t, tuple):
                negate, items = t
                pattern += "[" + ("!" if negate else "") + "".join(items) + "]"
                admitted = members(negate, items)
                attack += "/"
                honest += data.draw(st.sampled_from(admitted)) if admitted else "/"
            elif t == "*":
                pattern += "*"
            elif t == "?":
                pattern += "?"
                attack += "x"
                honest += "x"
            else:
                pattern += str(t)
                attack += str(t)
                honest += str(t)
        if any(isinstance(t, tuple) for t in tokens):
            for fold in (False, True):
                assert not Glob(pattern, fold=fold).match(attack), (pattern, attack)
        if all(not isinstance(t, tuple) or members(*t) for t in tokens):
            assert Glob(pattern).match(honest), (pattern, honest)

    check()


def test_refs_entrypoints_and_pin() -> None:
    p = Policy.from_text(
        "[[allow]]\nrepo = 'pytorch/vision'\nrefs = ['v0.*']\nentrypoints = ['resnet*']\n",
        "p.toml")
    assert p.decide(spec("pytorch/vision:v0.10.0"), entrypoint="resnet18").verdict == "allow"
    d = p.decide(spec("pytorch/vision:main"), entrypoint="resnet18")
    assert d.verdict == "deny" and "'main' is not one of ['v0.*']" in d.reasons[-1]
    assert p.decide(spec("pytorch/vision:v0.1/evil")).verdict == "deny"  # * stops at /
    assert p.decide(spec("pytorch/vision:v0.10.0"), entrypoint="vit").verdict == "deny"
    pinned = Policy.from_text("[[allow]]\nrepo = 'a/b'\npin = 'commit'\n", "p.toml")
    assert pinned.decide(spec("a/b:v1")).verdict == "deny"
    assert pinned.decide(spec("a/b:" + "a" * 40)).verdict == "allow"
    assert pinned.decide(spec("a/b:v1"), locked=True).verdict == "allow"


def test_deny_wins_and_shows_its_reason() -> None:
    p = Policy.from_text(
        "[[allow]]\nrepo = 'someone/*'\n[[deny]]\nrepo = 'someone/bad'\nreason = 'malware'\n",
        "p.toml")
    d = p.decide(spec("someone/bad"))
    assert d.verdict == "deny" and "malware" in d.reasons[0] and "p.toml" in d.reasons[0]
    assert p.decide(spec("someone/good")).verdict == "allow"


def test_no_files_means_prompt() -> None:
    d = load_policy(paths=[])
    assert d.decide(spec("a/b")).verdict == "prompt"


def test_layers_strictest_wins(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", "[safehub]\nunknown_repos = 'deny'\nmode = 'enforce'\n")
    b = write(tmp_path / "b.toml", "[safehub]\nunknown_repos = 'allow'\nmode = 'warn'\n")
    for order in ([a, b], [b, a]):
        p = load_policy(paths=order)
        assert p.setting("unknown_repos")[:2] == ("deny", str(a))
        assert p.setting("mode")[:2] == ("enforce", str(a))


def test_later_files_add_requirements(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", "[[allow]]\nrepo = 'org/*'\n")
    b = write(tmp_path / "b.toml", "[[allow]]\nrepo = 'org/models'\nrefs = ['v*']\n")
    p = load_policy(paths=[a, b])
    assert p.decide(spec("org/models:v1")).verdict == "allow"
    assert p.decide(spec("org/models:main")).verdict == "deny"
    assert p.decide(spec("org/other:main")).verdict == "allow"


def test_user_file_cannot_loosen_a_final_admin_file(
    isolated: Path, hub_repo: HubRepo, server: GitHubStandIn, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(site(isolated), "[safehub]\nfinal = true\nunknown_repos = 'deny'\n"
          f"cache_dir = '{isolated / 'admin-cache'}'\n[[deny]]\nrepo = 'evil/*'\n")
    write(user(isolated), "[safehub]\nunknown_repos = 'allow'\n"
          f"cache_dir = '{isolated / 'user-cache'}'\n"
          "[[allow]]\nrepo = 'acme/*'\n[[allow]]\nrepo = 'evil/x'\n")
    p = load_policy()
    assert p.setting("unknown_repos").value == "deny"
    d = p.decide(spec("acme/models"))
    assert d.verdict == "deny"
    assert "cannot admit a repo: it comes after a final = true file" in " ".join(d.reasons)
    assert p.decide(spec("evil/x")).verdict == "deny"
    assert p.setting("cache_dir")[0] == str(isolated / "admin-cache")
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(isolated / "env-cache"))
    assert safehub.Hub().settings.cache_dir == isolated / "admin-cache"  # env cannot either
    with pytest.raises(safehub.PolicyDenied):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert server.count() == 0 and runs(canary) == 0


def test_environment_wins_over_a_policy_that_is_not_final(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(user(isolated), f"[safehub]\ncache_dir = '{isolated / 'policy-cache'}'\n")
    assert safehub.Hub().settings.cache_dir == isolated / "policy-cache"
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(isolated / "env-cache"))
    assert safehub.Hub().settings.cache_dir == isolated / "env-cache"


def test_file_order_site_user_cwd_env(isolated: Path, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    files = [write(site(isolated), ""), write(user(isolated), ""),
             write(Path.cwd() / "safehub.toml", ""), write(tmp_path / "e1.toml", ""),
             write(tmp_path / "e2.toml", "")]
    monkeypatch.setenv("SAFEHUB_POLICY", os.pathsep.join(map(str, files[3:])))
    assert load_policy().files == tuple(map(str, files))


# -- through the pipeline ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["evil/models", "EVIL/Models"])
def test_denied_repo_makes_zero_requests(
    isolated: Path, server: GitHubStandIn, make_hub_repo, canary: Path, name: str,  # type: ignore[no-untyped-def]
) -> None:
    make_hub_repo("evil", "models")
    write(site(isolated), "[[deny]]\nrepo = 'evil/*'\nreason = 'known bad'\n")
    server.clear_log()
    with pytest.raises(safehub.PolicyDenied, match="known bad") as err:
        safehub.load(f"{name}:v1.0", "tiny", trust_repo=True)
    assert "whoever owns" in str(err.value)
    assert server.count() == 0 and runs(canary) == 0


def test_unknown_repo_under_deny_makes_zero_requests(
    isolated: Path, hub_repo: HubRepo, server: GitHubStandIn
) -> None:
    write(site(isolated), "[safehub]\nunknown_repos = 'deny'\n")
    server.clear_log()
    with pytest.raises(safehub.PolicyDenied) as err:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)  # True never beats deny
    assert 'repo = "acme/models"' in str(err.value)  # the exact lines that would allow it
    assert server.count() == 0


def test_allowed_repo_loads_in_ci_without_consent(
    isolated: Path, hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch, canary: Path
) -> None:
    monkeypatch.setenv("CI", "true")
    write(site(isolated), "[safehub]\nunknown_repos = 'deny'\n[[allow]]\nrepo = 'acme/*'\n")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo", 1) == ((1,), {})
    with pytest.raises(safehub.UntrustedRepoError, match="trust_repo=False"):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=False)  # False always asks


def test_default_branch_is_checked_against_refs(isolated: Path, hub_repo: HubRepo) -> None:
    write(site(isolated), "[[allow]]\nrepo = 'acme/*'\nrefs = ['v*']\n")
    with pytest.raises(safehub.PolicyDenied, match="'main' is not one of"):
        safehub.load(hub_repo.spec, "tiny")


def test_entrypoint_rules(isolated: Path, hub_repo: HubRepo, canary: Path) -> None:
    write(site(isolated), "[[allow]]\nrepo = 'acme/*'\nentrypoints = ['ti*']\n")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "tiny") is not None
    with pytest.raises(safehub.PolicyDenied, match="entrypoint 'echo'"):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo")
    assert runs(canary) == 1


def test_warn_mode_logs_and_loads(isolated: Path, hub_repo: HubRepo) -> None:
    write(site(isolated), "[safehub]\nmode = 'warn'\nunknown_repos = 'deny'\n")
    with pytest.warns(UserWarning, match="mode = 'warn'"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    log = isolated / "state/safehub/log/audit.jsonl"
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["decision"] == "warn" and last["trusted_by"] == "trust_repo"


def test_tree_fallback_can_be_forbidden(isolated: Path, make_hub_repo) -> None:  # type: ignore[no-untyped-def]
    repo: HubRepo = make_hub_repo(files={".gitattributes": "v.py export-subst\n",
                                         "v.py": "V = '$Format:%H$'\n"})
    write(site(isolated), "[safehub]\ntree_fallback = false\n")
    with pytest.raises(safehub.IntegrityError, match="forbidden by policy"):
        safehub.load(f"{repo.spec}:v1.0", "tiny", trust_repo=True)


# -- audit -------------------------------------------------------------------------------------

def test_every_decision_is_audited(isolated: Path, hub_repo: HubRepo,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    audit = isolated / "audit/log.jsonl"
    policy = write(site(isolated), f"[safehub]\naudit_log = '{audit}'\n"
                   "[[deny]]\nrepo = 'evil/*'\n")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    with pytest.raises(safehub.PolicyDenied):
        safehub.load("evil/x", "tiny")
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [x["decision"] for x in lines] == ["refused", "trust_repo", "consent", "deny"]
    first = lines[0]
    assert first["repo"] == "acme/models" and first["commit"] == hub_repo.sha
    assert first["digest"].startswith("sha256:") and first["policy_files"] == [str(policy)]
    assert {"time", "user", "host", "ref", "reasons", "entrypoint"} <= set(first)


def test_audit_log_the_policy_requires_must_be_writable(
    isolated: Path, hub_repo: HubRepo, tmp_path: Path
) -> None:
    blocker = write(tmp_path / "file", "")
    write(site(isolated), f"[safehub]\naudit_log = '{blocker / 'audit.jsonl'}'\n")
    with pytest.raises(PolicyError, match="audit log"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)


def test_signature_rules_name_their_files_relative_to_the_policy(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    key, cert = pem_key_and_certificate()
    (tmp_path / "keys/k.pub").write_bytes(key)
    (tmp_path / "keys/ca.pem").write_bytes(cert)
    (tmp_path / "keys/trust.json").write_text("{}")
    path = write(tmp_path / "p.toml", "[[allow]]\nrepo = 'a/*'\nsignature = 'required'\n"
                 "keys = ['keys/k.pub']\ncertificates = ['keys/ca.pem']\n"
                 "trust_config = 'keys/trust.json'\nsignature_url = 'release:model.sig'\n")
    reqs = load_policy(paths=[path]).decide(spec("a/b")).requirements
    (signer_set,) = reqs.signer_sets
    assert signer_set.keys[0].path == tmp_path / "keys/k.pub"
    assert signer_set.certificates == (tmp_path / "keys/ca.pem",)
    assert signer_set.trust_config == tmp_path / "keys/trust.json"
    assert signer_set.location == "release:model.sig"
    (tmp_path / "keys/ca.pem").unlink()
    with pytest.raises(PolicyError, match="ca.pem"):
        load_policy(paths=[write(tmp_path / "q.toml", path.read_text())])


def test_a_later_file_cannot_switch_a_final_policy_to_warn(tmp_path: Path) -> None:
    admin = write(tmp_path / "a.toml", "[safehub]\nfinal = true\nunknown_repos = 'deny'\n"
                  "[[deny]]\nrepo = 'acme/*'\n")
    project = write(tmp_path / "b.toml", "[safehub]\nmode = 'warn'\n")
    p = load_policy(paths=[admin, project])
    assert p.mode == "enforce"
    assert p.decide(spec("acme/models")).verdict == "deny"
    assert p.decide(spec("other/x")).verdict == "deny"


def test_tightening_settings_add_up_across_files(tmp_path: Path) -> None:
    site_file = write(tmp_path / "a.toml", "[safehub]\noffline = true\nnoninteractive = true\n"
                      "tree_fallback = false\n")
    later = write(tmp_path / "b.toml", "[safehub]\noffline = false\nnoninteractive = false\n"
                  "tree_fallback = true\n")
    p = load_policy(paths=[site_file, later])
    assert p.setting("offline")[0] is True and p.setting("noninteractive")[0] is True
    assert p.setting("tree_fallback")[0] is False


@pytest.mark.parametrize("key", ["github_api_url = 'https://evil.example'",
                                 "github_url = 'https://evil.example'",
                                 "allowed_hosts = ['evil.example']", "cache_dir = 'cache'"])
def test_a_project_file_cannot_redirect_where_code_comes_from(key: str) -> None:
    write(Path.cwd() / "safehub.toml", f"[safehub]\n{key}\n")
    with pytest.raises(PolicyError, match="cannot be set in a project's"):
        load_policy()


def test_ref_rules_see_every_spelling_of_a_ref() -> None:
    p = Policy.from_text("[[deny]]\nrepo = 'a/b'\nrefs = ['v2.0']\nreason = 'bad release'\n"
                         "[[allow]]\nrepo = 'a/*'\nrefs = ['v*']\n", "p.toml")
    for ref in ("v2.0", "tags/v2.0", "refs/tags/v2.0"):
        assert p.decide(spec(f"a/b:{ref}")).verdict == "deny", ref
    assert p.decide(spec("a/b:refs/tags/v1.0")).verdict == "allow"


def test_malformed_glob_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", "[[allow]]\nrepo = 'a/b'\nrefs = ['[z-a]']\n")
    with pytest.raises(PolicyError, match=r"allow\[0\].refs.*invalid pattern"):
        load_policy(paths=[path])


def pem_key_and_certificate() -> tuple[bytes, bytes]:
    """A real EC public key and a self-signed certificate, in PEM."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(private.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(private, hashes.SHA256()))
    key = private.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, cert.public_bytes(serialization.Encoding.PEM)


# -- bad input: every fault named at once, fail closed ------------------------------------------

BAD_POLICY = """\
[safehub]
final = "yes"
offline = 1
noninteractive = "true"
[[deny]]
repo = "org/[x*"
[[allow]]
repo = "a/b"
weights = ["http://models.example/*"]
signature = "required"
keys = ["missing.pem", "not-a-key.pem"]
entrypoints = ["resnet[50"]
[[allow.signers]]
issuer = "https://issuer.example"
identity = "[z-a]@example.org"
"""


def test_every_fault_is_named_at_once_and_loads_fail_closed(
    tmp_path: Path, isolated: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from safehub.cli import main

    write(tmp_path / "not-a-key.pem", "-----BEGIN NOTHING-----\n")
    path = write(tmp_path / "bad.toml", BAD_POLICY)
    assert main(["policy", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    for where, why in [("safehub.final", "true or false"), ("safehub.offline", "true or false"),
                       ("safehub.noninteractive", "true or false"),
                       ("deny[0].repo", "no closing ']'"), ("allow[0].weights", "https://"),
                       ("allow[0].keys", "does not exist"), ("allow[0].entrypoints", "'['"),
                       ("allow[0].signers[0].identity", "invalid pattern")]:
        assert where in out and why in out, (where, out)
    write(user(isolated), BAD_POLICY.replace("missing.pem", str(tmp_path / "missing.pem")))
    with pytest.raises(PolicyError, match="fail closed"):
        safehub.load("a/b:v1", "tiny", trust_repo=True)


def test_a_key_file_must_hold_a_pem_public_key(tmp_path: Path) -> None:
    key, cert = pem_key_and_certificate()
    write(tmp_path / "cert.pem", cert.decode())
    rule = "[[allow]]\nrepo = 'a/b'\nsignature = 'required'\nkeys = ['{}']\n"
    with pytest.raises(PolicyError, match="not a PEM public key"):
        load_policy(paths=[write(tmp_path / "p.toml", rule.format("cert.pem"))])
    write(tmp_path / "k.pub", key.decode())
    assert load_policy(paths=[write(tmp_path / "q.toml", rule.format("k.pub"))]).rules


def test_an_unclosed_bracket_is_an_error_not_a_deny_rule_that_never_matches() -> None:
    with pytest.raises(PolicyError, match=r"deny\[0\]\.repo.*no closing"):
        Policy.from_text("[[deny]]\nrepo = 'org/[x*'\n", "p.toml")


@pytest.mark.parametrize("text", ["final = 'yes'", "offline = 'yes'", "noninteractive = 1",
                                  "tree_fallback = 0", "version = true"])
def test_a_string_or_number_is_never_a_boolean(text: str) -> None:
    with pytest.raises(PolicyError):
        Policy.from_text(f"[safehub]\n{text}\n", "p.toml")


@pytest.mark.parametrize(("key", "value"), [
    ("audit_log", "'~/.bashrc'"), ("audit_log", "'../outside.jsonl'"),
    ("lockfile", "'/etc/passwd'")])
def test_a_project_file_names_paths_only_inside_the_project(key: str, value: str) -> None:
    write(Path.cwd() / "safehub.toml", f"[safehub]\n{key} = {value}\n")
    with pytest.raises(PolicyError, match="outside the project folder"):
        load_policy()


def test_a_project_file_path_through_a_symlink_is_refused(isolated: Path) -> None:
    (Path.cwd() / "log.jsonl").symlink_to(isolated / ".bashrc")
    write(Path.cwd() / "safehub.toml", "[safehub]\naudit_log = 'log.jsonl'\n")
    with pytest.raises(PolicyError, match="outside the project folder"):
        load_policy()
    write(Path.cwd() / "safehub.toml", "[safehub]\naudit_log = 'logs/audit.jsonl'\n")
    assert load_policy().setting("audit_log").value == str(Path.cwd() / "logs/audit.jsonl")


def test_only_declared_keys_may_come_from_a_project() -> None:
    from safehub.policy.keys import KEYS

    refused = {name for name, key in KEYS["safehub"].items() if not key.project}
    assert refused == {"cache_dir", "github_api_url", "github_url", "allowed_hosts", "local_dirs",
                       "oci"}


def policy_documents():  # type: ignore[no-untyped-def]
    """Mostly valid policy documents, with a wrong value or key here and there."""
    from hypothesis import strategies as st

    def maybe(good: list[object], bad: list[object]):  # type: ignore[no-untyped-def]
        return st.sampled_from(good + bad) if bad else st.sampled_from(good)

    globs = st.lists(maybe(["v*", "main", "release/**", "resnet*"], ["", "[z-a]", "пр"]),
                     max_size=2)
    signer = st.fixed_dictionaries(
        {"issuer": maybe(["https://token.actions.githubusercontent.com"], ["", 3]),
         "identity": maybe(["x@y.example", "https://github.com/o/**"], ["[z-a]"])},
        optional={"ref": maybe(["refs/tags/*"], [True]), "repository": maybe(["o/*"], []),
                  "bogus": st.just("x")})
    allow = st.fixed_dictionaries(
        {"repo": maybe(["a/b", "org/*", "my-org/x.y"], ["pytorch", "a/b/c", 7, "[z-a]/x"])},
        optional={
            "refs": globs, "entrypoints": globs, "weights": globs,
            "pin": maybe(["none", "commit"], ["sha"]),
            "signature": maybe(["none", "if-present", "required"], ["yes"]),
            "signers": st.lists(signer, max_size=2),
            "keys": st.lists(maybe(["k.pem"], [1]), max_size=1),
            "certificates": st.lists(maybe(["ca.pem"], []), max_size=1),
            "signature_url": maybe(["release:model.sig"], [None]),
            "weights_only": maybe([True, False], [1, "no"]),
            "reason": maybe(["why"], [None, 2]),
            "bogus": st.just(1),
        })
    deny = st.fixed_dictionaries(
        {"repo": maybe(["evil/*", "a/b"], ["evil"])},
        optional={"refs": globs, "reason": maybe(["bad"], [None]), "because": st.just("x")})
    section = st.fixed_dictionaries({}, optional={
        "version": maybe([1], [2, True, "1"]),
        "mode": maybe(["enforce", "warn"], ["audit"]),
        "unknown_repos": maybe(["deny", "prompt", "allow"], ["maybe"]),
        "final": maybe([True, False], [1]),
        "offline": maybe([True, False], ["yes"]),
        "github_api_url": maybe(["https://ghe.example/api"], ["http://x"]),
        "allowed_hosts": st.lists(maybe(["h.example"], [3]), max_size=2),
        "tree_fallback": maybe([True, False], [0]),
        "audit_log": maybe(["a.jsonl"], [1]),
        "unknown": st.just(1),
    })
    return st.fixed_dictionaries({}, optional={
        "safehub": section, "allow": st.lists(allow, max_size=3),
        "deny": st.lists(deny, max_size=2)})


@pytest.mark.slow
def test_the_validator_names_a_fault_or_accepts_every_document(tmp_path: Path) -> None:
    """The one validator never fails any other way than a PolicyError naming the file, and
    what it accepts reads back as the values given."""
    from hypothesis import HealthCheck, given, settings

    from safehub.policy.schema import validate

    (tmp_path / "k.pem").write_bytes(pem_key_and_certificate()[0])
    (tmp_path / "ca.pem").write_bytes(pem_key_and_certificate()[1])
    source = str(tmp_path / "p.toml")
    accepted = []

    @settings(max_examples=600, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(policy_documents())
    def check(data: dict[str, object]) -> None:
        try:
            ours = validate(data, source)
        except PolicyError as e:
            assert source in str(e), str(e)
            return
        accepted.append(bool(ours.allow or ours.deny))
        given_allow = data.get("allow", [])
        assert isinstance(given_allow, list) and len(ours.allow) == len(given_allow)
        for table, raw in zip(ours.allow, given_allow, strict=True):
            assert table.repo == raw["repo"]
            assert table.pin == raw.get("pin", "none")

    check()
    assert sum(accepted) > 25  # the property is not vacuous


def test_docs_key_tables_come_from_the_declaration() -> None:
    from safehub.policy.keys import markdown_table

    docs = (Path(__file__).parents[1] / "docs/policy.md").read_text()
    for scope in ("safehub", "oci", "allow", "deny", "signer"):
        assert markdown_table(scope) in docs, scope


def test_a_fix_quotes_a_ref_that_a_shell_would_read() -> None:
    """Refs may hold `;`, `$`, `(`: a printed command quotes the spec, so copying it into
    a shell runs safehub, not what the ref says."""
    import shlex

    from safehub.policy import Policy
    from safehub.spec import RepoSpec

    policy = Policy.from_text('[[allow]]\nrepo = "acme/*"\npin = "commit"\n', "site.toml")
    ref = "v1;touch${IFS}INJECTED;#"
    decision = policy.decide(RepoSpec.parse(f"acme/models:{ref}"))
    assert isinstance(decision.fix, Run), decision.fix
    assert shlex.split(decision.fix.command) == ["safehub", "lock", f"acme/models:{ref}"]


@pytest.mark.parametrize("shape", ["dangling link", "fifo", "folder", "long link"])
def test_a_policy_file_that_is_not_a_file_refuses_every_load(
    isolated: Path, tmp_path: Path, shape: str
) -> None:
    """The admin's floor never disappears because its file became a broken link or a
    FIFO: anything at a policy path that is not a readable file fails closed."""
    import os

    import safehub

    site = isolated / "site/safehub/policy.toml"
    site.parent.mkdir(parents=True, exist_ok=True)
    if shape == "dangling link":
        site.symlink_to(tmp_path / "nowhere.toml")
    elif shape == "fifo":
        os.mkfifo(site)
    elif shape == "folder":
        site.mkdir()
    else:
        site = Path("safehub.toml")  # a cloned project's
        site.symlink_to("x" * 300)
    with pytest.raises(safehub.PolicyError, match="policy file"):
        safehub.Hub()
