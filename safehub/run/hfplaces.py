"""Where huggingface_hub reads its endpoint and keeps its cache: its own settings where it
is imported, else the environment as it would read it (safehub never imports it for this).
A load's own work may write there; :mod:`safehub.run.hfcache` lays the cache out."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["HUB", "hub_cache", "hub_endpoint"]

HUB = "https://huggingface.co"
"""The Hub's own endpoint (``HF_ENDPOINT``'s default)."""


def hub_cache() -> Path:
    """The Hub cache huggingface_hub uses: its own setting where it is imported, else as
    it would read the environment (safehub's own work may write there during a load).

    >>> hub_cache().name
    'hub'
    """
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        return Path(constants.HF_HUB_CACHE)
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


def hub_endpoint() -> str:
    """The Hub endpoint huggingface_hub uses (without importing it: not imported, the
    environment's, as it would read it)."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        return str(constants.ENDPOINT).rstrip("/")
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")
