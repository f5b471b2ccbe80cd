"""The one grammar of an OCI place as ``SAFEHUB_OCI``, ``[safehub] oci`` and ``--oci`` write
it: ``REGISTRY/REPOSITORY`` (host, optional ``:port``, then a lower-case repository path, no
scheme) or ``oci:DIR`` (an OCI image layout folder).

>>> split_place("registry.example:5000/team/hub")
('registry.example:5000', 'team/hub')
>>> split_place("oci:/srv/layout")
('oci:', '/srv/layout')
>>> split_place("http://127.0.0.1:5000/team/hub")
('http://127.0.0.1:5000', 'team/hub')

``http://`` is accepted for a loopback host only (and only from a policy file: see
:mod:`safehub.config`), for a registry that speaks no TLS on this machine.
"""

from __future__ import annotations

import re

__all__ = ["split_place"]

_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}"
                   r"[a-z0-9])?(?::[0-9]{1,5})?|\[[0-9a-f:]+\](?::[0-9]{1,5})?")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)"
                         r"[a-z0-9]+)*)*")


def split_place(text: str) -> tuple[str, str]:
    """(registry, repository), or ("oci:", folder); a ValueError that says the form."""
    text = text.strip()
    if text.startswith("oci:"):
        if not text[4:]:
            raise ValueError("oci: needs a folder (oci:DIR)")
        return "oci:", text[4:]
    plain = text.startswith("http://")
    registry, _, repository = text.removeprefix("http://").partition("/")
    if plain:
        host = registry.lower().rpartition(":")[0] if ":" in registry else registry.lower()
        if host.strip("[]") not in ("localhost", "::1") and not host.startswith("127."):
            raise ValueError("plain http:// only for a registry on this machine (loopback)")
        text = text.removeprefix("http://")
    if "://" in text or not _HOST.fullmatch(registry.lower()) or \
            not _REPOSITORY.fullmatch(repository):
        raise ValueError("not REGISTRY/REPOSITORY (such as registry.example.com/team/hub: the "
                         "host and :port, then the repository path in lower case, without "
                         "https://) nor oci:DIR")
    return ("http://" if plain else "") + registry.lower(), repository
