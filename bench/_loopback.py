"""Shared set-up for the benchmarks: a ~1,000-file hub repo on the loopback GitHub stand-in
(tests/support; the scripts put the repo root on sys.path), and a switch that points
torch.hub's hard-coded github.com URLs at the same server.

torch.hub is measured with its own code paths; only the host part of its URLs is rewritten
(and its TLS context told to trust the stand-in's throwaway CA).
"""

from __future__ import annotations

import os
import random
import ssl
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
