"""safehub.load vs torch.hub.load on a large hub repo of real shape, side by side in one run.

    python bench/bench_large.py                 # 5,000 files, ~100 MB, prints a table
    python bench/bench_large.py --files 20000 --mb 300 --cold 3 --json out.json
    python bench/bench_large.py --dir /dev/shm  # on a tmpfs: without the disk's cost

The repo (bench/_loopback.py, ``make_real_repo``): 5,000 entries in ~400 nested folders,
text files of log-normal sizes and ten 5 MB binaries (~100 MB, a ~63 MB zip), 20 symlinks
(two to folders), executables, three submodules (gitlinks, which ``git archive`` writes as
empty folders, so safehub ties the archive to the commit per file with the API's tree
listing), a ``.gitattributes``, and a hubconf.py that imports its own package (25 modules).

Measured, torch.hub and safehub alternating (who goes first alternates too):
  * cold load by tag (nothing cached; the disk is synced before each): wall and CPU time
    of this process, requests made. safehub does the full verification: safe extraction,
    SHA-256 and git blob id of every byte, the per-file check against the commit's tree,
    the atomic install and the record of what was verified;
  * warm load by tag (in-process, repeated; the repo's modules are imported afresh each
    time, as a new process would): safehub checks the cached tree's folders and each file
    as the repo's code opens it. For comparison, the warm load with the runtime guard off,
    where safehub instead compares the stat data of every entry of the tree.
The stand-in runs in a child process, so serving 63 MB does not compete with the measured
loads for this interpreter's lock. torch.hub runs its own code; only the github.com host
in its URLs is rewritten (bench/_loopback.py). Nothing here reaches the internet.
Timings on a shared machine vary with its load: the load average is printed before and
after; run it a few times. Creating a file costs what the file system and the kernel make
it cost (on a busy ext4 disk, up to ~0.8 ms each, for both): ``--dir`` on a tmpfs shows
the work of each loader alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
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
    make_real_repo,
    point_torch_hub_at,
)

from safehub._internal.fsutil import rmtree  # noqa: E402

OWNER, NAME = "bench", "large"
SPEC = f"{OWNER}/{NAME}:v1.0"


def timed(func: Callable[[], Any]) -> tuple[float, float]:
    """Run func with stdout/stderr muted; return (wall, CPU) seconds of this process.

    The repo's own modules are forgotten afterwards, so the next load imports them again.
    """
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        wall, cpu = time.perf_counter(), time.process_time()
        func()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    for name in [m for m in sys.modules if m == "hubconf" or m.split(".")[0] == "zoo"]:
        del sys.modules[name]
    return wall, cpu


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--cold", type=int, default=5, help="cold loads of each (median)")
    ap.add_argument("--warm", type=int, default=100, help="warm loads of each (median)")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--dir", help="where the caches, torch's hub dir and the repo go (default: "
                    "the temp folder); a tmpfs such as /dev/shm leaves out the disk's cost")
    args = ap.parse_args(argv)

    load_before = loadavg()
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-large-", dir=args.dir))
    home = work / "home"
    os.environ.update({**home_env(home), "SAFEHUB_CACHE_DIR": str(home / "safehub")})
    os.environ.pop("CI", None)
    t = time.perf_counter()
    sha = make_real_repo(work / "large.git", args.files, args.mb)
    made = time.perf_counter() - t
    server = ChildServer(work, OWNER, NAME, work / "large.git")
    res: dict[str, Any] = {"files": args.files, "megabytes": args.mb, "commit": sha,
                           "cpus": os.cpu_count(), "loadavg_before": load_before,
                           "written_to": filesystem(work)}
    try:
        os.environ.update(env_for(server))  # type: ignore[arg-type]

        import torch
        import torch.hub

        import safehub

        point_torch_hub_at(server.api_url, server.web_url, str(server.ca_cert))
        torch_dir = Path(torch.hub.get_dir())

        def t_load() -> None:
            torch.hub.load(SPEC, "tiny", trust_repo=True, verbose=False)

        def s_load() -> None:
            safehub.load(SPEC, "tiny", trust_repo=True, verbose=False)

        def s_load_scan() -> None:
            safehub.Hub(runtime="off").load(SPEC, "tiny", trust_repo=True, verbose=False)

        def cold(which: str) -> tuple[float, float, int]:
            if which == "torch":
                shutil.rmtree(torch_dir, ignore_errors=True)
            else:
                safehub.Hub().cache.clear()
            os.sync()
            server.clear_log()
            wall, cpu = timed(t_load if which == "torch" else s_load)
            return wall, cpu, server.count()

        for which in ("torch", "safehub"):  # untimed: the stand-in makes and keeps the zip
            cold(which)
        runs: dict[str, list[tuple[float, float, int]]] = {"torch": [], "safehub": []}
        for n in range(args.cold):
            for which in (("torch", "safehub") if n % 2 == 0 else ("safehub", "torch")):
                runs[which].append(cold(which))
        entry = safehub.Hub().cache.lookup(sha)
        res["check_level"] = entry.level if entry is not None else "?"
        res["tree_files"] = sum(len(f) for _, _, f in os.walk(entry.path)) if entry else 0
        res["cold_ms"] = {w: statistics.median(r[0] for r in runs[w]) * 1e3 for w in runs}
        res["cold_cpu_ms"] = {w: statistics.median(r[1] for r in runs[w]) * 1e3 for w in runs}
        res["cold_all_ms"] = {w: [round(r[0] * 1e3) for r in runs[w]] for w in runs}
        res["cold_requests"] = {w: max(r[2] for r in runs[w]) for w in runs}

        warm: dict[str, list[float]] = {"torch": [], "safehub": [], "safehub_scan": []}
        for func in (t_load, s_load, s_load_scan):
            timed(func)
        server.clear_log()
        order = [("torch", t_load), ("safehub", s_load), ("safehub_scan", s_load_scan)]
        for n in range(args.warm):
            for which, func in order[n % 3:] + order[:n % 3]:
                warm[which].append(timed(func)[0])
        res["warm_ms"] = {w: statistics.median(v) * 1e3 for w, v in warm.items()}
        res["warm_requests"] = server.count()
    finally:
        server.stop()
        rmtree(work)  # the caches are read-only
    res["loadavg_after"] = loadavg()

    c, cc, w = res["cold_ms"], res["cold_cpu_ms"], res["warm_ms"]
    print(f"safehub vs torch.hub, large repo: {args.files} files, {args.mb} MB, submodules and "
          f"links (made in {made:.1f} s); torch {torch.__version__}, Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"load average before {load_before}, after {res['loadavg_after']}; files written "
          f"to {res['written_to']}")
    print(f"{'':38}{'torch.hub':>12}{'safehub':>12}{'ratio':>9}")
    print(f"{f'cold load by tag (median of {args.cold}, ms)':38}{c['torch']:12.0f}"
          f"{c['safehub']:12.0f}{c['safehub'] / c['torch']:9.2f}x")
    print(f"{'  CPU time of this process (ms)':38}{cc['torch']:12.0f}{cc['safehub']:12.0f}"
          f"{cc['safehub'] / cc['torch']:9.2f}x")
    print(f"{'  every run (ms)':38}{'':12}{'':12}   torch {res['cold_all_ms']['torch']}, "
          f"safehub {res['cold_all_ms']['safehub']}")
    rq = res["cold_requests"]
    print(f"{'  requests':38}{rq['torch']:12}{rq['safehub']:12}   (check: "
          f"{res['check_level']})")
    wt = w["torch"]
    print(f"{f'warm load by tag (median of {args.warm}, ms)':38}{wt:12.2f}{w['safehub']:12.2f}"
          f"{w['safehub'] / wt:9.2f}x   (+{w['safehub'] - wt:.2f} ms)")
    print(f"{'  runtime guard off: stat every file':38}{'':12}{w['safehub_scan']:12.2f}"
          f"{w['safehub_scan'] / wt:9.2f}x   (+{w['safehub_scan'] - wt:.2f} ms)")
    print(f"{'  requests, all warm loads':38}{'':12}{res['warm_requests']:12}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
