"""Where the user's own policy file is: where a fix for this user goes.

Its own module because the policy files (:mod:`.files`) and a local folder's refusal
(:mod:`.local`) both name it, and :mod:`.files` imports :mod:`.local`: one place, no
import cycle.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_file"]


def user_file() -> Path:
    """The user's policy file (``~/.config/safehub/policy.toml`` on Linux), existing or not:
    where a fix for this user goes. Worked out again when a variable it is made from
    changes (every load's guard holds it for its fixes)."""
    global _USER_FILE
    key = tuple(os.environ.get(name) for name in _USER_FILE_FROM)
    if _USER_FILE is None or _USER_FILE[0] != key:
        import platformdirs

        path = Path(platformdirs.user_config_dir("safehub", appauthor=False)) / "policy.toml"
        _USER_FILE = (key, path)
    return _USER_FILE[1]


# What platformdirs builds the user's folder from (XDG on Linux, the home folder on macOS,
# the profile on Windows).
_USER_FILE_FROM = ("XDG_CONFIG_HOME", "HOME", "APPDATA", "LOCALAPPDATA", "USERPROFILE")
_USER_FILE: tuple[tuple[str | None, ...], Path] | None = None
