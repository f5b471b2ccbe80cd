"""``weights_format`` in an ``[[allow]]`` rule, and the safetensors header check.

A rule that allows only ``"safetensors"`` refuses a pickle checkpoint from a held path
before anything deserialises it (nothing left in the target folder), and refuses the
repo's own ``torch.load(weights_only=False)`` (the runtime guard); a format must be in every
matching rule's list. A safetensors file whose header lies about the file is an
``IntegrityError`` whatever the rule, deleted before it is handed over. Real torch, real
safetensors files, a loopback HTTPS weights host; each attack with its honest case.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

import safehub
from safehub.errors import IntegrityError, PolicyDenied, RuntimeGuardError
from safehub.policy import Policy
from safehub.spec import RepoSpec
from safehub.verify.checkpoint import PICKLE, SAFETENSORS, CheckpointError, read_kind
from tests.helpers_load import policy
from tests.support import GitHubStandIn

HUBCONF = '''\
import os

import torch

dependencies = ["torch"]


def fetch(url, folder):
    """Download url into folder; return the file's path."""
    path = os.path.join(folder, os.path.basename(url))
    torch.hub.download_url_to_file(url, path, progress=False)
    return path


def tensors(url, folder):
    """Download a safetensors file and load it with the safetensors package."""
    from safetensors.torch import load_file

    return load_file(fetch(url, folder))


def state(url):
    """torch.hub's own helper (weights_only as the policy says)."""
    return torch.hub.load_state_dict_from_url(url, progress=False)


def unpickle(path):
    """The repo's own torch.load, asking for pickles."""
    return torch.load(path, weights_only=False)


def unpickle_safely(path):
    """The repo's own torch.load with torch's weights-only unpickler."""
    return torch.load(path, weights_only=True)
'''


def _safetensors(tensors: dict[str, object]) -> bytes:
    from safetensors.torch import save

    return save(tensors)  # type: ignore[arg-type]


def _forged(header: dict[str, object], data: bytes, *, length: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


@pytest.fixture
def host(server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
         monkeypatch: pytest.MonkeyPatch) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "models", {"hubconf.py": HUBCONF})
    base = server.api_url.rsplit("/api", 1)[0]
    return base


def _rule(isolated: Path, base: str, formats: str | None) -> None:
    line = f"weights_format = {formats}\n" if formats else ""
    policy(isolated, f"[[allow]]\nrepo = 'acme/models'\nweights = ['{base}/w/*']\n{line}")


def _pickle_bytes() -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    return buf.getvalue()


# -- the rule: pickles refused before they are deserialised ---------------------------------


def test_a_pickle_checkpoint_is_refused_where_only_safetensors_is_allowed(
        host: str, server: GitHubStandIn, isolated: Path, tmp_path: Path) -> None:
    server.add_static("/w/model.pth", _pickle_bytes())
    _rule(isolated, host, '["safetensors"]')
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(PolicyDenied, match="pickle checkpoint") as err:
        safehub.load("acme/models:v1.0", "fetch", f"{host}/w/model.pth", str(folder),
                     verbose=False)
    assert list(folder.iterdir()) == []  # nothing handed over, no partial file
    assert "weights_format" in str(err.value)
    with pytest.raises(PolicyDenied, match="pickle checkpoint"):  # torch.hub's own helper
        safehub.load("acme/models:v1.0", "state", f"{host}/w/model.pth", verbose=False)
    assert not list((isolated / "cache" / "torch").rglob("model.pth"))


def test_a_pickle_checkpoint_loads_where_the_rule_allows_it(
        host: str, server: GitHubStandIn, isolated: Path) -> None:
    server.add_static("/w/model.pth", _pickle_bytes())
    _rule(isolated, host, None)  # the default: both formats
    state = safehub.load("acme/models:v1.0", "state", f"{host}/w/model.pth", verbose=False)
    assert list(state) == ["w"]


def test_a_safetensors_file_loads_where_only_safetensors_is_allowed(
        host: str, server: GitHubStandIn, isolated: Path, tmp_path: Path) -> None:
    import torch

    server.add_static("/w/model.safetensors",
                      _safetensors({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                                    "b": torch.zeros(0, dtype=torch.bfloat16)}))
    _rule(isolated, host, '["safetensors"]')
    got = safehub.load("acme/models:v1.0", "tensors", f"{host}/w/model.safetensors",
                       str(tmp_path), verbose=False)
    assert got["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_the_formats_of_matching_rules_intersect() -> None:
    text = ("[[allow]]\nrepo = 'acme/*'\nweights_format = ['safetensors', 'pickle']\n"
            "[[allow]]\nrepo = 'acme/models'\nweights_format = ['safetensors']\n")
    reqs = Policy.from_text(text, "/p.toml").decide(RepoSpec.parse("acme/models")).requirements
    assert reqs.weights_format == {"safetensors"}
    reqs = Policy.from_text(text, "/p.toml").decide(RepoSpec.parse("acme/other")).requirements
    assert reqs.weights_format == {"safetensors", "pickle"}
    from safehub.policy.schema import parse_text

    site = parse_text("[[allow]]\nrepo = 'acme/*'\nweights_format = ['safetensors']\n",
                      "/site.toml", origin="site")
    user = parse_text("[[allow]]\nrepo = 'acme/models'\nweights_format = ['pickle']\n",
                      "/user.toml", origin="user")
    reqs = Policy.from_files([site, user]).decide(RepoSpec.parse("acme/models")).requirements
    assert reqs.weights_format == frozenset()  # a later file adds nothing: nothing passes


def test_the_repos_own_torch_load_of_a_pickle_is_refused_under_the_rule(
        host: str, isolated: Path, tmp_path: Path) -> None:
    """A pickle the repo has by other means (its own tree, a file it wrote) is refused as
    torch.load(weights_only=False) names its first global, before that global runs."""
    import os

    canary = tmp_path / "planted-ran"

    class Plant:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return (open, (str(canary), "w"))

    import pickle

    bad = tmp_path / "planted.pkl"
    bad.write_bytes(pickle.dumps(Plant()))
    good = tmp_path / "good.pth"
    good.write_bytes(_pickle_bytes())
    _rule(isolated, host, '["safetensors"]')
    with pytest.raises(RuntimeGuardError, match="deserialise a pickle") as err:
        safehub.load("acme/models:v1.0", "unpickle", str(bad), verbose=False)
    assert not os.path.exists(canary)
    assert err.value.key == "weights_format" and err.value.action == "pickle"
    with pytest.raises(RuntimeGuardError, match="deserialise a pickle"):
        safehub.load("acme/models:v1.0", "unpickle", str(good), verbose=False)
    # torch's weights-only unpickler is allowed: it calls no global the file names
    assert list(safehub.load("acme/models:v1.0", "unpickle_safely", str(good),
                             verbose=False)) == ["w"]
    _rule(isolated, host, None)
    assert list(safehub.load("acme/models:v1.0", "unpickle", str(good), verbose=False)) == ["w"]


# -- a safetensors header that lies is an IntegrityError, the file deleted -------------------

_DATA = bytes(range(16))
_LIES = {
    "length past the end": _forged({"w": {"dtype": "U8", "shape": [16],
                                          "data_offsets": [0, 16]}}, _DATA, length=10**6),
    "span past the data": _forged({"w": {"dtype": "U8", "shape": [32],
                                         "data_offsets": [0, 32]}}, _DATA),
    "overlap": _forged({"a": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]},
                        "b": {"dtype": "U8", "shape": [10], "data_offsets": [6, 16]}}, _DATA),
    "gap": _forged({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                    "b": {"dtype": "U8", "shape": [4], "data_offsets": [12, 16]}}, _DATA),
    "dtype times shape": _forged({"w": {"dtype": "F32", "shape": [2],
                                        "data_offsets": [0, 16]}}, _DATA),
    "unknown dtype": _forged({"w": {"dtype": "X9", "shape": [16],
                                    "data_offsets": [0, 16]}}, _DATA),
    "not JSON": struct.pack("<Q", 6) + b"{nope}" + _DATA,
    "duplicate key": (struct.pack("<Q", 97) + (
        b'{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},'
        b'"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}') + _DATA),
    "NaN": (lambda raw: struct.pack("<Q", len(raw)) + raw + _DATA)(
        b'{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"__metadata__":{"x":NaN}}'),
    "short": b"\x10\x00\x00",
}


@pytest.mark.parametrize("lie", sorted(_LIES))
def test_a_safetensors_header_that_lies_is_refused_and_deleted(
        host: str, server: GitHubStandIn, isolated: Path, tmp_path: Path, lie: str) -> None:
    server.add_static("/w/model.safetensors", _LIES[lie])
    _rule(isolated, host, None)  # whatever the format rule
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(IntegrityError, match="claim to be safetensors"):
        safehub.load("acme/models:v1.0", "fetch", f"{host}/w/model.safetensors",
                     str(folder), verbose=False)
    assert list(folder.iterdir()) == []


def test_the_header_check_reads_real_safetensors_files() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from safetensors.torch import save

    data = save({"f": torch.ones(3, 5), "h": torch.ones(7, dtype=torch.float16),
                 "i": torch.arange(11), "b": torch.ones(3, dtype=torch.bool),
                 "e": torch.zeros(0, 4)}, metadata={"format": "pt"})
    assert read_kind(io.BytesIO(data), len(data)) == SAFETENSORS
    with pytest.raises(CheckpointError, match="data section"):
        read_kind(io.BytesIO(data + b"x"), len(data) + 1)
    pickled = _pickle_bytes()
    assert read_kind(io.BytesIO(pickled), len(pickled)) == PICKLE
    with pytest.raises(CheckpointError):
        read_kind(io.BytesIO(pickled), len(pickled), named=True)


def test_only_a_header_length_that_fits_the_file_claims_safetensors() -> None:
    """An unnamed file claims safetensors by its first bytes only where they are a header
    length that fits in the file, then '{': a JSON or text file whose ninth byte is '{' is
    other bytes (torch.load's to read, under the pickle rules), not a broken safetensors."""
    for text in (b'{"models{": 1}\n', b"weights:{\n  a: 1\n}\n" * 10, b"# commnt{ x\n"):
        assert text[8:9] == b"{"
        assert read_kind(io.BytesIO(text), len(text)) == PICKLE
    lying = struct.pack("<Q", 40) + b'{"w": 1}' + bytes(40)  # fits, then a broken header
    with pytest.raises(CheckpointError):
        read_kind(io.BytesIO(lying), len(lying))
    with pytest.raises(CheckpointError):  # named: whatever its bytes
        read_kind(io.BytesIO(b'{"models{": 1}\n'), 15, named=True)


def test_a_warn_mode_file_only_warns_about_its_format_rule(
        host: str, server: GitHubStandIn, isolated: Path) -> None:
    server.add_static("/w/model.pth", _pickle_bytes())
    policy(isolated, "[safehub]\nmode = 'warn'\n[[allow]]\nrepo = 'acme/models'\n"
           f"weights = ['{host}/w/*']\nweights_format = ['safetensors']\n")
    with pytest.warns(UserWarning, match="mode = 'warn', allowed"):
        state = safehub.load("acme/models:v1.0", "state", f"{host}/w/model.pth",
                             verbose=False)
    assert list(state) == ["w"]
