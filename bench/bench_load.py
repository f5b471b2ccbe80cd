"""safehub.load vs torch.hub.load, side by side on the same loopback GitHub, one run.

    python bench/bench_load.py            # ~1,000-file repo, prints a table with ratios
    python bench/bench_load.py --json out.json
    python bench/bench_load.py --dir /dev/shm   # on a tmpfs: without the disk's cost

Measures, for a load by tag of a ~1,000-file hub repo:
  * cold load time (nothing cached; torch.hub and safehub alternate, and who goes first
    alternates too) and requests made;
  * warm load time (in-process, repeated) and requests made, by tag and pinned by sha;
  * N processes cold-loading at once: how many succeed and how many archive downloads.
torch.hub runs its own code; only the github.com host in its URLs is rewritten to the
stand-in (see bench/_loopback.py), which runs in a child process. Nothing here reaches the
internet. The load average is
printed before and after: on a shared machine, run it a few times. bench/bench_large.py
does the same for a 5,000-file, ~100 MB repo of real shape.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _loopback import (  # noqa: E402
    ChildServer,
    env_for,
    filesystem,
    home_env,
    make_big_repo,
    point_torch_hub_at,
)

from safehub._internal.fsutil import rmtree  # noqa: E402

SPEC = "bench/hub"

CHILD = """
import sys, os
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch
which = sys.argv[1]
if which == "torch":
    import _loopback, torch.hub
    _loopback.point_torch_hub_from_env()
    load = torch.hub.load
else:
    import safehub
    load = safehub.load
print("ready", flush=True)
sys.stdin.readline()
try:
    load(sys.argv[2], "tiny", trust_repo=True, verbose=False)
    print("ok", flush=True)
except BaseException as e:
    print("fail", type(e).__name__, str(e).splitlines()[0][:120], flush=True)
"""


def quiet(func: Callable[[], Any]) -> float:
    """Run func with stdout/stderr muted; return seconds."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        t = time.perf_counter()
        func()
        elapsed = time.perf_counter() - t
    for name in [m for m in sys.modules if m.startswith("pkg") or m == "hubconf"]:
        del sys.modules[name]  # the repo's own modules: let each load import them afresh
    return elapsed


def concurrent(which: str, n: int, spec: str, env: dict[str, str]) -> list[str]:
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, which, spec], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env) for _ in range(n)]
    for p in procs:
        assert p.stdout is not None
        p.stdout.readline()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [p.communicate(timeout=600)[0].strip() for p in procs]


def succeeded(output: str) -> bool:
    """The child printed 'ok' last (after any 'Downloading' line)."""
    return output.splitlines()[-1:] == ["ok"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--cold", type=int, default=5, help="cold loads of each (median)")
    ap.add_argument("--warm", type=int, default=100, help="warm loads of each (median)")
    ap.add_argument("--procs", type=int, default=16, help="concurrent cold loaders")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--dir", help="where the caches, torch's hub dir and the repo go (default: "
                    "the temp folder); a tmpfs such as /dev/shm leaves out the disk's cost")
    args = ap.parse_args(argv)

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-", dir=args.dir))
    written_to = filesystem(work)
    home = work / "home"
    env_home = {**home_env(home), "SAFEHUB_CACHE_DIR": str(home / "safehub")}
    sha = make_big_repo(work / "repo", args.files)
    from tests.support import git

    git(work / "repo", "tag", "v1.0")
    # The stand-in runs in a child process: serving does not compete with the measured
    # loads for this interpreter's lock.
    server = ChildServer(work, "bench", "hub", work / "repo")
    try:
        os.environ.update(env_home)
        os.environ.update(env_for(server))  # type: ignore[arg-type]
        os.environ["BENCH_DIR"] = str(HERE)
        os.environ.pop("CI", None)

        import torch.hub

        import safehub

        point_torch_hub_at(server.api_url, server.web_url, str(server.ca_cert))
        torch_dir = Path(torch.hub.get_dir())
        tag, pinned = f"{SPEC}:v1.0", f"{SPEC}:{sha}"

        def t_load(spec: str = tag) -> None:
            torch.hub.load(spec, "tiny", trust_repo=True, verbose=False)

        def s_load(spec: str = tag) -> None:
            safehub.load(spec, "tiny", trust_repo=True, verbose=False)

        res: dict[str, Any] = {"files": args.files}
        cold_t: list[float] = []
        cold_s: list[float] = []
        req_t: list[int] = []
        req_s: list[int] = []

        def cold_torch() -> None:
            shutil.rmtree(torch_dir, ignore_errors=True)
            server.clear_log()
            cold_t.append(quiet(t_load))
            req_t.append(server.count())

        def cold_safehub() -> None:
            safehub.Hub().cache.clear()
            server.clear_log()
            cold_s.append(quiet(s_load))
            req_s.append(server.count())

        for n in range(args.cold):  # who goes first alternates
            for step in ((cold_torch, cold_safehub) if n % 2 == 0
                         else (cold_safehub, cold_torch)):
                step()
        res["cold_ms"] = {"torch": statistics.median(cold_t) * 1e3,
                          "safehub": statistics.median(cold_s) * 1e3}
        res["cold_all_ms"] = {"torch": [round(t * 1e3) for t in cold_t],
                              "safehub": [round(t * 1e3) for t in cold_s]}
        res["cold_requests_by_tag"] = {"torch": max(req_t), "safehub": max(req_s)}

        warm_t, warm_s, warm_p = [], [], []
        server.clear_log()
        quiet(lambda: s_load(pinned))
        quiet(lambda: s_load(tag))
        server.clear_log()
        for _ in range(args.warm):
            warm_t.append(quiet(t_load))
            warm_s.append(quiet(lambda: safehub.load(tag, "tiny", verbose=False)))
            warm_p.append(quiet(lambda: safehub.load(pinned, "tiny", verbose=False)))
        res["warm_ms"] = {"torch": statistics.median(warm_t) * 1e3,
                          "safehub": statistics.median(warm_s) * 1e3,
                          "safehub_pinned": statistics.median(warm_p) * 1e3}
        warm_count = server.count()
        res["warm_requests"] = {"torch": warm_count // args.warm if args.warm else 0,
                                "safehub_total": warm_count}

        env = dict(os.environ)
        shutil.rmtree(torch_dir, ignore_errors=True)
        server.clear_log()
        outs = concurrent("torch", args.procs, tag, env)
        t_dl = sum("/legacy.zip/" in p for p in server.paths())
        safehub.Hub().cache.clear()
        server.clear_log()
        outs_s = concurrent("safehub", args.procs, tag, env)
        s_dl = sum("/legacy.zip/" in p for p in server.paths())
        res["concurrent"] = {
            "procs": args.procs,
            "torch_ok": sum(succeeded(o) for o in outs), "torch_downloads": t_dl,
            "safehub_ok": sum(succeeded(o) for o in outs_s), "safehub_downloads": s_dl,
            "torch_failures": sorted({o.splitlines()[-1] for o in outs if not succeeded(o)})[:3],
        }
    finally:
        server.stop()
        rmtree(work)  # the caches are read-only

    c, w = res["cold_ms"], res["warm_ms"]
    cc = res["concurrent"]
    print(f"safehub vs torch.hub, {args.files}-file repo, loopback HTTPS, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    res["loadavg"] = {"before": load_before, "after": load_after}
    res["written_to"] = written_to
    print(f"load average before {load_before}, after {load_after}; files written to "
          f"{written_to}")
    print(f"{'':34}{'torch.hub':>12}{'safehub':>12}{'ratio':>9}")
    print(f"{'cold load by tag (median ms)':34}{c['torch']:12.1f}{c['safehub']:12.1f}"
          f"{c['safehub'] / c['torch']:9.2f}x")
    print(f"{'  every run (ms)':34}   torch {res['cold_all_ms']['torch']}, "
          f"safehub {res['cold_all_ms']['safehub']}")
    print(f"{'warm load by tag (median ms)':34}{w['torch']:12.2f}{w['safehub']:12.2f}"
          f"{w['safehub'] / w['torch']:9.2f}x   (+{w['safehub'] - w['torch']:.2f} ms)")
    pin = w["safehub_pinned"]
    print(f"{'warm load pinned sha (median ms)':34}{'':12}{pin:12.2f}"
          f"{pin / w['torch']:9.2f}x   (+{pin - w['torch']:.2f} ms)")
    rq = res["cold_requests_by_tag"]
    print(f"{'requests per cold load by tag':34}{rq['torch']:12}{rq['safehub']:12}")
    print(f"{'requests, all warm loads':34}{'':12}{res['warm_requests']['safehub_total']:12}")
    print(f"{str(cc['procs']) + ' concurrent cold loads: ok':34}{cc['torch_ok']:12}"
          f"{cc['safehub_ok']:12}")
    print(f"{'  archive downloads':34}{cc['torch_downloads']:12}{cc['safehub_downloads']:12}")
    if cc["torch_failures"]:
        print(f"  torch.hub failures: {cc['torch_failures']}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
