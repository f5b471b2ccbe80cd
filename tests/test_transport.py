"""Time and size are bounded: a server that answers slowly or forever cannot hold a load.
Every request has a total deadline (``SAFEHUB_TIMEOUT``), not a per-read one that a drip of
bytes keeps alive; paged listings (the branches and tags searched for a commit's provenance)
stop after a bounded number of pages. On the loopback GitHub, with real git repos.
"""

from __future__ import annotations

import pytest

import safehub
from safehub.errors import FetchError, PinError
from tests.conftest import HubRepo
from tests.support import GitHubStandIn, Reply


def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, trust_repo=True, verbose=False, **kwargs)


def test_a_server_that_drips_is_cut_off_at_the_deadline(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "1.5")
    server.drip(server.codeload_url, chunk_size=1, delay=0.1)  # bytes keep coming, slowly
    with pytest.raises(FetchError, match="longer than 1.5 s"):  # the deadline, not forever
        load("acme/models:v1.0")


def test_ref_listing_is_bounded(hub_repo: HubRepo, make_hub_repo,  # type: ignore[no-untyped-def]
                                server: GitHubStandIn) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"evil.py": "x = 1\n"})
    page = [{"name": f"b{i}", "commit": {"sha": "f" * 40, "url": "x"}} for i in range(100)]

    def endless(record: object) -> Reply:
        return Reply.json(page, headers=[("Link", '<https://x/?page=2>; rel="next"')])

    server.intercept(lambda r: "/branches" in r.path or "/tags?" in r.path, endless)
    with pytest.raises(PinError):
        load(f"acme/models:{evil}")
    listed = [r for r in server.requests_log if "/branches" in r.path or "/tags?" in r.path]
    assert len(listed) <= 20 and len(server.requests_log) < 60


@pytest.mark.parametrize("spelling", [
    "https://{foreign}\\@{codeload}{path}", "//{foreign}\\@{codeload}{path}",
    "https://{foreign}\t@{codeload}{path}", "https://{codeload}@{foreign}{path}"])
def test_an_archive_redirect_two_parsers_read_as_two_hosts_is_refused(
        hub_repo: HubRepo, server: GitHubStandIn, spelling: str) -> None:
    """The web host sends the archive to ``https://FOREIGN\\@CODELOAD/...``: Python's
    parser reads the allowed codeload host, requests would connect to the foreign one.
    Refused before anything is sent; with the honest redirect the same load works."""
    codeload = f"{server.host('codeload')}:{server.port}"
    foreign = f"{server.host('foreign')}:{server.port}"
    location = spelling.format(foreign=foreign, codeload=codeload,
                               path=f"/codeload/acme/models/legacy.zip/{hub_repo.sha}")
    with server.intercept(lambda r: "/zipball/" in r.path, Reply.redirect(location)), \
            pytest.raises(FetchError) as e:
        load("acme/models:v1.0")
    assert not any(r.role == "foreign" for r in server.requests_log)
    assert "archive of acme/models" in e.value.message
    assert location.replace("\t", "\\t") in e.value.message and e.value.hint
    assert load("acme/models:v1.0") is not None  # the stand-in's own redirect


def test_a_ca_bundle_that_does_not_exist_is_named_and_its_fix_works(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """What a stopped `demo --serve` leaves in a shell: REQUESTS_CA_BUNDLE naming a deleted
    file. Not "check the network": the variable, and how to mend it."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", f"{tmp_path}/gone/ca.pem")
    before = len(server.requests_log)
    with pytest.raises(FetchError) as e:
        load("acme/models:v1.0")
    assert "REQUESTS_CA_BUNDLE names does not exist" in e.value.message
    assert "unset REQUESTS_CA_BUNDLE" in e.value.hint and "network" not in e.value.hint
    assert len(server.requests_log) == before  # nothing was sent
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.ca_cert))  # "point it at a PEM file"
    load("acme/models:v1.0")
