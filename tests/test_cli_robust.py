"""No traceback, ever: every subcommand, fed what an attacker or a confused newcomer types.

Each case runs ``safehub ARGS`` twice, as typed and with ``--json``, against the loopback
GitHub stand-in serving ``acme/models`` (and a few broken repos), in a folder full of
wrong things: a directory where a file is expected, a file where a directory is, empty,
binary and malformed files, symlink loops, keys that are not keys. Every failure must be
one line of what failed (its details indented below it) and one ``fix:`` line, exit 1
(refused or failed) or 2 (usage), never a traceback, never the "bug in safehub" catch-all;
with ``--json`` stdout is exactly one JSON value, for errors ``{"error", "message",
"hint", "fix", "exit"}``. The cases where stdin, stdout or the terminal matter run
``python -m safehub`` in a real subprocess.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from safehub import errors
from safehub.cli import main
from safehub.verify.signatures import sign_directory
from tests.conftest import HAVE_TORCH, HUBCONF, child_pythonpath, needs_torch, runs
from tests.docs_support import in_the_foreground
from tests.helpers_load import cli
from tests.support import GitHubStandIn, TLSFiles, git, make_repo

ROOT = Path(__file__).parents[1]
#: What a failure may call itself: a usage error, a safehub error, or the repo's own code's.
KINDS = {"usage error", "interrupted", "RepoCodeError", "OutputError", *errors.__all__}
DEEP = "[" * 100_000  # nesting that a recursive parser does not survive


@dataclass(frozen=True)
class Case:
    """``safehub ARGS`` and what it must do.

    ARGS are shell words; ``{spec}`` is acme/models:v1.0, ``{sha}`` its commit, ``{deep}``
    100,000 opening brackets; other words name the files :func:`mess` makes in the cwd.
    """

    args: str
    exit: int  # 1 refused or failed, 2 usage
    says: str = ""  # a phrase that must be in the message or the fix (any case)
    env: dict[str, str] = field(default_factory=dict)
    report: bool = False  # the refusal is the command's own report on stdout, not an error
    json: bool = True  # also run with --json

    @property
    def id(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{env + ' ' if env else ''}{self.args or '(nothing)'}"[:90]


def C(args: str, exit: int, says: str = "", report: bool = False, json: bool = True,
      **env: str) -> Case:
    return Case(args, exit, says, env, report, json)


CASES = [
    # -- the top level ---------------------------------------------------------------------
    C("", 2, "COMMAND"),
    C("frobnicate", 2, "invalid choice"),
    C("--bogus", 2, "not an option of safehub itself"),
    C("''", 2, "invalid choice"),
    C("LOAD {spec} tiny", 2, "invalid choice"),
    C("--json load", 2, "options go after the command"),
    # -- load --------------------------------------------------------------------------------
    C("load", 2, "required: spec, entrypoint"),
    C("load {spec}", 2, "required: entrypoint"),
    C("load {spec} tiny --kwargs '[1]'", 2, "JSON object"),
    C("load {spec} tiny --kwargs '{{bad'", 2, "not JSON"),
    C("load {spec} tiny --kwargs ''", 2, "not JSON"),
    C("load {spec} tiny --kwargs null", 2, "JSON object"),
    C("load {spec} tiny --kwargs '\"n\"'", 2, "JSON object"),
    C("load {spec} tiny --kwargs '{deep}'", 2, "not JSON"),
    C("load {spec} tiny --kwargs", 2, "expected one argument"),
    C("load {spec} tiny --trust=yes", 2, "ignored explicit argument"),
    C("load {spec} tiny extra", 2, "safehub load --help"),
    C("load {spec} tiny --source nope", 2, "invalid choice"),
    C("load {spec} tiny --kwargs '{{\"n\": NaN}}' --trust", 1, "raised TypeError"),
    C("load {spec} tiny --kwargs '{{\"nope\": 1}}' --trust", 1, "safehub help"),
    C("load a/b/c tiny", 2, "exactly one '/'"),
    C("load ../../etc tiny", 2, "a folder path"),
    C("load acme/models:.. tiny", 2, "invalid ref"),
    C("load 'acme/models:v1.0 ' tiny", 2, "spec"),
    C("load 'acme/mödels' tiny", 2, "spec"),
    C("load acme/models@v1.0 tiny", 2, "spec"),
    C("load https://github.com/acme/models tiny", 2, "spec"),
    C("load acme/models:{sha}0 tiny --trust", 1, "no branch or tag"),
    C("load acme/models:v9.9 tiny --trust", 1, "v9.9"),
    C("load acme/models:deadbeef tiny --trust", 1, "deadbeef"),
    C("load acme/nosuch tiny --trust", 1, "acme/nosuch"),
    C("load {spec} '' --trust", 2, "not an entrypoint name"),
    C("load {spec} ../x --trust", 2, "not an entrypoint name"),
    C("load {spec} os.system --trust", 2, "not an entrypoint name"),
    C("load {spec} nosuch --trust", 1, "safehub list"),
    C("load {spec} tiny", 1, "--trust", CI="true"),
    C("load {spec} tiny --trust", 1, "offline", SAFEHUB_OFFLINE="1"),
    C("load {spec} tiny --cache-dir empty", 2, "is a file"),
    C("load {spec} tiny --cache-dir ''", 2, "empty string"),
    C("load {spec} tiny --lockfile adir", 2, "is a folder"),
    C("load {spec} tiny --lockfile junk", 1, "UTF-8"),
    C("load {spec} tiny --lockfile bad.lock", 1, "safehub lock"),
    C("load {spec} tiny --lockfile wrong.lock", 1, "40-hex"),
    C("load {spec} tiny --lockfile deep.lock", 1, "lockfile"),
    C("load {spec} tiny --lockfile nosuch.lock", 1, "safehub lock"),
    C("load {spec} tiny --lockfile ''", 2, "empty string"),
    C("load {spec} tiny --trust", 1, "audit", SAFEHUB_POLICY="auditdir.toml"),
    C("load hub tiny --source local", 1, "fix hub/hubconf.py"),
    C("load nosuch tiny --source local", 1, "hubconf.py"),
    C("load empty tiny --source local", 1, "hubconf.py"),
    C("load adir tiny --source local", 1, "hubconf.py"),
    C("load acme/broken:v1.0 tiny --trust", 1, "broken on purpose"),
    C("load acme/quits:v1.0 tiny --trust", 1, "sys.exit(0)"),
    C("load acme/needy:v1.0 tiny --trust", 1, "pip install no_such_module_xyz"),
    C("load acme/plain:v1.0 tiny --trust", 1, "has no hubconf.py"),
    C("load acme/odd:v1.0 tiny --trust", 1, "raised Odd: no Exception"),
    C("load acme/mute:v1.0 tiny --trust", 1, "raised Mute: (its message cannot be shown)"),
    C("load acme/loud:v1.0 tiny --trust", 1, "loud loud"),
    # -- list and help -----------------------------------------------------------------------
    C("list", 2, "required: spec"),
    C("list x", 2, "exactly one '/'"),
    C("list {spec} tiny", 2, "safehub list --help"),
    C("list {spec}", 1, "--trust", CI="true"),
    C("list acme/broken:v1.0 --trust", 1, "broken on purpose"),
    C("list acme/quits:v1.0 --trust", 1, "sys.exit(0)"),
    C("list acme/odd:v1.0 --trust", 1, "raised Odd"),
    C("list acme/plain:v1.0 --trust", 1, "has no hubconf.py"),
    C("help {spec}", 2, "required: entrypoint"),
    C("help {spec} nosuch --trust", 1, "safehub list"),
    C("help {spec} '' --trust", 2, "not an entrypoint name"),
    C("help acme/needy:v1.0 tiny --trust", 1, "pip install no_such_module_xyz"),
    C("help acme/broken:v1.0 tiny --trust", 1, "broken on purpose"),
    # -- check -------------------------------------------------------------------------------
    C("check", 2, "required: spec"),
    C("check ''", 2, "exactly one '/'"),
    C("check {spec} --entrypoint ''", 2, "not an entrypoint name"),
    C("check {spec} --entrypoint nosuch", 1, "nosuch", report=True),
    C("check {spec}", 1, "safehub trust", report=True, CI="true"),
    C("check acme/nosuch", 1, "acme/nosuch", report=True),
    C("check {spec} --lockfile adir", 2, "is a folder"),
    C("check {spec} --lockfile junk", 1, "UTF-8", report=True),
    C("check {spec} --cache-dir empty", 2, "is a file"),
    C("check {spec} --trust", 2, "unrecognized arguments: --trust"),
    C("check {spec}", 1, "not valid TOML", SAFEHUB_POLICY="bad.toml"),
    C("check {spec}", 1, "unknown key", SAFEHUB_POLICY="wrongkey.toml"),
    C("check {spec}", 1, "policy", SAFEHUB_POLICY="deep.toml"),
    C("check {spec}", 1, "SAFEHUB_POLICY", SAFEHUB_POLICY="adir"),
    C("check {spec}", 1, "UTF-8", SAFEHUB_POLICY="junk"),
    C("check {spec}", 1, "SAFEHUB_POLICY", SAFEHUB_POLICY="nosuch.toml"),
    C("check {spec}", 1, "SAFEHUB_POLICY", SAFEHUB_POLICY="loop"),
    C("check {spec}", 1, "SAFEHUB_POLICY", SAFEHUB_POLICY="dangling"),
    C("check {spec}", 1, "cache", report=True, SAFEHUB_CACHE_DIR="empty"),
    C("check {spec}", 1, "lockfile", report=True, SAFEHUB_LOCKFILE="adir"),
    C("check {spec}", 1, "safehub lock", report=True, SAFEHUB_LOCKFILE="nosuch.lock"),
    C("check {spec}", 2, "https://", SAFEHUB_GITHUB_URL="http://example.com"),
    C("check {spec}", 2, "https://", SAFEHUB_GITHUB_API_URL="ftp://x"),
    C("check {spec}", 2, "SAFEHUB_TIMEOUT", SAFEHUB_TIMEOUT="soon"),
    C("check {spec}", 2, "SAFEHUB_TIMEOUT", SAFEHUB_TIMEOUT="-1"),
    C("check {spec}", 2, "finite", SAFEHUB_TIMEOUT="inf"),
    C("check {spec}", 2, "finite", SAFEHUB_TIMEOUT="nan"),
    C("check {spec}", 2, "finite", SAFEHUB_TIMEOUT="1e400"),
    C("check {spec}", 2, "https://", SAFEHUB_GITHUB_API_URL="https://[::1"),
    C("check {spec}", 2, "https://", SAFEHUB_GITHUB_URL="https://"),
    C("check {spec}", 2, "SAFEHUB_MAX_FILES", SAFEHUB_MAX_FILES="1.5"),
    C("check {spec}", 2, "SAFEHUB_MAX_ARCHIVE_BYTES", SAFEHUB_MAX_ARCHIVE_BYTES="lots"),
    # -- trust and untrust -------------------------------------------------------------------
    C("trust", 2, "required: spec"),
    C("trust a", 2, "exactly one '/'"),
    C("trust {spec} tiny", 2, "safehub trust --help"),
    C("trust acme/nosuch", 1, "acme/nosuch"),
    C("trust {spec}", 1, "not here", SAFEHUB_POLICY="deny.toml"),
    C("trust {spec}", 1, "empty", XDG_DATA_HOME="{cwd}/empty"),
    C("untrust", 2, "required: spec"),
    C("untrust 'a b'", 2, "exactly one '/'"),
    C("untrust acme/models:somebranch", 1, "safehub untrust acme/models"),
    # -- lock --------------------------------------------------------------------------------
    C("lock", 2, "nothing to lock"),
    C("lock 'bad spec'", 2, "exactly one '/'"),
    C("lock {spec} 'bad spec'", 2, "exactly one '/'"),
    C("lock --from nosuch", 2, "no such file"),
    C("lock --from adir", 2, "is a folder"),
    C("lock --from junk", 2, "UTF-8"),
    C("lock --from loop", 2, "looping"),
    C("lock --from specs.txt", 2, "exactly one '/'"),
    C("lock --from empty", 2, "lists no specs"),
    C("lock --from comments.txt", 2, "lists no specs"),
    C("lock --from ''", 2, "empty string"),
    C("lock --check {spec}", 2, "--check"),
    C("lock --check --upgrade", 2, "--check"),
    C("lock --check", 1, "safehub lock"),
    C("lock --lockfile adir {spec}", 2, "is a folder"),
    C("lock --lockfile empty/safehub.lock {spec}", 2, "is a file"),
    C("lock --lockfile junk --check", 1, "UTF-8"),
    C("lock --lockfile bad.lock {spec}", 1, "not valid TOML"),
    C("lock --lockfile wrong.lock {spec}", 1, "40-hex"),
    C("lock --lockfile nosuch.lock --check", 1, "safehub lock"),
    C("lock acme/nosuch", 1, "acme/nosuch"),
    C("lock acme/models:v9.9", 1, "v9.9"),
    C("lock {spec}", 1, "not here", SAFEHUB_POLICY="deny.toml"),
    # -- prefetch and fetch ------------------------------------------------------------------
    C("prefetch", 2, "safehub lock"),
    C("fetch", 2, "safehub lock"),
    C("prefetch --from adir", 2, "is a folder"),
    C("fetch x", 2, "exactly one '/'"),
    C("prefetch {spec} --mirror empty", 2, "is a file"),
    C("prefetch {spec} --mirror ''", 2, "empty string"),
    C("prefetch {spec} --mirror blocked", 1, "mirror"),
    C("prefetch {spec} --cache-dir empty", 2, "is a file"),
    C("prefetch acme/nosuch", 1, "acme/nosuch"),
    C("prefetch --lockfile bad.lock", 1, "not valid TOML"),
    C("prefetch --lockfile good.lock", 1, "offline", SAFEHUB_OFFLINE="1"),
    C("prefetch {spec} --oci https://reg.example/x", 2, "REGISTRY/REPOSITORY"),
    C("prefetch {spec} --oci oci:adir", 2, "oci export"),
    # -- oci export and import (issue 19) ---------------------------------------------------
    C("oci export", 2, "DIR"),
    C("oci export empty", 2, "is a file"),
    C("oci export out --lockfile bad.lock", 1, "not valid TOML"),
    C("oci import nosuch reg.example/x", 2, "no such folder"),
    C("oci import adir https://reg.example/x", 2, "REGISTRY/REPOSITORY"),
    C("oci import adir reg.example/x", 1, "no snapshots"),
    # -- verify ------------------------------------------------------------------------------
    C("verify", 2, "required: target"),
    C("verify nosuch", 2, "no folder"),
    C("verify empty", 2, "is a file"),
    C("verify adir", 2, "--key"),
    C("verify adir --key nosuch", 2, "no such file"),
    C("verify adir --key ''", 2, "empty string"),
    C("verify adir --key adir", 2, "is a folder"),
    C("verify adir --key pub.pem", 1, "safehub sign"),
    C("verify signed --key empty", 1, "not a PEM public key"),
    C("verify signed --key junk", 1, "not a PEM public key"),
    C("verify signed --key notakey.pem", 1, "not a PEM public key"),
    C("verify signed --key priv.pem", 1, "not a PEM public key"),
    C("verify signed --key other.pub", 1, "matches no key"),
    C("verify signed --key pub.pem --key nosuch", 2, "no such file"),
    C("verify badsig --key pub.pem", 1, "not a JSON Sigstore bundle"),
    C("verify adir --identity x", 2, "--issuer"),
    C("verify adir --issuer x", 2, "--identity"),
    C("verify signed --identity x --issuer y --trust-config nosuch", 2, "no such file"),
    C("verify signed --identity x --issuer y --trust-config adir", 2, "is a folder"),
    C("verify signed --identity x --issuer y", 1, "made with a key"),
    C("verify adir --certificate-identity x", 2, "--issuer"),  # cosign's names: the same
    C("verify signed --certificate-identity x --certificate-oidc-issuer y", 1, "made with a key"),
    C("verify {spec} --key pub.pem", 1, "safehub sign"),
    C("verify acme/nosuch --key pub.pem", 1, "acme/nosuch"),
    # -- sign --------------------------------------------------------------------------------
    C("sign", 2, "required: directory, --key"),
    C("sign adir", 2, "required: --key"),
    C("sign nosuch --key priv.pem", 2, "no such folder"),
    C("sign empty --key priv.pem", 2, "is a file"),
    C("sign adir --key nosuch", 2, "no such file"),
    # -- keygen ------------------------------------------------------------------------------
    C("keygen", 2, "required: PRIVATE"),
    C("keygen priv.pem", 2, "never overwrites"),
    C("keygen adir", 2, "is a folder"),
    C("env --bogus", 2, "--bogus"),
    C("sign adir --key ''", 2, "empty string"),
    C("sign adir --key adir", 2, "is a folder"),
    C("sign adir --key empty", 1, "not a PEM private key"),
    C("sign adir --key junk", 1, "not a PEM private key"),
    C("sign adir --key pub.pem", 1, "not a PEM private key"),
    C("sign adir --key rsa.pem", 1, "not an EC private key"),
    C("sign adir --key priv.pem --out adir", 2, "is a folder"),
    C("sign adir --key priv.pem --out empty/model.sig", 2, "is a file"),
    C("sign adir --key priv.pem --out ''", 2, "empty string"),
    # -- policy ------------------------------------------------------------------------------
    C("policy", 2, "ACTION"),
    C("policy bogus", 2, "invalid choice"),
    C("policy show extra", 2, "safehub policy show --help"),
    C("policy show", 1, "not valid TOML", SAFEHUB_POLICY="bad.toml"),
    C("policy show", 1, "SAFEHUB_POLICY", SAFEHUB_POLICY="adir"),
    C("policy validate", 2, "required: FILE"),
    C("policy validate ''", 2, "empty string"),
    C("policy validate nosuch", 1, "nosuch", report=True),
    C("policy validate adir", 1, "adir", report=True),
    C("policy validate junk", 1, "UTF-8", report=True),
    C("policy validate loop", 1, "loop", report=True),
    C("policy validate bad.toml", 1, "TOML", report=True),
    C("policy validate deep.toml", 1, "deep.toml", report=True),
    C("policy validate wrongkey.toml", 1, "unknown key", report=True),
    C("policy init --for nope", 2, "invalid choice"),
    C("policy init --for", 2, "expected one argument"),
    C("policy init --path adir", 2, "is a folder"),
    C("policy init --path empty", 1, "never overwrites"),
    C("policy init --path empty/policy.toml", 2, "is a file"),
    C("policy init --path ''", 2, "empty string"),
    # -- cache -------------------------------------------------------------------------------
    C("cache", 2, "ACTION"),
    C("cache bogus", 2, "invalid choice"),
    C("cache ls extra", 2, "safehub cache ls --help"),
    C("cache ls --cache-dir empty", 2, "is a file"),
    C("cache ls --cache-dir empty/", 2, "is a file"),
    C("cache ls --cache-dir empty/sub", 2, "empty is a file"),
    C("cache ls", 1, "is a file", SAFEHUB_CACHE_DIR="empty"),
    C("cache verify", 1, "is a file", SAFEHUB_CACHE_DIR="empty"),
    C("cache clear", 1, "is a file", SAFEHUB_CACHE_DIR="empty"),
    C("cache verify zzz", 2, "hex"),
    C("cache verify abcd", 1, "safehub cache ls"),
    C("cache clear 'xyz!'", 2, "hex"),
    C("cache clear ''", 2, "hex"),
    C("cache clear ../..", 2, "hex"),
    # -- run, demo, docs (``run`` passes everything after it on: no --json) ----------------
    C("run", 2, "safehub run -- python", json=False),
    # -- the environment hook (what it writes is tests/test_environment_hook.py's) ----------
    C("install", 2, "required: --environment"),
    C("uninstall", 2, "required: --environment"),
    # -- oci ---------------------------------------------------------------------------------
    C("oci", 2, "required: ACTION"),
    C("oci import", 2, "required: DIR, REGISTRY/REPOSITORY"),
    C("oci import adir", 2, "required: REGISTRY/REPOSITORY"),
    C("run --", 2, "safehub run -- python", json=False),
    C("run -- /nonexistent/prog", 127, "/nonexistent/prog", json=False),  # as a shell
    C("run -- adir", 127, "adir", json=False),
    C("run -- ./empty", 126, "empty", json=False),
    C("demo extra", 2, "safehub demo --help"),
    C("completion", 2, "shell"),
    C("completion fish", 2, "invalid choice"),
    C("docs nosuch", 2, "pages:"),
    C("docs ../README", 2, "pages:"),
    C("docs ''", 2, "pages:"),
    C("docs policy extra", 2, "safehub docs --help"),
]


# -- the repos, and the folder full of wrong things -------------------------------------------

REPOS: dict[str, dict[str, str]] = {
    "models": {},
    "broken": {"hubconf.py": "raise ValueError('broken on purpose')\n"},
    "quits": {"hubconf.py": "import sys\nsys.exit(0)\n"},
    "needy": {"hubconf.py": "dependencies = ['no_such_module_xyz']\n\n\n"
              "def tiny():\n    'A model.'\n"},
    "chatty": {"hubconf.py": HUBCONF + "\nprint('hello from hubconf')\n"},
    "odd": {"hubconf.py": "class Odd(BaseException):\n    pass\n\n\nraise Odd('no Exception')\n"},
    "mute": {"hubconf.py": "class Mute(Exception):\n    def __str__(self):\n"
             "        raise RuntimeError('no')\n\n\nraise Mute()\n"},
    "loud": {"hubconf.py": "raise ValueError('loud ' * 100_000)\n"},
    "mangler": {"hubconf.py": "import sys\nsys.stdout.close()\nsys.stderr = None\n\n\n"
                "def tiny():\n    return 1\n"},
    "plain": {},
}


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class World:
    """Made once for the module: the stand-in with its repos; keys, a signed folder and a
    lockfile to copy into each test's folder."""

    server: GitHubStandIn
    sha: str
    files: Path


def _serve(mp: pytest.MonkeyPatch, server: GitHubStandIn) -> None:
    """What the conftest's ``server`` fixture sets: safehub talks to the stand-in only."""
    mp.setenv("SAFEHUB_GITHUB_API_URL", server.api_url)
    mp.setenv("SAFEHUB_GITHUB_URL", server.web_url)
    mp.setenv("SAFEHUB_ALLOWED_HOSTS", ",".join(server.redirect_hosts))
    mp.setenv("REQUESTS_CA_BUNDLE", str(server.ca_cert))


@pytest.fixture(scope="module")
def world(tls: TLSFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("robust")
    files = root / "files"
    files.mkdir()
    mine, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    (files / "priv.pem").write_bytes(_private_pem(mine))
    (files / "pub.pem").write_bytes(_public_pem(mine))
    (files / "other.pub").write_bytes(_public_pem(other))
    (files / "rsa.pem").write_bytes(_private_pem(rsa.generate_private_key(65537, 2048)))
    (files / "signed").mkdir()
    (files / "signed/weights.txt").write_text("w\n")
    sign_directory(files / "signed", files / "priv.pem")
    with GitHubStandIn(tls) as server:
        shas = {}
        for name, content in REPOS.items():
            path = root / "repos" / name
            tree: dict[str, str | bytes] = {"hubconf.py": HUBCONF, "README.md": "# hub\n"}
            tree.update(content)
            if name == "plain":
                del tree["hubconf.py"]
            shas[name] = make_repo(path, tree)
            git(path, "tag", "v1.0")
            server.add_repo("acme", name, path)
        with pytest.MonkeyPatch.context() as mp:
            _serve(mp, server)
            for var, sub in (("SAFEHUB_CACHE_DIR", "cache"), ("XDG_DATA_HOME", "data"),
                             ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"),
                             ("XDG_CONFIG_DIRS", "site")):
                mp.setenv(var, str(root / sub))
            assert main(["lock", "acme/models:v1.0", "--lockfile", str(files / "good.lock"),
                         "--json"]) == 0
        yield World(server, shas["models"], files)


@pytest.fixture
def mess(world: World, monkeypatch: pytest.MonkeyPatch, isolated: Path) -> World:
    """This test's folder (the cwd), full of wrong things; safehub talks to the stand-in."""
    _serve(monkeypatch, world.server)
    cwd = Path.cwd()
    shutil.copytree(world.files, cwd, dirs_exist_ok=True)
    (cwd / "adir").mkdir()
    (cwd / "empty").write_text("")
    (cwd / "junk").write_bytes(b"\xff\xfe\x00 not text \x80")
    (cwd / "notakey.pem").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    (cwd / "bad.toml").write_text("[[allow]\nrepo = \n")
    (cwd / "deep.toml").write_text("a = " + DEEP + "\n")
    (cwd / "deep.lock").write_text("a = " + DEEP + "\n")
    (cwd / "wrongkey.toml").write_text("[safehub]\nversion = 1\nunknown_repo = 'deny'\n")
    (cwd / "deny.toml").write_text("[[deny]]\nrepo = 'acme/*'\nreason = 'not here'\n")
    (cwd / "auditdir.toml").write_text("[safehub]\naudit_log = 'adir'\n"
                                       "[[allow]]\nrepo = 'acme/models'\n")
    (cwd / "bad.lock").write_text("[[lock]\n")
    (cwd / "wrong.lock").write_text("version = 1\n[[repo]]\nspec = 'acme/models:v1.0'\n"
                                    "commit = 'not a sha'\n")
    (cwd / "specs.txt").write_text("# my repos\nnot a spec\n")
    (cwd / "comments.txt").write_text("# nothing but comments\n\n")
    (cwd / "loop").symlink_to(cwd / "loop")
    (cwd / "dangling").symlink_to(cwd / "nowhere")
    (cwd / "hub").mkdir()
    (cwd / "hub/hubconf.py").write_text("raise ImportError('my own local hubconf is broken')\n")
    (cwd / "badsig").mkdir()
    (cwd / "badsig/weights.txt").write_text("w\n")
    (cwd / "badsig/model.sig").write_bytes(b"\xff not a bundle")
    (cwd / "holds/x/x").mkdir(parents=True)  # a folder named like nothing in particular
    (cwd / "blocked").mkdir()
    (cwd / "blocked/acme").write_text("a file where the mirror needs a folder\n")
    return world


# -- the checks -------------------------------------------------------------------------------

ERROR_LINE = re.compile(r"^safehub: (usage error|\w+): (.+)$")


def check_failure(case: Case, code: int, out: str, err: str, as_json: bool) -> None:
    """The shape every failure must have."""
    shown = out + err
    assert "Traceback" not in shown, shown
    assert "bug in safehub" not in shown, shown
    assert code == case.exit, shown
    assert case.says.lower() in shown.lower(), shown
    if case.report:  # the command's own report: what failed, then how to fix it
        if as_json:
            json.loads(out)  # exactly one JSON value
        else:
            assert re.search(r"^\s*fix:? ", out, re.M), out
        return
    # Progress lines may come first. The error is last: what failed, its details (indented
    # four), the fix and the fix's own lines (indented four).
    lines = err.splitlines()
    first = next(i for i, line in enumerate(lines)
                 if (m := ERROR_LINE.match(line)) and m.group(1) in KINDS)
    assert len(lines[first]) < 1000, "one line, bounded"
    rest = lines[first + 1:]
    details = list(itertools.takewhile(lambda line: line.startswith("    "), rest))
    assert rest[len(details)].startswith("  fix: "), err
    assert all(line.startswith("    ") for line in rest[len(details) + 1:]), err
    if as_json:
        error = json.loads(out)  # exactly one JSON object, nothing else on stdout
        assert set(error) == {"error", "message", "hint", "fix", "exit"}, error
        assert error["exit"] == code and error["hint"] and error["fix"], error
        assert error["error"] in KINDS or error["error"] == "usage", error
        assert error["message"].split("\n")[0] in lines[first], (error, err)
    else:
        assert out == "", out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_failure_is_one_line_a_fix_and_an_exit_code(
    case: Case, mess: World, canary: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.format(cwd=Path.cwd()))
    words = shlex.split(case.args.format(spec="acme/models:v1.0", sha=mess.sha, deep=DEEP))
    for as_json in (False, True) if case.json else (False,):
        code = main([*words, "--json"] if as_json else words)
        captured = capsys.readouterr()
        if not HAVE_TORCH and "torch cannot be imported" in captured.err + captured.out:
            pytest.skip("needs torch (not installed)")
        check_failure(case, code, captured.out, captured.err, as_json or "--json" in words)
    if "--trust" not in words:
        assert runs(canary) == 0  # nobody agreed: no repo code ran


def test_every_subcommand_is_in_the_table() -> None:
    """A new subcommand (or action) gets its bad-argument cases here too."""
    from safehub.cli import COMMANDS

    tried = {" ".join(shlex.split(c.args)[:2]) for c in CASES} | \
        {shlex.split(c.args)[0] for c in CASES if c.args}
    assert {*COMMANDS, "fetch", "cache ls", "cache verify", "cache clear"} - {"cache"} <= tried


@needs_torch
def test_what_the_repo_code_prints_does_not_spoil_the_json(
    mess: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["load", "acme/chatty:v1.0", "tiny", "--trust", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["entrypoint"] == "tiny"  # nothing else on stdout
    assert "hello from hubconf" in captured.err


def test_version_and_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    from safehub import __version__
    from safehub.cli import COMMANDS

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"safehub {__version__} (Python ")
    for name in ["", *COMMANDS, "fetch", "policy", "cache ls", "cache verify", "cache clear"]:
        assert main([*name.split(), "--help"]) == 0, name
        out = capsys.readouterr().out
        assert out.startswith(f"usage: safehub {name}".rstrip()) and "Traceback" not in out


@needs_torch
def test_every_success_with_json_is_one_json_value(
    mess: World, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ["lock {spec}", "prefetch", "trust {spec}", "check {spec}", "list {spec}",
                    "help {spec} tiny", "load {spec} tiny", "verify signed --key pub.pem",
                    "sign adir --key priv.pem", "policy show", "policy validate deny.toml",
                    "cache ls --cache-dir adir", "cache ls --cache-dir holds/x",
                    "policy init --path new.toml", "cache ls", "cache verify", "untrust {spec}",
                    "cache clear --yes", "docs", "docs policy", "lock --check"]:
        words = shlex.split(command.format(spec="acme/models:v1.0"))
        assert main([*words, "--json"]) == 0, command
        json.loads(capsys.readouterr().out)  # exactly one JSON value, nothing else



@needs_torch
@pytest.mark.parametrize("words", [["run", "--", "no_such_program_x"],
                                   ["check", "not a spec", "--json"],
                                   ["verify", "nosuchdir/", "--key", "k.pub", "--json"]])
def test_errors_are_one_line_and_the_fix(capsys: pytest.CaptureFixture[str],
                                         words: list[str]) -> None:
    """Outside the folder full of wrong things too: a program that does not exist, a spec
    that is none, a folder that is not there."""
    rc, out, err = cli(capsys, *words)
    assert rc in (1, 2, 127) and "Traceback" not in out + err  # 127: run, as a shell
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("safehub: ") and lines[1].startswith("  fix: ")
    if "--json" in words:
        assert json.loads(out)["exit"] == rc
    else:
        assert out == ""

# -- where stdin, stdout, stderr or the terminal matter: a real process ----------------------

def python_m(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    env.update(kwargs.pop("env", {}))  # type: ignore[call-overload]
    kwargs.setdefault("capture_output", not {"stdout", "stderr"} & set(kwargs))
    return subprocess.run([sys.executable, "-m", "safehub", *args], text=True, env=env,
                          timeout=120, **kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize("args", [("docs", "architecture"), ("--help",),
                                  ("load", "bad", "m", "--json"), ("cache", "ls", "--json")])
def test_a_reader_that_went_away_is_no_traceback(args: tuple[str, ...]) -> None:
    """`safehub ... | head`: the pipe closes; safehub stops quietly, exit 1."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = python_m(*args, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert proc.stderr == ""  # not even "Exception ignored"
    # argparse ignores a failed write of its help text on 3.11+ (3.10 reports it: exit 1)
    assert proc.returncode in ((0, 1) if args == ("--help",) else (1,))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_on_stdout_is_one_line_and_a_fix() -> None:
    with open("/dev/full", "w") as full:
        proc = python_m("docs", "policy", stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0] == \
        "safehub: OutputError: cannot write the output (No space left on device)"
    assert proc.stderr.splitlines()[1].startswith("  fix: ")


def test_a_terminal_that_cannot_show_unicode_gets_escapes() -> None:
    proc = python_m("docs", "architecture", env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and "\\u2192" in proc.stdout and proc.stderr == ""


def test_no_stderr_at_all_still_exits_with_the_code() -> None:
    proc = python_m("load", "bad", "m", "--json", stdout=subprocess.PIPE,
                    preexec_fn=lambda: os.close(2))
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"] == "SpecError"


@pytest.mark.parametrize("args", [("docs", "policy"), ("load", "bad", "m", "--json")])
def test_no_stdout_at_all_is_one_line_and_a_fix(args: tuple[str, ...]) -> None:
    proc = python_m(*args, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "safehub: OutputError: cannot write the output (standard output is closed)",
        "  fix: check where standard output goes (a full disk, a closed pipe)"]


@pytest.mark.slow
@needs_torch
def test_repo_code_that_breaks_stdout_and_stderr_spoils_nothing(mess: World) -> None:
    proc = python_m("load", "acme/mangler:v1.0", "tiny", "--trust", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == {"type": "builtins.int"}
    proc = python_m("load", "acme/mangler:v1.0", "nosuch", "--trust")
    assert proc.returncode == 1 and "HubconfError" in proc.stderr and "  fix: " in proc.stderr


def test_no_terminal_and_no_ci_refuses_at_once(mess: World, canary: Path) -> None:
    proc = python_m("load", "acme/models:v1.0", "tiny", stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "UntrustedRepoError" in proc.stderr and "  fix: " in proc.stderr
    assert runs(canary) == 0


@pytest.mark.parametrize("answer", ["ctrl-c", "ctrl-d"])
def test_the_prompt_left_with_ctrl_c_or_ctrl_d(mess: World, canary: Path, answer: str) -> None:
    import pexpect

    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    child = pexpect.spawn(sys.executable, ["-m", "safehub", "load", "acme/models:v1.0", "tiny"],
                          env=env, encoding="utf-8", timeout=120,
                          preexec_fn=in_the_foreground)  # Ctrl-C reaches it
    child.expect(r"\[y/N\] ")
    if answer == "ctrl-c":
        child.sendintr()
    else:
        child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    shown = str(child.before)
    assert "Traceback" not in shown
    if answer == "ctrl-c":
        assert child.exitstatus == 130 and "safehub: interrupted: " in shown
    else:
        assert child.exitstatus == 1 and "UntrustedRepoError" in shown
        assert "\n" in shown.split("safehub: ", 1)[0], shown  # not on the prompt's line
    assert "  fix: " in shown
    assert runs(canary) == 0


def test_run_of_a_program_that_cannot_run_exits_as_a_shell_does(
        tmp_path: Path, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """127 for a program not found, 126 for one that cannot be executed (issue 33)."""
    from safehub.cli import main

    assert main(["run", "--", str(tmp_path / "nonexistent")]) == 127
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    assert main(["run", "--", str(script)]) == 126
    assert "cannot run" in capsys.readouterr().err
