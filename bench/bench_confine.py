"""What ``--confine`` adds to a job's start: ``safehub run --confine -- python -c pass``
beside ``safehub run -- python -c pass``, one run, CPU beside wall.

    python bench/bench_confine.py [--rounds 15]

Each round runs the two commands one after the other (alternating which goes first);
CPU is the whole process tree's (``wait4`` of the ``safehub run`` process: it waits for
its job), wall from spawn to exit; medians, and the median of each round's CPU
difference (the machine's load drifts less within a round). Then the modules the
confined start imports beyond the plain one (-X importtime). Bytecode compiled; the
environment is the caller's (``--confine`` needs Landlock ABI 4 and libseccomp: where
the kernel has neither the bench says so and stops).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    with tempfile.TemporaryFile() as err:
        wall = time.perf_counter()
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        err.seek(0)
        text = err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{' '.join(args)} failed: {text[-1500:]}")
    return (usage.ru_utime + usage.ru_stime) * 1e3, wall * 1e3, text


def _imports(text: str) -> dict[str, int]:
    found = {}
    for line in text.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, _, name = line[len("import time:"):].split("|")
            found[name.strip()] = int(own)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "safehub")],
                   check=True, env=env)
    job = ["--", sys.executable, "-c", "pass"]
    commands = {"plain": [sys.executable, "-m", "safehub", "run", *job],
                "confine": [sys.executable, "-m", "safehub", "run", "--confine", *job]}
    try:
        for command in commands.values():  # untimed: caches, bytecode
            _timed(command, env)
    except RuntimeError as e:
        print(f"confined start not measured here: {e}")
        return 0
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    for r in range(args.rounds):
        for key in (("plain", "confine") if r % 2 == 0 else ("confine", "plain")):
            cpu, wall, _ = _timed(commands[key], env)
            runs[key].append((cpu, wall))
    cpu = {k: statistics.median(c for c, _ in v) for k, v in runs.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in runs.items()}
    extra = statistics.median(c[0] - p[0] for c, p in zip(runs["confine"], runs["plain"],
                                                            strict=True))
    print(f"safehub run -- python -c pass, median of {args.rounds}; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'':24}{'CPU ms':>9}{'wall ms':>9}")
    for key, label in (("plain", "plain"), ("confine", "--confine")):
        print(f"{label:24}{cpu[key]:9.1f}{wall[key]:9.1f}")
    print(f"--confine adds {extra:+.1f} ms CPU (median of each round's difference), "
          f"{wall['confine'] - wall['plain']:+.1f} ms wall")
    seen = {k: _imports(_timed([sys.executable, "-X", "importtime", *c[1:]], env)[2])
            for k, c in commands.items()}
    beyond = sorted(((us, m) for m, us in seen["confine"].items() if m not in seen["plain"]),
                    reverse=True)
    print(f"imports beyond the plain start: {len(beyond)} modules, "
          f"{sum(us for us, _ in beyond) / 1e3:.1f} ms: "
          + ", ".join(f"{m} {us / 1e3:.1f} ms" for us, m in beyond[:8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
