"""Weights are hashed in the same pass as the download (the file is not read back), and a
warm load that finds a checked checkpoint in torch's folder reads none of its bytes while
its stat identity (size, mtime, ctime, inode) is the one recorded; any change re-hashes it,
and a swapped file is refused. A download cut short and retried is hashed from its start.
Real torch, a loopback HTTPS weights host (issue 32, item 3).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import safehub
import safehub.run.weights as weights_module
from safehub.errors import IntegrityError
from tests.helpers_load import policy
from tests.support import GitHubStandIn, Reply

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")


def prefixed(url, path, prefix):
    """Download with torch's hash_prefix check."""
    torch.hub.download_url_to_file(url, path, hash_prefix=prefix, progress=False)
    return path
'''


def _checkpoint(value: float) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.full((4096,), value)}, buf)
    return buf.getvalue()


@pytest.fixture
def url(server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> str:
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    server.add_static("/weights/w.pth", _checkpoint(1.0))
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    base = server.api_url.rsplit("/api", 1)[0]
    policy(isolated, f"[[allow]]\nrepo = 'acme/weighted'\nweights = ['{base}/weights/*']\n")
    return f"{base}/weights/w.pth"


class _Reads:
    """Counts safehub's own reads of a checkpoint: a full hash, or a header read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.hashed: list[str] = []
        self.sniffed: list[str] = []
        hash_of, kind_of = weights_module.sha256_of, weights_module.file_kind

        def hashed(path: Path) -> str:
            self.hashed.append(str(path))
            return hash_of(path)

        def sniffed(path: str, *, named: bool = False) -> str:
            self.sniffed.append(path)
            return kind_of(path, named=named)

        monkeypatch.setattr(weights_module, "sha256_of", hashed)
        monkeypatch.setattr(weights_module, "file_kind", sniffed)


def _checkpoint_file(isolated: Path) -> Path:
    return next(isolated.rglob("checkpoints/w.pth"))


def test_a_download_is_hashed_as_it_is_written_and_a_warm_load_reads_none_of_it(
        url: str, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _Reads(monkeypatch)
    assert safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)["w"][0] == 1.0
    assert reads.hashed == []  # hashed in the download's own pass
    reads.sniffed.clear()
    assert safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)["w"][0] == 1.0
    assert reads.hashed == [] and reads.sniffed == []  # the stat identity vouches for it
    cached = _checkpoint_file(isolated)
    os.utime(cached)  # any change to its stat identity: hashed again (and still the pin)
    assert safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)["w"][0] == 1.0
    assert reads.hashed == [str(cached)]


def test_a_swapped_checkpoint_of_the_same_size_is_refused_on_a_warm_load(
        url: str, isolated: Path) -> None:
    safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)
    cached = _checkpoint_file(isolated)
    swapped = _checkpoint(2.0)
    assert len(swapped) == cached.stat().st_size
    st = cached.stat()
    cached.write_bytes(swapped)
    os.utime(cached, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime moves
    with pytest.raises(IntegrityError, match="was pinned"):
        safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)
    assert not cached.exists()


def test_a_download_cut_short_and_retried_is_hashed_from_its_start(
        url: str, server: GitHubStandIn, isolated: Path) -> None:
    body = _checkpoint(1.0)
    server.intercept("/weights/w.pth", Reply(200, body, cut_after=len(body) // 2), times=1)
    assert safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)["w"][0] == 1.0
    for f in isolated.rglob("checkpoints/w.pth"):
        f.unlink()
    assert safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)["w"][0] == 1.0


def test_torchs_hash_prefix_is_checked_on_the_streamed_digest(
        url: str, tmp_path: Path) -> None:
    import hashlib

    digest = hashlib.sha256(_checkpoint(1.0)).hexdigest()
    target = tmp_path / "w.pth"
    with pytest.raises(RuntimeError, match="invalid hash value"):
        safehub.load("acme/weighted:v1.0", "prefixed", url, str(target), "00000000",
                     verbose=False)
    assert not target.exists()
    assert safehub.load("acme/weighted:v1.0", "prefixed", url, str(target), digest[:8],
                        verbose=False) == str(target)


class _Dribble(io.BytesIO):
    """A raw file that takes at most 3 bytes a write (as a raw write may)."""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        return super().write(bytes(data[:3]))


def test_a_hashed_download_starts_over_on_a_rewind_and_goes_on_when_resumed() -> None:
    import hashlib

    from safehub._internal.hashing import Hashing

    out = _Dribble()
    hashed = Hashing(out)
    hashed.write(b"garbage")
    hashed.seek(0)  # a retry from the first byte: the hash starts over
    hashed.truncate()
    hashed.write(b"hello ")
    hashed.seek(6)  # a resumed download: what was written stays hashed
    hashed.truncate()
    hashed.write(b"world")
    assert out.getvalue() == b"hello world" and hashed.size == 11
    assert hashed.hexdigest() == hashlib.sha256(b"hello world").hexdigest()
    with pytest.raises(io.UnsupportedOperation):
        hashed.seek(3)  # anywhere else would leave the hash not the file's
