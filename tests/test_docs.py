"""Docs that run: every code block of README.md and docs/ is run, checked, or marked.

Each page is read top to bottom, as a newcomer would: shell blocks run line by line
(``safehub`` through ``safehub.cli.main``, ``git``/``openssl``/``python`` as processes,
see tests/docs_support.py) against the loopback GitHub stand-in; Python blocks run in a
fresh namespace or a child process; TOML policy blocks are validated with
``safehub policy validate`` and, where a page goes on to use them, used; JSON blocks are
parsed and compared with what safehub writes; untagged blocks show output and must match
what safehub prints in that situation. A block that cannot run here carries
``<!-- not run: why -->`` right before its fence.

Nothing is substituted silently: the repos the docs name are served under those names
(``REPOS``), and every value a doc shows that cannot exist here (a sha, a path such as
``/srv/mirror``, a host) is replaced as ``STAND_INS`` says. Commands that are not run are
listed in ``SKIPPED`` with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import HubRepo, needs_torch
from tests.docs_support import (
    PROGRAMS,
    ROOT,
    Block,
    Shell,
    assert_shows,
    blocks,
    command_lines,
    demo_serve,
    environment,
    pages,
    pythonpath,
    run_block,
)
from tests.support import GitHubStandIn, TLSFiles, git

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# -- what the docs name, and what stands in for it -------------------------------------------------

#: Every repo the docs load, served by the stand-in under the same name, at the tag the
#: docs use, with a hubconf.py that defines the entrypoints the docs call.
REPOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "org/repo": ("v1.2", ("resnet_tiny",)),
    "myorg/models": ("v2.1", ("resnet_tiny",)),
    "pytorch/vision": ("v0.19.0", ("resnet18",)),
    "acme/models": ("v1.0", ("resnet_tiny", "connect")),
    "org/models": ("v1.0", ("resnet_tiny",)),  # signed with a certificate (signing.md)
}

#: Values the docs show that cannot be used here, and what the tests use instead
#: (each test fills in the values it needs; test_every_stand_in_is_used keeps this honest).
STAND_INS: dict[str, str] = {
    "48b1edffdc6f34b766e2b4bbf23b78bd4df94181": "the commit of pytorch/vision:v0.19.0",
    "0b6b7e6c0f0de5e5ab8c9d3c9f1e7d2bb0f0a3d1": "the tree of pytorch/vision:v0.19.0",
    "/etc/xdg/safehub/policy.toml": "the site policy file under the test's XDG_CONFIG_DIRS",
    "/home/runner": "HOME of the CI job's machine, in tmp_path",
    "/shared/hub": "tmp_path/root/shared/hub",
    "/srv/models": "tmp_path/root/srv/models",
    "/shared/safehub-cache": "tmp_path/root/shared/safehub-cache",
    "/srv/mirror": "tmp_path/root/srv/mirror",
    "/srv/hub-mirror": "tmp_path/root/srv/hub-mirror",
    "/job/": "the project checkout the shells work in",
    "https://mirror.internal/hub-mirror": "the stand-in's mirror host serving /srv/hub-mirror",
    "1.1.1.1:443": "a loopback address and port nothing listens on",
    "registry.example.com": "a docker-registry 2.8 started by the test (TLS, htpasswd)",
    "/srv/hub-layout": "tmp_path/root/srv/hub-layout",
    "/srv/keys": "tmp_path/root/srv/keys",
}

#: Commands (a prefix of the line, as the doc writes it) that are not run, and why.
SKIPPED: dict[str, str] = {
    "pip install": "installs packages; these tests run in the environment it makes",
    "python -m pytest": "runs the test suite, of which this test is a part",
}

#: A line that runs but cannot succeed here: a keyless signature needs an OIDC token from
#: a GitHub Actions run and Sigstore's public services. It must refuse org/repo (signed with
#: a key), naming what is wrong.
KEYLESS = ("safehub verify org/repo:v1.2 --identity 'https://github.com/org/repo/**' "
           "--issuer https://token.actions.githubusercontent.com")

#: Each page's blocks, in order: (fence tag, how the tests treat it). "run": executed;
#: "checked": compared with what safehub writes or validated by it; "not run": marked in
#: the page with <!-- not run: why -->.
LAYOUT: dict[str, list[tuple[str, str]]] = {
    "README.md": [("bash", "run"), ("python", "run"), ("", "checked"), ("python", "run"),
                  ("toml", "checked"), ("bash", "run")],
    "docs/api.md": [],
    "docs/architecture.md": [],
    "docs/ci.md": [("yaml", "not run"), ("python", "run"), ("", "checked")],
    "docs/confine.md": [("bash", "not run"), ("toml", "checked"), ("bash", "run")],
    "docs/digest.md": [("", "checked"), ("", "checked")],
    "docs/fleet.md": [("bash", "run"), ("bash", "run"), ("bash", "not run"), ("bash", "run"),
                      ("bash", "run"), ("bash", "run"), ("toml", "checked"),
                      *[("bash", "run")] * 5],
    "docs/pinning.md": [("bash", "run"), ("toml", "checked")],
    "docs/policy.md": [("", "checked"), ("toml", "checked"), ("toml", "checked"),
                       ("toml", "checked"), ("json", "checked"),
                       ("bash", "run")],
    "docs/runtime.md": [("toml", "checked"), ("json", "checked"), ("", "checked")],
    "docs/signing.md": [("yaml", "not run"), ("toml", "checked"), ("bash", "run"),
                        ("toml", "checked"), ("bash", "run"), ("toml", "checked"),
                        ("bash", "run")],
    "docs/threat-model.md": [],
}


def page(name: str) -> list[Block]:
    """The blocks of a page, checked against LAYOUT (a new block needs a test)."""
    found = blocks(name)
    assert [b.lang for b in found] == [lang for lang, _ in LAYOUT[name]], (
        f"{name}: its blocks changed; update LAYOUT and the page's test: "
        f"{[(b.line, b.lang) for b in found]}")
    return found


def hubconf(repo: str, entrypoints: tuple[str, ...]) -> str:
    parts = [f'"""{repo} as the docs use it (served by the loopback stand-in)."""\n\n'
             'dependencies = ["torch"]\n']
    for name in entrypoints:
        if name == "connect":
            host, port = STAND_IN_ADDRESS
            parts.append(f'''
def connect():
    """Connect to a host no rule allows (docs/runtime.md: 1.1.1.1:443)."""
    import socket

    with socket.create_connection(("{host}", {port}), timeout=2):
        pass
''')
        else:
            parts.append(f'''
def {name}(pretrained=False, **kwargs):
    """A tiny model standing in for {name}."""
    import torch

    return torch.nn.Linear(4, 2)
''')
    return "".join(parts)


#: Where docs/runtime.md's 1.1.1.1:443 points: the discard port on loopback, where nothing
#: listens here (the guard must refuse before connecting anyway).
STAND_IN_ADDRESS = ("127.0.0.1", 9)


@dataclass
class Docs:
    """The pages' world: the stand-in serving REPOS, shells, and the stand-in values."""

    server: GitHubStandIn
    tmp: Path
    repos: dict[str, HubRepo]
    values: dict[str, str] = field(default_factory=dict)
    shells: dict[str, Shell] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        return self.tmp / "work"

    def path(self, shown: str) -> Path:
        """Where an absolute path a doc shows lives in this test."""
        return Path(self.mapped(shown))

    def sha(self, repo: str) -> str:
        return self.repos[repo].sha

    def mapped(self, text: str) -> str:
        """``text`` with every STAND_INS value this test knows replaced."""
        for shown in sorted(STAND_INS, key=len, reverse=True):
            if shown in text:
                assert shown in self.values, f"no stand-in for {shown!r} in this test"
                text = text.replace(shown, self.values[shown])
        return text

    def shell(self, machine: str = "you", *, ci: bool = False, cwd: Path | None = None
              ) -> Shell:
        """A shell on ``machine`` (in the checkout, or ``cwd``); each machine has its own
        home. ``ci``: a CI runner's environment, XDG variables unset (so the caches live
        in ~/.cache) and ``CI=true``."""
        key = f"{machine} {cwd}"
        if key in self.shells:
            return self.shells[key]
        env = dict(os.environ)
        env["PYTHONPATH"] = pythonpath(env)
        if machine != "you":
            home = self.tmp / "machines" / machine
            for var, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"),
                             ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"),
                             ("XDG_CONFIG_DIRS", "site")):
                (home / sub).mkdir(parents=True, exist_ok=True)
                env[var] = str(home / sub)
            env["HOME"] = str(home)
            env.pop("TORCH_HOME", None)  # torch's default, in this machine's home
            env["SAFEHUB_TEST_SYSTEM_CONFIG_DIR"] = str(home / "etc-xdg")  # tests/sitehook
        if ci:
            for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
                del env[var]  # XDG_CONFIG_DIRS stays: never the machine's real /etc/xdg
            env["CI"] = "true"
        if cwd is not None:
            cwd.mkdir(parents=True, exist_ok=True)
        shell = Shell(cwd or self.work, env, PROGRAMS, SKIPPED)
        self.shells[key] = shell
        return shell

    def run(self, block: Block, shell: Shell | None = None, *,
            expect: dict[str, int] | None = None,
            before: dict[str, Callable[[], None]] | None = None) -> list[str]:
        """Run a shell block (mapped) in ``shell`` (default: yours); return the output of
        each command (see run_block for ``expect`` and ``before``)."""
        mapped = Block(block.page, block.index, block.line, block.lang,
                       self.mapped(block.text), block.note)
        results = run_block(shell or self.shell(), mapped, expect, before)
        return [r.out + r.err for r in results]


@pytest.fixture
def docs(server: GitHubStandIn, make_hub_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
         isolated: Path) -> Iterator[Docs]:
    repos = {}
    for spec, (tag, entrypoints) in REPOS.items():
        owner, name = spec.split("/")
        repos[spec] = make_hub_repo(owner, name, {"hubconf.py": hubconf(spec, entrypoints)},
                                    tag=tag)
    world = Docs(server, tmp_path, repos)
    root = tmp_path / "root"  # where the absolute paths the docs write to are made
    world.values.update({
        "/etc/xdg/safehub/policy.toml": str(isolated / "site/safehub/policy.toml"),
        "/job/": f"{world.work}/",
        **{shown: str(root / shown.lstrip("/")) for shown in (
            "/shared/hub", "/shared/safehub-cache", "/srv/mirror", "/srv/hub-mirror",
            "/srv/models", "/srv/hub-layout", "/srv/keys")},
    })
    yield world
    assert server.server_errors == []


def validate(docs: Docs, block: Block, name: str = "policy.toml") -> Path:
    """Write a policy block to a file of its own and check it with `safehub policy validate`."""
    path = docs.tmp / "validate" / f"{block.page.replace('/', '-')}-{block.index}" / name
    path.parent.mkdir(parents=True)
    path.write_text(docs.mapped(block.text))
    result = docs.shell().run(f"safehub policy validate {path}")[-1]
    assert result.code == 0, f"{block.where}\n{result}"
    return path


# -- every block is accounted for ------------------------------------------------------------------


def test_every_block_is_run_checked_or_marked() -> None:
    assert set(pages()) == set(LAYOUT), "a page was added or removed: update LAYOUT"
    for name in pages():
        for block, (_, how) in zip(page(name), LAYOUT[name], strict=True):
            if how == "not run":
                assert block.note.startswith("not run: ") and len(block.note) > 20, (
                    f"{block.where}: mark it <!-- not run: why --> before the fence")
            else:
                assert not block.note.startswith("not run"), (
                    f"{block.where}: marked not run, but a test runs it")


def test_every_stand_in_is_used() -> None:
    text = "".join(b.text for name in pages() for b in blocks(name))
    assert [s for s in STAND_INS if s not in text] == []


def test_every_skipped_command_is_in_a_block() -> None:
    lines = [line for name in pages() for b in blocks(name) if b.lang == "bash"
             for line in command_lines(b.text)]
    for prefix in SKIPPED:
        assert any(prefix in line for line in lines), prefix


# -- README.md ------------------------------------------------------------------------------------


@needs_torch
def test_readme(docs: Docs, isolated: Path) -> None:
    import pexpect

    install, quickstart, prompt, routed, admin, lock = page("README.md")

    out = docs.run(install)
    assert "every check behaved as expected" in "".join(out)

    # The quickstart, verbatim, on a terminal, against `safehub demo --serve` with the
    # lines it prints pasted: the prompt is the one the README shows; "y" loads.
    shell = docs.shell()
    with demo_serve(shell.env, shell.cwd) as served:
        env = {**shell.env, **served.exports}
        assert set(served.exports) >= {"SAFEHUB_GITHUB_API_URL", "SAFEHUB_GITHUB_URL",
                                       "REQUESTS_CA_BUNDLE", "SAFEHUB_CACHE_DIR"}
        child = pexpect.spawn(sys.executable, ["-c", quickstart.text], cwd=str(shell.cwd),
                              env=env, encoding="utf-8", timeout=120)
        child.expect(r"\[y/N\] ")
        assert_shows(prompt.text, child.before + child.after, prompt.where)
        child.sendline("y")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        assert "['tiny_mlp']" in child.before
        assert "stopped" in served.stop()
    assert served.process.returncode == 0
    root = Path(served.exports["SAFEHUB_CACHE_DIR"]).parent
    assert not root.exists()  # the demo's files went with it

    # safehub.install(): torch.hub.load now goes through safehub (to the stand-in).
    import torch

    import safehub

    namespace: dict[str, object] = {}
    with environment(shell.env, shell.cwd):
        try:
            exec(compile(docs.mapped(routed.text), routed.where, "exec"), namespace)
            model = torch.hub.load("org/repo:v1.2", "resnet_tiny", trust_repo=True)
        finally:
            safehub.uninstall()
    assert isinstance(model, torch.nn.Linear)

    # The admin policy is valid (with the key file it names beside it), and denies
    # unknown repos before any request.
    site = Path(docs.values["/etc/xdg/safehub/policy.toml"])
    assert admin.text.startswith("# /etc/xdg/safehub/policy.toml\n")
    site.parent.mkdir(parents=True, exist_ok=True)
    site.write_text(admin.text)
    write_public_key(site.parent / "myorg-release.pub")
    assert shell.run(f"safehub policy validate {site}")[0].code == 0
    before = docs.server.count()
    refused = shell.run("safehub check pytorch/vision:v0.19.0")[0]
    assert refused.code == 1 and "unknown_repos" in refused.out + refused.err
    assert docs.server.count() == before
    site.unlink()

    docs.run(lock)
    locked = tomllib.loads((docs.work / "safehub.lock").read_text())
    assert {e["spec"] for e in locked["repo"]} == {"myorg/models:v2.1", "pytorch/vision:v0.19.0"}
    assert (docs.path("/srv/mirror") / "myorg/models/zipball" / docs.sha("myorg/models")).is_file()
    assert (docs.path("/shared/hub") / "v1/commits" / docs.sha("pytorch/vision")).is_dir()


def write_public_key(path: Path) -> Path:
    """A fresh EC P-256 public key in PEM at ``path`` (its private key is thrown away)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    path.write_bytes(key.public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


# -- docs/ci.md ------------------------------------------------------------------------------------

#: What a GitHub Actions runner would put where a workflow says ``${{ ... }}``.
ACTIONS_EXPRESSIONS = {"${{ secrets.GITHUB_TOKEN }}": "ghs_a-token-the-stand-in-ignores"}


def workflow(text: str) -> tuple[dict[str, str], list[str]]:
    """A workflow's job-level ``env`` and its ``run:`` commands, one per line, in order."""
    lines = text.splitlines()
    env: dict[str, str] = {}
    runs: list[str] = []
    for i, line in enumerate(lines):
        if re.fullmatch(r"    env:", line):
            for item in lines[i + 1:]:
                m = re.fullmatch(r"      (\w+): (\"[^\"]*\"|\S+)\s*(#.*)?", item)
                if not m:
                    break
                value = m.group(2).strip('"')
                env[m.group(1)] = ACTIONS_EXPRESSIONS.get(value, value)
        m = re.fullmatch(r"(\s*(?:- )?)run: (.*)", line)
        if not m:
            continue
        if m.group(2).strip() != "|":
            runs.append(m.group(2))
            continue
        for item in lines[i + 1:]:
            if len(item) - len(item.lstrip()) <= len(m.group(1)):
                break
            runs.append(item.strip())
    return env, runs


@needs_torch
def test_ci(docs: Docs) -> None:
    job, train, refusal = page("docs/ci.md")

    # The pieces the page names: ./safehub.toml from policies/ci.toml (with `your-org`
    # replaced by the organisation, as docs/policy.md says), a lockfile made with
    # `safehub lock`, and train.py as the page shows it.
    ci_policy = (ROOT / "policies/ci.toml").read_text().replace("your-org", "myorg")
    (docs.work / "safehub.toml").write_text(ci_policy)
    (docs.work / "train.py").write_text(train.text)
    runner = docs.shell("runner", ci=True)
    env, runs = workflow(job.text)
    assert env["SAFEHUB_NONINTERACTIVE"] == "1"
    runner.env.update(env)
    assert runner.run("safehub lock myorg/models:v2.1")[-1].code == 0
    assert (docs.work / "safehub.lock").is_file()

    docs.run(Block(job.page, job.index, job.line, "bash", "\n".join(runs) + "\n"), runner)

    audit = [json.loads(line) for line in
             (docs.work / "safehub-audit.jsonl").read_text().splitlines()]
    loaded = [a for a in audit if a.get("entrypoint") == "resnet_tiny"]
    assert [a["decision"] for a in loaded] == ["allow"]
    assert loaded[0]["commit"] == docs.sha("myorg/models")
    home = Path(runner.env["HOME"])  # actions/cache keeps ~/.cache/safehub
    assert (home / ".cache/safehub/v1/commits" / docs.sha("myorg/models") / "tree").is_dir()

    # When it refuses: a CI job with no policy, and content nobody trusted.
    elsewhere = docs.shell("runner", ci=True, cwd=docs.tmp / "elsewhere")
    docs.values["/home/runner"] = elsewhere.env["HOME"]
    command, shown = refusal.text.split("\n", 1)
    assert command.startswith("$ ")
    result = elsewhere.run(docs.mapped(command[2:]))[-1]
    assert result.code == 1
    assert_shows(docs.mapped(shown), result.err, refusal.where)


def test_confine(docs: Docs) -> None:
    _, table, dry_runs = page("docs/confine.md")
    validate(docs, table)
    (docs.work / "train.py").write_text("print('training')\n")
    docs.run(dry_runs)  # each prints the ruleset and exits 0; nothing runs


def test_output_blocks_match_words_and_elisions() -> None:
    from tests.docs_support import pattern

    shown = "commit 9f2c...: it is\n  not trusted (...)\n"
    assert pattern(shown).search(f"x commit {'ab' * 20}: it is not\ntrusted (no rule)")
    assert not pattern(shown).search("commit nothex: it is not trusted (no rule)")
    assert not pattern(shown).search(f"commit {'ab' * 20}: it is trusted (no rule)")
    assert not pattern("a ... b").search("a x\ny b")  # ... stays within a line


# -- docs/digest.md --------------------------------------------------------------------------------


def digest_as_the_doc_says(tree: Path) -> str:
    """docs/digest.md's content digest, computed from its description alone."""
    entries = []
    for path in tree.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            continue
        rel = path.relative_to(tree).as_posix()
        if path.is_symlink():
            mode, content = "120000", os.readlink(path).encode()
        else:
            mode = "100755" if path.stat().st_mode & 0o111 else "100644"
            content = path.read_bytes()
        entries.append((rel.encode(), f"{mode} {hashlib.sha256(content).hexdigest()} {rel}\n"))
    text = "safehub-digest-v1\n" + "".join(line for _, line in sorted(entries))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@needs_torch
def test_digest(docs: Docs, isolated: Path) -> None:
    formula, layout = page("docs/digest.md")
    assert '"safehub-digest-v1\\n"' in formula.text
    assert '"<mode> <sha256 of the content, hex> <path>\\n"' in formula.text
    assert "sorted by the UTF-8 bytes of its path" in formula.text

    repo = docs.repos["org/repo"]  # with an executable, a link and a non-ASCII name
    repo.commit({"scripts/run.sh": "#!/bin/sh\n", "données/é.txt": "é\n", "Z.txt": "z\n"},
                executable=["scripts/run.sh"], symlinks={"link": "Z.txt"})
    repo.tag("v1.2")
    shell = docs.shell()
    shell.env["SAFEHUB_CACHE_DIR"] = str(docs.tmp / "cache")
    assert shell.run("safehub lock org/repo:v1.2")[-1].code == 0
    assert shell.run("safehub load org/repo:v1.2 resnet_tiny --trust")[-1].code == 0
    locked = tomllib.loads((docs.work / "safehub.lock").read_text())["repo"][0]
    tree = docs.tmp / "cache/v1/commits" / repo.sha / "tree"
    assert locked["digest"] == digest_as_the_doc_says(tree)

    # Every path of the cache layout is there after a load.
    names = {"$SAFEHUB_CACHE_DIR": shell.env["SAFEHUB_CACHE_DIR"], "<sha>": repo.sha,
             "<owner>/<name>": "org/repo",
             "<user data dir>": str(isolated / "data/safehub")}
    for line in layout.text.splitlines():
        shown = re.split(r"\s{2,}", line.strip())[0]
        for place in re.split(r",\s*", shown):
            if not place.startswith(("$", "<")):
                place = shown.split("/v1/")[0] + "/v1/" + place  # "locks/, tmp/"
            for name, value in names.items():
                place = place.replace(name, value)
            path = Path(place)
            assert path.is_dir() if place.endswith("/") else path.is_file(), line


# -- docs/fleet.md ---------------------------------------------------------------------------------

#: What nodes without internet get for GitHub: a loopback port nothing listens on.
NO_NETWORK = "https://127.0.0.1:9/no-network"


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``folder`` with its mode, size and mtime (to see any write)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def node(docs: Docs, name: str) -> Shell:
    """A training node: its own home, and no way to reach GitHub."""
    shell = docs.shell(name)
    shell.env.update(SAFEHUB_GITHUB_API_URL=NO_NETWORK, SAFEHUB_GITHUB_URL=NO_NETWORK)
    return shell


@needs_torch
def test_fleet(docs: Docs) -> None:
    lock, prefetch, node_env, mirror, mirror_env = page("docs/fleet.md")[7:]
    git(docs.work, "init", "-q")  # the project is a git checkout

    docs.run(lock)
    assert "Pin hub repos" in git(docs.work, "log", "-1", "--format=%s")

    docs.run(prefetch)
    shared = docs.path("/shared/safehub-cache")
    assert not (shared / "locks").exists() and not (shared / "tmp").exists()
    assert not os.stat(shared / "v1/commits").st_mode & 0o222  # sealed

    # A node reads the shared cache offline and never writes it.
    before, requests = snapshot(shared), docs.server.count()
    on_node = node(docs, "node-1")
    docs.run(node_env, on_node)
    loaded = on_node.run("safehub load myorg/models:v2.1 resnet_tiny --trust")[-1]
    assert loaded.code == 0, loaded
    assert snapshot(shared) == before and docs.server.count() == requests

    docs.run(mirror)
    folder = docs.path("/srv/hub-mirror")
    sha = docs.sha("myorg/models")
    assert (folder / "myorg/models/zipball" / sha).is_file()

    # A node with the mirror: one HTTP request, no API call.
    docs.values["https://mirror.internal/hub-mirror"] = docs.server.serve_directory(
        folder, "/hub-mirror")
    on_node = node(docs, "node-2")
    docs.run(mirror_env, on_node)
    docs.server.clear_log()
    loaded = on_node.run("safehub load myorg/models:v2.1 resnet_tiny --trust")[-1]
    assert loaded.code == 0, loaded
    assert [r.path for r in docs.server.requests_log] == [f"/hub-mirror/myorg/models/zipball/{sha}"]


def test_fleet_registry(docs: Docs, tls: TLSFiles, tmp_path: Path) -> None:
    """The registry path of docs/fleet.md against a real docker-registry 2.8."""
    from tests.support.oci import PASSWORD, USER, DockerRegistry, docker_config, missing_tools

    if missing_tools():
        pytest.skip(str(missing_tools()))
    publish, node_env, _auth, export, other_side, sign, require = page("docs/fleet.md")[:7]
    git(docs.work, "init", "-q")
    with DockerRegistry(tmp_path / "registry", tls) as registry:
        docs.values["registry.example.com"] = registry.host
        you = docs.shell()
        you.env["DOCKER_CONFIG"] = str(docker_config(tmp_path / "docker",
                                                     {registry.host: (USER, PASSWORD)}))
        docs.run(publish)
        assert 'oci = "sha256:' in (docs.work / "safehub.lock").read_text()

        on_node = node(docs, "oci-node")
        on_node.env["DOCKER_CONFIG"] = you.env["DOCKER_CONFIG"]
        docs.run(node_env, on_node)
        docs.server.clear_log()
        loaded = on_node.run("safehub prefetch myorg/models:v2.1")[-1]  # a cold fetch, no torch
        assert loaded.code == 0 and docs.sha("myorg/models")[:12] in loaded.out, loaded
        assert docs.server.requests_log == []
        refused = on_node.run("safehub check pytorch/vision:v0.19.0")[-1]
        assert refused.code == 1 and "safehub prefetch --oci" in refused.out, refused

        docs.run(export)  # rebuilt from GitHub here (SAFEHUB_OCI is the nodes' setting)
        assert (docs.path("/srv/hub-layout") / "index.json").is_file()
        docs.server.clear_log()
        gapped = node(docs, "gapped-node")
        gapped.env["DOCKER_CONFIG"] = you.env["DOCKER_CONFIG"]
        docs.run(other_side, gapped)
        loaded = gapped.run("safehub prefetch myorg/models:v2.1")[-1]
        assert loaded.code == 0 and docs.sha("myorg/models")[:12] in loaded.out, loaded
        assert docs.server.requests_log == []

        # Fleet signatures: a node that requires one refuses the unsigned snapshot, and
        # loads it once the publisher signed it as the page says.
        from tests.test_signatures import new_key

        keys = docs.path("/srv/keys")
        keys.mkdir(parents=True)
        (keys / "fleet.pub").write_bytes(new_key(keys / "fleet.pem"))
        signed_node = node(docs, "signed-node")
        signed_node.env["DOCKER_CONFIG"] = you.env["DOCKER_CONFIG"]
        docs.run(node_env, signed_node)
        site = Path(signed_node.env["XDG_CONFIG_DIRS"]) / "safehub/policy.toml"
        site.parent.mkdir(parents=True, exist_ok=True)
        site.write_text(docs.mapped(require.text) + '\n[[allow]]\nrepo = "myorg/*"\n')
        validate(docs, require)
        refused = signed_node.run("safehub prefetch myorg/models:v2.1")[-1]
        assert refused.code == 1 and "--sign-key KEY myorg/models:v2.1" in refused.err, refused
        docs.run(sign)
        loaded = signed_node.run("safehub prefetch myorg/models:v2.1")[-1]
        assert loaded.code == 0, loaded


# -- docs/pinning.md -------------------------------------------------------------------------------


def test_pinning(docs: Docs) -> None:
    commands, lockfile = page("docs/pinning.md")
    (docs.work / "hub-specs.txt").write_text("# reviewed hub repos\norg/repo:v1.2  # team A\n")
    shell = docs.shell()
    models = docs.repos["myorg/models"]
    pins: list[str] = []

    def move_the_tag() -> None:  # what `--upgrade` is for: the tag moved, on purpose
        pins.append(str(locked("myorg/models:v2.1")["commit"]))
        models.commit({"README.md": "v2.1, again\n"})
        models.tag("v2.1")
        assert shell.run("safehub lock --check")[-1].code == 1

    def locked(spec: str) -> dict[str, object]:
        entries = tomllib.loads((docs.work / "safehub.lock").read_text())["repo"]
        return next(e for e in entries if e["spec"] == spec)

    docs.run(commands, before={"safehub lock --upgrade myorg/models:v2.1": move_the_tag})
    assert locked("org/repo:v1.2")["commit"] == docs.sha("org/repo")
    assert pins[0] != models.sha == locked("myorg/models:v2.1")["commit"]

    # The format block is what `safehub lock` writes, but for the values it elides.
    docs.values["48b1edffdc6f34b766e2b4bbf23b78bd4df94181"] = docs.sha("pytorch/vision")
    docs.values["0b6b7e6c0f0de5e5ab8c9d3c9f1e7d2bb0f0a3d1"] = git(
        docs.repos["pytorch/vision"].path, "rev-parse", "v0.19.0^{tree}")
    shown = tomllib.loads(docs.mapped(lockfile.text))
    real = tomllib.loads((docs.work / "safehub.lock").read_text())
    assert lockfile.text.splitlines()[0] == (docs.work / "safehub.lock").read_text().splitlines()[0]
    assert shown["version"] == real["version"] and len(shown["repo"]) == 1
    entry = locked("pytorch/vision:v0.19.0")
    assert list(shown["repo"][0]) == list(entry), "the keys, in the order safehub writes them"
    for key, value in shown["repo"][0].items():
        assert_shows(str(value), str(entry[key]), f"{lockfile.where}: {key}", whole=True)


# -- docs/policy.md --------------------------------------------------------------------------------


@needs_torch
def test_policy(docs: Docs) -> None:
    import safehub

    invalid, local, runtime_rule, confinement, audit_line, commands = page("docs/policy.md")
    validate(docs, runtime_rule)
    validate(docs, local)
    validate(docs, confinement)
    site = docs.path("/etc/xdg/safehub/policy.toml")
    site.parent.mkdir(parents=True, exist_ok=True)
    site.write_text('[safehub]\nfinal = "yes"\n\n[[allow]]\nrepo = "org/*"\npin = "sha"\n\n'
                    '[[deny]]\nrepo = "org/[x*"\n')
    with pytest.raises(safehub.PolicyError) as refused:
        safehub.load("org/repo:v1.2", "resnet_tiny")
    assert_shows(docs.mapped(invalid.text), str(refused.value), invalid.where, whole=True)

    # local_dirs as the page shows them: a folder under one loads, another is refused.
    site.write_text(docs.mapped(local.text))
    hubconf_text = hubconf("org/repo", ["resnet_tiny"])
    for folder in (docs.path("/srv/models") / "team", docs.tmp / "elsewhere"):
        folder.mkdir(parents=True)
        (folder / "hubconf.py").write_text(hubconf_text)
    assert safehub.load(str(docs.path("/srv/models") / "team"), "resnet_tiny", source="local")
    with pytest.raises(safehub.PolicyDenied, match="not in local_dirs"):
        safehub.load(str(docs.tmp / "elsewhere"), "resnet_tiny", source="local")
    site.unlink()

    # The audit line has the keys of a real one (a load the user consented to).
    shell = docs.shell()
    assert shell.run("safehub trust pytorch/vision:v0.19.0")[-1].code == 0
    assert shell.run("safehub load pytorch/vision:v0.19.0 resnet18")[-1].code == 0
    log = Path(shell.env["XDG_STATE_HOME"]) / "safehub/log/audit.jsonl"
    real = json.loads(log.read_text().splitlines()[-1])
    shown = json.loads(audit_line.text)
    assert (shown["decision"], real["decision"]) == ("consent", "consent")
    assert sorted(shown) == sorted(real)
    assert sorted(shown["runtime"]) == sorted(real["runtime"])

    (docs.work / "safehub.toml").write_text('[[deny]]\nrepo = "someone/*"\nreason = "no"\n')
    docs.run(commands)
    started = Path(shell.env["XDG_CONFIG_HOME"]) / "safehub/policy.toml"  # by policy init
    assert shell.run(f"safehub policy validate {started}")[-1].code == 0


# -- docs/runtime.md -------------------------------------------------------------------------------


@needs_torch
def test_runtime(docs: Docs) -> None:
    yolov5, report, refusal = page("docs/runtime.md")
    validate(docs, yolov5)

    host, port = STAND_IN_ADDRESS
    docs.values["1.1.1.1:443"] = f"{host}:{port}"
    site = docs.path("/etc/xdg/safehub/policy.toml")
    site.parent.mkdir(parents=True, exist_ok=True)
    site.write_text('[[allow]]\nrepo = "acme/*"\nnetwork = ["download.pytorch.org"]\n')
    shell = docs.shell()
    result = shell.run("safehub load acme/models:v1.0 connect")[-1]
    assert result.code == 1
    assert_shows(docs.mapped(refusal.text), result.err, refusal.where)

    # The record has the keys of a real one (the refused load's, in the audit log).
    log = Path(shell.env["XDG_STATE_HOME"]) / "safehub/log/audit.jsonl"
    real = json.loads(log.read_text().splitlines()[-1])["runtime"]
    shown = json.loads(report.text)
    assert sorted(shown) == sorted(real)
    assert [sorted(r) for r in shown["refused"]] == [sorted(r) for r in real["refused"]]


# -- docs/signing.md -------------------------------------------------------------------------------


def make_pki(folder: Path) -> None:
    """An organisation's PKI: org-root-ca.pem, an intermediate org-ca.pem, and a
    code-signing leaf release.pem with its key release.key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
             signer: ec.EllipticCurvePrivateKey, ca: bool) -> tuple[x509.Name, bytes]:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = (x509.KeyUsage(False, False, False, False, False, True, True, False, False)
                 if ca else
                 x509.KeyUsage(True, False, False, False, False, False, False, False, False))
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=7))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                   .add_extension(usage, critical=True))
        if not ca:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        return subject, builder.sign(signer, hashes.SHA256()).public_bytes(
            serialization.Encoding.PEM)

    root_key, ca_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Org Root CA")])
    _, root = cert("Org Root CA", root_key, root_name, root_key, True)
    ca_name, ca = cert("Org Release CA", ca_key, root_name, root_key, True)
    _, leaf = cert("Org release signing", leaf_key, ca_name, ca_key, False)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "org-root-ca.pem").write_bytes(root)
    (folder / "org-ca.pem").write_bytes(ca)
    (folder / "release.pem").write_bytes(leaf)
    (folder / "release.key").write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))


@needs_torch
def test_signing(docs: Docs) -> None:
    _, keyless, sign, key_policy, pki_sign, pki_policy, verify = page("docs/signing.md")
    validate(docs, keyless)

    # With a key: the publisher signs the checkout of org/repo that the stand-in serves,
    # releasing v1.2 (so the tag the fixture made is not there yet).
    repo = docs.repos["org/repo"]
    repo.git("tag", "-d", "v1.2")
    publisher = docs.shell("publisher", cwd=repo.path)
    docs.run(sign, publisher)
    repo.sha = repo.git("rev-parse", "HEAD")
    assert repo.git("show", "--format=", "--name-only", "HEAD") == "model.sig"

    # The consumer's policy, with the publisher's public key as keys/org-repo.pub.
    policy = Path(publisher.env["XDG_CONFIG_HOME"]) / "safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text(key_policy.text)
    (policy.parent / "keys").mkdir()
    shutil.copy(Path(publisher.env["HOME"]) / "signing.pub", policy.parent / "keys/org-repo.pub")
    assert publisher.run(f"safehub policy validate {policy}")[-1].code == 0

    # Checking before you publish (the keyless line cannot pass: see KEYLESS).
    results = docs.run(verify, publisher, expect={KEYLESS: 1})
    assert "valid: " in results[0] and "signed by key" in results[1]
    assert "made with a key, but the command line accepts only keyless" in results[2]
    loaded = publisher.run("safehub load org/repo:v1.2 resnet_tiny")[-1]
    assert loaded.code == 0, loaded  # the allow rule and the signature: no prompt

    # With a private PKI: org/models signed with a certificate, loaded under the policy
    # that names the root.
    models = docs.repos["org/models"]
    make_pki(docs.tmp / "machines/release-manager/pki")
    manager = docs.shell("release-manager", cwd=models.path)
    docs.run(pki_sign, manager)
    assert manager.run("git add model.sig && git commit -q -m 'Sign v1.0'")[-1].code == 0
    models.tag("v1.0")
    consumer = docs.shell("consumer")
    policy = Path(consumer.env["XDG_CONFIG_HOME"]) / "safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text(pki_policy.text)
    shutil.copy(docs.tmp / "machines/release-manager/pki/org-root-ca.pem", policy.parent)
    assert consumer.run(f"safehub policy validate {policy}")[-1].code == 0
    loaded = consumer.run("safehub load org/models:v1.0 resnet_tiny")[-1]
    assert loaded.code == 0, loaded
    verified = consumer.run("safehub verify org/models:v1.0")[-1]
    assert verified.code == 0 and "CN=Org release signing" in verified.out, verified
