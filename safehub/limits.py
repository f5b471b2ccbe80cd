"""Bounds on what safehub reads from the network, each one against a resource attack."""

from __future__ import annotations

from safehub._internal.frozen import Frozen

__all__ = ["DEFAULTS", "Limits"]


class Limits(Frozen):
    """Bounds on what a download may be; each one stops a resource-exhaustion attack."""

    max_archive_bytes: int = 512 * 1024 * 1024
    """Largest zip accepted from the network (``SAFEHUB_MAX_ARCHIVE_BYTES``)."""
    max_tree_bytes: int = 2 * 1024 * 1024 * 1024
    """Largest total size of the extracted files (``SAFEHUB_MAX_TREE_BYTES``)."""
    max_files: int = 100_000
    """Most entries an archive may hold (``SAFEHUB_MAX_FILES``)."""
    max_api_bytes: int = 32 * 1024 * 1024
    """Largest JSON answer read from the API."""
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    """Seconds without a byte that end a request (stall timeout)."""
    deadline: float = 300.0
    """Seconds one request may take, connection to last byte (``SAFEHUB_TIMEOUT``)."""
    retries: int = 3
    """Extra attempts after a 5xx answer, a dropped connection or a truncated download."""
    backoff: float = 0.5
    """First pause before a retry in seconds; doubles each time (``SAFEHUB_BACKOFF``)."""
    lock_timeout: float = 600.0
    """Seconds to wait for another process installing the same commit."""


DEFAULTS = Limits()
