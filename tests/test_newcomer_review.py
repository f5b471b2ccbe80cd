"""What a newcomer review found: each refusal tells the truth, and its fix works as written.

Table-driven like tests/test_fixes.py: each case makes safehub refuse (or answer), applies
the printed fix mechanically with that file's reader, and checks the next answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safehub._cli import main
from tests.test_fixes import apply, parse
from tests.test_signatures import new_key
from tests.test_signed_load import Signed, require_key

pytest.importorskip("torch")


def cli(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = main(list(words))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def apply_hint(hint: str) -> None:
    for options in parse(hint):
        mechanical = [f for f in options if f.kind != "say"]
        assert mechanical, f"not mechanical: {hint}"
        apply(mechanical[0])


# -- N2: check tells the truth about a required signature ----------------------------------

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
    apply_hint(report["fix"])
    capsys.readouterr()
    rc, out, _ = cli(capsys, "check", spec, "--json")
    report = json.loads(out)
    assert (rc, report["outcome"]) == (code, outcome), report
    assert cli(capsys, "load", spec, "tiny")[0] == code  # check said what the load does
