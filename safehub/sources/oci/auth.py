"""Registry credentials and challenges: read, never written.

Credentials come from ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` as
``docker login`` leaves them: an ``auths`` entry (``auth`` = base64 ``user:password``, or
``identitytoken``), or a credential helper (``credHelpers`` per registry, ``credsStore``
for all), run as ``docker-credential-NAME get`` with the registry on stdin. Nothing here
sends anything: the registry client decides where a credential may go (only to the
registry's own host, or a token realm the policy lists).

>>> challenge('Bearer realm="https://r.example/token",service="r.example",scope="a:b:pull"')
('bearer', {'realm': 'https://r.example/token', 'service': 'r.example', 'scope': 'a:b:pull'})
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import FetchError

__all__ = ["Credential", "challenge", "credential"]

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


class Credential(Frozen):
    """A user name and secret (or an identity token, sent as a refresh token)."""

    username: str
    secret: str
    identity_token: bool = False

    def __repr__(self) -> str:  # never print a secret
        return f"Credential(username={self.username!r}, secret=...)"


def challenge(header: str) -> tuple[str, dict[str, str]]:
    """(scheme, parameters) of a ``WWW-Authenticate`` header (the first challenge)."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            break
        params[m.group(1).lower()] = (m.group(2) if m.group(2) is not None
                                      else m.group(3)).replace('\\"', '"')
        pos = m.end()
    return scheme.lower(), params


def _config_path(environ: Mapping[str, str]) -> Path:
    folder = environ.get("DOCKER_CONFIG")
    return Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"


def _keys(registry: str) -> tuple[str, ...]:
    """The names ``docker login`` may have written for ``registry``."""
    names = [registry, f"https://{registry}", f"https://{registry}/v1/", f"https://{registry}/v2/"]
    if registry in ("docker.io", "registry-1.docker.io"):
        names.append("https://index.docker.io/v1/")
    return tuple(names)


def credential(registry: str, environ: Mapping[str, str] | None = None) -> Credential | None:
    """The credential docker's config holds for ``registry`` (``host[:port]``), if any."""
    env = os.environ if environ is None else environ
    path = _config_path(env)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise FetchError(f"cannot read the docker config {path} ({e.strerror or e})",
                         fix=fixes.say("fix its permissions, or point "
                                       "DOCKER_CONFIG elsewhere")) from e
    try:
        config = json.loads(raw)
        if type(config) is not dict:
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as e:
        raise FetchError(f"the docker config {path} is not valid JSON ({e})",
                         fix=fixes.say("run `docker login` again, or fix the file by hand")) from e
    helpers: dict[str, object] = config["credHelpers"] if type(
        config.get("credHelpers")) is dict else {}
    auths: dict[str, object] = config["auths"] if type(config.get("auths")) is dict else {}
    for key in _keys(registry):
        helper = helpers.get(key)
        if isinstance(helper, str):
            return _helper(helper, registry, path)
    for key in _keys(registry):
        entry = auths.get(key)
        if type(entry) is dict and (entry.get("auth") or entry.get("identitytoken")):
            return _from_entry(entry, registry, path)
    store = config.get("credsStore")
    if type(store) is str and store:
        return _helper(store, registry, path, missing_ok=True)
    return None


def _from_entry(entry: dict[str, object], registry: str, path: Path) -> Credential:
    user, secret = "", ""
    if type(entry.get("auth")) is str:
        try:
            user, _, secret = base64.b64decode(str(entry["auth"]), validate=True).decode(
                ).partition(":")
        except (ValueError, UnicodeDecodeError) as e:
            raise FetchError(f"the docker config {path} has an auth for {registry} that is "
                             "not base64 of user:password",
                             fix=fixes.run(f"docker login {registry}", "again")) from e
    token = entry.get("identitytoken")
    if type(token) is str and token:
        return Credential(user or "<token>", token, identity_token=True)
    return Credential(user, secret)


def _helper(name: str, registry: str, path: Path, *, missing_ok: bool = False
            ) -> Credential | None:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise FetchError(f"the docker config {path} names a credential helper {name!r} "
                         "that is not a plain program name",
                         fix=fixes.say("fix credHelpers/credsStore"))
    program = f"docker-credential-{name}"
    try:
        done = subprocess.run([program, "get"], input=registry.encode(), capture_output=True,
                              timeout=30, check=False)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise FetchError(f"the credential helper {program} named for {registry} in {path} "
                         "is not installed", fix=fixes.say(f"install {program}, or remove it from "
                                                           "credHelpers")) from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FetchError(f"the credential helper {program} failed for {registry} ({e})",
                         fix=fixes.run(f"{program} get", "by hand to see why")) from e
    if done.returncode != 0:
        if missing_ok or b"credentials not found" in done.stdout + done.stderr:
            return None
        raise FetchError(f"the credential helper {program} failed for {registry} (exit "
                         f"{done.returncode})",
                         fix=fixes.run(f"docker login {registry}", "again"))
    try:
        answer = json.loads(done.stdout)
        user, secret = str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError) as e:
        raise FetchError(f"the credential helper {program} answered something other than "
                         "its JSON for {registry}",
                         fix=fixes.run(f"{program} get", "by hand")) from e
    if user == "<token>":
        return Credential(user, secret, identity_token=True)
    return Credential(user, secret)
