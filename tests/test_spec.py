"""Spec parsing: malformed names are refused before any I/O."""

from __future__ import annotations

import pytest

from safehub.errors import SpecError
from safehub.spec import RepoSpec, is_full_sha, looks_like_sha


@pytest.mark.parametrize(
    ("text", "owner", "name", "ref"),
    [
        ("pytorch/vision", "pytorch", "vision", None),
        ("PyTorch/Vision:v0.10.0", "PyTorch", "Vision", "v0.10.0"),
        ("a/b:feature/x-1", "a", "b", "feature/x-1"),
        ("a-b/c.d_e:refs/tags/v1", "a-b", "c.d_e", "refs/tags/v1"),
        ("o/r:" + "a" * 40, "o", "r", "a" * 40),
    ],
)
def test_valid_specs(text: str, owner: str, name: str, ref: str | None) -> None:
    spec = RepoSpec.parse(text)
    assert (spec.owner, spec.name, spec.ref) == (owner, name, ref)
    assert spec.key == f"{owner}/{name}".lower()
    assert str(spec) == text


@pytest.mark.parametrize(
    "text",
    [
        "", "pytorch", "a/b/c", "/b", "a/", "-a/b", "a-/b", "a_b/c", "a/b:", "a/b:x y",
        "a/b:a..b", "a/b:~1", "a/b:x^", "a/b:@", "a/b:x@{1}", "a/b:-x", "a/b:x/", "a/b:x.lock",
        "a/b:.hidden", "a/b:refs/pull/1/head", "a/b:refs/remotes/o/x", "a/b:HEAD", "a/..",
        "a/b:pull/1/head", "a/b:PULL/1/merge", "a/b:remotes/origin/main",
        "a/.", "a/b.git", "a/b:x:y", "a/b:x\\y", "a/b:x\ny",
        "руtorch/vision",  # Cyrillic 'р' and 'у': a homoglyph of pytorch
        "pytorch/visiоn",  # Cyrillic 'о'
        "x" * 40 + "/r",
        "o/" + "r" * 101,
    ],
)
def test_malformed_specs_are_refused(text: str) -> None:
    with pytest.raises(SpecError) as err:
        RepoSpec.parse(text)
    assert err.value.hint  # every refusal says how to fix it
    assert isinstance(err.value, ValueError)  # torch raised ValueError for bad specs


def test_non_string_spec() -> None:
    with pytest.raises(SpecError):
        RepoSpec.parse(42)  # type: ignore[arg-type]


def test_sha_shapes() -> None:
    assert is_full_sha("0123456789abcdef0123456789abcdef01234567")
    assert not is_full_sha("0123456789ABCDEF0123456789abcdef01234567")
    assert looks_like_sha("abc1234") and looks_like_sha("abc1") and not looks_like_sha("abc")
    assert not looks_like_sha("v1.0")
