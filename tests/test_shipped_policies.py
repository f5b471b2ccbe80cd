"""The ready-made files in policies/ are valid and do what docs/policy.md says."""

from __future__ import annotations

from pathlib import Path

import pytest

from safehub.policy import Policy, validate_file
from safehub.spec import RepoSpec

POLICIES = Path(__file__).parents[1] / "policies"
SHA = "0123456789abcdef0123456789abcdef01234567"


def load(name: str) -> Policy:
    return validate_file(POLICIES / name)


@pytest.mark.parametrize("path", sorted(POLICIES.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_policy_is_valid(path: Path) -> None:
    assert validate_file(path).rules


def test_there_are_the_four_documented_policies() -> None:
    assert {p.name for p in POLICIES.glob("*.toml")} == {
        "strict-org.toml", "team-allowlist.toml", "ci.toml", "warn-rollout.toml"}
    docs = (Path(__file__).parents[1] / "docs/policy.md").read_text()
    for p in POLICIES.glob("*.toml"):
        assert f"policies/{p.name}" in docs


def test_strict_org() -> None:
    p = load("strict-org.toml")
    assert p.decide(RepoSpec.parse("someone/else:v1")).verdict == "deny"
    assert p.decide(RepoSpec.parse("your-org/models:v1")).verdict == "deny"  # not pinned
    ok = p.decide(RepoSpec.parse(f"your-org/models:{SHA}"))
    assert ok.verdict == "allow" and ok.requirements.signature == "required"
    assert p.setting("tree_fallback")[0] is False
    assert p.decide(RepoSpec.parse(f"your-org/models-fork:{SHA}")).verdict == "deny"


def test_team_allowlist() -> None:
    p = load("team-allowlist.toml")
    assert p.decide(RepoSpec.parse("pytorch/vision:v0.19.0"), entrypoint="resnet50").verdict \
        == "allow"
    assert p.decide(RepoSpec.parse("pytorch/vision:main")).verdict == "deny"
    assert p.decide(RepoSpec.parse("pytorch/vision:v0.19.0"), entrypoint="raft").verdict \
        == "deny"
    d = p.decide(RepoSpec.parse("ultralytics/yolov5:v7.0"))
    assert d.verdict == "deny" and "vendored" in d.reasons[0]


def test_ci_policy_paths_are_relative_to_the_file() -> None:
    p = load("ci.toml")
    assert p.setting("audit_log") == (str(POLICIES / "safehub-audit.jsonl"),
                                      str(POLICIES / "ci.toml"), False)
    assert p.setting("noninteractive")[0] is True


def test_warn_rollout_never_denies() -> None:
    p = load("warn-rollout.toml")
    d = p.decide(RepoSpec.parse("someone/else:v1"))
    assert d.verdict == "prompt" and d.violations
