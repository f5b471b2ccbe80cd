"""Policy decision time with three layered files of 200 rules each, and the warm load with
those policies present, against torch.hub's warm load on the same loopback server.

    python bench/bench_policy.py
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _loopback import env_for, home_env, make_big_repo, point_torch_hub_at, start_server  # noqa: E402


def policy_text(layer: int, rules: int = 200) -> str:
    """A realistic file: exact names, owner globs, refs, entrypoints, weights and denies."""
    out = [f"[safehub]\nversion = 1\nunknown_repos = '{'deny' if layer == 0 else 'prompt'}'\n"]
    for i in range(rules):
        if i % 10 == 0:
            out.append(f"[[deny]]\nrepo = 'bad{layer}-{i}/*'\nreason = 'r{i}'\n")
        elif i % 3 == 0:
            out.append(f"[[allow]]\nrepo = 'org{layer}-{i}/*'\nrefs = ['v*', 'release/*']\n"
                       f"weights = ['https://w{i}.example/**']\n")
        else:
            out.append(f"[[allow]]\nrepo = 'team{layer}/repo-{i}'\npin = 'commit'\n"
                       f"entrypoints = ['model_*', 'resnet[0-9]*']\n")
    if layer == 0:
        out.append("[[allow]]\nrepo = 'bench/*'\n")
    return "\n".join(out)


def timed(func, n: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        func()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e3


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-policy-"))
    home = work / "home"
    files = []
    for layer, where in enumerate(["site/safehub/policy.toml", "config/safehub/policy.toml",
                                   "project/safehub.toml"]):
        path = home / where
        path.parent.mkdir(parents=True)
        path.write_text(policy_text(layer))
        files.append(path)
    os.environ.update(home_env(home))
    os.chdir(home / "project")
    server = start_server(work)
    try:
        import safehub.policy as policy_mod
        from safehub.spec import RepoSpec

        t = time.perf_counter()
        policy = policy_mod.load_policy()
        first_parse = (time.perf_counter() - t) * 1e3
        assert len(policy.rules) >= 600, len(policy.rules)
        specs = [RepoSpec.parse(s) for s in (
            "team2/repo-199:" + "a" * 40, "org1-3/anything:v2", "bad0-10/x:v1",
            "unknown/repo:v1", "bench/hub:v1.0")]
        decide = statistics.median(
            timed(lambda s=s: policy.decide(s, entrypoint="model_a"), 300) for s in specs)
        worst = max(timed(lambda s=s: policy.decide(s, entrypoint="model_a"), 300)
                    for s in specs)
        per_load = timed(lambda: policy_mod.load_policy().decide(specs[3]), 300)

        sha = make_big_repo(work / "repo", 1000)
        from tests.support import git

        git(work / "repo", "tag", "v1.0")
        server.add_repo("bench", "hub", work / "repo")
        os.environ.update(env_for(server))
        import torch.hub

        import safehub

        point_torch_hub_at(server.api_url, server.web_url, str(server.ca_cert))
        sink = io.StringIO()

        def forget() -> None:
            for name in [m for m in sys.modules if m.startswith("pkg") or m == "hubconf"]:
                del sys.modules[name]

        def t_load() -> None:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                torch.hub.load("bench/hub:v1.0", "tiny", trust_repo=True, verbose=False)
            forget()

        def s_load() -> None:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                safehub.load("bench/hub:v1.0", "tiny", verbose=False)
            forget()

        t_load()
        s_load()
        server.clear_log()
        warm_t = timed(t_load, 100)
        warm_s = timed(s_load, 100)
        requests = server.count()
        del sha
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"policy: 3 layered files, {len(policy.rules)} rules in all")
    print(f"  first parse of the 3 files, fresh process  {first_parse:8.1f} ms")
    print(f"  one decision (median over 5 specs)         {decide:8.3f} ms   (budget 5 ms)")
    print(f"  slowest spec's median decision             {worst:8.3f} ms")
    print(f"  find + stat files + decide (per load)      {per_load:8.3f} ms")
    print("warm load of a 1,000-file repo with those policies present (median of 100):")
    print(f"  torch.hub {warm_t:.2f} ms   safehub {warm_s:.2f} ms   "
          f"ratio {warm_s / warm_t:.2f}x   (+{warm_s - warm_t:.2f} ms)   "
          f"requests {requests}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
