"""Refs written in full in a rule (``refs/heads/dev``, ``refs/tags/v*``) match the ref
however it is asked: ``dev``, ``heads/dev`` or ``refs/heads/dev``, cold or from the cache's
record of the ref, and for locked loads (the lockfile keeps the full name, ``resolved_ref``;
one written before it did is still held to a deny). A rule for branches leaves tags alone,
and one for tags admits no branch. On the loopback GitHub; the canary proves what ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from tests.conftest import runs
from tests.helpers_load import policy

pytest.importorskip("torch")


@pytest.fixture
def branches(hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    hub_repo.git("branch", "dev")
    hub_repo.git("branch", "vnext")
    return policy(isolated, "", "config")


@pytest.mark.parametrize("asked", ["dev", "heads/dev", "refs/heads/dev"])
def test_a_deny_rule_written_in_full_denies_the_short_names(branches: Path, asked: str,
                                                             canary: Path) -> None:
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/dev"]\n'
                        'reason = "dev is not reviewed"\n')
    for _ in range(2):  # cold, then from the cache's record of the ref
        with pytest.raises(safehub.PolicyDenied, match="dev is not reviewed"):
            safehub.load(f"acme/models:{asked}", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_deny_rule_for_branches_leaves_tags_alone(branches: Path, canary: Path) -> None:
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/*"]\n')
    assert safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False) == ((), {})
    with pytest.raises(safehub.PolicyDenied):
        safehub.load("acme/models:dev", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 1


def test_an_allow_rule_for_tags_admits_tags_asked_short_and_no_branch(branches: Path,
                                                                     canary: Path) -> None:
    branches.write_text('[safehub]\nunknown_repos = "deny"\n'
                        '[[allow]]\nrepo = "acme/models"\nrefs = ["refs/tags/v*"]\n')
    assert safehub.load("acme/models:v1.0", "echo", verbose=False) == ((), {})
    for _ in range(2):
        with pytest.raises(safehub.PolicyDenied, match="vnext"):
            safehub.load("acme/models:vnext", "echo", verbose=False)
    assert runs(canary) == 1


@pytest.mark.parametrize("legacy", [False, True])
def test_refs_in_full_hold_for_locked_loads(branches: Path, canary: Path,
                                            legacy: bool) -> None:
    """The lockfile keeps the full name (resolved_ref); one written before it did is held
    to a deny for either kind."""
    assert main(["lock", "acme/models:dev", "acme/models:vnext"]) == 0
    lock = Path("safehub.lock")
    if legacy:
        lock.write_text("".join(line for line in lock.read_text().splitlines(keepends=True)
                                if not line.startswith("resolved_ref")))
    else:
        assert 'resolved_ref = "refs/heads/dev"' in lock.read_text()
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/dev"]\n'
                        'reason = "dev is not reviewed"\n')
    with pytest.raises(safehub.PolicyDenied, match="dev is not reviewed"):
        safehub.load("acme/models:dev", "echo", trust_repo=True, verbose=False)
    if not legacy:
        branches.write_text('[[allow]]\nrepo = "acme/models"\nrefs = ["refs/tags/v*"]\n')
        with pytest.raises(safehub.PolicyDenied, match="vnext"):
            safehub.load("acme/models:vnext", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0
