"""One admission step for every operation: the same spec gets the same verdict everywhere.

Each case (a renamed repo with and without an allow rule for its new name, a spec without
a ref whose default branch the policy does not allow, a denied repo, a fork's commit under
the parent's name, and a plain allowed spec) runs through load, list, help, check, trust,
lock, lock --check, verify and prefetch; every operation must reach the same verdict.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import safehub
from safehub import operations
from safehub.errors import PinError, PolicyDenied, RepoMovedError, SafehubError
from safehub.store.lockfile import LockEntry, Lockfile
from safehub.verify.signatures.signers import KeySigner, SignerSet
from tests.conftest import HubRepo, runs

ADMITTED = "admitted"


def verdict_of(error: BaseException | None) -> str:
    """What the admission decided, whatever happened after it."""
    for kind in (PolicyDenied, RepoMovedError, PinError):
        if isinstance(error, kind):
            return kind.__name__
    return ADMITTED


def _lock_check(hub: safehub.Hub, spec: str) -> None:
    Lockfile(hub.lockfile_path, [LockEntry(spec.lower(), "a" * 40, "b" * 40,
                                           "sha256:" + "c" * 64)]).save()
    hub.forget_lockfile()
    (status,) = operations.lock_check(hub)
    if status.error is not None:
        name = status.error.partition(":")[0]
        raise {"PolicyDenied": PolicyDenied("x"), "PinError": PinError("x"),
               "RepoMovedError": RepoMovedError("x", old="", new="")}.get(
                   name, SafehubError(status.error))


def _check(hub: safehub.Hub, spec: str) -> None:
    report = operations.check(hub, spec)
    if report.error is not None:
        raise {"PolicyDenied": PolicyDenied("x"), "PinError": PinError("x"),
               "RepoMovedError": RepoMovedError("x", old="", new="")}.get(
                   report.error, SafehubError(report.why))


def _verify(key: Path) -> Callable[[safehub.Hub, str], object]:
    def run(hub: safehub.Hub, spec: str) -> object:
        return operations.verify(hub, spec, [SignerSet("test", keys=(KeySigner(key),))])
    return run


OPERATIONS: dict[str, Callable[..., object]] = {
    "load": lambda hub, spec: hub.load(spec, "tiny", trust_repo=True),
    "list": lambda hub, spec: hub.list(spec, trust_repo=True),
    "help": lambda hub, spec: hub.help(spec, "tiny", trust_repo=True),
    "check": _check,
    "trust": lambda hub, spec: hub.trust(spec),
    "lock": lambda hub, spec: operations.lock(hub, [spec]),
    "lock --check": _lock_check,
    "prefetch": lambda hub, spec: operations.prefetch(hub, [spec]),
}


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    path = tmp_path / "k.pub"
    path.write_bytes(key.public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


def run_everywhere(spec: str, public_key: Path, tmp_path: Path) -> dict[str, str]:
    results = {}
    operations = {**OPERATIONS, "verify": _verify(public_key)}
    home = Path.cwd()
    for name, operation in operations.items():
        work = tmp_path / "ops" / name.replace(" ", "-")
        work.mkdir(parents=True)
        os.chdir(work)  # each operation with its own ./safehub.lock
        try:
            operation(safehub.Hub(noninteractive=True), spec)
            results[name] = ADMITTED
        except SafehubError as e:
            results[name] = verdict_of(e)
        finally:
            os.chdir(home)
    return results


def policy(isolated: Path, text: str) -> None:
    path = isolated / "config/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_renamed_repo_without_a_rule_for_the_new_name(
    hub_repo: HubRepo, server, isolated: Path, public_key: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
    canary: Path,
) -> None:
    server.rename_repo("acme", "models", "newco", "models")
    results = run_everywhere("acme/models:v1.0", public_key, tmp_path)
    assert set(results.values()) == {"RepoMovedError"}, results
    assert runs(canary) == 0


def test_renamed_repo_with_a_rule_for_the_new_name(
    hub_repo: HubRepo, server, isolated: Path, public_key: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    server.rename_repo("acme", "models", "newco", "models")
    policy(isolated, "[[allow]]\nrepo = 'newco/models'\nrefs = ['v*']\n")
    results = run_everywhere("acme/models:v1.0", public_key, tmp_path)
    assert set(results.values()) == {ADMITTED}, results


def test_renamed_repo_whose_new_name_the_policy_refuses(
    hub_repo: HubRepo, server, isolated: Path, public_key: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The new name's rules apply after a rename: here they refuse the ref."""
    server.rename_repo("acme", "models", "newco", "models")
    policy(isolated, "[[allow]]\nrepo = 'newco/models'\nrefs = ['release-*']\n")
    results = run_everywhere("acme/models:v1.0", public_key, tmp_path)
    assert set(results.values()) == {"PolicyDenied"}, results


def test_spec_without_a_ref_is_checked_against_the_default_branch(
    hub_repo: HubRepo, isolated: Path, public_key: Path, tmp_path: Path,
) -> None:
    policy(isolated, "[[allow]]\nrepo = 'acme/*'\nrefs = ['v*']\n")
    results = run_everywhere("acme/models", public_key, tmp_path)
    assert set(results.values()) == {"PolicyDenied"}, results


def test_spec_without_a_ref_allowed_by_the_default_branch(
    hub_repo: HubRepo, isolated: Path, public_key: Path, tmp_path: Path,
) -> None:
    policy(isolated, "[[allow]]\nrepo = 'acme/*'\nrefs = ['main']\n")
    results = run_everywhere("acme/models", public_key, tmp_path)
    assert set(results.values()) == {ADMITTED}, results


def test_denied_repo(hub_repo: HubRepo, server, isolated: Path, public_key: Path,  # type: ignore[no-untyped-def]
                     tmp_path: Path) -> None:
    policy(isolated, "[[deny]]\nrepo = 'acme/*'\nreason = 'no'\n")
    server.clear_log()
    results = run_everywhere("acme/models:v1.0", public_key, tmp_path)
    assert set(results.values()) == {"PolicyDenied"}, results
    assert server.count() == 0  # refused before any request, by every operation


def test_fork_commit_under_the_parent_name(
    hub_repo: HubRepo, make_hub_repo, public_key: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"hubconf.py": "raise SystemExit('evil')\n"})
    results = run_everywhere(f"acme/models:{evil}", public_key, tmp_path)
    assert set(results.values()) == {"PinError"}, results


# -- the dry run asks the load's own trust step --------------------------------------------

TRUST_CASES = {
    "allowed by a rule": ('[[allow]]\nrepo = "acme/models"\n', None, "load"),
    "unknown, nobody to ask": ("", None, "refuse"),
    "trusted this content": ("", "this", "load"),
    "trusted another commit": ("", "other", "refuse"),
    "warn mode, violated": ('[safehub]\nmode = "warn"\n[[allow]]\nrepo = "acme/models"\n'
                            'refs = ["v9*"]\n', None, "refuse"),
}


@pytest.mark.parametrize("case", list(TRUST_CASES))
def test_check_and_load_reach_the_same_trust_verdict(hub_repo: HubRepo, isolated: Path,
                                                     canary: Path, case: str) -> None:
    rules, trusted, expected = TRUST_CASES[case]
    (isolated / "config" / "safehub").mkdir(parents=True, exist_ok=True)
    (isolated / "config" / "safehub" / "policy.toml").write_text(rules)
    hub = safehub.Hub(noninteractive=True)
    if trusted == "other":
        first = hub_repo.sha
        hub_repo.commit({"README.md": "again\n"})
        hub_repo.tag("v1.0")
        hub.consents.record("acme/models", first, "sha256:" + "0" * 64, "test")
    if trusted == "this":
        hub.trust("acme/models:v1.0")
    for fresh in (True, False):  # nothing cached yet, then the tree cached (digest known)
        report = operations.check(hub, "acme/models:v1.0")
        try:
            safehub.Hub(noninteractive=True).load("acme/models:v1.0", "echo", verbose=False)
            loaded = "load"
        except safehub.UntrustedRepoError:
            loaded = "refuse"
        assert (report.outcome, loaded) == (expected, expected), (fresh, report)
        if fresh:
            safehub.Hub().fetcher.tree(hub.admission.admit(
                safehub.policy.RepoSpec.parse("acme/models:v1.0")).resolved, None,
                verbose=False)
