"""Small contracts of issues 8 to 11 that have no better home: the injectable transport,
warnings that point at the caller, where offline mode came from, filesystem errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import safehub
from safehub.sources.transport import Transport, TransportConfig
from tests.conftest import HubRepo


def test_the_transport_is_injectable(hub_repo: HubRepo) -> None:
    """Hub(transport=...) takes the network as python-tuf's Updater(fetcher=...) does."""
    offline = Transport(TransportConfig(offline=True, offline_source="a test"))
    with pytest.raises(safehub.OfflineError, match="a test"):
        safehub.Hub(transport=offline).load("acme/models:v1.0", "echo", trust_repo=True)


def test_offline_mode_names_where_it_came_from(hub_repo: HubRepo, isolated: Path) -> None:
    path = isolated / "config/safehub/policy.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[safehub]\noffline = true\n")
    with pytest.raises(safehub.OfflineError, match=f"offline in {path}"):
        safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)


@pytest.mark.parametrize("call", ["load", "list", "help"])
def test_warnings_point_at_the_callers_line(hub_repo: HubRepo, isolated: Path,
                                            call: str) -> None:
    pytest.importorskip("torch")
    path = isolated / "config/safehub/policy.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[safehub]\nmode = 'warn'\n[[allow]]\nrepo = 'acme/*'\nrefs = ['x']\n")
    args = {"load": ("echo",), "list": (), "help": ("echo",)}[call]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(safehub, call)("acme/models:v1.0", *args, trust_repo=True)
    ours = [w for w in caught if "policy violation" in str(w.message)]
    assert ours and all(w.filename == __file__ for w in ours), [w.filename for w in ours]


def test_a_full_disk_at_install_is_a_cache_error(hub_repo: HubRepo,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    real = os.replace

    def full(src: object, dst: object) -> None:
        if "commits" in str(dst):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(safehub.CacheError, match="No space left"):
        safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)
