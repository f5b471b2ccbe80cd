"""Finding a repo's signature: in the tree, at a release asset, at a URL, or on disk.

The policy's ``signature_url`` says where (default: ``model.sig`` at the repo root):

* ``release:ASSET``: the asset of the release named by the ref
  (``{web}/{owner}/{name}/releases/download/{ref}/ASSET``);
* an ``https://`` URL template;
* a local path (relative to the policy file that names it).

Templates take ``{owner}`` ``{name}`` ``{repo}`` ``{ref}`` ``{commit}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import SignatureError
from safehub.verify.signatures.signers import DEFAULT_SIGNATURE, SignerSet

__all__ = ["Found", "find_signature"]

MAX_SIGNATURE_BYTES = 16 * 1024 * 1024


class Found(Frozen):
    """A signature's bytes, and its path in the tree if it lives there."""

    data: bytes
    in_tree: str | None
    where: str


def find_signature(tree: Path, sets: Sequence[SignerSet], values: Mapping[str, str], *,
                   web_url: str, fetch: Callable[[str], bytes | None]) -> Found | None:
    """The signature the rules point at, or None if there is none there.

    ``values`` fill the template's placeholders; ``fetch`` downloads an https URL (None
    for a 404).
    """
    chosen = next((s for s in sets if s.location), None)
    if chosen is None or chosen.location is None:
        path = tree / DEFAULT_SIGNATURE
        return Found(_read(path), DEFAULT_SIGNATURE, DEFAULT_SIGNATURE) if path.is_file() \
            else None
    location = chosen.location
    if location.startswith("release:"):
        location = (f"{web_url}/{values['owner']}/{values['name']}/releases/download/{{ref}}/"
                    + location.removeprefix("release:"))
    try:
        target = location.format(**values)
    except (KeyError, ValueError, IndexError) as e:
        raise SignatureError(f"bad signature_url {chosen.location!r} in {chosen.source}: {e}",
                             fix=fixes.say("placeholders: {owner} {name} "
                                           "{repo} {ref} {commit}")) from e
    if target.startswith("https://"):
        data = fetch(target)
        return None if data is None else Found(data, None, target)
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = Path(chosen.policy_file).parent / path
    return Found(_read(path), None, str(path)) if path.is_file() else None


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SIGNATURE_BYTES + 1)
    except OSError as e:
        raise SignatureError(f"cannot read the signature {path} ({e.strerror})",
                             fix=fixes.say("check the file's permissions")) from e
    if len(data) > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"the signature {path} is larger than {MAX_SIGNATURE_BYTES:,} "
                             "bytes", fix=fixes.say("a signature bundle is a few kilobytes; do not "
                                                    "load this repo"))
    return data
