"""Fleet scale: many processes warm-loading from one shared, read-only cache, and what a
locked cold load costs in requests.

    python bench/bench_fleet.py [--procs 64]

1. `safehub lock` + `safehub prefetch --cache-dir SHARED --read-only` (sealed for sharing).
2. One process loads alone (5 times): the baseline load time.
3. N processes (torch already imported) are released together and each times its own
   `safehub.load` with SAFEHUB_OFFLINE=1: median and p95 against the baseline.
4. A locked cold load against the GitHub stand-in, and against a static mirror written by
   `safehub prefetch --mirror`: API calls and HTTP requests.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import env_for, home_env, make_big_repo, start_server  # noqa: E402

CHILD = """
import sys, time
import torch, safehub
print("ready", flush=True)
sys.stdin.readline()
t, c = time.perf_counter(), time.process_time()
safehub.load(sys.argv[1], "tiny", verbose=False)
wall, cpu = (time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3
t = time.perf_counter()
safehub.load(sys.argv[1], "tiny", verbose=False)
print(f"{wall:.3f} {cpu:.3f} {(time.perf_counter() - t) * 1e3:.3f}", flush=True)
"""


def run_loaders(n: int, spec: str, env: dict[str, str],
                cwd: Path) -> list[tuple[float, float, float]]:
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, spec], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=cwd) for _ in range(n)]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(p.communicate()[1])
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    times = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(err)
        wall, cpu, second = out.strip().splitlines()[-1].split()
        times.append((float(wall), float(cpu), float(second)))
    return times


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--files", type=int, default=1000)
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="safehub-bench-fleet-"))
    home = work / "home"
    project = work / "project"
    project.mkdir(parents=True)
    os.environ.update(home_env(home))
    os.chdir(project)
    server = start_server(work)
    shared = work / "shared-cache"
    try:
        from safehub.cli import main as cli
        from tests.support import git

        make_big_repo(work / "repo", args.files)
        git(work / "repo", "tag", "v1.0")
        server.add_repo("bench", "hub", work / "repo")
        os.environ.update(env_for(server))
        spec = "bench/hub:v1.0"
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            assert cli(["lock", spec]) == 0
            assert cli(["prefetch", "--cache-dir", str(shared), "--read-only"]) == 0
            assert cli(["trust", spec]) == 0  # consent for this content, in the user data dir
            assert cli(["prefetch", "--cache-dir", str(work / "unused"), "--mirror",
                        str(work / "mirror")]) == 0

        env = {**os.environ, "SAFEHUB_CACHE_DIR": str(shared), "SAFEHUB_OFFLINE": "1",
               "PYTHONPATH": str(ROOT)}
        single = [run_loaders(1, spec, env, project)[0] for _ in range(5)]
        many = run_loaders(args.procs, spec, env, project)

        # A locked cold load: from the stand-in, then from the static mirror.
        import safehub

        cold = {}
        mirror = server.serve_directory(work / "mirror")  # served as is, case-sensitive
        for label, web in (("GitHub stand-in", server.web_url), ("static mirror", mirror)):
            os.environ["SAFEHUB_GITHUB_URL"] = web
            os.environ["SAFEHUB_CACHE_DIR"] = str(work / f"cold-{len(cold)}")
            server.clear_log()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                safehub.load(spec, "tiny", verbose=False)
            cold[label] = (server.count(server.api_url), server.count())
    finally:
        server.stop()
        subprocess.run(["chmod", "-R", "u+w", str(shared)], check=False)
        shutil.rmtree(work, ignore_errors=True)

    def col(rows: list[tuple[float, float, float]], i: int) -> list[float]:
        return [r[i] for r in rows]

    base, base_cpu = statistics.median(col(single, 0)), statistics.median(col(single, 1))
    walls, cpus = col(many, 0), col(many, 1)
    n = args.procs
    print(f"shared read-only cache, {args.files}-file repo, SAFEHUB_OFFLINE=1, locked spec, "
          f"{os.cpu_count()} CPUs")
    print("first load in a fresh process (torch already imported), wall / CPU time:")
    print(f"  one process alone (median of 5)   {base:9.1f} ms / {base_cpu:7.1f} ms")
    print(f"  {n} at once, median                {statistics.median(walls):9.1f} ms / "
          f"{statistics.median(cpus):7.1f} ms   ({statistics.median(walls) / base:.1f}x wall)")
    print(f"  {n} at once, p95                   {p95(walls):9.1f} ms / {p95(cpus):7.1f} ms"
          f"   ({p95(walls) / base:.1f}x wall)")
    print(f"second load in the same process: alone {statistics.median(col(single, 2)):.1f} ms,"
          f" {n} at once median {statistics.median(col(many, 2)):.1f} ms")
    print(f"  {n}/{n} succeeded; the read-only cache was not written")
    for label, (api, total) in cold.items():
        print(f"locked cold load via {label}: {api} API calls, {total} HTTP requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
