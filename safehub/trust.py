"""Consent bound to content, and the prompt that asks for it.

torch.hub remembers that a user trusted a *name*; safehub remembers that they trusted
*this content*: a consent record is the triple (repo, commit, content digest), kept in
the user's data dir (``trust/<owner>/<name>.json``). New content asks again.

The prompt appears only on a terminal. With ``CI=true``, ``SAFEHUB_NONINTERACTIVE=1`` or
a stdin that is not a TTY, safehub never calls ``input()``: it refuses at once and says
how to consent.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safehub._internal.fsutil import read_json, write_json
from safehub.errors import CacheError

__all__ = ["Consent", "ConsentStore", "SignatureRecords", "VerifiedRecords", "ask"]


@dataclass(frozen=True)
class Consent:
    """One recorded agreement to run (repo, commit, digest)."""

    repo: str
    commit: str
    digest: str
    how: str
    at: str


class ConsentStore:
    """Consent records under ``<data_dir>/trust``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "trust"

    def _file(self, key: str) -> Path:
        owner, name = key.split("/")
        return self.root / owner / f"{name}.json"

    def _read(self, key: str) -> list[dict[str, Any]]:
        path = self._file(key)
        try:
            data = read_json(path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except (OSError, ValueError) as e:
            raise CacheError(
                f"the trust record {str(path)!r} cannot be read ({e})",
                hint="fix or delete it; deleting forgets what you trusted for this repo",
            ) from e
        items = data.get("consents") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise CacheError(f"the trust record {str(path)!r} is malformed",
                             hint="fix or delete it")
        return [i for i in items if isinstance(i, dict)]

    def find(self, key: str, commit: str, digest: str) -> Consent | None:
        """The consent for exactly this content, if one was given."""
        for item in self._read(key):
            if item.get("commit") == commit and item.get("digest") == digest:
                return Consent(key, commit, digest, str(item.get("how", "")), str(item.get("at")))
        return None

    def list(self, key: str) -> list[Consent]:
        return [
            Consent(key, str(i.get("commit")), str(i.get("digest")), str(i.get("how", "")),
                    str(i.get("at", "")))
            for i in self._read(key)
        ]

    def record(self, key: str, commit: str, digest: str, how: str) -> None:
        items = [
            i for i in self._read(key) if (i.get("commit"), i.get("digest")) != (commit, digest)
        ]
        items.append({
            "commit": commit,
            "digest": digest,
            "how": how,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        try:
            write_json(self._file(key), {"repo": key, "consents": items}, mode=0o600)
        except OSError as e:
            raise CacheError(
                f"cannot record trust in {str(self._file(key))!r} ({e.strerror or e})",
                hint="make the user data dir writable",
            ) from e

    def remove(self, key: str, commit: str | None = None) -> int:
        """Forget consents for ``key`` (all, or one commit); return how many."""
        items = self._read(key)
        keep = [i for i in items if commit is not None and i.get("commit") != commit]
        if len(keep) != len(items):
            write_json(self._file(key), {"repo": key, "consents": keep}, mode=0o600)
        return len(items) - len(keep)


def ask(lines: list[str], question: str) -> bool:
    """Show ``lines`` and ``question [y/N]`` on stderr; read one answer from stdin.

    Only ``y`` or ``yes`` (any case) agree; anything else, including end of input, refuses.
    """
    sys.stderr.write("\n".join(lines) + f"\n{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


class SignatureRecords:
    """Signature verdicts per (commit, digest, signer-policy fingerprint).

    Kept in the user's data dir, not in the (possibly shared) cache: a warm signed load
    does not verify again, and a writer to a shared cache cannot plant a verdict.
    """

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "signatures"

    def find(self, commit: str, digest: str, policy: str) -> str | None:
        try:
            data = read_json(self.root / f"{commit}.json")
        except (FileNotFoundError, NotADirectoryError, ValueError, OSError):
            return None
        entry = data.get(policy) if isinstance(data, dict) else None
        if isinstance(entry, dict) and entry.get("digest") == digest:
            return str(entry.get("signer", ""))
        return None

    def record(self, commit: str, digest: str, policy: str, signer: str) -> None:
        path = self.root / f"{commit}.json"
        try:
            data = read_json(path)
        except (FileNotFoundError, ValueError, OSError):
            data = {}
        data[policy] = {"digest": digest, "signer": signer,
                        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with contextlib.suppress(OSError):  # only a cache of work done: verify again next time
            write_json(path, data, mode=0o600)


class VerifiedRecords:
    """What this user verified, per commit: the digest, the tree and the scans it served.

    A cache hit is served without re-hashing only if the cache entry's scan and digest are
    the ones recorded here, in the user's data dir, after this user's own verification:
    whoever can write the cache cannot write these records.
    """

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "verified"

    def get(self, commit: str) -> dict[str, Any] | None:
        try:
            data = read_json(self.root / f"{commit}.json")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            raise CacheError(
                f"the record {str(self.root / commit)!r}.json cannot be read ({e})",
                hint="delete it; the cached tree is then re-hashed once",
            ) from e
        if not isinstance(data, dict) or not isinstance(data.get("scans"), dict):
            return None
        return data

    def record(self, commit: str, digest: str, tree: str, path: str, scan: str) -> None:
        data = self.get(commit) or {}
        scans = data.get("scans", {}) if data.get("digest") == digest else {}
        scans[path] = scan
        with contextlib.suppress(OSError):  # unwritable: the tree is re-hashed next time
            write_json(self.root / f"{commit}.json",
                       {"digest": digest, "tree": tree, "scans": scans}, mode=0o600)
