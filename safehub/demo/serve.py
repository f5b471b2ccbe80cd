"""``safehub demo --serve``: the demo's loopback hub, up until Ctrl-C, to try commands on.

It serves five repos from git repos made in a temp folder (the same every time: fixed
content, author and dates, so the commits are the ones the README shows):

- ``demo/tiny-hub`` (tag ``v1.0``): the shipped example, the one the README's Quickstart loads;
- ``mallory/tiny-hub``: a fork of it with one commit of its own, which GitHub would also
  serve under ``demo/tiny-hub``'s name (safehub refuses it);
- ``demo/signed-hub`` (tag ``v1.0``): the example signed with a key made at start-up; the
  demo's policy requires that signature;
- ``demo/moved-hub`` (tag ``v1.0``): locked in the demo's lockfile, then its tag was moved;
- ``demo/phone-home`` (tag ``v1.0``): its entrypoint connects to a host (this server).

It prints the ``export`` lines that point safehub at it (API, web, its CA, a cache and a
policy in its temp folder, so no file of yours changes) and commands to try. Everything is
removed when it stops, and it prints the ``unset`` line that undoes the exports (they name
its removed files; ``REQUESTS_CA_BUNDLE`` is read by every requests-based program).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from safehub._internal.frozen import Frozen

__all__ = ["Served", "environ", "serve", "serving"]

_EXAMPLE = Path(__file__).parents[1] / "_data" / "demo_hub"

_PHONE_HOME = '''"""A repo whose code phones home: its entrypoint connects to a host of its own."""

dependencies = ["torch"]

HOME = ("localhost", {port})


def model(width: int = 4):  # type: ignore[no-untyped-def]
    """A tiny model, after telling HOME that this machine loaded it."""
    import socket

    import torch

    with socket.create_connection(HOME, timeout=5):
        pass
    return torch.nn.Linear(width, 2)
'''


class Served(Frozen):
    """What ``serving`` made: the server's URLs and files, the lines to paste, the commits."""

    root: Path
    env: dict[str, str]
    commits: dict[str, str]  # "demo/tiny-hub:v1.0" and the others -> commit sha
    key: Path  # the public key demo/signed-hub is signed with
    lockfile: Path  # demo/moved-hub:v1.0 as it was before its tag moved

    def exports(self) -> str:
        """The lines to paste into a shell (POSIX sh)."""
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in self.env.items())

    def unsets(self) -> str:
        """The line that undoes :meth:`exports` in the shell they were pasted into."""
        return "unset " + " ".join(self.env)

    def tries(self) -> str:
        fork = self.commits["mallory/tiny-hub"]
        moved = self.commits["demo/moved-hub:v1.0 (locked)"]
        return "\n".join((
            "  safehub check demo/tiny-hub:v1.0              # would it load, and why",
            "  safehub load demo/tiny-hub:v1.0 tiny_mlp      # asks first (or: --trust)",
            f"  safehub load demo/tiny-hub:{fork[:12]} tiny_mlp --trust"
            "   # a fork's commit: refused",
            "  safehub load demo/signed-hub:v1.0 tiny_mlp    # signed; the policy requires it",
            f"  safehub verify demo/signed-hub:v1.0 --key {shlex.quote(str(self.key))}",
            f"  safehub lock --check --lockfile {shlex.quote(str(self.lockfile))}"
            f"   # v1.0 was {moved[:12]}: moved",
            "  safehub load demo/phone-home:v1.0 model --trust --report"
            "   # what its code did",
            "  safehub cache ls                              # what was verified, and whose",
        ))


def _make_repos(root: Path, port: int) -> dict[str, Path]:
    from safehub.demo.server import git

    def repo(name: str, files: dict[str, str]) -> Path:
        path = root / "repos" / name
        path.mkdir(parents=True)
        for file_name, text in files.items():
            (path / file_name).write_text(text, encoding="utf-8")
        git(path, "init", "-q", "-b", "main")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "initial")
        git(path, "tag", "v1.0")
        return path

    example = {p.name: p.read_text(encoding="utf-8") for p in sorted(_EXAMPLE.iterdir())
               if p.is_file()}
    tiny = repo("tiny-hub", example)
    fork = root / "repos" / "fork"
    git(root, "clone", "-q", str(tiny), str(fork))
    (fork / "hubconf.py").write_text("print('the fork ran its own code')\n")
    git(fork, "commit", "-q", "-a", "-m", "the fork's own commit")
    moved = repo("moved-hub", {**example, "README.md": "demo/moved-hub: its tag v1.0 moves\n"})
    phone = repo("phone-home", {"hubconf.py": _PHONE_HOME.format(port=port)})
    return {"demo/tiny-hub": tiny, "mallory/tiny-hub": fork, "demo/moved-hub": moved,
            "demo/phone-home": phone}


def _signed_repo(root: Path, example: Path) -> tuple[Path, Path]:
    """demo/signed-hub: the example with model.sig by a key made now; (repo, public key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from safehub.demo.server import git
    from safehub.verify.signatures import sign_directory

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = root / "keys" / "demo-signing.key", root / "keys" / "demo-signing.pub"
    private.parent.mkdir()
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    path = root / "repos" / "signed-hub"
    path.mkdir()
    for file in sorted(example.iterdir()):
        if file.is_file():
            (path / file.name).write_bytes(file.read_bytes())
    sign_directory(path, private)
    private.unlink()  # nobody signs anything else with it
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "signed")
    git(path, "tag", "v1.0")
    return path, public


def _policy(root: Path, key: Path) -> Path:
    path = root / "policy.toml"
    path.write_text(
        "# The demo's policy (added to yours by SAFEHUB_POLICY): demo/signed-hub must carry\n"
        "# a valid signature by the demo's key. Everything else is decided by your files.\n"
        "[safehub]\nversion = 1\n\n"
        f'[[allow]]\nrepo = "demo/signed-hub"\nsignature = "required"\nkeys = ["{key}"]\n',
        encoding="utf-8")
    return path


@contextlib.contextmanager
def serving(port: int = 0, folder: Path | None = None) -> Iterator[Served]:
    """Build the demo's repos and serve them on 127.0.0.1:``port`` (0: any free port)
    while the ``with`` block runs."""
    from safehub.demo.server import DemoGitHub, git
    from safehub.store.cache.store import DEMO_PREFIX

    with contextlib.ExitStack() as stack:
        root = folder or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix=DEMO_PREFIX)))
        server = stack.enter_context(DemoGitHub(root, port=port))
        repos = _make_repos(root, server.port)
        signed, key = _signed_repo(root, _EXAMPLE)
        server.add_repo("demo", "tiny-hub", repos["demo/tiny-hub"])
        server.add_repo("mallory", "tiny-hub", repos["mallory/tiny-hub"],
                        fork_of="demo/tiny-hub")
        server.add_repo("demo", "signed-hub", signed)
        server.add_repo("demo", "moved-hub", repos["demo/moved-hub"])
        server.add_repo("demo", "phone-home", repos["demo/phone-home"])
        env = {"SAFEHUB_GITHUB_API_URL": server.api_url, "SAFEHUB_GITHUB_URL": server.web_url,
               "REQUESTS_CA_BUNDLE": str(server.ca_cert),
               "SAFEHUB_ALLOWED_HOSTS": "127.0.0.1",
               "SAFEHUB_CACHE_DIR": str(root / "cache"),
               "SAFEHUB_POLICY": str(_policy(root, key))}
        lockfile = _lock_then_move(root, server, repos["demo/moved-hub"])
        commits = {f"{name}:v1.0": git(path, "rev-parse", "v1.0^{commit}")
                   for name, path in {**repos, "demo/signed-hub": signed}.items()
                   if name != "mallory/tiny-hub"}
        commits["mallory/tiny-hub"] = git(repos["mallory/tiny-hub"], "rev-parse", "HEAD")
        commits["demo/moved-hub:v1.0 (locked)"] = _locked_commit(lockfile)
        yield Served(root, env, commits, key, lockfile)


def _lock_then_move(root: Path, server: object, repo: Path) -> Path:
    """Lock demo/moved-hub:v1.0 in root/demo.lock, then move its tag to a new commit."""
    from safehub import operations
    from safehub.demo.server import git
    from safehub.hub import Hub
    from safehub.policy import Policy

    lockfile = root / "demo.lock"
    hub = Hub(policy=Policy(), cache_dir=root / "lock-cache", data_dir=root / "lock-data",
              log_dir=root / "lock-log", api_url=server.api_url,  # type: ignore[attr-defined]
              web_url=server.web_url,  # type: ignore[attr-defined]
              extra_hosts=frozenset({"127.0.0.1"}), noninteractive=True, offline=False,
              lockfile=lockfile, audit_log=None)
    with _quiet(), environ({"REQUESTS_CA_BUNDLE": str(server.ca_cert)}):  # type: ignore[attr-defined]
        operations.lock(hub, ["demo/moved-hub:v1.0"])
    (repo / "README.md").write_text("v1.0, moved to another commit after it was locked\n")
    git(repo, "commit", "-q", "-a", "-m", "moved")
    git(repo, "tag", "-f", "v1.0")
    return lockfile


def _locked_commit(lockfile: Path) -> str:
    from safehub.store.lockfile import Lockfile

    entry = next(iter(Lockfile.load(lockfile).entries.values()))
    return entry.commit


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the ``with`` block, then put back what was there."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _say(line: str) -> None:
    print(line, flush=True)  # a reader of a pipe sees each line as it is printed


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """While serving, SIGTERM ends the server as Ctrl-C does (so its temp folder is
    removed); the handler that was there before comes back afterwards."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(port: int, say: Callable[[str], None] = _say,
          stop: threading.Event | None = None) -> None:
    """Serve until Ctrl-C (or ``stop`` is set), after printing what to paste and try."""
    unset = ""
    with _stop_on_sigterm(), serving(port) as served, \
            contextlib.suppress(KeyboardInterrupt):  # from the first line printed on
        say(f"safehub demo hub on {served.env['SAFEHUB_GITHUB_API_URL']} "
            f"(files in {served.root}; removed when it stops)\n"
            "In another shell, paste these lines (they point safehub at this hub, with a "
            "cache and a policy of its own, so no file of yours changes; "
            "REQUESTS_CA_BUNDLE makes every requests-based program in that shell trust "
            "this hub's CA only, so use that shell for the demo):\n")
        say(served.exports())
        say("\nthen try the README's Quickstart, or:\n" + served.tries())
        unset = served.unsets()
        say(f"\nCtrl-C stops it. Then, in that shell:\n{unset}")
        (stop or threading.Event()).wait()
    say("safehub demo hub stopped; its files are removed" + (
        ". In the shell where you pasted the export lines (they name those files), "
        f"run:\n{unset}" if unset else ""))
