"""What the repo's code did while a guard was active: the record for the audit line."""

from __future__ import annotations

from typing import Any

from safehub._internal.frozen import Mutable, field
from safehub.errors import RuntimeGuardError
from safehub.run.hygiene import Shadow

__all__ = ["RuntimeReport"]

_CAP = 256  # entries kept per list of a report; more are counted in `truncated`


class RuntimeReport(Mutable):
    """What the repo's code did while the guard was active (lists capped at 256 entries).

    ``hosts``: connections (``host:port``, named when a lookup in the same guard gave the
    address); ``lookups``: names resolved; ``programs``: command lines started; ``writes``:
    paths changed outside the repo's tree; ``environ``: environment variables set or unset
    (names only: later processes and libraries of the caller see them, ``HTTPS_PROXY`` or
    ``PATH`` for instance); ``libraries``: native code loaded with ctypes,
    compiled modules imported from writable places, ctypes functions looked up;
    ``kernel``: under ``safehub run --confine``, the actions above the kernel refuses;
    ``refused``: every refusal, in order; ``shadowing``: top-level names of the tree that
    shadow other modules; ``leftovers``: the tree's modules still imported afterwards;
    ``fetched``: what safehub downloaded on the repo's behalf (weights, every URL of the
    way), whose hosts are in ``hosts`` too.
    """

    repo: str
    mode: str
    hosts: list[str] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    environ: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    kernel: list[str] = field(default_factory=list)
    """Under ``safehub run --confine``: what the guard saw that the kernel refuses."""
    refused: list[RuntimeGuardError] = field(default_factory=list)
    shadowing: list[Shadow] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    truncated: int = 0

    def raise_if_refused(self) -> None:
        """Raise the first refusal, even if the repo's code caught it when it happened."""
        if self.refused:
            raise self.refused[0]

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data, for the audit line and ``--report``."""
        return {
            "repo": self.repo, "mode": self.mode,
            "hosts": list(self.hosts), "lookups": list(self.lookups),
            "programs": list(self.programs), "writes": list(self.writes),
            "environ": list(self.environ), "libraries": list(self.libraries),
            "kernel": list(self.kernel),
            "refused": [{"action": e.action, "target": e.target, "key": e.key,
                         "message": e.message} for e in self.refused],
            "shadowing": [s.to_json() for s in self.shadowing],
            "leftovers": list(self.leftovers), "fetched": list(self.fetched),
            "truncated": self.truncated,
        }

    def add_fetched(self, url: str) -> None:
        """safehub downloads ``url`` for the repo (its weights): the URL and its host."""
        from safehub._internal.urls import UrlError, read_url

        try:
            hop = read_url(url, http=True)  # as the transport read it
        except UrlError:
            return
        self.add_entry(self.fetched, url)
        self.add_entry(self.hosts, f"{hop.host}:{hop.port}")

    def add_entry(self, entries: list[str], value: str) -> None:
        """Add ``value`` to one of the lists above once, up to the cap."""
        if value in entries:
            return
        if len(entries) >= _CAP:
            self.truncated += 1
            return
        entries.append(value)
