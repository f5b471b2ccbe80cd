"""The weights guard: what hubconf may download while it runs inside ``safehub.load``.

While a hub repo's code runs (``load``, ``list``, ``help``), ``torch.hub``'s
``download_url_to_file`` and ``load_state_dict_from_url`` (and safehub's, which call
them) are routed here (:func:`safehub.run.torchhub.handling`), also where the
repo's code bound them before the load:

* a URL must match the policy's ``weights`` patterns (every matching rule's list), else
  :class:`PolicyDenied` before any byte is fetched; the download goes through safehub's
  transport, HTTPS only, and every redirect hop must match the patterns too;
* every file fetched, or found in torch's checkpoint folder, is hashed in full (torch
  checks an 8-character prefix, and only if the file name carries one). The first hash
  of a URL is pinned in the user's data dir (``safehub lock`` copies a repo's pins into
  its lockfile entry, ``[[repo.weights]]``); a later file with another hash than the
  lockfile's or the user's pin is an :class:`IntegrityError` and is deleted before torch
  loads it;
* ``load_state_dict_from_url`` runs with ``weights_only=True`` (no pickled code) unless
  every matching policy rule says ``weights_only = false``;
* locked mode (``SAFEHUB_LOCKED=1``, ``locked = true``, ``--locked``): a URL the lockfile
  entry does not pin is a :class:`PinError` before any byte is fetched, and nothing is
  pinned on first use;
* ``weights_format``: a file that is not safetensors (:mod:`safehub.verify.checkpoint`)
  is refused where a matching rule allows only safetensors, before anything loads it; a
  safetensors file whose header lies about the file is an :class:`IntegrityError`;
* a download is hashed as it is written (no second read); a file found in torch's
  checkpoint folder whose stat identity is the one recorded when it was checked is not
  read again.

Files from the Hugging Face Hub (``huggingface_hub``'s downloads) come here through
:mod:`safehub.run.hfhub`, keyed ``hf://REPO_ID@REVISION/PATH``. Code that fetches with
other libraries is not covered: safehub does not sandbox a repo it has decided to trust
(see docs/threat-model.md).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from safehub._internal import fixes
from safehub._internal.frozen import Mutable, field
from safehub._internal.globs import Glob
from safehub._internal.hashing import Hashing
from safehub._internal.torchdir import torch_hub_path
from safehub._internal.urls import UrlError, read_url
from safehub._internal.warn import warn
from safehub.errors import IntegrityError, PinError, PolicyDenied, UntrustedRepoError
from safehub.run.weightfile import (
    delete,
    named_safetensors,
    same_file,
    sha256_of,
    stat_key,
)
from safehub.spec import plain_text
from safehub.store.records import WeightPins
from safehub.verify.checkpoint import PICKLE, SAFETENSORS, CheckpointError, file_kind

if TYPE_CHECKING:
    from safehub.sources.transport import Transport

__all__ = ["WeightsGuard"]


class WeightsGuard(Mutable):
    """The rules for one load; use :meth:`active` around the code that runs hubconf."""

    repo: str
    patterns: tuple[tuple[Glob, ...], ...] = ()
    weights_only: bool = True
    warn_only: bool = False
    locked: dict[str, str] = field(default_factory=dict)
    records: WeightPins | None = None
    """The user's own pins (a new URL's first hash is recorded here; ``safehub lock``
    copies a locked repo's pins into the lockfile: a load never writes the lockfile)."""
    repo_key: str = ""
    rules: tuple[tuple[str, str], ...] = ()
    """(policy file, table) of the rule each entry of ``patterns`` comes from."""
    transport: Callable[[], Transport] | None = None
    """Downloads go through safehub's transport (every hop checked), made by this on the
    first download (a load that downloads nothing makes none); None: torch's."""
    max_bytes: int = 64 * 1024**3
    locked_spec: str | None = None
    """The lockfile's spec for this repo, if it is locked (``safehub lock SPEC`` copies the
    user's new pins into that entry)."""
    fetched: Callable[[str], None] | None = None
    """Told each URL safehub downloads for the repo (the runtime report's ``fetched``)."""
    blobs: Callable[[str, str, IO[bytes]], bool] | None = None
    """A fleet node's snapshot (``SAFEHUB_OCI``): given a URL the lockfile pins, its sha256
    and a file, writes the pinned bytes there, checked as they arrive; False where the
    snapshot does not carry the file (it is then downloaded as any other)."""
    locked_mode: str = ""
    """Where locked mode was switched on ("": off): every URL must be pinned in ``locked``
    (the lockfile's), and no new pin is recorded."""
    entrypoint: str | None = None
    """The entrypoint being loaded (the ``safehub lock --entrypoint`` a fix names)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """The lockfile's size of each pinned URL that has one: a download stops past it."""
    formats: frozenset[str] = frozenset((SAFETENSORS, PICKLE))
    """The checkpoint formats every matching rule's ``weights_format`` allows."""
    format_rules: tuple[tuple[str, str], ...] = ()
    """(policy file, table) of each rule that narrows ``weights_format``."""
    bound: dict[str, str] = field(default_factory=dict)
    """The weights the user's consent to this content binds (URL -> sha256): a file of
    such a URL that no pin holds any more (the user removed theirs) must still be that."""
    spec_asked: str = ""
    """The spec as the load asked for it (the ``safehub trust`` a fix names)."""
    commits: dict[str, str] = field(default_factory=dict)
    """The lockfile's commit of each pinned Hub file (``hf://`` key -> 40-hex commit)."""
    told: Callable[[str, str, int, str], None] | None = None
    """Told each file checked (URL, sha256, size, a Hub file's commit): in a child of
    ``safehub lock --entrypoint``, its parent, which checks each and writes the lockfile."""

    def check_url(self, url: str) -> None:
        """Refuse ``url`` unless the policy's weights patterns allow it, as the transport
        will read and send it (:func:`~safehub._internal.urls.read_url`), and in locked
        mode unless the lockfile pins it; nothing has been fetched yet."""
        self._require_pin(url)
        self._check_patterns(url)

    def _require_pin(self, url: str) -> None:
        """Locked mode: ``url`` must be pinned in the lockfile entry (a PinError names the
        ``safehub lock`` command that pins what the entrypoint fetches)."""
        if not self.locked_mode or url in self.locked:
            return
        spec = self.locked_spec or self.repo_key or self.repo
        where = (f"the lockfile entry {spec!r} does not pin it" if self.locked_spec
                 else f"{spec} is not locked")
        raise PinError(
            f"hubconf.py of {self.repo} tried to fetch {url}, but {where} (locked mode: "
            f"{self.locked_mode}); nothing was fetched",
            fix=fixes.run(f"safehub lock {shlex.quote(spec)} --entrypoint "
                          f"{self.entrypoint or 'ENTRYPOINT'}",
                          "to pin every file that entrypoint fetches, then review the "
                          "lockfile's change"))

    def _check_patterns(self, url: str) -> None:
        """``url`` against the policy's weights patterns (a redirect hop too; a Hugging
        Face Hub file's ``hf://`` pin key in each of its written forms)."""
        if url.startswith("hf://"):  # a Hugging Face Hub file's pin key (run/hfhub.py)
            from safehub.run.hfhub import written_forms

            forms = written_forms(url)
            folder = forms[0]
        else:
            try:
                hop = read_url(url, http=True)  # http only where no pattern is set (torch's)
            except UrlError as e:
                raise PolicyDenied(f"hubconf.py of {self.repo} tried to download from a URL "
                                   f"safehub does not follow: {e}",
                                   fix=fixes.say(f"{e.advice}; download "
                                   "weights from a plain https://host/path URL")) from None
            if {".", ".."} & {unquote(seg) for seg in hop.path.split("/")} or any(
                    enc in hop.path.lower() for enc in ("%2f", "%5c")):
                raise PolicyDenied(
                    f"hubconf.py of {self.repo} tried to download {hop}: a URL with '.' or "
                    "'..' path segments, or an encoded '/' or '\\' in its path, is refused (a "
                    "client or server may act on them after the weights patterns matched)",
                    fix=fixes.say("download weights from a plain https://host/path URL"))
            # Patterns see the URL as it will be sent, so that
            # 'https://evil.example#.myorg.example/x' cannot pass for a myorg URL.
            forms, folder = (str(hop),), str(hop).split("?", 1)[0].rsplit("/", 1)[0] + "/*"
        for i, patterns in enumerate(self.patterns):
            if not any(p.match(form) for p in patterns for form in forms):
                allowed = ", ".join(p.pattern for p in patterns)
                message = (f"hubconf.py of {self.repo} tried to download {url}, which the "
                           f"policy's weights patterns do not allow ({allowed})")
                if self.warn_only:
                    warn(f"{message} (mode = 'warn', allowed)")
                    return
                wanted = ", ".join(f'"{p}"' for p in (*(p.pattern for p in patterns), folder))
                path, table = self.rules[i] if i < len(self.rules) else ("your policy", "")
                raise PolicyDenied(message, fix=fixes.noted(
                    fixes.change(path, table, [f"weights = [{wanted}]"]),
                                                            "if the repo should download it: "))

    def check_file(self, url: str, path: Path, *, sha256: str | None = None) -> str:
        """Refuse (and delete) the file at ``path`` unless it is the pinned one, of a format
        the policy allows, with a truthful header if it is safetensors; then record it.
        ``sha256``: its digest, taken as it was downloaded (else it is hashed here, unless
        its stat identity is the one recorded when it was last checked: then nothing of it
        is read). Returns its sha256."""
        self._require_pin(url)  # a caller that fetched without asking check_url first
        seen = self.records.get(url) if self.records is not None else None
        known = seen if sha256 is None and same_file(seen, path) else None
        digest = sha256 or (str(known["sha256"]) if known else sha256_of(path))
        kind = self._verify(url, path, digest, seen, known)
        from safehub.run.runtime import own_work

        with own_work():  # safehub's own records, written while the repo's code runs
            self._record(url, path, digest, seen, kind)
        return digest

    def _verify(self, url: str, path: Path, digest: str, seen: dict[str, Any] | None,
                known: dict[str, Any] | None = None) -> str:
        """The pin, the format rule and a safetensors header, for the file at ``path`` of
        sha256 ``digest``; a refused file is deleted. Returns its format."""
        pinned = self.locked.get(url) or (str(seen["sha256"]) if seen else None)
        if pinned is not None and pinned != digest:
            delete(path)
            raise IntegrityError(
                f"the weights from {url} have sha256 {digest}, but {pinned} was pinned "
                f"({'in the lockfile' if url in self.locked else 'when first downloaded'}); "
                f"the file {path} was deleted",
                fix=fixes.say("if the publisher really replaced the file, remove the pin (the "
                              "lockfile's [[repo.weights]] entry) and load again"),
            )
        if pinned is None and self.bound.get(url, digest) != digest:
            delete(path)
            raise _not_consented(self, url, digest, path)
        kind = str(known.get("format", "")) if known else ""
        if kind not in (SAFETENSORS, PICKLE):  # not recorded yet: read its header
            try:
                kind = file_kind(str(path), named=named_safetensors(url, path))
            except CheckpointError as e:
                delete(path)
                raise IntegrityError(
                    f"the weights from {url} claim to be safetensors, but {e}; the file "
                    f"{path} was deleted before anything loaded it",
                    fix=fixes.say("the file is damaged or forged: ask its publisher for an "
                                  "intact one")) from None
            except OSError as e:
                raise IntegrityError(f"the weights from {url} at {path} cannot be read ({e})",
                                     fix=fixes.say("check the file's permissions")) from e
        if kind not in self.formats:
            path_, table = (self.format_rules[0] if self.format_rules
                            else ("your policy", ""))
            message = (f"the weights from {url} are a pickle checkpoint (torch's format), but "
                       f"the policy allows only {', '.join(sorted(self.formats)) or 'none'} "
                       f"for {self.repo} ({path_}{' ' + table if table else ''}: "
                       "weights_format)")
            if self.warn_only:
                warn(f"{message} (mode = 'warn', allowed)")
                return kind
            delete(path)
            raise PolicyDenied(
                f"{message}; the file {path} was deleted before anything deserialised it",
                fix=fixes.either(
                    fixes.say("ask the repo to publish safetensors weights"),
                    fixes.noted(fixes.change(path_, table,
                                             ['weights_format = ["safetensors", "pickle"]']),
                                "if pickles from this repo are acceptable: ")))
        return kind

    def _record(self, url: str, path: Path, digest: str, seen: dict[str, Any] | None,
                kind: str) -> None:
        """Remember the file's digest, format and stat identity; a new URL is pinned here,
        never in locked mode (no trust on first use)."""
        if self.told is not None and not url.startswith("hf://"):  # a Hub file's commit:
            self.told(url, digest, path.stat().st_size, "")  # hfcache.check_hub_file
        if self.records is None:
            return
        pinned = url in self.locked or seen is not None
        if self.locked_mode and url not in self.locked:
            return
        self.records.put(url, digest, path, lambda p: stat_key(p.stat()),
                         repo=self.repo_key, kind=kind, durable=url not in self.locked)
        if not pinned and self.told is None:  # else the parent that asked pins (or not)
            _say_pinned(self, url, digest)

    # -- while hubconf runs: torch.hub's two download functions are routed here ------------
    # (by name: safehub.run.torchhub.WEIGHTS, through safehub.run.guards.Weights)

    def _hop(self, url: str) -> None:
        """Every redirect hop is held to the patterns, as the first URL is."""
        try:
            self._check_patterns(url)
        except PolicyDenied as e:
            raise PolicyDenied(f"{e.message} (reached by a redirect)", fix=e.fix) from None
        self._tell(url)

    def _tell(self, url: str) -> None:
        """safehub is about to download ``url`` for the repo (a hop, or the first URL)."""
        if self.fetched is not None:
            self.fetched(url)

    def download_url_to_file(self, url: str, dst: str, hash_prefix: str | None = None,
                             progress: bool = True) -> None:
        """torch's ``download_url_to_file``, through safehub's transport: HTTPS only, every
        hop matched against ``weights``, the whole file hashed and pinned."""
        url, dst = _text(url, "url"), _text(os.fspath(dst), "dst")
        self.check_url(url)
        target = Path(os.path.expanduser(dst))
        _writable_here(self, url, target.parent)
        if _from_snapshot(self, url, target, hash_prefix):
            return
        if self.transport is None or (not self.patterns and not url.startswith("https://")):
            self._tell(url)
            _original("download_url_to_file")(url, dst, hash_prefix, progress)
            self.check_file(url, target)
        else:
            self._fetch(url, target, hash_prefix, progress)

    def _fetch(self, url: str, target: Path, hash_prefix: str | None, progress: bool) -> None:
        from safehub._internal.progress import terminal_progress
        from safehub.run.runtime import own_work

        assert self.transport is not None
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                   suffix=".partial")
        try:
            # safehub's own work: the transport made (its modules imported) and the download
            with os.fdopen(fd, "wb", buffering=0) as raw, own_work():
                out = Hashing(raw)  # hashed as it is written: the file is not read back
                try:
                    self.transport().download(
                        url, out, what=f"weights {url}",  # type: ignore[arg-type]
                        max_bytes=min(self.max_bytes, self.sizes.get(url, self.max_bytes)),
                        allow=self._hop if self.patterns else self._tell,
                        progress=terminal_progress(url) if progress else None,
                        accept="*/*")
                finally:
                    out.close()
                digest = out.hexdigest()
            if hash_prefix is not None and not digest.startswith(hash_prefix):
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                                   f'"{digest}")')  # as torch.hub raises it
            seen = self.records.get(url) if self.records is not None else None
            kind = self._verify(url, Path(tmp), digest, seen)  # before torch's folder has it
            os.replace(tmp, target)
            with own_work():
                self._record(url, target, digest, seen, kind)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def load_state_dict_from_url(self, url: str, model_dir: str | None = None,
                                 map_location: Any = None, progress: bool = True,
                                 check_hash: bool = False, file_name: str | None = None,
                                 weights_only: bool = False) -> Any:
        """torch's ``load_state_dict_from_url``: a cached file is checked first; no pickled
        code unless every matching rule says ``weights_only = false``."""
        url = _text(url, "url")
        self.check_url(url)
        folder = model_dir or os.path.join(torch_hub_path(), "checkpoints")
        # The file name as torch's load_state_dict_from_url derives it (its own urlparse):
        # which file torch would load, not where anything connects.
        cached = Path(folder) / (file_name or os.path.basename(urlparse(url).path))
        if cached.is_file():  # torch would load it without downloading: check it first
            self.check_file(url, cached)
        else:
            _writable_here(self, url, Path(folder))
            if self.blobs is not None and url in self.locked:
                os.makedirs(folder, exist_ok=True)  # as torch would, before it downloads
                _from_snapshot(self, url, cached, None)
        if self.weights_only and not weights_only:
            weights_only = True
        return _original("load_state_dict_from_url")(url, model_dir, map_location, progress,
                                                      check_hash, file_name, weights_only)


def _from_snapshot(guard: WeightsGuard, url: str, target: Path, hash_prefix: str | None) -> bool:
    """A file the lockfile pins, from the node's snapshot (:attr:`blobs`) into
    ``target``: written beside it, its sha256 checked as it arrives, moved in (a refusal
    leaves nothing), then checked as any file is (its digest already known: not read
    again). False where the snapshot does not carry it."""
    pinned = guard.locked.get(url)
    if guard.blobs is None or pinned is None:
        return False
    from safehub.run.runtime import own_work

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                               suffix=".partial")
    try:
        with os.fdopen(fd, "w+b") as out, own_work():
            if not guard.blobs(url, pinned, out):
                return False
        if hash_prefix is not None and not pinned.startswith(hash_prefix):
            raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                               f'"{pinned}")')  # as torch.hub raises it
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    guard.check_file(url, target, sha256=pinned)  # the blob's bytes were the pin's
    return True


def _writable_here(guard: WeightsGuard, url: str, folder: Path) -> None:
    """In a confined job, a download into a folder the kernel holds read-only (torch's
    checkpoint folder: a later run pins what it finds there) is refused by name."""
    if "SAFEHUB_CONFINED" not in os.environ:
        return
    from safehub.errors import ConfineError
    from safehub.run.confine.ruleset import current

    ruleset = current()
    if ruleset is not None and ruleset.refuses("write", os.path.realpath(folder)):
        raise ConfineError(
            f"hubconf.py of {guard.repo} tried to download {url} into {folder}, which is "
            "read-only inside `safehub run --confine` (a later run trusts what it finds "
            "there)", fix=fixes.say("load the model once outside the job (safehub load SPEC "
            "ENTRYPOINT downloads and pins the file, and the job then reads it), or pass "
                                    "a model_dir under [confine] writes"))


def _say_pinned(guard: WeightsGuard, url: str, digest: str) -> None:
    """A new pin went to the user's records, never the lockfile (a load does not change
    a tracked file): say so, and how to add it to the lockfile."""
    import sys

    assert guard.records is not None
    to_lock = (f"; `safehub lock {guard.locked_spec}` adds it to the lockfile"
               if guard.locked_spec else "")
    from safehub._internal.text import printable

    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(printable(f"safehub: pinned the weights {url} of {guard.repo} "
                                   f"(sha256 {digest[:16]}...) in {guard.records.path}"
                                   f"{to_lock}") + "\n")


def _not_consented(guard: WeightsGuard, url: str, digest: str, path: Path
                   ) -> UntrustedRepoError:
    """A file of a URL whose pin was removed, other than the one the consent binds."""
    return UntrustedRepoError(
        f"the weights from {url} have sha256 {digest}, but your consent to run "
        f"{guard.repo} covers {guard.bound[url]} (the pin was removed since); the file "
        f"{path} was deleted before anything loaded it",
        fix=fixes.run(f"safehub trust {shlex.quote(guard.spec_asked or guard.repo)}",
                      "to trust this content with whatever its code fetches next (pinned on "
                      "first use), then load again"))


def _text(value: object, name: str) -> str:
    return plain_text(value, f"the weights download's {name}")


def _original(name: str) -> Callable[..., Any]:
    from safehub.run.torchhub import original

    return original(name)


