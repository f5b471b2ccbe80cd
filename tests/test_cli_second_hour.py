"""The second hour of a new user (issue 33): what the tools next door taught them works here,
and no message says more than safehub knows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import safehub
from safehub.cli import main


def test_hub_names_cache_dir_and_offline(isolated: Path, tmp_path: Path) -> None:
    params = inspect.signature(safehub.Hub.__init__).parameters
    assert {"cache_dir", "offline", "overrides"} <= set(params)
    assert "cache_dir" in (safehub.Hub.__init__.__doc__ or "")
    hub = safehub.Hub(cache_dir=tmp_path / "c", offline=True)
    assert hub.settings.cache_dir == tmp_path / "c" and hub.settings.offline is True
    assert safehub.Hub().settings.offline is False


def test_unreachable_api_names_a_ref_not_a_tag(isolated: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # isolated points the API at a closed loopback port: the lookup never gets an answer
    code = main(["check", "acme/models:main"])
    out = capsys.readouterr()
    err = out.out + out.err
    assert code != 0 and "cannot connect" in err, err
    assert "ref 'main'" in err and "tag 'main'" not in err, err


def test_keygen_makes_a_pair_that_signs_and_verifies(isolated: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 100)
    private = tmp_path / "keys" / "signing.pem"
    assert main(["keygen", str(private)]) == 0
    public = tmp_path / "keys" / "signing.pub"
    assert private.stat().st_mode & 0o777 == 0o600 and public.is_file()
    assert b"BEGIN PRIVATE KEY" in private.read_bytes()
    assert b"BEGIN PUBLIC KEY" in public.read_bytes()
    assert main(["sign", str(folder), "--key", str(private)]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--key", str(public)]) == 0
    # never over an existing key, neither half
    before = private.read_bytes()
    assert main(["keygen", str(private)]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert private.read_bytes() == before
    other = tmp_path / "other.pem"
    assert main(["keygen", str(other), "--public", str(public)]) == 2
    assert not other.exists()


def test_keygen_json(isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["keygen", str(tmp_path / "k"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"private_key": str(tmp_path / "k"),
                                                   "public_key": str(tmp_path / "k.pub")}


def test_verify_own_edited_folder_offers_signing_again(isolated: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import shlex

    folder, private, public = tmp_path / "model", tmp_path / "s.pem", tmp_path / "s.pub"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"one")
    assert main(["keygen", str(private)]) == 0
    assert main(["sign", str(folder), "--key", str(private)]) == 0
    signed_at = (folder / "model.sig").stat().st_mtime_ns
    (folder / "w.bin").write_bytes(b"two")
    os.utime(folder / "w.bin", ns=(signed_at + 10**9, signed_at + 10**9))
    capsys.readouterr()
    assert main(["verify", str(folder), "--key", str(public)]) == 1
    err = capsys.readouterr().err
    assert "w.bin differs" in err and "do not load it" in err, err
    line = next(x.strip() for x in err.splitlines() if x.strip().startswith("safehub sign "))
    words = [private if w == "KEY" else w for w in shlex.split(line)[1:]]
    assert main([str(w) for w in words]) == 0  # the printed fix, with the key filled in
    assert main(["verify", str(folder), "--key", str(public)]) == 0

    # a folder whose files are all older than its signature was not edited since: a
    # mismatch there is someone else's change, and signing again is not offered
    (folder / "w.bin").write_bytes(b"three")
    signed_at = (folder / "model.sig").stat().st_mtime_ns
    os.utime(folder / "w.bin", ns=(signed_at - 10**9, signed_at - 10**9))
    capsys.readouterr()
    assert main(["verify", str(folder), "--key", str(public)]) == 1
    err = capsys.readouterr().err
    assert "do not load it" in err and "safehub sign" not in err, err


def test_run_json_is_one_object_about_the_run(isolated: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import sys

    code = main(["run", "--json", "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert code == 3
    assert json.loads(capsys.readouterr().out) == {
        "command": [sys.executable, "-c", "raise SystemExit(3)"], "confine": None, "exit": 3}
    assert main(["run", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["exit"] == 2


@pytest.mark.parametrize("role", ["site", "user"])
def test_validate_as_a_role_says_where_that_role_is_read(
        role: str, isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re
    import shutil

    draft = tmp_path / "draft.toml"
    draft.write_text('[safehub]\nunknown_repos = "bogus"\n')
    assert main(["policy", "validate", "--as", role, str(draft)]) == 1
    err = capsys.readouterr().out
    assert "SAFEHUB_POLICY" not in err, err
    target = re.search(r"copy it to (\S+)\)", err)
    assert target is not None and f"the {role} file" in err, err
    draft.write_text('[safehub]\nunknown_repos = "prompt"\n')
    Path(target.group(1)).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(draft, target.group(1))  # the fix, applied
    assert main(["policy", "validate", target.group(1)]) == 0
    assert f"{role} file, in force" in capsys.readouterr().out


def test_env_checks_the_environment_read_only(isolated: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import os

    from safehub.policy import searched

    user = next(p.path for p in searched() if p.origin == "user")
    user.parent.mkdir(parents=True)
    user.write_text('[safehub]\nunknown_repos = "bogus"\n')
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    before = sorted(str(p) for p in isolated.rglob("*"))
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(str(p) for p in isolated.rglob("*")) == before  # nothing written
    assert report["versions"]["safehub"] == safehub.__version__
    assert {"torch", "sigstore", "model-signing", "requests", "huggingface_hub"} <= set(
        report["versions"])
    row = next(f for f in report["policy_files"] if f["role"] == "user")
    assert row["exists"] and row["valid"] is False and "unknown_repos" in row["error"]
    assert report["settings"]["offline"] == {"value": True, "from": "SAFEHUB_OFFLINE=1"}
    assert report["settings"]["locked"]["value"] is False
    assert report["cache_dir"]["writable"] is True
    assert report["torch_hub_dir"]["path"] == os.path.join(os.environ["TORCH_HOME"], "hub")
    assert report["environment_hook"]["state"] in ("missing", "installed", "changed")
    assert set(report["kernel"]) >= {"landlock_abi", "libseccomp", "confine_ok"}

    assert main(["env"]) == 0
    shown = capsys.readouterr().out
    assert f"{user}: INVALID" in shown and "offline: on (from SAFEHUB_OFFLINE=1)" in shown
    assert "Landlock ABI:" in shown and "libseccomp:" in shown
