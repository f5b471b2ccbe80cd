"""What ``safehub run --confine`` does for its job, outside the sandbox.

The job can change nothing a later safehub run trusts, so an honest job asks
(:mod:`safehub._internal.broker`):

* ``prefetch``: a load in the job misses the read-only cache. ``safehub run`` fetches and
  verifies the spec exactly as ``safehub prefetch SPEC`` would, under its own policy and
  lockfile, and installs it; the job then loads it read-only. The job names a spec and the
  commit it resolved; nothing else it says is used, and nothing is trusted or run.
* ``audit``: one of the job's audit lines, appended to the real log as it is, marked
  ``"confined_job": true`` (what the job says about itself, recorded as such);
* ``pinned``: a weights file a load in the job checked (URL, sha256, size, commit). A job's
  word is no pin: ``safehub run`` records nothing of it; ``safehub lock --entrypoint``
  (:mod:`safehub.operations.lock`) asks each file itself before it pins it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from safehub._internal import fixes
from safehub._internal.broker import Broker, Handler
from safehub.errors import CacheError
from safehub.spec import is_full_sha

if TYPE_CHECKING:
    from safehub.hub import Hub

_RECORD_BYTES = 1 << 16


def serve(hub: Hub, pinned: Handler | None = None) -> Broker:
    """The broker for one confined job, answering with ``hub`` (the parent's);
    ``pinned``: what is done with the files the job says it checked (nothing, unless
    given)."""

    def prefetch(request: dict[str, Any]) -> dict[str, Any]:
        from safehub.operations.cache import prefetch as fill

        spec, commit = str(request.get("spec", ""))[:512], str(request.get("commit", ""))
        if not is_full_sha(commit):
            raise ValueError("the commit is not a 40-hex sha")
        done = fill(hub, [spec])[0]
        if done.commit != commit:
            raise CacheError(
                f"{spec} names commit {done.commit} for safehub run, but the job resolved "
                f"{commit}: nothing was fetched for the job",
                fix=fixes.run(f"safehub lock {spec}",
                              "to pin the spec in a lockfile, then run the job again"))
        return {"ok": True, "commit": done.commit, "digest": done.digest}

    def audit(request: dict[str, Any]) -> dict[str, Any]:
        record = request.get("record")
        if not isinstance(record, dict) or len(str(record)) > _RECORD_BYTES:
            raise ValueError("an audit record is a JSON object of at most 64 KiB")
        hub.audit.append_record({**record, "confined_job": True})
        return {"ok": True}

    return Broker({"prefetch": prefetch, "audit": audit,
                   "pinned": pinned or (lambda request: {"ok": True})})
