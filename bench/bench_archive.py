"""safehub's extract-and-verify vs torch.hub's plain unzip, on one generated archive.

    python bench/bench_archive.py                 # 5,000 files, ~100 MB, prints a table
    python bench/bench_archive.py --files 20000 --mb 300 --runs 5

A repo of real shape is written with git (nested folders, Python/Markdown/JSON text of
log-normal sizes, a few large binaries, symlinks, executables, three submodules) and
archived with ``git archive --format=zip`` as GitHub does. Then, on the same zip, in
alternating order, the median of ``--runs`` (the disk is synced between runs):

* torch.hub: ``zipfile.ZipFile(zip).extractall(dir)`` (what ``torch.hub`` does);
* safehub: :func:`safehub.verify.archive.extract` (checks, writes read-only, one streaming pass
  that hashes SHA-256 and the git blob id while writing, inflating and hashing on two
  helper threads) and :func:`check_tree` against
  the commit's tree: exact for the repo without submodules, per file (the API's listing,
  here from ``git ls-tree``) for the one with them and a ``.gitattributes``.
Wall time and CPU time (all threads) are shown: safehub does more work (two hashes per
byte) and needs a spare core to finish as soon as torch.hub does; on a loaded machine the
wall times say more about the load than about either. Nothing here reaches the network.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from safehub._internal.fsutil import rmtree  # noqa: E402
from safehub.config import Limits  # noqa: E402
from safehub.verify.archive import check_tree, extract  # noqa: E402

WORDS = ["def", "class", "return", "import", "self", "torch", "tensor", "model", "weight",
         "layer", "forward", "config", "data", "loader", "train", "eval", "batch", "shape"]


def _env(home: Path) -> dict[str, str]:
    return {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def _text(rng: random.Random, size: int) -> bytes:
    lines = []
    total = 0
    while total < size:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choices(WORDS, k=rng.randint(2, 12)))
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:max(size, 1)]


def make_repo(root: Path, files: int, megabytes: int, *, submodules: bool) -> tuple[str, str]:
    """A repo written by one fast-import run; returns (commit, tree)."""
    rng = random.Random(1234)
    repo = root / ("with-submodules.git" if submodules else "plain.git")
    env = _env(root)
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, env=env)
    folders = [""]
    for _ in range(files // 12):
        parent = rng.choice(folders)
        folders.append(f"{parent}/d{len(folders)}" if parent else f"d{len(folders)}")
    big = [rng.randbytes(5 * 1024 * 1024) for _ in range(max(1, megabytes // 10))]
    text_budget = megabytes * 1024 * 1024 - sum(map(len, big))
    stream = bytearray(b"commit refs/heads/main\nmark :1\n"
                       b"committer A <a@x> 1700000000 +0000\ndata 2\nm\n")
    used = 0
    paths = []
    for n in range(files - len(big) - 20):
        folder = rng.choice(folders)
        ext = rng.choice([".py", ".py", ".py", ".md", ".json", ".txt", ".yaml"])
        path = f"{folder}/f{n}{ext}" if folder else f"f{n}{ext}"
        mean = text_budget / (files - len(big) - 20)
        size = min(int(rng.lognormvariate(0, 1.0) * mean / 1.65), 2 * 1024 * 1024)
        data = _text(rng, size)
        used += len(data)
        mode = "100755" if n % 97 == 0 else "100644"
        stream += f"M {mode} inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
        paths.append(path)
    for n, data in enumerate(big):
        stream += f"M 100644 inline weights/w{n}.bin\ndata {len(data)}\n".encode() + data + b"\n"
    for n in range(20):
        target = os.path.relpath(rng.choice(paths), "links")
        stream += f"M 120000 inline links/l{n}\ndata {len(target)}\n{target}\n".encode()
    hubconf = b"def m():\n    return 1\n"
    stream += b"M 100644 inline hubconf.py\ndata %d\n" % len(hubconf) + hubconf + b"\n"
    if submodules:
        for n in range(3):
            stream += f"M 160000 {n + 1:040d} third_party/mod{n}\n".encode()
        attrs = b"*.md text\n/docs export-ignore\n*.bat eol=crlf\n"
        stream += b"M 100644 inline .gitattributes\ndata %d\n" % len(attrs) + attrs + b"\n"
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=bytes(stream),
                   check=True, env=env)
    out = subprocess.run(["git", "rev-parse", "main", "main^{tree}"], cwd=repo, check=True,
                         env=env, capture_output=True, text=True).stdout.split()
    return out[0], out[1]


def archive(root: Path, repo: str, commit: str) -> Path:
    zip_path = root / f"{repo}.zip"
    with open(zip_path, "wb") as out:
        subprocess.run(["git", "archive", "--format=zip", f"--prefix=o-r-{commit[:7]}/",
                        commit], cwd=root / f"{repo}.git", stdout=out, check=True,
                       env=_env(root))
    return zip_path


def listing(root: Path, repo: str, tree: str) -> list[dict[str, object]]:
    raw = subprocess.run(["git", "ls-tree", "-r", "-t", "-z", tree], cwd=root / f"{repo}.git",
                         check=True, env=_env(root), capture_output=True).stdout
    out: list[dict[str, object]] = []
    for item in raw.split(b"\0"):
        if item:
            meta, _, path = item.partition(b"\t")
            mode, kind, sha = meta.decode().split()
            out.append({"path": path.decode(), "mode": mode, "type": kind, "sha": sha})
    return out


def bench(zip_path: Path, commit: str, tree: str, items: list[dict[str, object]] | None,
          work: Path, runs: int) -> dict[str, float | str]:
    """Medians of wall and CPU seconds: torch's unzip, safehub's extract, its check_tree."""
    times: dict[str, list[float]] = {k: [] for k in ("torch", "torch_cpu", "extract",
                                                      "safehub_cpu", "check")}
    level = ""
    for n in range(runs):
        for which in (("torch", "safehub") if n % 2 == 0 else ("safehub", "torch")):
            dest = work / f"{which}{n}"
            start, cpu = time.perf_counter(), time.process_time()
            if which == "torch":
                with zipfile.ZipFile(zip_path) as zf:
                    zf.extractall(dest)
                times["torch"].append(time.perf_counter() - start)
                times["torch_cpu"].append(time.process_time() - cpu)
            else:
                dest.mkdir()
                ext = extract(zip_path, dest / "tree", commit=commit, limits=Limits())
                middle = time.perf_counter()
                check = check_tree(ext, tree, items if ext.tree_id != tree else None,
                                   allow_fallback=True)
                level = check.level
                times["extract"].append(middle - start)
                times["check"].append(time.perf_counter() - middle)
                times["safehub_cpu"].append(time.process_time() - cpu)
            rmtree(dest)
            os.sync()
    out: dict[str, float | str] = {k: statistics.median(v) for k, v in times.items()}
    out["level"] = level
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", help="where to extract (default: the temp folder); try a "
                        "tmpfs such as /dev/shm to see CPU cost alone")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="safehub-bench-", dir=args.dir))
    try:
        print(f"{'repo':<17}{'files':>6}{'MB':>5}{'torch.hub unzip':>16}{'safehub extract':>16}"
              f"{'+check_tree':>12}{'ratio':>6}{'CPU torch/safehub':>19}  level")
        for submodules in (False, True):
            name = "with-submodules" if submodules else "plain"
            commit, tree = make_repo(root, args.files, args.mb, submodules=submodules)
            zip_path = archive(root, name, commit)
            items = listing(root, name, tree)
            with zipfile.ZipFile(zip_path) as zf:
                count = sum(1 for i in zf.infolist() if not i.is_dir())
                size = sum(i.file_size for i in zf.infolist()) / 1e6
            work = root / f"work-{name}"
            work.mkdir()
            r = bench(zip_path, commit, tree, items, work, args.runs)
            t_torch, t_extract, t_check = (float(r[k]) for k in ("torch", "extract", "check"))
            cpu = f"{float(r['torch_cpu']):.2f}s/{float(r['safehub_cpu']):.2f}s"
            print(f"{name:<17}{count:>6}{size:>5.0f}{t_torch:>15.3f}s{t_extract:>15.3f}s"
                  f"{t_check:>11.3f}s{(t_extract + t_check) / t_torch:>6.2f}{cpu:>19}  "
                  f"{r['level']}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
