"""What this user agreed to and verified, kept in the user's data dir.

Four small JSON stores, none of them in the (possibly shared) cache, so whoever can write
a shared cache cannot plant a record:

* :class:`ConsentStore` -- ``trust/<owner>/<name>.json``: consent for (repo, commit, digest)
  and the weights pinned for the repo when it was given;
* :class:`VerifiedRecords` -- ``verified/<commit>.json``: the digest and tree this user
  verified for a commit, and the stat scans of the cache folders it served;
* :class:`SignatureRecords` -- ``signatures/<commit>.json``: signature verdicts per
  signer-policy fingerprint;
* :class:`WeightPins` -- ``weights/pins.json``: the SHA-256 of each weights URL first seen.

Beside them, :class:`safehub.store.bytecode.BytecodeStore` keeps ``bytecode/``: the code
compiled from verified trees' modules, keyed by what was compiled.

Each store declares its folder (``FOLDER``) and what it keeps (``KEEPS``); :data:`FOLDERS`
and :func:`folders` list them, for every part that must know safehub's own places (what
the runtime guard lets safehub's own work write, what a confined job may never change).

Everything read back is input: each record is validated on read, and paths are built only
from validated 40-hex shas and parsed repo keys. A record of the wrong shape is treated as
absent (so the work is done again) where that is safe; a consent file that cannot be
parsed is a :class:`CacheError`, so consents are never dropped in silence. Records are
written only when they change: a warm load writes nothing here.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, field, replace
from safehub._internal.fsutil import read_json, write_json
from safehub.digest import is_digest
from safehub.errors import CacheError
from safehub.spec import RepoSpec, is_full_sha
from safehub.store.bytecode import BytecodeStore
from safehub.store.cache.integrity import Survey

__all__ = ["FOLDERS", "Consent", "ConsentStore", "SignatureRecords", "VerifiedRecords",
           "WeightPins", "folders"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read(path: Path) -> Any | None:
    """The JSON at ``path``; None if missing or unreadable as JSON (treated as absent)."""
    try:
        return read_json(path)
    except (OSError, ValueError, RecursionError):
        return None


def _commit_file(root: Path, commit: str) -> Path:
    if not is_full_sha(commit):
        raise CacheError(f"refusing to build a record path from {commit!r}: not a 40-hex sha",
                         fix=fixes.say("this is a bug or a tampered record; report it"))
    return root / f"{commit}.json"


def _write(path: Path, data: Any, *, required: bool, what: str, durable: bool = True) -> None:
    try:
        write_json(path, data, mode=0o600, durable=durable)
    except OSError as e:
        if required:
            raise CacheError(f"cannot record {what} in {str(path)!r} ({e.strerror or e})",
                             fix=fixes.say("make the user data dir writable")) from e
        # only a cache of work done: it is done again next time


class Consent(Frozen):
    """One recorded agreement to run (repo, commit, digest), and the weights pinned for the
    repo when it was given (URL -> sha256; a record written before safehub bound weights,
    or for a repo without any, has none)."""

    repo: str
    commit: str
    digest: str
    how: str
    at: str
    weights: dict[str, str] = field(default_factory=dict)


class ConsentStore:
    """Consent records under ``<data_dir>/trust``."""

    FOLDER = "trust"
    KEEPS = "consent"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / self.FOLDER

    def _file(self, key: str) -> Path:
        spec = RepoSpec.parse(key)  # a repo key is validated before it becomes a path
        return self.root / spec.owner.lower() / f"{spec.name.lower()}.json"

    def list(self, key: str) -> list[Consent]:
        path = self._file(key)
        try:
            data = read_json(path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except (OSError, ValueError, RecursionError) as e:
            raise CacheError(f"the trust record {str(path)!r} cannot be read ({e})",
                             fix=fixes.say("fix or delete it; deleting forgets what you trusted "
                                           "for this repo")) from e
        items = data.get("consents") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise CacheError(f"the trust record {str(path)!r} is malformed",
                             fix=fixes.say("fix or delete it; deleting forgets what you trusted"))
        return [Consent(key, i["commit"], i["digest"], str(i.get("how", "")),
                        str(i.get("at", "")), _pins(i.get("weights")))
                for i in items
                if isinstance(i, dict) and is_full_sha(str(i.get("commit")))
                and is_digest(i.get("digest"))]

    def find(self, key: str, commit: str, digest: str) -> Consent | None:
        """The consent for exactly this content, if one was given."""
        return next((c for c in self.list(key) if (c.commit, c.digest) == (commit, digest)),
                    None)

    def record(self, key: str, commit: str, digest: str, how: str,
               weights: Mapping[str, str] | None = None) -> None:
        """Record consent for this content and the ``weights`` pinned now (None: keep what
        was bound); nothing is written if that is what the record says already."""
        items = self.list(key)
        for n, c in enumerate(items):
            if (c.commit, c.digest) == (commit, digest):
                if weights is None or dict(weights) == c.weights:
                    return
                items[n] = replace(c, weights=dict(weights))
                break
        else:
            items.append(Consent(key, commit, digest, how, _now(), dict(weights or {})))
        self._save(key, items)

    def remove(self, key: str, commit: str | None = None) -> int:
        """Forget consents for ``key`` (all, or one commit); return how many."""
        items = self.list(key)
        keep = [c for c in items if commit is not None and c.commit != commit]
        if len(keep) != len(items):
            self._save(key, keep)
        return len(items) - len(keep)

    def _save(self, key: str, items: Sequence[Consent]) -> None:
        data = {"repo": key, "consents": [
            {"commit": c.commit, "digest": c.digest, "how": c.how, "at": c.at,
             **({"weights": dict(sorted(c.weights.items()))} if c.weights else {})}
            for c in items]}
        _write(self._file(key), data, required=True, what="trust")


class SignatureRecords:
    """Signature verdicts per (commit, digest, signer-policy fingerprint)."""

    FOLDER = "signatures"
    KEEPS = "signature verdicts"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / self.FOLDER

    def find(self, commit: str, digest: str, policy: str) -> str | None:
        data = _read(_commit_file(self.root, commit))
        entry = data.get(policy) if isinstance(data, dict) else None
        if isinstance(entry, dict) and entry.get("digest") == digest and isinstance(
                entry.get("signer"), str):
            return str(entry["signer"])
        return None

    def record(self, commit: str, digest: str, policy: str, signer: str) -> None:
        path = _commit_file(self.root, commit)
        data = _read(path)
        data = data if isinstance(data, dict) else {}
        data[policy] = {"digest": digest, "signer": signer, "at": _now()}
        _write(path, data, required=False, what="a signature verdict")


class Verified(Frozen):
    """What this user verified for one commit: per cache folder that served it, the stat
    scan of every entry (``scans``), of every folder (``dirs``), the latest ctime of
    any entry right after verification (``verified_ns``; the record's key is ``sealed``,
    as earlier versions wrote it), and the tree's folders (``folders``, so that the folder
    scan need not list them). "Sealed" now means only a cache shared read-only."""

    digest: str
    tree: str
    scans: dict[str, str]
    dirs: dict[str, str]
    verified_ns: dict[str, int]
    folders: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def at(self, path: str) -> Survey | None:
        """What the cache folder ``path`` looked like when this user verified it there
        (None if it never served this commit): what its scan is compared with."""
        if path not in self.verified_ns:
            return None
        return Survey(self.scans.get(path, ""), self.dirs.get(path, ""),
                      self.folders.get(path, ()), self.verified_ns[path])


class VerifiedRecords:
    """What this user verified, per commit: the digest, the tree and the scans it served.

    A cache hit is served without re-hashing only if the cache entry's scan and digest are
    the ones recorded here, after this user's own verification.
    """

    FOLDER = "verified"
    KEEPS = "verified trees"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / self.FOLDER

    def get(self, commit: str) -> Verified | None:
        data = _read(_commit_file(self.root, commit))
        if not isinstance(data, dict):
            return None
        maps = [data.get(k, {}) for k in ("scans", "dirs", "sealed", "folders")]
        if not (is_digest(data.get("digest")) and is_full_sha(str(data.get("tree")))
                and all(isinstance(m, dict) for m in maps)
                and all(isinstance(k, str) and isinstance(v, str)
                        for m in maps[:2] for k, v in m.items())
                and all(isinstance(k, str) and type(v) is int for k, v in maps[2].items())
                and all(isinstance(k, str) and type(v) is list
                        and all(isinstance(d, str) for d in v) for k, v in maps[3].items())):
            return None  # malformed: as if never verified, so the tree is re-hashed
        return Verified(data["digest"], data["tree"], maps[0], maps[1], maps[2],
                        {k: tuple(v) for k, v in maps[3].items()})

    def record(self, commit: str, digest: str, tree: str, path: str, found: Survey) -> None:
        """Remember that ``path`` held verified content, as ``found`` right after it was
        verified (written only if that changed)."""
        known = self.get(commit)
        same = known is not None and known.digest == digest
        maps: list[dict[str, Any]] = [dict(m) if same else {} for m in (
            (known.scans, known.dirs, known.verified_ns, known.folders) if known
            else ({}, {}, {}, {}))]
        new = (found.scan, found.dirs, found.verified_ns, found.folders)
        if same and all(m.get(path) == v for m, v in zip(maps, new, strict=True)):
            return
        for m, v in zip(maps, new, strict=True):
            m[path] = v
        _write(_commit_file(self.root, commit),
               {"digest": digest, "tree": tree, "scans": maps[0], "dirs": maps[1],
                "sealed": maps[2], "folders": {k: list(v) for k, v in maps[3].items()}},
               required=False, what="a verification", durable=False)  # lost: re-hashed


class WeightPins:
    """Per-user record of weight files seen: URL -> sha256 (and the file's stat data)."""

    FOLDER = "weights"
    KEEPS = "weight pins"

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / self.FOLDER / "pins.json"
        self._before = data_dir / "weights.json"  # where safehub 0.1 kept them

    def _all(self) -> dict[str, Any]:
        data = _read(self.path)
        if data is None:
            data = _read(self._before)
        return data if isinstance(data, dict) else {}

    def get(self, url: str) -> dict[str, Any] | None:
        entry = self._all().get(url)
        if (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                and _HEX64.fullmatch(entry["sha256"])):
            return entry
        return None

    def put(self, url: str, sha256: str, path: Path, stat_key: Callable[[Path], list[int]],
            repo: str = "", kind: str = "", durable: bool = True, *, commit: str = "",
            size: int | None = None) -> None:
        """Pin ``url`` to ``sha256`` (``repo``: the repo key whose code downloaded it;
        ``kind``: its checkpoint format, as checked, kept with the file's stat identity; a
        Hub file's ``commit`` and ``size`` are kept until given again).
        ``durable=False``: the pin is held elsewhere (the lockfile, or this record
        already), so a record lost in a crash only costs a re-hash: not synced to disk."""
        data = self._all()
        with contextlib.suppress(OSError):
            old = data.get(url)
            repos = sorted({*(_repos(old)), *([repo] if repo else [])})
            kept = {k: v for k, v in old.items() if k in ("commit", "size")
                    and old.get("sha256") == sha256} if isinstance(old, dict) else {}
            entry = {**kept, **({"commit": commit} if commit else {}),
                     **({"size": size} if size is not None else {}),
                     "sha256": sha256, "file": str(path), "stat": stat_key(path),
                     "repos": repos, **({"format": kind} if kind else {})}
            if old == entry:
                return
            data[url] = entry
            _write(self.path, data, required=False, what="a weights pin",
                   durable=durable or old is None or _digest(old) != sha256)

    def for_repo(self, repo: str) -> dict[str, str]:
        """URL -> sha256 of the weights ``repo``'s code downloaded (``safehub lock``)."""
        return {url: entry["sha256"] for url, entry in self._all().items()
                if repo in _repos(entry) and self.get(url) is not None}


def _digest(entry: Any) -> Any:
    return entry.get("sha256") if isinstance(entry, dict) else None


def _pins(value: Any) -> dict[str, str]:
    """A consent's weights (URL -> sha256) as read back: malformed entries are dropped."""
    if not isinstance(value, dict):
        return {}
    return {url: sha for url, sha in value.items()
            if isinstance(url, str) and isinstance(sha, str) and _HEX64.fullmatch(sha)}


def _repos(entry: Any) -> list[str]:
    repos = entry.get("repos") if isinstance(entry, dict) else None
    return [r for r in repos if isinstance(r, str)] if isinstance(repos, list) else []


FOLDERS: dict[str, str] = {store.FOLDER: store.KEEPS for store in (
    ConsentStore, VerifiedRecords, SignatureRecords, WeightPins, BytecodeStore)}
"""Each folder of the user's data dir the records keep, and what it keeps."""


def folders(data_dir: Path) -> dict[Path, str]:
    """The records' folders in ``data_dir``, each with what it keeps.

    >>> sorted(p.name for p in folders(Path("/d")))
    ['bytecode', 'signatures', 'trust', 'verified', 'weights']
    """
    return {data_dir / name: keeps for name, keeps in FOLDERS.items()}
