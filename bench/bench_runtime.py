"""What the runtime guard costs: per audit event, per guarded block, per warm hub load.

    python bench/bench_runtime.py            # prints a table
    python bench/bench_runtime.py --json out.json

Measures (best of several repeats, so noise from other work on the machine counts less):
  * the cost of one audit event (``sys.audit``) with no hook at all (in a fresh child
    process: hooks cannot be removed), with safehub's hook installed and idle, while
    another thread is guarded, and inside a guard for an event it ignores, reads
    (``open`` for reading) and decides on (``open`` for writing in the tree);
  * entering and leaving a guard around nothing, for a yolov5-shaped tree;
  * a warm ``torch.hub.load(dir, source="local")`` of a small repo, plain and guarded
    (``enforce``), side by side in one run (target: at most +2 ms).
Nothing here uses the network.
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
    from safehub.runtime import RuntimeGuard, RuntimeRules

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
    from safehub.runtime import sealed

    other = root / "other.txt"
    other.write_text("x")
    sealed.watch((f"{tree}{os.sep}",), time.time_ns(), "bench/yolo")
    results["open for reading, a tree watched, other file (ns)"] = per_event(
        lambda: open(other, "rb").close(), n=20_000)
    results["open for reading, a tree watched, its file (ns)"] = per_event(
        lambda: open(readable, "rb").close(), n=20_000)
    # Read by the repo's own code, a tree file is checked: its stat, the tree folder's
    # identity and every folder on the way (a folder swapped after the warm check).
    nested = str(tree / "models" / "__init__.py")
    results["the read check of a tree file one folder down (ns)"] = per_event(
        lambda: sealed.check_read(nested), n=20_000)

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
    from safehub.runtime import RuntimeGuard, RuntimeRules

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TORCH_HOME", os.path.join(tmp, "torch"))
        results = measure(Path(tmp))
    print(f"python {sys.version.split()[0]}")
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"  {key:<{width}}  {value:10.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
