"""``safehub check``, the dry run, says what the load would do: a required signature is
checked (against the key the policy names, or found missing) before check says LOAD, and
its fix, applied as given, leads to the answer the load then gives; an entrypoint the
repo does not define is named together with the ones it does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import safehub
from safehub import operations
from safehub._internal.fixes import render
from tests.helpers_load import cli
from tests.test_fixes import apply_fix
from tests.test_signatures import new_key
from tests.test_signed_load import Signed, require_key

pytest.importorskip("torch")


@pytest.mark.parametrize(("right_key", "outcome", "code"), [
    (True, "load", 0), (False, "refuse", 1)], ids=["signed-by-the-key", "another-key"])
def test_check_of_a_required_signature(server, tmp_path: Path, isolated: Path,  # type: ignore[no-untyped-def]
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, right_key: bool,
                                       outcome: str, code: int) -> None:
    monkeypatch.setenv("CI", "true")
    signed = Signed(tmp_path, server)
    pub = signed.pub
    if not right_key:
        pub = tmp_path / "other.pub"
        pub.write_bytes(new_key(tmp_path / "other.pem"))
    require_key(isolated, pub)
    spec = f"{signed.spec}:v1.0"
    rc, out, _ = cli(capsys, "check", spec, "--json")
    report = json.loads(out)
    assert (rc, report["outcome"]) == (1, "conditional")  # not LOAD: nothing was checked
    assert str(pub) in report["why"] and "signature" in report["why"]
    fix = operations.check(safehub.Hub(), spec).fix  # what the report printed, as data
    assert fix is not None and render(fix) == report["fix"]
    apply_fix(fix)
    capsys.readouterr()
    rc, out, _ = cli(capsys, "check", spec, "--json")
    report = json.loads(out)
    assert (rc, report["outcome"]) == (code, outcome), report
    assert report["signature"] != "MISSING"
    assert cli(capsys, "load", spec, "tiny")[0] == code  # check said what the load does


def test_check_says_a_required_signature_is_missing(hub_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    isolated: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    require_key(isolated, pub)
    cli(capsys, "prefetch", f"{hub_repo.spec}:v1.0")  # fetches the (unsigned) tree
    rc, out, _ = cli(capsys, "check", f"{hub_repo.spec}:v1.0", "--json")
    report = json.loads(out)
    assert (rc, report["outcome"], report["signature"]) == (1, "refuse", "MISSING"), report


@pytest.mark.parametrize("asked", ["nosuch", "dependencies", "os"])
def test_check_entrypoint_lists_the_real_ones(hub_repo, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                              asked: str) -> None:
    Path("safehub.toml").write_text("[[allow]]\nrepo = 'acme/*'\n")
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--entrypoint", asked, "--json")
    report = json.loads(out)
    assert (rc, report["entrypoint_found"]) == (1, False)
    assert report["why"].endswith("it defines: echo, tiny")  # no dependencies, no modules
    assert cli(capsys, "check", "acme/models:v1.0", "--entrypoint", "tiny")[0] == 0
