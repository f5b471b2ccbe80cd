"""What safehub reads back from disk is input: its own records (the cache's record of a
repo's refs and commits, a commit's cache entry, the verification and consent records) may
have been edited by anyone who can write the folder. A malformed record never names a
path, never allows: it is a CacheError or an IntegrityError, or (a verification record) as
if absent, so the tree is verified again before it is served. On the loopback GitHub, with
real git repos.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import safehub
from safehub.errors import CacheError
from tests.conftest import HubRepo


def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, trust_repo=True, verbose=False, **kwargs)


def _repo_record(isolated: Path) -> Path:
    return next((isolated / "cache").rglob("repos/acme/models.json"))


def test_a_cache_record_cannot_name_a_path(hub_repo: HubRepo, isolated: Path) -> None:
    load("acme/models:v1.0")
    record = _repo_record(isolated)
    data = json.loads(record.read_text())
    data["refs"]["v1.0"]["commit"] = "../../x"
    record.write_text(json.dumps(data))
    sentinel = record.parents[3] / "x-keep"
    sentinel.mkdir()
    with pytest.raises(CacheError, match="malformed"):
        load("acme/models:v1.0")
    assert sentinel.is_dir()


@pytest.mark.parametrize("text", ['{"refs": []}', "[1, 2]", '{"refs": {"v1.0": 3}}',
                                  '{"commits": {"abc": {"tree": 1}}}', "{" * 5000, "not json",
                                  '{"moved_to": "../../evil"}'])
def test_a_malformed_cache_record_is_a_cache_error(hub_repo: HubRepo, isolated: Path,
                                                   text: str) -> None:
    load("acme/models:v1.0")
    _repo_record(isolated).write_text(text)
    with pytest.raises(CacheError):
        load("acme/models:v1.0")


@pytest.mark.parametrize("text", ["[]", '{"digest": 3}', '{"scans": []}', "{" * 5000, "x"])
def test_a_malformed_verification_record_is_as_if_absent(
    hub_repo: HubRepo, isolated: Path, text: str
) -> None:
    load("acme/models:v1.0")
    for path in (isolated / "data").rglob("verified/*.json"):
        path.write_text(text)
    assert load("acme/models:v1.0", "echo", 3) == ((3,), {})  # re-verified, then served


@pytest.mark.parametrize("text", ['{"consents": {}}', "[]", "{" * 5000])
def test_a_malformed_consent_record_is_a_cache_error(hub_repo: HubRepo, isolated: Path,
                                                     text: str) -> None:
    load("acme/models:v1.0")
    for path in (isolated / "data").rglob("trust/acme/models.json"):
        path.write_text(text)
    with pytest.raises(CacheError, match="trust record"):
        load("acme/models:v1.0")


@pytest.mark.parametrize("field", ["commit", "digest", "tree", "level"])
def test_a_malformed_cache_entry_is_an_integrity_error(hub_repo: HubRepo, isolated: Path,
                                                       field: str) -> None:
    load("acme/models:v1.0")
    entry = next((isolated / "cache").rglob("commits/*/entry.json"))
    entry.parent.chmod(0o755)
    entry.chmod(0o644)
    data = json.loads(entry.read_text())
    data[field] = "../../etc" if field != "level" else ["x"]
    entry.write_text(json.dumps(data))
    with pytest.raises(safehub.IntegrityError):
        load("acme/models:v1.0")


def test_safehubs_own_places_come_from_the_records_declarations(tmp_path: Path) -> None:
    """Each records store keeps its files in the folder it declares; the one list of
    safehub's own places (what a confined job may not change, what safehub's own work may
    write during a load) holds every one of them, and names what each keeps."""
    from safehub._internal.fsutil import within_any
    from safehub.config import Settings
    from safehub.store import records
    from safehub.store.bytecode import BytecodeStore

    settings = Settings(cache_dir=tmp_path / "c", data_dir=tmp_path / "d", log_dir=tmp_path / "l")
    places = settings.own_places()
    stores = (records.ConsentStore(settings.data_dir), records.VerifiedRecords(settings.data_dir),
              records.SignatureRecords(settings.data_dir))
    kept = [str(s.root) for s in stores] + [str(records.WeightPins(settings.data_dir).path),
                                            str(BytecodeStore(settings.data_dir).root)]
    assert set(records.folders(settings.data_dir)) == {Path(p).parent if p.endswith(".json")
                                                       else Path(p) for p in kept}
    assert all(within_any(p, [str(place.path) for place in places]) for p in kept)
    described = next(p.what for p in places if p.path == settings.data_dir)
    assert all(keeps in described for keeps in records.FOLDERS.values())
    assert settings.audit_path in {p.path for p in places if p.file}
