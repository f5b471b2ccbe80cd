"""What the runtime guard costs: per audit event, per open(), per guarded block, and the
work a program does after a load, beside torch.hub in one run.

    python bench/bench_runtime.py            # prints a table
    python bench/bench_runtime.py --json out.json
    python bench/bench_runtime.py --quick    # the in-process numbers only
    python bench/bench_runtime.py --instructions --other ../old-checkout   # valgrind counts

Measures (best of several repeats, so noise from other work on the machine counts less):
  * one audit event (``sys.audit``) and one ``open()`` of a small file with no hook at all
    (fresh child processes: hooks cannot be removed), and with safehub's hook installed and
    a tree watched, for a file outside it (target: at most +0.5 us an open);
  * the events a guard reads and decides, entering and leaving a guard, a warm
    ``torch.hub.load(dir, source="local")`` plain and guarded;
  * after a load: a program that loaded a hub repo with ``torch.hub.load`` or with
    ``safehub.load`` (a child process each, the loopback stand-in serving the repo), then
    reads 20,000 small files and runs a DataLoader with 2 workers over them. CPU time
    (the process and its workers) beside wall time, medians of alternating runs, and the
    ratio safehub / torch.hub (target: at most 1.05x).
Nothing here uses the internet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

EVENTS = 200_000

HUBCONF = '''\
dependencies = ["torch"]
from mypkg.layers import make


def tiny(n=2):
    """A tiny model."""
    return make(n)
'''


def per_event(func: Callable[[], None], n: int = EVENTS, repeat: int = 5) -> float:
    """Best time per call of ``func`` in ns, ``n`` calls a repeat, minus the loop's cost."""
    def loop(f: Callable[[], None]) -> float:
        start = time.perf_counter_ns()
        for _ in range(n):
            f()
        return (time.perf_counter_ns() - start) / n

    empty = min(loop(lambda: None) for _ in range(repeat))
    return max(0.0, min(loop(func) for _ in range(repeat)) - empty)


def best_ms(func: Callable[[], Any], n: int, repeat: int = 5) -> float:
    results = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(n):
            func()
        results.append((time.perf_counter() - start) / n * 1000)
    return min(results)


def child_no_hook() -> float:
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import bench_runtime as b; "
            "print(json.dumps(b.per_event(lambda: sys.audit('bench.event', 1))))")
    out = subprocess.run([sys.executable, "-c", code, str(HERE)], capture_output=True,
                         text=True, check=True)
    return float(json.loads(out.stdout))


def yolo_like(root: Path) -> Path:
    tree = root / "yolo"
    for pkg in ("utils", "models", "segment", "classify"):
        (tree / pkg).mkdir(parents=True)
        (tree / pkg / "__init__.py").write_text("")
    for mod in ("hubconf", "export", "detect", "train", "val", "benchmarks"):
        (tree / f"{mod}.py").write_text("")
    for folder in ("data", "tools", "docs"):
        (tree / folder).mkdir()
    return tree


def small_repo(root: Path) -> Path:
    tree = root / "small"
    (tree / "mypkg").mkdir(parents=True)
    (tree / "hubconf.py").write_text(HUBCONF)
    (tree / "mypkg" / "__init__.py").write_text("")
    (tree / "mypkg" / "layers.py").write_text(
        "import torch\n\ndef make(n):\n    return torch.nn.Linear(n, n)\n")
    return tree


def measure(root: Path) -> dict[str, float]:
    from safehub.run.runtime import RuntimeGuard, RuntimeRules

    results: dict[str, float] = {}
    event = lambda: sys.audit("bench.event", 1)  # noqa: E731
    results["event, no hook (ns)"] = child_no_hook()
    tree = yolo_like(root)
    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo="bench/yolo", tree=tree)
    with guard.active():
        pass  # installs the hook
    results["event, hook idle (ns)"] = per_event(event)

    started, stop = threading.Event(), threading.Event()

    def other_thread() -> None:
        with guard.active():
            started.set()
            stop.wait()

    worker = threading.Thread(target=other_thread)
    worker.start()
    started.wait()
    results["event, another thread guarded (ns)"] = per_event(event)
    stop.set()
    worker.join()

    readable = tree / "hubconf.py"
    written = tree / "out.txt"
    with guard.active():
        results["event ignored, in a guard (ns)"] = per_event(event)
        results["open for reading, in a guard (ns)"] = per_event(
            lambda: open(readable, "rb").close(), n=20_000)
        results["open for writing in the tree, in a guard (ns)"] = per_event(
            lambda: open(written, "wb").close(), n=20_000)
    results["open for reading, no guard (ns)"] = per_event(
        lambda: open(readable, "rb").close(), n=20_000)
    results["open for writing, no guard (ns)"] = per_event(
        lambda: open(written, "wb").close(), n=20_000)

    # After a load, its verified tree stays watched for the process's lifetime: every
    # read is matched against it (and a read of a tree file from outside the repo's code
    # looks at the stack first).
    from safehub.store.cache import warm

    other = root / "other.txt"
    other.write_text("x")
    warm.watch((f"{tree}{os.sep}",), time.time_ns(), "bench/yolo")
    results["open for reading, a tree watched, other file (ns)"] = per_event(
        lambda: open(other, "rb").close(), n=20_000)
    results["open for reading, a tree watched, its file (ns)"] = per_event(
        lambda: open(readable, "rb").close(), n=20_000)
    # Read by the repo's own code, a tree file is checked: its stat, the tree folder's
    # identity and every folder on the way (a folder swapped after the warm check).
    nested = str(tree / "models" / "__init__.py")
    results["the read check of a tree file one folder down (ns)"] = per_event(
        lambda: warm.check_opened(nested), n=20_000)

    def block() -> None:
        with RuntimeGuard(RuntimeRules(mode="enforce"), repo="bench/yolo", tree=tree).active():
            pass

    results["guard around nothing, yolov5-shaped tree (ms)"] = best_ms(block, 200)
    results.update(warm_loads(root))
    return results


def warm_loads(root: Path) -> dict[str, float]:
    try:
        import torch.hub
    except ImportError:
        return {}
    from safehub.run.runtime import RuntimeGuard, RuntimeRules

    tree = small_repo(root)
    hub_load: Callable[..., Any] = torch.hub.load

    def plain() -> None:
        hub_load(str(tree), "tiny", source="local", trust_repo=True)

    def guarded() -> None:
        guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo="bench/small", tree=tree)
        with guard.active():
            plain()

    plain()
    guarded()
    # interleave the two so drift in the machine's speed hits both alike
    a, b = [], []
    for _ in range(5):
        a.append(best_ms(plain, 50, repeat=1))
        b.append(best_ms(guarded, 50, repeat=1))
    return {"warm torch.hub.load, local (ms)": min(a),
            "same, guarded, enforce (ms)": min(b),
            "guard's cost on a warm load (ms)": min(b) - min(a)}


OPEN_CHILD = """
import sys, json, time
sys.path.insert(0, sys.argv[1])
import bench_runtime as b
path, tree = sys.argv[2], sys.argv[3]
if sys.argv[4] == "hooked":
    from safehub.store.cache import warm
    from safehub.run.runtime import _hook
    _hook.install()
    warm.watch((tree.rstrip("/") + "/",), time.time_ns(), "bench/tree")
print(json.dumps(b.per_event(lambda: open(path, "rb").close(), n=50_000)))
"""


def open_cost(root: Path) -> dict[str, float]:
    """One open() of a file outside every watched tree: no hook vs the hook (children)."""
    other, tree = root / "open-me.txt", root / "watched"
    other.write_text("x")
    tree.mkdir(exist_ok=True)

    def child(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", OPEN_CHILD, str(HERE), str(other),
                              str(tree), mode], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        return float(json.loads(out.stdout))

    plain = [child("plain") for _ in range(3)]
    hooked = [child("hooked") for _ in range(3)]
    return {"open(), no hook (ns)": min(plain),
            "open() of a file outside the watched tree, hook (ns)": min(hooked),
            "the hook's cost per open (ns)": min(hooked) - min(plain)}


AFTER = """
import json, os, resource, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch, torch.utils.data
which, spec, data = sys.argv[1:4]
if which in ("torch", "floor"):
    import _loopback, torch.hub
    _loopback.point_torch_hub_from_env()
    load = torch.hub.load
    if which == "floor":  # a Python audit hook that does nothing: the interpreter's own cost
        sys.addaudithook(lambda event, args: None)
else:
    import safehub
    load = safehub.load
load(spec, "tiny", trust_repo=True, verbose=False)
files = sorted(os.path.join(data, n) for n in os.listdir(data))
if os.environ.get("BENCH_READS"):  # --instructions: only the reads, counted from outside
    import gc
    gc.disable()  # a full collection of torch's heap lands in one count and not the other
    for name in files[:int(os.environ["BENCH_READS"])]:
        with open(name, "rb") as f:
            f.read()
    sys.exit(0)


def reads():
    for name in files:
        with open(name, "rb") as f:
            f.read()


class Files(torch.utils.data.Dataset):
    def __len__(self):
        return len(files)

    def __getitem__(self, i):
        with open(files[i], "rb") as f:
            return len(f.read())


def loader():
    for _ in torch.utils.data.DataLoader(Files(), batch_size=64, num_workers=2):
        pass


def cpu():
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


out = {}
for name, work in (("reads", reads), ("loader", loader)):
    c, w = cpu(), time.perf_counter()
    work()
    out[name] = {"cpu": cpu() - c, "wall": time.perf_counter() - w}
print("RESULT " + json.dumps(out))
"""


def after_load(root: Path, rounds: int, other: Path | None = None,
               instructions: bool = False) -> dict[str, Any]:
    """The same work after torch.hub.load and after safehub.load (see the docstring)."""
    import statistics

    sys.path.insert(0, str(HERE))
    from _loopback import ChildServer, env_for, home_env, make_big_repo

    from tests.support import git

    make_big_repo(root / "repo", 50)
    git(root / "repo", "tag", "v1.0")
    data = root / "data"
    data.mkdir()
    for i in range(20_000):
        (data / f"{i:05d}.bin").write_bytes(os.urandom(512))
    server = ChildServer(root, "bench", "hub", root / "repo")
    env = {**os.environ, **home_env(root / "home"), **env_for(server),  # type: ignore[arg-type]
           "BENCH_DIR": str(HERE), "PYTHONPATH": str(HERE.parent)}
    env.pop("CI", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measured as users run it: bytecode compiled
    seen: dict[str, dict[str, list[float]]] = {}
    kinds = ("torch", "safehub", *(("other",) if other else ()))
    try:
        def once(which: str) -> None:
            child = dict(env)
            if which == "other":  # another safehub checkout (before/after a change)
                child["PYTHONPATH"] = os.pathsep.join((str(other), env["PYTHONPATH"]))
            out = subprocess.run([sys.executable, "-c", AFTER, which if which != "other" else
                                  "safehub", "bench/hub:v1.0", str(data)], env=child,
                                 capture_output=True, text=True, check=True, timeout=900)
            line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
            for work, numbers in json.loads(line[7:]).items():
                for kind, value in numbers.items():
                    seen.setdefault(f"{work} {kind}", {}).setdefault(which, []).append(value)

        for which in kinds:  # caches filled, bytecode compiled; then measured
            once(which)
        if instructions:
            return _instructions(kinds, env, data, other)
        seen.clear()
        for n in range(rounds):
            for which in (kinds if n % 2 == 0 else kinds[::-1]):
                once(which)
    finally:
        server.stop()
    results: dict[str, Any] = {}
    for key, by in seen.items():
        t, s = statistics.median(by["torch"]), statistics.median(by["safehub"])
        results[key] = {"torch": t, "safehub": s, "ratio": s / t if t else float("nan")}
        if other:
            o = statistics.median(by["other"])
            results[key].update(other=o, other_ratio=o / t if t else float("nan"))
    return results


def _instructions(kinds: tuple[str, ...], env: dict[str, str], data: Path,
                  other: Path | None) -> dict[str, Any]:
    """Instructions per small-file read after a load (callgrind: the same count every run,
    whatever else the machine does): 2,000 and 6,000 reads, subtracted, with the garbage
    collector off while they run (else whether a full collection of torch's large heap falls
    between the two counts decides the result)."""
    import re

    real = os.path.realpath(sys.executable)
    per: dict[str, float] = {}
    for which in ("floor", *kinds):
        counts = []
        for n in (2000, 6000):
            child = {**env, "BENCH_READS": str(n)}
            if which == "other" and other is not None:
                child["PYTHONPATH"] = os.pathsep.join((str(other), env["PYTHONPATH"]))
            out = subprocess.run(
                ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", real, "-c",
                 AFTER, "safehub" if which == "other" else which, "bench/hub:v1.0", str(data)],
                env=child, capture_output=True, text=True, check=True, timeout=3600)
            found = re.search(r"Collected : (\d+)", out.stderr)
            assert found, out.stderr[-500:]
            counts.append(int(found[1]))
        per[which] = (counts[1] - counts[0]) / 4000
    # "floor": torch.hub with a do-nothing audit hook (what any Python hook costs an event)
    return {"instructions per read": {k: round(v) for k, v in per.items()},
            "ratio to torch.hub": {k: round(v / per["torch"], 3) for k, v in per.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the numbers to this file")
    ap.add_argument("--quick", action="store_true", help="skip the after-load comparison")
    ap.add_argument("--rounds", type=int, default=5, help="after-load runs of each (median)")
    ap.add_argument("--other", type=Path, metavar="CHECKOUT", help="after a load, also "
                    "measure the safehub of another checkout (before/after a change)")
    ap.add_argument("--instructions", action="store_true", help="after a load, count "
                    "instructions per read with valgrind instead of timing (repeatable)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TORCH_HOME", os.path.join(tmp, "torch"))
        results: dict[str, Any] = {**open_cost(Path(tmp)), **measure(Path(tmp))}
        after = {} if args.quick else after_load(Path(tmp) / "after", args.rounds, args.other,
                                                 args.instructions)
        from safehub._internal.fsutil import rmtree

        rmtree(Path(tmp) / "after")  # the caches are read-only
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"  {key:<{width}}  {value:10.3f}")
    if args.instructions and after:
        print(f"after a load, instructions per small-file read: {after}")
    elif after:
        extra = f"   {args.other.name}   ratio" if args.other else ""
        print(f"after a load (medians of {args.rounds}; seconds){'':8}torch.hub   safehub   "
              f"ratio{extra}")
        for key, r in after.items():
            more = (f" {r['other']:9.3f} {r['other_ratio']:7.3f}x" if args.other else "")
            print(f"  {key:<44}{r['torch']:9.3f} {r['safehub']:9.3f} {r['ratio']:7.3f}x{more}")
    if args.json:
        args.json.write_text(json.dumps({**results, "after_load": after}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
