"""Real hub repos' shapes, a fresh process, warm cache: safehub.load beside torch.hub.load.

    python bench/bench_shapes.py [--fresh 7] [--shapes timm,dinov2,dle] [--dir /dev/shm]

Nothing is fetched from the internet: each repo is built here in the shape of a real one
(its top-level names, its package layout, what its hubconf imports) and served by the
loopback GitHub stand-in under the real repo's name:

- ``timm``: ``huggingface/pytorch-image-models``, with an installed distribution ``timm``
  (a site folder on ``PYTHONPATH``, its ``RECORD`` and ``METADATA`` as timm's wheel has
  them: no ``top_level.txt``, ``Project-URL`` on the repo). The repo's own ``timm`` package
  shadows it; the runtime guard warns (its own distribution) instead of refusing.
- ``dinov2``: ``facebookresearch/dinov2``, a top-level ``dinov2`` package whose
  ``hub/backbones.py`` the hubconf imports.
- ``dle``: ``NVIDIA/DeepLearningExamples``, a few thousand files in deep folders, the
  hubconf importing a package chain several levels down.

For each: a whole fresh process (``python -c "import torch; load(...)"``), warm cache,
CPU from ``wait4`` and wall, medians of ``--fresh``, alternating who goes first, and the
paired ratio; then what the safehub process imports beyond torch.hub's, with each module's
own import time (-X importtime, least of three), and what the load checks beyond
torch.hub (the guard's shadowing check: the names looked up, the distributions read).
Bytecode compiled, as pip installs do (PYTHONDONTWRITEBYTECODE unset for the children).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import ChildServer, env_for, filesystem, home_env  # noqa: E402
from bench_load import FRESH, _spawn_timed, compile_bytecode  # noqa: E402

from safehub._internal.fsutil import rmtree  # noqa: E402

TINY = "\n\ndef tiny(n=2):\n    return n\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _modules(prefix: str, count: int) -> dict[str, str]:
    body = "import math\n\n\ndef f{i}(x):\n    return math.sqrt(x) * {i}\n"
    return {f"{prefix}/m{i:03d}.py": body.format(i=i) for i in range(count)}


def timm_shape(repo: Path, site: Path) -> None:
    """pytorch-image-models: a ``timm`` package, scripts at the top, and timm installed."""
    files = {"hubconf.py": "dependencies = ['torch']\nfrom timm.models import create_model"
             "  # noqa\n" + TINY,
             "timm/__init__.py": "from .version import __version__\n",
             "timm/version.py": "__version__ = '1.0.0'\n",
             "timm/models/__init__.py": "from ._factory import create_model\n",
             "timm/models/_factory.py": "from timm.layers import m000\n\n\n"
             "def create_model(name):\n    return name\n",
             "timm/layers/__init__.py": "", "timm/data/__init__.py": "",
             "timm/utils/__init__.py": "", "tests/test_models.py": "",
             "hfdocs/source/index.mdx": "# timm\n", "requirements.txt": "torch\n",
             "setup.cfg": "[metadata]\n", "pyproject.toml": "[project]\nname = 'timm'\n"}
    for script in ("train", "validate", "inference", "benchmark", "avg_checkpoints",
                   "clean_checkpoint", "bulk_runner", "onnx_export", "onnx_validate"):
        files[f"{script}.py"] = "import timm\n"
    for sub, count in (("models", 120), ("layers", 90), ("data", 40), ("utils", 25)):
        files.update(_modules(f"timm/{sub}", count))
    _write(repo, files)
    installed = {"timm/__init__.py": "__version__ = '1.0.0'\n",
                 "timm/models/__init__.py": ""}
    _write(site, installed)
    info = site / "timm-1.0.0.dist-info"
    _write(info, {"METADATA": "Metadata-Version: 2.3\nName: timm\nVersion: 1.0.0\n"
                  "Project-URL: Documentation, https://huggingface.co/docs/timm/en/index\n"
                  "Project-URL: Homepage, https://github.com/huggingface/pytorch-image-models\n"
                  "Project-URL: Source, https://github.com/huggingface/pytorch-image-models\n",
                  "WHEEL": "Wheel-Version: 1.0\nGenerator: pdm-backend\nRoot-Is-Purelib: true\n",
                  "RECORD": "".join(f"{rel},,\n" for rel in [
                      *installed, "timm-1.0.0.dist-info/METADATA",
                      "timm-1.0.0.dist-info/WHEEL", "timm-1.0.0.dist-info/RECORD"])})


def dinov2_shape(repo: Path, site: Path) -> None:
    """dinov2: a ``dinov2`` package; the hubconf imports its hub backbones."""
    files = {"hubconf.py": "dependencies = ['torch']\nfrom dinov2.hub.backbones import "
             "dinov2_vits14  # noqa\n" + TINY,
             "dinov2/__init__.py": "__version__ = '0.0.1'\n",
             "dinov2/hub/__init__.py": "",
             "dinov2/hub/backbones.py": "from dinov2.layers import m000\n\n\n"
             "def dinov2_vits14():\n    return 14\n",
             "dinov2/layers/__init__.py": "", "dinov2/models/__init__.py": "",
             "dinov2/train/__init__.py": "", "dinov2/eval/__init__.py": "",
             "notebooks/semantic_segmentation.ipynb": "{}\n", "setup.py": "",
             "requirements.txt": "torch\n", "conda.yaml": "name: dinov2\n"}
    for sub, count in (("layers", 12), ("models", 6), ("train", 8), ("eval", 30)):
        files.update(_modules(f"dinov2/{sub}", count))
    _write(repo, files)


def dle_shape(repo: Path, site: Path) -> None:
    """DeepLearningExamples: thousands of files in deep folders; the hubconf imports a
    package chain several levels down."""
    chain = "PyTorch/Classification/ConvNets/image_classification/models"
    files = {"hubconf.py": "dependencies = ['torch']\nfrom PyTorch.Classification.ConvNets."
             "image_classification.models import resnet50  # noqa\n" + TINY,
             f"{chain}/__init__.py": "from .resnet import resnet50\n",
             f"{chain}/resnet.py": "def resnet50():\n    return 50\n"}
    parts = chain.split("/")
    for depth in range(1, len(parts)):
        files["/".join(parts[:depth]) + "/__init__.py"] = ""
    for area in ("PyTorch", "TensorFlow2", "MxNet", "Tools"):
        for topic in ("Classification", "Detection", "Segmentation", "LanguageModeling",
                      "SpeechSynthesis", "Recommendation"):
            for model in range(6):
                base = f"{area}/{topic}/Model{model}"
                files.update({f"{base}/src/{rel}": text for rel, text in
                              _modules("", 12).items()})
                files[f"{base}/README.md"] = f"# {topic} {model}\n" * 20
                files[f"{base}/Dockerfile"] = "FROM nvcr.io/nvidia/pytorch\n"
    _write(repo, files)


SHAPES = {"timm": ("huggingface", "pytorch-image-models", timm_shape),
          "dinov2": ("facebookresearch", "dinov2", dinov2_shape),
          "dle": ("NVIDIA", "DeepLearningExamples", dle_shape)}

CHECKS = """
import os, sys, time
import torch
import safehub
from safehub.run import hygiene
looked = []
which = "owners_of" if hasattr(hygiene, "owners_of") else "top_level_owners"  # (older)
real = getattr(hygiene, which)
def timed(*names):
    t = time.process_time()
    try:
        return real(*names)
    finally:
        looked.append((sorted(*names) if names else ["(all)"], time.process_time() - t))
setattr(hygiene, which, timed)
safehub.load(sys.argv[2], "tiny", trust_repo=True, verbose=False)
setattr(hygiene, which, real)
hygiene._OWNERS = None
t = time.process_time()
hygiene.top_level_owners()  # what the check read before: every distribution's names
whole = time.process_time() - t
print(f"owners looked up for {[n for names, _ in looked for n in names]}: "
      f"{sum(t for _, t in looked) * 1e3:.1f} ms CPU (the map of every installed "
      f"distribution it replaces: {whole * 1e3:.1f} ms)")
"""


def _commit(repo: Path) -> None:
    from tests.support import git

    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "shape")
    git(repo, "tag", "v1.0")


def bench_shape(work: Path, key: str, rounds: int) -> list[str]:
    owner, name, build = SHAPES[key]
    repo, site = work / key / "repo", work / key / "site"
    site.mkdir(parents=True)
    build(repo, site)
    _commit(repo)
    (work / key / "srv").mkdir()
    server = ChildServer(work / key / "srv", owner, name, repo)
    try:
        env = {k: v for k, v in os.environ.items()
               if k not in ("CI", "PYTHONDONTWRITEBYTECODE") and not k.startswith("SAFEHUB_")}
        env.update(home_env(work / key / "home"))
        env.update(env_for(server))  # type: ignore[arg-type]
        env.update({"SAFEHUB_CACHE_DIR": str(work / key / "cache"), "BENCH_DIR": str(HERE),
                    "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])})
        spec = f"{owner}/{name}:v1.0"
        for which in ("torch", "safehub"):  # untimed: caches filled, bytecode written
            _spawn_timed([sys.executable, "-c", FRESH, which, spec], env)
        runs: dict[str, list[tuple[float, float]]] = {"torch": [], "safehub": []}
        for r in range(rounds):
            for which in (("torch", "safehub") if r % 2 == 0 else ("safehub", "torch")):
                _, _, cpu, wall = _spawn_timed([sys.executable, "-c", FRESH, which, spec], env)
                runs[which].append((cpu * 1e3, wall * 1e3))
        paired = statistics.median(s[0] / t[0] for s, t in zip(runs["safehub"], runs["torch"],
                                                                strict=True))
        t_cpu, s_cpu = (statistics.median(c for c, _ in runs[w]) for w in ("torch", "safehub"))
        t_wall, s_wall = (statistics.median(w for _, w in runs[x]) for x in ("torch", "safehub"))
        rows = [f"{owner}/{name} ({sum(1 for p in repo.rglob('*') if p.is_file())} files): "
                f"CPU torch.hub {t_cpu:.0f} ms, safehub {s_cpu:.0f} ms, {s_cpu / t_cpu:.3f}x "
                f"(paired {paired:.3f}x); wall {t_wall:.0f} / {s_wall:.0f} ms, "
                f"{s_wall / t_wall:.3f}x"]
        out, *_ = _spawn_timed([sys.executable, "-c", CHECKS, "safehub", spec], env)
        rows.append(f"  the shadowing check: {out.strip()}")
        rows += [f"  {line}" for line in _extra_imports(spec, env)]
        return rows
    finally:
        server.stop()


def _extra_imports(spec: str, env: dict[str, str], rounds: int = 3) -> list[str]:
    seen: dict[str, dict[str, int]] = {"torch": {}, "safehub": {}}
    for _ in range(rounds):
        for which in ("torch", "safehub"):
            _, err, _, _ = _spawn_timed([sys.executable, "-X", "importtime", "-c", FRESH,
                                         which, spec], env)
            for line in err.splitlines():
                if line.startswith("import time:") and "|" in line and "self [us]" not in line:
                    own, _, mod = line[len("import time:"):].split("|")
                    table = seen[which]
                    table[mod.strip()] = min(int(own), table.get(mod.strip(), int(own)))
    extra = sorted(((us, m) for m, us in seen["safehub"].items() if m not in seen["torch"]),
                   reverse=True)
    lines = [f"imports beyond torch.hub's: {len(extra)} modules, "
             f"{sum(us for us, _ in extra) / 1e3:.1f} ms of their own import time; costliest:"]
    lines += [f"  {us / 1e3:7.2f} ms  {m}" for us, m in extra[:8]]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh", type=int, default=7, help="fresh processes of each (median)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="which repo shapes")
    ap.add_argument("--dir", help="where the repos and caches go (default: the temp folder)")
    args = ap.parse_args(argv)
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-shapes-", dir=args.dir))
    print(f"fresh process, warm cache, safehub.load beside torch.hub.load; {os.cpu_count()} "
          f"CPUs, load average {os.getloadavg()[0]:.2f}; files in {filesystem(work)}")
    try:
        for key in args.shapes.split(","):
            print("\n".join(bench_shape(work, key, args.fresh)), flush=True)
    finally:
        rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
