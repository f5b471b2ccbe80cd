"""safehub.load beside torch.hub.load on the same loopback GitHub, one run, CPU and wall.

    python bench/bench_load.py                    # 10 and 5,000 files; a table of ratios
    python bench/bench_load.py --files 10,1000,5000 --warm 300 --fresh 7
    python bench/bench_load.py --quick            # fewer rounds, a smoke run
    python bench/bench_load.py --json out.json

What is measured, each in processes of its own, with bytecode compiled (the bench unsets
PYTHONDONTWRITEBYTECODE for its children and compiles safehub first), as users run it:

1. **Warm loads in a process** (what a training script calls again and again): the
   module-level ``safehub.load`` (what drop-in users call), a ``Hub`` built once and
   reused, and ``torch.hub.load``, each in its own process (safehub's audit hook, once
   installed, is process-wide), in every runtime mode (``off``, ``observe``, ``enforce``),
   at each repo size. CPU time is the figure (wall time is noisy on a shared machine);
   medians of ``--warm`` loads after a few untimed ones, in ``--rounds`` rounds that each
   time torch.hub's process beside safehub's, then the median over the rounds. The same
   process then times torch.hub's own warm load after safehub's: what the hook costs
   torch.hub.
2. **A whole fresh process** (``python -c "import torch; load(...)"``), warm cache and
   cold (nothing cached), alternating who goes first: the CPU time of the whole process
   (user + system, from ``wait4``) and its wall time, medians of ``--fresh``; and the CPU
   of the full garbage collections inside the load (a pass over all of torch's objects,
   due at whoever's next allocations: safehub's cold load makes enough to run one).
3. **What the first load imports** beyond torch.hub's own first load, from
   ``python -X importtime``, with each module's own import time (least of three).

``--sections`` picks parts (``warm,fresh,cold,imports,concurrent``).
4. ``--procs`` processes cold-loading at once: how many succeed, how many archive
   downloads (torch.hub's cache is not safe for concurrent loads of one repo).

torch.hub runs its own code; only the github.com host in its URLs is rewritten to the
stand-in (bench/_loopback.py), which runs in a child process. Nothing reaches the internet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import ChildServer, env_for, filesystem, home_env, make_big_repo  # noqa: E402

from safehub._internal.fsutil import rmtree  # noqa: E402

MODES = ("off", "observe", "enforce")

# One process of section 1: KIND SPEC N; prints one JSON line.
WARM = """
import gc, json, os, statistics, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch, torch.hub
import _loopback
_loopback.point_torch_hub_from_env()
kind, spec, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def torch_load():
    torch.hub.load(spec, "tiny", trust_repo=True, verbose=False)
if kind == "torch":
    load = torch_load
elif kind == "module":
    import safehub
    load = lambda: safehub.load(spec, "tiny", trust_repo=True, verbose=False)
else:
    import safehub
    hub = safehub.Hub()
    load = lambda: hub.load(spec, "tiny", trust_repo=True, verbose=False)
def timed(func, n):
    cpu, wall = [], []
    for _ in range(n):
        c, w = time.process_time_ns(), time.perf_counter_ns()
        func()
        cpu.append(time.process_time_ns() - c)
        wall.append(time.perf_counter_ns() - w)
    return statistics.median(cpu) / 1e6, statistics.median(wall) / 1e6
for _ in range(5):
    load()
    torch_load()
gc.collect()
cpu, wall = timed(load, n)
after = timed(torch_load, n) if kind != "torch" else (cpu, wall)
print(json.dumps({"cpu": cpu, "wall": wall, "torch_after_cpu": after[0],
                  "torch_after_wall": after[1]}))
"""

# One process of sections 2 and 3: KIND SPEC. Prints the CPU time of the full (oldest
# generation) garbage collections that ran from the import of torch.hub or safehub to the
# end of the load: one pass over torch's heap, due at the next allocations of whoever runs.
FRESH = """
import gc, os, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch
full = [0.0, 0]
def _gc(phase, info):
    if info["generation"] == 2:
        full[0] += time.thread_time() * (1 if phase == "stop" else -1)
        full[1] += phase == "stop"
gc.callbacks.append(_gc)
if sys.argv[1] == "torch":
    import torch.hub, _loopback
    _loopback.point_torch_hub_from_env()
    torch.hub.load(sys.argv[2], "tiny", trust_repo=True, verbose=False)
else:
    import safehub
    safehub.load(sys.argv[2], "tiny", trust_repo=True, verbose=False)
gc.callbacks.remove(_gc)
print(f"full-gc {full[0] * 1e3:.3f} {full[1]}")
"""

CONCURRENT = """
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


class Bench:
    """The repos, their stand-ins and the environment the children run in."""

    def __init__(self, work: Path, sizes: list[int]) -> None:
        self.work = work
        self.home = work / "home"
        self.servers: dict[int, ChildServer] = {}
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("CI", "PYTHONDONTWRITEBYTECODE") and not k.startswith("SAFEHUB_")}
        self.env.update(home_env(self.home))
        self.env.update({"SAFEHUB_CACHE_DIR": str(self.home / "safehub"),
                         "BENCH_DIR": str(HERE), "PYTHONPATH": str(ROOT)})
        for n in sizes:
            repo = work / f"repo{n}"
            make_big_repo(repo, n)
            from tests.support import git

            git(repo, "tag", "v1.0")
            (work / f"srv{n}").mkdir()
            self.servers[n] = ChildServer(work / f"srv{n}", "bench", f"hub{n}", repo)
        first = self.servers[sizes[0]]
        self.env.update(env_for(first))  # type: ignore[arg-type]
        hosts = {h for s in self.servers.values() for h in s.redirect_hosts}
        self.env["SAFEHUB_ALLOWED_HOSTS"] = ",".join(sorted(hosts))
        self.policies = {}
        for mode in MODES:
            path = work / f"runtime-{mode}.toml"
            path.write_text(f'[safehub]\nruntime = "{mode}"\n')
            self.policies[mode] = str(path)

    def child_env(self, n: int, mode: str | None = None) -> dict[str, str]:
        """The environment for a child loading the ``n``-file repo (each stand-in has its
        own address and CA)."""
        env = {**self.env, **env_for(self.servers[n])}  # type: ignore[arg-type]
        env["SAFEHUB_ALLOWED_HOSTS"] = self.env["SAFEHUB_ALLOWED_HOSTS"]
        if mode is not None:
            env["SAFEHUB_POLICY"] = self.policies[mode]
        return env

    def clear(self, which: str) -> None:
        if which == "torch":
            shutil.rmtree(self.home / "torch" / "hub", ignore_errors=True)
        else:
            cache = self.home / "safehub"
            if cache.exists():
                rmtree(cache)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


def _spawn_timed(args: list[str], env: dict[str, str]) -> tuple[str, str, float, float]:
    """Run a child and read its own CPU time from ``wait4`` (not all children's total);
    its output goes to files, so neither pipe can fill while the other is read."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        wall = time.perf_counter()
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode:
        raise RuntimeError(f"child failed ({proc.returncode}): {stderr[-2000:]}")
    return stdout, stderr, usage.ru_utime + usage.ru_stime, wall


def warm(bench: Bench, sizes: list[int], n: int, rounds: int) -> dict[str, Any]:
    """Section 1: ``rounds`` rounds, each a torch.hub process and then one process per
    kind and mode; each figure is the median over the rounds, and ``+CPU`` the median of
    each round's difference from that round's torch.hub (the machine's load drifts over
    seconds: a process compared with one timed right beside it drifts less)."""
    result: dict[str, Any] = {}
    configs = [f"{kind}/{mode}" for mode in MODES for kind in ("module", "hub")]
    for size in sizes:
        spec = f"bench/hub{size}:v1.0"
        runs: dict[str, list[dict[str, float]]] = {c: [] for c in ["torch", *configs]}
        for _ in range(rounds):
            out, *_ = _spawn_timed([sys.executable, "-c", WARM, "torch", spec, str(n)],
                                   bench.child_env(size))
            runs["torch"].append(json.loads(out))
            for config in configs:
                kind, mode = config.split("/")
                out, *_ = _spawn_timed([sys.executable, "-c", WARM, kind, spec, str(n)],
                                       bench.child_env(size, mode))
                got = json.loads(out)
                got["extra_cpu"] = got["cpu"] - runs["torch"][-1]["cpu"]
                runs[config].append(got)
        result[str(size)] = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                             for c, rs in runs.items()}
    return result


def fresh(bench: Bench, size: int, rounds: int, cold: bool) -> dict[str, Any]:
    """Section 2: whole processes, alternating who goes first."""
    spec = f"bench/hub{size}:v1.0"
    runs: dict[str, list[tuple[float, float]]] = {"torch": [], "safehub": []}
    full_gc: dict[str, list[float]] = {"torch": [], "safehub": []}
    for which in ("torch", "safehub"):  # untimed: fill the caches, compile, warm the disk
        _spawn_timed([sys.executable, "-c", FRESH, which, spec], bench.child_env(size))
    for r in range(rounds):
        for which in (("torch", "safehub") if r % 2 == 0 else ("safehub", "torch")):
            if cold:
                bench.clear(which)
            out, _, cpu, wall = _spawn_timed([sys.executable, "-c", FRESH, which, spec],
                                             bench.child_env(size))
            runs[which].append((cpu, wall))
            full_gc[which].append(float(out.split()[-2]))
    result: dict[str, Any] = {
        w: {"cpu": statistics.median(c for c, _ in v) * 1e3,
            "wall": statistics.median(t for _, t in v) * 1e3,
            "full_gc": statistics.median(full_gc[w])} for w, v in runs.items()}
    # Each round's two processes ran one after the other: their ratio drifts less with the
    # machine's load than the ratio of the two medians.
    result["paired_cpu_ratio"] = statistics.median(
        s[0] / t[0] for s, t in zip(runs["safehub"], runs["torch"], strict=True))
    return result


def imports(bench: Bench, size: int, rounds: int = 3) -> dict[str, Any]:
    """Section 3: modules the first safehub load imports that torch.hub's first load does
    not, with each one's own import time (microseconds, from -X importtime; the least of
    ``rounds`` processes, as a shared machine only ever adds to it)."""
    spec = f"bench/hub{size}:v1.0"
    seen: dict[str, dict[str, int]] = {"torch": {}, "safehub": {}}
    for which in ("torch", "safehub"):  # warm: the cold runs may have emptied the caches
        _spawn_timed([sys.executable, "-c", FRESH, which, spec], bench.child_env(size))
    for _ in range(rounds):
        for which in ("torch", "safehub"):
            _, err, _, _ = _spawn_timed([sys.executable, "-X", "importtime", "-c", FRESH,
                                         which, spec], bench.child_env(size))
            table = seen[which]
            for line in err.splitlines():
                if line.startswith("import time:") and "|" in line and "self [us]" not in line:
                    own, _, name = line[len("import time:"):].split("|")
                    table[name.strip()] = min(int(own), table.get(name.strip(), int(own)))
    extra = {name: us for name, us in seen["safehub"].items() if name not in seen["torch"]}
    top = sorted(extra.items(), key=lambda kv: -kv[1])
    return {"count": len(extra), "total_ms": sum(extra.values()) / 1e3,
            "top": [{"module": m, "ms": us / 1e3} for m, us in top[:15]],
            "all": [{"module": m, "ms": us / 1e3} for m, us in top]}


def concurrent(bench: Bench, size: int, procs: int) -> dict[str, Any]:
    """Section 4."""
    spec = f"bench/hub{size}:v1.0"
    server = bench.servers[size]
    result: dict[str, Any] = {"procs": procs}
    for which in ("torch", "safehub"):
        bench.clear(which)
        server.clear_log()
        children = [subprocess.Popen([sys.executable, "-c", CONCURRENT, which, spec],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     env=bench.child_env(size)) for _ in range(procs)]
        for c in children:
            assert c.stdout is not None
            c.stdout.readline()
        for c in children:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        outs = [c.communicate(timeout=900)[0].strip() for c in children]
        ok = [o.splitlines()[-1:] == ["ok"] for o in outs]
        result[f"{which}_ok"] = sum(ok)
        result[f"{which}_downloads"] = sum("/legacy.zip/" in p for p in server.paths())
        failed = [o for o, good in zip(outs, ok, strict=True) if not good and o]
        result[f"{which}_failures"] = sorted({o.splitlines()[-1] for o in failed})[:3]
    return result


def compile_bytecode() -> None:
    """Users run safehub with its bytecode compiled (pip compiles on install)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "safehub"),
                    str(HERE / "_loopback.py")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


def report(res: dict[str, Any]) -> None:
    print(f"safehub vs torch.hub on a loopback GitHub; torch {res['torch']}, Python "
          f"{res['python']}, {res['cpus']} CPUs; load average {res['loadavg_before']} before, "
          f"{res['loadavg_after']} after; files in {res['written_to']}")
    if "warm" in res:
        _report_warm(res["warm"])
    if "fresh_warm" in res or "fresh_cold" in res:
        _report_fresh(res)
    if "imports" in res:
        imp = res["imports"]
        print(f"\n3. the first load imports {imp['count']} modules beyond torch.hub's own, "
              f"{imp['total_ms']:.1f} ms of their own import time; the costliest:")
        for item in imp["top"]:
            print(f"     {item['ms']:7.2f} ms  {item['module']}")
    if "concurrent" in res:
        c = res["concurrent"]
        print(f"\n4. {c['procs']} processes cold-loading at once: ok torch.hub "
              f"{c['torch_ok']}, safehub {c['safehub_ok']}; archive downloads "
              f"{c['torch_downloads']} and {c['safehub_downloads']}")
        if c["torch_failures"]:
            print(f"   torch.hub failures: {c['torch_failures']}")


def _report_warm(rows: dict[str, Any]) -> None:
    print("\n1. warm loads in a process (median ms per load; CPU, then wall; medians over the "
          "rounds, +CPU: over each round's torch.hub)")
    print(f"{'':28}{'CPU':>9}{'+CPU':>9}{'ratio':>8}{'wall':>9}{'ratio':>8}")
    for size, row in rows.items():
        t = row["torch"]
        print(f"{size + ' files: torch.hub':28}{t['cpu']:9.2f}{'':9}{'':8}{t['wall']:9.2f}")
        for mode in MODES:
            for kind, label in (("module", "safehub.load"), ("hub", "Hub reused")):
                r = row[f"{kind}/{mode}"]
                print(f"{f'  {label}, {mode}':28}{r['cpu']:9.2f}{r['extra_cpu']:+9.2f}"
                      f"{r['cpu'] / t['cpu']:7.2f}x{r['wall']:9.2f}{r['wall'] / t['wall']:7.2f}x")
        after = row["module/observe"]
        print(f"{'  torch.hub after safehub':28}{after['torch_after_cpu']:9.2f}"
              f"{after['torch_after_cpu'] - t['cpu']:+9.2f}"
              f"{after['torch_after_cpu'] / t['cpu']:7.2f}x{after['torch_after_wall']:9.2f}"
              f"{after['torch_after_wall'] / t['wall']:7.2f}x")


def _report_fresh(res: dict[str, Any]) -> None:
    print("\n2. a whole fresh process: python -c 'import torch; load(...)' (median ms; "
          "paired: the median of each round's ratio)")
    print(f"{'':28}{'torch.hub':>10}{'safehub':>10}{'ratio':>8}{'paired':>8}   "
          f"{'wall':>8}{'wall':>8}{'ratio':>8}")
    for label, key in (("warm", "fresh_warm"), ("cold", "fresh_cold")):
        for size, f in res.get(key, {}).items():
            t, s = f["torch"], f["safehub"]
            print(f"{f'{label}, {size} files, CPU':28}{t['cpu']:10.0f}{s['cpu']:10.0f}"
                  f"{s['cpu'] / t['cpu']:7.3f}x{f['paired_cpu_ratio']:7.3f}x   "
                  f"{t['wall']:8.0f}{s['wall']:8.0f}"
                  f"{s['wall'] / t['wall']:7.3f}x")
            if t["full_gc"] or s["full_gc"]:
                print(f"{'  of which full GC, CPU':28}{t['full_gc']:10.0f}{s['full_gc']:10.0f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default="10,5000", help="repo sizes, comma-separated")
    ap.add_argument("--cold-files", type=int, default=1000, help="repo size of the cold runs")
    ap.add_argument("--warm", type=int, default=200, help="warm loads per process (median)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of section 1, each timing torch.hub beside safehub")
    ap.add_argument("--fresh", type=int, default=5, help="fresh processes of each (median)")
    ap.add_argument("--procs", type=int, default=16, help="concurrent cold loaders")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few rounds")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--sections", default="warm,fresh,cold,imports,concurrent",
                    help="which parts to run, comma-separated (default: all): warm (1), "
                    "fresh (2, warm cache), cold (2, nothing cached), imports (3), "
                    "concurrent (4)")
    ap.add_argument("--dir", help="where the caches, torch's hub dir and the repos go (default: "
                    "the temp folder); a tmpfs such as /dev/shm leaves out the disk's cost")
    args = ap.parse_args(argv)
    if args.quick:
        args.warm, args.fresh, args.procs, args.rounds = 20, 1, 4, 1
    sections = set(args.sections.split(","))
    unknown = sections - {"warm", "fresh", "cold", "imports", "concurrent"}
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    warm_sizes = [int(s) for s in args.files.split(",")]
    cold_sizes = {args.cold_files} if sections & {"cold", "concurrent"} else set()
    sizes = sorted(set(warm_sizes) | cold_sizes)

    import torch

    res: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0],
                           "cpus": os.cpu_count(), "loadavg_before": _loadavg()}
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-", dir=args.dir))
    res["written_to"] = filesystem(work)
    bench = Bench(work, sizes)
    try:
        for size in sizes:  # the first loads: caches filled, consent recorded, bytecode made
            for which in ("torch", "safehub"):
                _spawn_timed([sys.executable, "-c", FRESH, which, f"bench/hub{size}:v1.0"],
                             bench.child_env(size))
        if "warm" in sections:
            res["warm"] = warm(bench, warm_sizes, args.warm, args.rounds)
        if "fresh" in sections:
            res["fresh_warm"] = {str(n): fresh(bench, n, args.fresh, cold=False)
                                 for n in warm_sizes}
        if "cold" in sections:
            res["fresh_cold"] = {str(args.cold_files): fresh(bench, args.cold_files,
                                                             args.fresh, cold=True)}
        if "imports" in sections:
            res["imports"] = imports(bench, warm_sizes[0])
        if "concurrent" in sections:
            res["concurrent"] = concurrent(bench, args.cold_files, args.procs)
    finally:
        bench.stop()
        rmtree(work)  # the caches are read-only
    res["loadavg_after"] = _loadavg()
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
