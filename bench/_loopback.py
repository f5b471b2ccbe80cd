"""Shared set-up for the benchmarks: hub repos on the loopback GitHub stand-in (tests/support;
the scripts put the repo root on sys.path), and a switch that points torch.hub's hard-coded
github.com URLs at the same server.

Two repo shapes: :func:`make_big_repo` (~1,000 small modules in flat folders) and
:func:`make_real_repo` (thousands of files in nested folders, text of log-normal sizes, a
few large binaries, symlinks, executables, submodules, ``.gitattributes``, a hubconf that
imports its own package). The stand-in can also run in a child process
(:class:`ChildServer`), so that serving a large archive does not compete with the client
measured for this process's interpreter lock.

torch.hub is measured with its own code paths; only the host part of its URLs is rewritten
(and its TLS context told to trust the stand-in's throwaway CA).
"""

from __future__ import annotations

import json
import os
import random
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support import GitHubStandIn

HUBCONF = '''\
dependencies = ["torch"]

from pkg00 import mod000  # a hub repo usually imports some of its own modules


def tiny(n=2):
    """A tiny linear model."""
    import torch

    return torch.nn.Linear(n, n)
'''


def make_big_repo(path: Path, files: int = 1000, seed: int = 7) -> str:
    """A repo with ``files`` files in folders of 40, sizes 200 B to 8 KiB; returns the sha."""
    from tests.support import make_repo

    rng = random.Random(seed)
    content: dict[str, str | bytes] = {"hubconf.py": HUBCONF}
    for i in range(files - 1):
        body = "".join(f"X{j} = {rng.randrange(10**9)}\n" for j in range(rng.randrange(10, 400)))
        content[f"pkg{i // 40:02d}/mod{i % 40:03d}.py"] = body
    for d in range(files // 40 + 1):
        content.setdefault(f"pkg{d:02d}/__init__.py", "")
    return make_repo(path, content)


REAL_HUBCONF = '''\
dependencies = ["torch"]

from zoo import backbones  # a hub repo imports its own package, which imports more of it


def tiny(n=2):
    """A tiny linear model."""
    import torch

    return torch.nn.Linear(n, n)
'''

_WORDS = ["def", "class", "return", "import", "self", "torch", "tensor", "model", "weight",
          "layer", "forward", "config", "data", "loader", "train", "eval", "batch", "shape"]


def _text(rng: random.Random, size: int) -> bytes:
    lines, total = [], 0
    while total < size:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choices(_WORDS, k=rng.randint(2, 12)))
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:max(size, 1)]


def _module(rng: random.Random, n: int) -> bytes:
    body = "".join(f"def f{j}(x):\n    return x * {rng.randrange(10**6)}\n\n\n"
                   for j in range(rng.randrange(20, 120)))
    return f'"""Module {n}."""\n\n\n{body}'.encode()


def make_real_repo(git_dir: Path, files: int = 5000, megabytes: int = 100, *,
                   submodules: int = 3, links: int = 20, seed: int = 7) -> str:
    """A bare repo of real shape at ``git_dir`` (one ``git fast-import``); returns the sha.

    ``files`` entries in all (a tenth of the bytes in 5 MB binaries, the rest text of
    log-normal sizes in ~``files / 12`` nested folders; every 97th file executable), a
    package ``zoo`` that hubconf imports (it imports 24 modules of its own), ``links``
    symlinks (two to folders), ``submodules`` gitlinks named in ``.gitmodules``, and a
    ``.gitattributes`` of the usual kind. Branch ``main``, tag ``v1.0``; same sha every run.
    """
    from tests.support import run_git

    rng = random.Random(seed)
    run_git(["init", "-q", "--bare", "-b", "main", str(git_dir)])
    folders = [""]
    for _ in range(files // 12):
        parent = rng.choice(folders)
        folders.append(f"{parent}/d{len(folders)}" if parent else f"d{len(folders)}")
    big = [rng.randbytes(5 * 1024 * 1024) for _ in range(max(1, megabytes // 10))]
    attrs = b"*.ipynb linguist-documentation\n*.bin binary\n*.sh text eol=lf\n"
    modules = {f"zoo/backbones/m{n:02d}.py": _module(rng, n) for n in range(24)}
    modules["zoo/__init__.py"] = b""
    modules["zoo/backbones/__init__.py"] = "".join(
        f"from . import m{n:02d}  # noqa: F401\n" for n in range(24)).encode()
    fixed: dict[str, bytes] = {"hubconf.py": REAL_HUBCONF.encode(), ".gitattributes": attrs,
                               "README.md": b"# a large hub repo\n", **modules}
    gitmodules = "".join(f'[submodule "third_party/sub{n}"]\n\tpath = third_party/sub{n}\n'
                         f"\turl = https://github.com/other/sub{n}.git\n"
                         for n in range(submodules))
    if submodules:
        fixed[".gitmodules"] = gitmodules.encode()
    count = files - len(big) - len(fixed) - links - submodules
    mean = (megabytes * 1024 * 1024 - sum(map(len, big))) / max(count, 1)
    stream = bytearray(b"commit refs/heads/main\nmark :1\n"
                       b"committer A <a@x> 1700000000 +0000\ndata 2\nm\n")

    def add(path: str, data: bytes, mode: str = "100644") -> None:
        stream.extend(f"M {mode} inline {path}\ndata {len(data)}\n".encode() + data + b"\n")

    paths = []
    for n in range(count):
        folder = rng.choice(folders)
        ext = rng.choice([".py", ".py", ".py", ".md", ".json", ".txt", ".yaml", ".sh"])
        path = f"{folder}/f{n}{ext}" if folder else f"f{n}{ext}"
        size = min(int(rng.lognormvariate(0, 1.0) * mean / 1.65), 2 * 1024 * 1024)
        add(path, _text(rng, size), "100755" if n % 97 == 0 else "100644")
        paths.append(path)
    for n, data in enumerate(big):
        add(f"assets/weights/w{n}.bin", data)
    for path, data in fixed.items():
        add(path, data)
    for n in range(links):
        target = rng.choice(folders[1:] if n < 2 else paths)
        add(f"links/l{n}", os.path.relpath(target, "links").encode(), "120000")
    for n in range(submodules):
        stream.extend(f"M 160000 {rng.randbytes(20).hex()} third_party/sub{n}\n".encode())
    stream.extend(b"reset refs/tags/v1.0\nfrom :1\n\n")
    run_git(["fast-import", "--quiet"], cwd=git_dir, stdin=bytes(stream))
    return run_git(["rev-parse", "main"], cwd=git_dir).stdout.decode().strip()


def filesystem(path: Path) -> str:
    """Where ``path`` is and the type of its file system (from /proc/mounts, if any)."""
    target, best, kind = str(path.resolve()), "", "?"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        parts = line.split()
        if len(parts) > 2 and len(parts[1]) >= len(best) and (
                target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
            best, kind = parts[1], parts[2]
    return f"{path.parent} ({kind})"


def home_env(home: Path) -> dict[str, str]:
    """Point HOME, the XDG dirs and torch's hub dir into ``home`` (nothing of yours is used)."""
    return {
        "HOME": str(home), "XDG_CONFIG_DIRS": str(home / "site"),
        "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
        "TORCH_HOME": str(home / "torch"),
    }


def start_server(workdir: Path) -> GitHubStandIn:
    from tests.support import GitHubStandIn, make_tls

    tls = make_tls(workdir / "tls")
    server = GitHubStandIn(tls)
    server.start()
    return server


def env_for(server: GitHubStandIn) -> dict[str, str]:
    """Environment that points safehub at the stand-in."""
    return {
        "SAFEHUB_GITHUB_API_URL": server.api_url,
        "SAFEHUB_GITHUB_URL": server.web_url,
        # what safehub allows by itself for github.com: the codeload and release-asset hosts
        "SAFEHUB_ALLOWED_HOSTS": ",".join(server.redirect_hosts),
        "REQUESTS_CA_BUNDLE": str(server.ca_cert),
        "BENCH_API_URL": server.api_url,
        "BENCH_WEB_URL": server.web_url,
    }


def point_torch_hub_at(api_url: str, web_url: str, ca_cert: str) -> None:
    """Rewrite torch.hub's https://github.com and https://api.github.com URLs."""
    import torch.hub

    context = ssl.create_default_context(cafile=ca_cert)
    real_urlopen = urllib.request.urlopen

    def rewrite(url: str) -> str:
        for real, ours in (("https://api.github.com", api_url), ("https://github.com", web_url)):
            if url.startswith(real):
                return ours + url[len(real):]
        return url

    def urlopen(req: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(req, urllib.request.Request):
            req.full_url = rewrite(req.full_url)
        else:
            req = rewrite(req)
        kwargs.setdefault("context", context)
        return real_urlopen(req, *args, **kwargs)

    torch.hub.urlopen = urlopen  # type: ignore[attr-defined]


def point_torch_hub_from_env() -> None:
    point_torch_hub_at(os.environ["BENCH_API_URL"], os.environ["BENCH_WEB_URL"],
                       os.environ["REQUESTS_CA_BUNDLE"])


class ChildServer:
    """The stand-in run by a child process (``python bench/_loopback.py``), serving one
    repo; the request log is read over a pipe. Same addresses and knobs as in-process."""

    def __init__(self, workdir: Path, owner: str, name: str, git_dir: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(workdir), owner, name, str(git_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        info = self._ask("info")
        self.api_url: str = info["api_url"]
        self.web_url: str = info["web_url"]
        self.redirect_hosts: tuple[str, ...] = tuple(info["redirect_hosts"])
        self.ca_cert = Path(info["ca_cert"])

    def _ask(self, command: str) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the stand-in's process ended")
        return json.loads(line)

    def clear_log(self) -> None:
        self._ask("clear")

    def paths(self) -> list[str]:
        """The path of every request since the log was cleared."""
        result: list[str] = self._ask("paths")
        return result

    def count(self) -> int:
        return len(self.paths())

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._ask("stop")
            self._proc.wait(timeout=60)


def _serve(workdir: Path, owner: str, name: str, git_dir: Path) -> None:
    """The child's side of :class:`ChildServer`: one JSON line per command read."""
    server = start_server(workdir)
    server.add_repo(owner, name, git_dir)
    answers = {
        "info": lambda: {"api_url": server.api_url, "web_url": server.web_url,
                         "redirect_hosts": list(server.redirect_hosts),
                         "ca_cert": str(server.ca_cert)},
        "clear": lambda: server.clear_log(),
        "paths": lambda: [r.path for r in server.requests_log],
        "stop": lambda: server.stop(),
    }
    for line in sys.stdin:
        command = line.strip()
        print(json.dumps(answers[command]()), flush=True)
        if command == "stop":
            return


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]))
