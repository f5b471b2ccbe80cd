"""``safehub demo``: the whole pipeline on a shipped example, with no network.

It builds a git repo from the example in ``safehub/_data/demo_hub``, serves it from a small
loopback HTTPS GitHub of its own (``safehub/demo/server.py``, throwaway CA), loads it
through safehub, then shows four refusals: a fork's commit under the parent's name, an
altered archive, a ``hubconf.py`` edited in the cache, and a CI job that never consented.
Needs ``git``; everything lives in a temp folder.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safehub.errors import SafehubError

__all__ = ["run_demo"]

_EXAMPLE = Path(__file__).parents[1] / "_data" / "demo_hub"


def _swap_hubconf(data: bytes) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename.endswith("/hubconf.py"):
                body += b"\nimport os; os.system('echo pwned')\n"
            dst.writestr(info, body)
        dst.comment = src.comment
    return out.getvalue()


def run_demo(say: Callable[[str], None] = print) -> bool:
    """Run the demo; return True if every step behaved as it should."""
    from safehub.demo.serve import environ
    from safehub.demo.server import DemoGitHub, git
    from safehub.hub import Hub
    from safehub.policy import Policy

    ok = True

    def expect_refusal(title: str, action: Callable[[], Any]) -> None:
        nonlocal ok
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):  # download notes
                action()
        except SafehubError as e:
            say(f"  refused, as it should be: {type(e).__name__}: {e.message}")
        else:
            ok = False
            say(f"  NOT refused: {title}")

    with tempfile.TemporaryDirectory(prefix="safehub-demo-") as tmp:
        root = Path(tmp)
        repo, fork = root / "repo", root / "fork"
        repo.mkdir()
        for path in _EXAMPLE.iterdir():
            if path.is_file():
                (repo / path.name).write_bytes(path.read_bytes())
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "initial")
        sha = git(repo, "rev-parse", "HEAD")
        git(repo, "tag", "v1.0")
        git(root, "clone", "-q", str(repo), str(fork))
        (fork / "hubconf.py").write_text("print('fork code')\n")
        git(fork, "commit", "-q", "-a", "-m", "evil")
        fork_sha = git(fork, "rev-parse", "HEAD")
        with DemoGitHub(root) as server, environ({"REQUESTS_CA_BUNDLE": str(server.ca_cert)}):
            server.add_repo("demo", "tiny-hub", repo)
            server.add_repo("mallory", "tiny-hub", fork, fork_of="demo/tiny-hub")
            hub = Hub(
                policy=Policy(),  # self-contained: this machine's policy files do not apply
                cache_dir=root / "cache", data_dir=root / "data", log_dir=root / "log",
                api_url=server.api_url, web_url=server.web_url,
                extra_hosts=frozenset({"127.0.0.1"}), noninteractive=True, offline=False,
                lockfile=None, audit_log=None, tree_fallback=True,
            )
            say(f"Loopback GitHub on {server.api_url} serving demo/tiny-hub (tag v1.0 = {sha})")

            say("\n1. Cold load of demo/tiny-hub:v1.0 (trust_repo=True)")
            server.log.clear()
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                model = hub.load("demo/tiny-hub:v1.0", "tiny_mlp", width=4, trust_repo=True,
                                 verbose=False)
            say(f"  loaded {type(model).__name__} with "
                f"{sum(p.numel() for p in model.parameters())} parameters; "
                f"{len(server.log)} requests (tag, its commit, archive, redirect)")
            entry = hub.cache.lookup(sha)
            assert entry is not None
            say(f"  verified: zip comment names {sha[:12]}, git tree {entry.tree[:12]} "
                f"matches, digest {entry.digest[:23]}...")

            say("\n2. Warm load: from the cache, re-checked, no network")
            server.log.clear()
            hub.load("demo/tiny-hub:v1.0", "tiny_mlp", verbose=False)
            say(f"  loaded again; {len(server.log)} requests")

            say(f"\n3. A fork's commit {fork_sha[:12]} asked for under the parent's name")
            expect_refusal("fork commit", lambda: hub.load(
                f"demo/tiny-hub:{fork_sha}", "tiny_mlp", trust_repo=True, verbose=False))

            say("\n4. The server (or a mirror) sends an altered archive")
            server.archive_filter = _swap_hubconf
            expect_refusal("altered archive", lambda: hub.load(
                "demo/tiny-hub:v1.0", "tiny_mlp", trust_repo=True, force_reload=True,
                verbose=False))
            server.archive_filter = None

            say("\n5. Someone edits hubconf.py inside the cache")
            hubconf = entry.path / "hubconf.py"
            hubconf.parent.chmod(0o755)
            hubconf.chmod(0o644)
            hubconf.write_text(hubconf.read_text() + "\nprint('edited in the cache')\n")
            expect_refusal("edited cache", lambda: hub.load(
                "demo/tiny-hub:v1.0", "tiny_mlp", verbose=False))

            say("\n6. A CI job that never consented to this content: refused, nobody is asked")
            ci = Hub(hub.settings, policy=Policy(), data_dir=root / "ci-data",
                     noninteractive=True)
            expect_refusal("untrusted in CI", lambda: ci.load(
                "demo/tiny-hub:v1.0", "tiny_mlp", force_reload=True, verbose=False))
    say("\n" + ("demo finished: every check behaved as expected" if ok else "demo FAILED"))
    return ok
