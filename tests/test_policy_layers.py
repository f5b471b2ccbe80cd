"""Policy layers merge monotonically: a later file never loosens an earlier file's refusal.

A property test builds stacks of 2 to 4 policy files (site, user, project, extra) from a
small vocabulary and checks, for many specs, that the merged decision is never more
permissive than that of the same stack without its last file, and that it equals what a
small model of docs/policy.md ("How files merge") says. Then the reported attack (a site
deny, then a user or ``SAFEHUB_POLICY`` file with ``mode = "warn"``) end to end, and the
honest cases: a later file's ``warn`` still softens that file's own rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safehub
from safehub.errors import PolicyDenied, SignatureError
from safehub.policy import Decision, Policy
from safehub.policy.schema import parse_text
from safehub.spec import RepoSpec
from tests.conftest import HubRepo, runs
from tests.test_policy import pem_key_and_certificate

# -- the vocabulary ------------------------------------------------------------------------------

REPO_GLOBS = ("evil/*", "acme/*", "acme/models", "ACME/Models", "*/*", "other/x")
REPOS = ("evil/payload", "acme/models", "acme/other", "other/x")
SHA = "0123456789abcdef0123456789abcdef01234567"
REFS = (None, "main", "v1", "dev", SHA)
ALLOW_REFS = (("v*",), ("main",), ("refs/tags/v*",), ("dev", "main"))
DENY_REFS = (("dev",), ("v*",), ("refs/heads/dev",))
ENTRYPOINT_GLOBS = (("tiny",), ("t*",), ("echo",))
ENTRYPOINTS = (None, "tiny", "echo", "tool")
# (full_ref prefix, resolved): asked, resolved of unknown kind, resolved to a branch or tag
CONTEXTS = (("", False), ("", True), ("refs/heads/", True), ("refs/tags/", True))
ORIGINS = ("site", "user", "project", "extra")
VERDICTS = ("allow", "prompt", "deny")  # from the loosest to the strictest
SIGNATURES = ("none", "if-present", "required")


@dataclass(frozen=True)
class Deny:
    repo: str
    refs: tuple[str, ...] | None


@dataclass(frozen=True)
class Allow:
    repo: str
    pin: str | None
    signature: str | None
    signer: str  # "signers" (a keyless identity) or "keys" (a key file)
    refs: tuple[str, ...] | None
    entrypoints: tuple[str, ...] | None


@dataclass(frozen=True)
class Layer:
    origin: str
    mode: str | None
    unknown: str | None
    final: bool | None
    denies: tuple[Deny, ...]
    allows: tuple[Allow, ...]

    @property
    def warns(self) -> bool:
        return self.mode == "warn"

    def toml(self) -> str:
        lines = ["[safehub]"]
        for key, value in (("mode", self.mode), ("unknown_repos", self.unknown)):
            if value is not None:
                lines.append(f'{key} = "{value}"')
        if self.final is not None:
            lines.append(f"final = {'true' if self.final else 'false'}")
        for d in self.denies:
            lines += ["[[deny]]", f'repo = "{d.repo}"']
            if d.refs is not None:
                lines.append(f"refs = {_list(d.refs)}")
        for a in self.allows:
            lines += ["[[allow]]", f'repo = "{a.repo}"']
            if a.pin is not None:
                lines.append(f'pin = "{a.pin}"')
            if a.refs is not None:
                lines.append(f"refs = {_list(a.refs)}")
            if a.entrypoints is not None:
                lines.append(f"entrypoints = {_list(a.entrypoints)}")
            if a.signature is not None:
                lines.append(f'signature = "{a.signature}"')
                if a.signature != "none" and a.signer == "keys":
                    lines.append('keys = ["k.pub"]')  # beside the file: inside a project too
                elif a.signature != "none":
                    lines.append('signers = [{issuer = "https://issuer.example", '
                                 'identity = "release@example.com"}]')
        return "\n".join(lines) + "\n"


def _list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


@dataclass(frozen=True)
class Query:
    repo: str
    ref: str | None
    entrypoint: str | None
    context: tuple[str, bool]

    def full_ref(self) -> str:
        prefix, _ = self.context
        return f"{prefix}{self.ref}" if prefix and self.ref not in (None, SHA) else ""

    def decide(self, policy: Policy) -> Decision:
        spec = RepoSpec.parse(self.repo if self.ref is None else f"{self.repo}:{self.ref}")
        return policy.decide(spec, entrypoint=self.entrypoint, full_ref=self.full_ref(),
                             resolved=self.context[1])


def maybe(values: tuple[object, ...]) -> st.SearchStrategy[object]:
    return st.one_of(st.none(), st.sampled_from(values))


denies = st.builds(Deny, st.sampled_from(REPO_GLOBS), maybe(DENY_REFS))
allows = st.builds(Allow, st.sampled_from(REPO_GLOBS), st.sampled_from((None, None, "commit")),
                   maybe(SIGNATURES), st.sampled_from(("signers", "keys")),
                   maybe(ALLOW_REFS), maybe(ENTRYPOINT_GLOBS))
def layers(rules: bool) -> st.SearchStrategy[Layer]:
    """A file; without ``rules``, only its [safehub] table (so later files find room)."""
    return st.builds(Layer, st.sampled_from(ORIGINS), maybe(("enforce", "warn")),
                     st.sampled_from((None, None, "deny", "prompt", "allow")),
                     st.sampled_from((None, None, False, True)),
                     st.lists(denies, max_size=1 if rules else 0).map(tuple),
                     st.lists(allows, max_size=3 if rules else 0).map(tuple))


stacks = st.lists(st.one_of(layers(True), layers(False)), min_size=2, max_size=4)
queries = st.lists(st.builds(Query, st.sampled_from(REPOS), st.sampled_from(REFS),
                             st.sampled_from(ENTRYPOINTS), st.sampled_from(CONTEXTS)),
                   min_size=1, max_size=4)


# -- the model: docs/policy.md, "How files merge" ------------------------------------------------

def _glob(pattern: str, text: str, *, fold: bool = False) -> bool:
    """The dialect, for the vocabulary's patterns: ``*`` and ``?`` never match ``/``."""
    regex = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                    for c in pattern)
    return re.fullmatch(regex, text, re.IGNORECASE if fold else 0) is not None


def _names(query: Query) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """How a ref is written, for deny rules and for allow rules ("refs patterns match every
    way of writing the branch or tag"; a deny pattern for a kind waits for the resolved
    name, an allow pattern for a kind admits until then)."""
    ref, full = query.ref, query.full_ref()
    if ref is None:
        return (), ()
    if ref == SHA:
        return (ref,), (ref,)
    if full:
        kind = full.split("/")[1]
        return (full, f"{kind}/{ref}", ref), (full, f"{kind}/{ref}", ref)
    either = (ref, *(f"{p}{k}/{ref}" for k in ("heads", "tags") for p in ("refs/", "")))
    return (either if query.context[1] else (ref,)), either


def _denies(rule: Deny, query: Query) -> bool:
    return _glob(rule.repo, query.repo, fold=True) and (
        rule.refs is None or any(_glob(p, n) for p in rule.refs for n in _names(query)[0]))


def _unknown(stack: list[Layer]) -> str:
    """Step 3 and the table: the strictest value wins; a value looser than an earlier
    file's is ignored, and so is a project's value looser than the default; a final file
    that leaves it unset, where no earlier file set it, holds the default."""
    held: str | None = None
    for layer in stack:
        value = layer.unknown
        if layer.origin == "project" and value == "allow":
            value = None
        if value is None:
            if layer.final and held is None:
                held = "prompt"
            continue
        held = value if held is None else max(held, value, key=VERDICTS.index)
    return held or "prompt"


@dataclass(frozen=True)
class Expected:
    verdict: str
    pin: bool
    signature: str
    signer_sets: int
    signature_warns: bool


def model(stack: list[Layer], query: Query) -> Expected:
    first_final = next((i for i, layer in enumerate(stack) if layer.final), len(stack))
    allow_names = _names(query)[1]
    refusals: list[bool] = []  # one per refusal: does its file say mode = "warn"?
    for layer in stack:                                                   # 1. deny rules
        refusals += [layer.warns for d in layer.denies if _denies(d, query)]
    matching = [(i, layer, a) for i, layer in enumerate(stack) for a in layer.allows
                if _glob(a.repo, query.repo, fold=True)]
    if any(i <= first_final for i, _, _ in matching):                     # 2. admission
        base = "allow"
    else:                                                                 # 3. unknown repos
        base = _unknown(stack)
        if base == "deny":
            refusals.append(all(layer.warns for layer in stack if layer.unknown == "deny"))
            base = "prompt"
    for _, layer, a in matching:                                          # 4. requirements
        if a.refs is not None and query.ref is not None and not any(
                _glob(p, n) for p in a.refs for n in allow_names):
            refusals.append(layer.warns)
        if a.entrypoints is not None and query.entrypoint is not None and not any(
                _glob(p, query.entrypoint) for p in a.entrypoints):
            refusals.append(layer.warns)
        if a.pin == "commit" and query.ref != SHA:
            refusals.append(layer.warns)
    verdict = ("deny" if not all(refusals) else "prompt" if refusals  # 5. mode, per file
               else base)
    asking = [(layer, a) for _, layer, a in matching if a.signature not in (None, "none")]
    return Expected(
        verdict, any(a.pin == "commit" for _, _, a in matching),
        max((a.signature or "none" for _, _, a in matching), key=SIGNATURES.index,
            default="none"),
        len(asking), bool(asking) and all(layer.warns for layer, _ in asking))


def _room(stack: list[Layer], query: Query) -> bool:
    """Where the earlier files leave room (no final file, no rule of theirs for the repo),
    the last file may let more in: its allow rule admits the repo, or it sets
    ``unknown_repos`` where none of them does (unless it is a project's file)."""
    *earlier, last = stack
    if any(layer.final for layer in earlier) or any(
            _glob(a.repo, query.repo, fold=True) for layer in earlier for a in layer.allows):
        return False
    if any(_denies(d, query) for layer in earlier for d in layer.denies):
        return False
    return any(_glob(a.repo, query.repo, fold=True) for a in last.allows) or (
        last.unknown == "allow" and last.origin != "project"
        and all(layer.unknown is None or (layer.origin, layer.unknown) == ("project", "allow")
                for layer in earlier))


# -- the property ----------------------------------------------------------------------------------

def _policy(stack: list[Layer], folder: Path) -> Policy:
    names = {"project": "safehub.toml"}
    return Policy.from_files([
        parse_text(layer.toml(), str(folder / f"{i}" / names.get(layer.origin, "policy.toml")),
                   origin=layer.origin)
        for i, layer in enumerate(stack)])


def _check(decision: Decision, expected: Expected, what: str) -> None:
    assert decision.verdict == expected.verdict, (what, decision)
    if decision.verdict == "deny":
        return  # a refusal asks nothing more of the content
    reqs = decision.requirements
    assert (reqs.pin, reqs.signature, len(reqs.signer_sets)) == (
        expected.pin, expected.signature, expected.signer_sets), (what, decision)
    if expected.signer_sets:
        assert (decision.mode == "warn") == expected.signature_warns, (what, decision)


def test_a_later_file_never_loosens_an_earlier_files_refusal(tmp_path: Path) -> None:
    """For stacks of 2 to 4 files and many specs: the verdict with the last file is never
    more permissive than without it (except where the earlier files leave room, as the docs'
    "Room" says), every requirement without it still holds with it, and both equal the
    model of docs/policy.md."""
    key = pem_key_and_certificate()[0]
    for i in range(4):
        (tmp_path / f"{i}").mkdir()
        (tmp_path / f"{i}" / "k.pub").write_bytes(key)
    seen = dict.fromkeys(("stricter", "warned", "room", "denied", "compared"), 0)

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(stacks, queries)
    def check(stack: list[Layer], asked: list[Query]) -> None:
        longer, shorter = _policy(stack, tmp_path), _policy(stack[:-1], tmp_path)
        for query in asked:
            long, short = query.decide(longer), query.decide(shorter)
            _check(long, model(stack, query), f"{stack} {query}")
            _check(short, model(stack[:-1], query), f"{stack[:-1]} {query}")
            rank = VERDICTS.index
            if rank(long.verdict) < rank(short.verdict):
                assert _room(stack, query), (stack, query, short, long)
                seen["room"] += 1
                continue
            seen["stricter"] += rank(long.verdict) > rank(short.verdict)
            seen["warned"] += long.verdict == "prompt" and bool(long.violations)
            seen["denied"] += long.verdict == "deny"
            if long.verdict == "deny" or short.verdict == "deny":
                continue
            a, b = short.requirements, long.requirements
            seen["compared"] += bool(a.pin or a.signer_sets)
            assert b.pin or not a.pin
            assert SIGNATURES.index(b.signature) >= SIGNATURES.index(a.signature)
            assert {(s.rule, s.policy_file) for s in a.signer_sets} <= {
                (s.rule, s.policy_file) for s in b.signer_sets}
            if a.signer_sets and short.mode == "enforce":
                assert long.mode == "enforce"  # a failed signature still refuses

    check()
    assert min(seen.values()) > 10, seen  # every kind of case was reached


# -- the reported attack, end to end --------------------------------------------------------------

def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def site(home: Path, text: str) -> Path:
    return write(home / "etc-xdg" / "safehub" / "policy.toml", text)


def user(home: Path, text: str) -> Path:
    return write(home / "config" / "safehub" / "policy.toml", text)


SITE_DENY = '[safehub]\nunknown_repos = "deny"\n\n[[deny]]\nrepo = "evil/*"\nreason = "malware"\n'
WARN = '[safehub]\nmode = "warn"\n'


@pytest.mark.parametrize("later", ["user", "SAFEHUB_POLICY"])
def test_a_later_warn_file_cannot_soften_a_site_deny(
    later: str, isolated: Path, make_hub_repo: Callable[..., HubRepo], canary: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_hub_repo("evil", "payload")
    make_hub_repo("stranger", "y")
    site(isolated, SITE_DENY)
    if later == "user":
        user(isolated, WARN)
    else:
        monkeypatch.setenv("SAFEHUB_POLICY", str(write(tmp_path / "extra.toml", WARN)))
    with pytest.raises(PolicyDenied, match="malware"):
        safehub.load("evil/payload:main", "echo", trust_repo=True, verbose=False)
    with pytest.raises(PolicyDenied, match="unknown_repos = 'deny'"):
        safehub.load("stranger/y:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_later_warn_file_cannot_soften_a_required_signature(
    isolated: Path, hub_repo: HubRepo, canary: Path, tmp_path: Path
) -> None:
    """The site requires a signature from its key; the repo is unsigned; a user file's
    ``mode = "warn"`` does not turn the failure into a prompt."""
    pub = write(tmp_path / "site.pub", "")
    pub.write_bytes(pem_key_and_certificate()[0])
    site(isolated, f'[[allow]]\nrepo = "acme/*"\nsignature = "required"\nkeys = ["{pub}"]\n')
    user(isolated, WARN)
    with pytest.raises(SignatureError, match="no signature"):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_soft_deny_keeps_the_other_files_requirements(tmp_path: Path) -> None:
    """A warn file's deny rule only warns, and the site's requirements still apply (its
    signature is checked and refuses on failure)."""
    key = write(tmp_path / "k.pub", "")
    key.write_bytes(pem_key_and_certificate()[0])
    files = [parse_text(f'[[allow]]\nrepo = "acme/*"\nsignature = "required"\n'
                        f'keys = ["{key}"]\n', str(tmp_path / "site.toml"), origin="site"),
             parse_text(WARN + '[[deny]]\nrepo = "acme/models"\n', str(tmp_path / "user.toml"))]
    d = Policy.from_files(files).decide(RepoSpec.parse("acme/models:v1"))
    assert d.verdict == "prompt" and d.violations
    assert d.requirements.signature == "required" and d.mode == "enforce"


# -- the honest cases: a later file's warn softens its own rules ----------------------------------

def test_a_later_warn_file_softens_its_own_deny(isolated: Path, hub_repo: HubRepo,
                                                 canary: Path) -> None:
    site(isolated, SITE_DENY.replace('unknown_repos = "deny"', 'unknown_repos = "prompt"'))
    user(isolated, WARN + '[[deny]]\nrepo = "acme/*"\nreason = "under review"\n')
    with pytest.warns(UserWarning, match="under review"):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 1


def test_a_later_warn_file_softens_its_own_signature_requirement(
    isolated: Path, hub_repo: HubRepo, canary: Path, tmp_path: Path
) -> None:
    pub = write(tmp_path / "user.pub", "")
    pub.write_bytes(pem_key_and_certificate()[0])
    site(isolated, '[[allow]]\nrepo = "acme/*"\n')
    user(isolated, WARN + f'[[allow]]\nrepo = "acme/models"\nsignature = "required"\n'
         f'keys = ["{pub}"]\n')
    with pytest.warns(UserWarning, match="signature check failed"):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 1


def test_a_later_file_still_admits_where_the_site_leaves_room(isolated: Path,
                                                               hub_repo: HubRepo) -> None:
    site(isolated, SITE_DENY)
    user(isolated, WARN + '[[allow]]\nrepo = "acme/models"\nrefs = ["v*"]\n')
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo", verbose=False) == ((), {})
    with pytest.warns(UserWarning, match="'main' is not one of"):  # its own rule: a warning
        safehub.load(f"{hub_repo.spec}:main", "echo", trust_repo=True, verbose=False)


# -- the other keys: local folders and the runtime guard -------------------------------------------

def test_a_later_warn_file_cannot_open_local_folders(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    layers = [parse_text('[safehub]\nunknown_repos = "deny"\n', str(tmp_path / "site.toml"),
                         origin="site"),
              parse_text(WARN + f'local_dirs = ["{mine}"]\n', str(tmp_path / "user.toml"))]
    policy = Policy.from_files(layers)
    assert policy.decide_local(str(mine)).verdict == "allow"  # room: the site sets no list
    refused = policy.decide_local(str(other))
    assert refused.verdict == "deny" and "site.toml" in " ".join(refused.reasons)
    alone = Policy.from_files(layers[1:]).decide_local(str(other))
    assert alone.verdict == "prompt" and alone.violations  # its own list only warns


def test_a_later_rule_narrows_the_runtime_keys_and_never_opens_them(tmp_path: Path) -> None:
    site_rule = parse_text('[safehub]\nruntime = "enforce"\n[[allow]]\nrepo = "acme/*"\n',
                           str(tmp_path / "site.toml"), origin="site")
    user_rule = parse_text('[[allow]]\nrepo = "acme/models"\nnetwork = ["evil.example"]\n'
                           'subprocess = ["sh"]\nweights = ["https://evil.example/*"]\n',
                           str(tmp_path / "user.toml"))
    spec = RepoSpec.parse("acme/models:v1")
    runtime = Policy.from_files([site_rule, user_rule]).decide(spec).requirements.runtime
    assert runtime.merged("enforce") == ((), False, None)
    assert runtime.weights_patterns() == ()
    # Where no earlier rule matches, the user's rule admits the repo and sets its keys.
    alone = Policy.from_files([user_rule]).decide(spec).requirements.runtime
    assert alone.merged("enforce") == (("evil.example",), ("sh",), None)


def test_the_docs_table_of_who_may_loosen_each_key_comes_from_the_declaration() -> None:
    from safehub.policy.keys import layers_table

    docs = (Path(__file__).parents[1] / "docs/policy.md").read_text()
    assert layers_table() in docs
    assert layers_table("confine") in docs


# -- [confine]: merged as every key, by the roles and final flags of the same stacks -------------

CONFINE_DEFAULTS: dict[str, frozenset[object]] = {
    "writes": frozenset(), "exec": frozenset(), "connect_ports": frozenset({443})}
FOLDERS = ("", "data", "data/run", "data2", "srv", "srv/x")  # beneath the files' folder
PROGRAMS = ("git", "sh", "curl")
PORTS = (443, 22, 8443)
WIDENS = ("site", "user")  # the roles that may widen a [confine] default


@dataclass(frozen=True)
class ConfineLayer:
    origin: str
    final: bool
    writes: tuple[str, ...] | None
    exec: tuple[str, ...] | None
    connect_ports: tuple[int, ...] | None

    def value(self, name: str, root: Path) -> frozenset[object] | None:
        value: tuple[object, ...] | None = getattr(self, name)
        if value is None:
            return None
        return frozenset(str(root / v) if name == "writes" else v for v in value)

    def toml(self, root: Path) -> str:
        lines = ["[safehub]", f"final = {'true' if self.final else 'false'}"]
        given = {name: self.value(name, root) for name in CONFINE_DEFAULTS}
        if any(v is not None for v in given.values()):
            lines.append("[confine]")
        for name, value in given.items():
            if value is not None:
                lines.append(f"{name} = [" + ", ".join(
                    f'"{v}"' if isinstance(v, str) else str(v) for v in sorted(
                        value, key=str)) + "]")
        return "\n".join(lines) + "\n"


def _some(values: tuple[object, ...]) -> st.SearchStrategy[object]:
    return st.one_of(st.none(), st.lists(st.sampled_from(values), max_size=3,
                                         unique=True).map(tuple))


confine_stacks = st.lists(st.builds(
    ConfineLayer, st.sampled_from(ORIGINS), st.sampled_from((False, False, True)),
    _some(FOLDERS), _some(PROGRAMS), _some(PORTS)), min_size=1, max_size=5)


def _inside(path: object, folder: object) -> bool:
    return path == folder or str(path).startswith(f"{folder}/")


def _meet(name: str, bound: frozenset[object], value: frozenset[object]) -> frozenset[object]:
    """What both allow: folders nest (the deeper of two kept), programs and ports by name."""
    if name != "writes":
        return bound & value
    return frozenset({v for v in value if any(_inside(v, b) for b in bound)}
                     | {b for b in bound if any(_inside(b, v) for v in value)})


def _narrower(name: str, a: frozenset[object], b: frozenset[object]) -> bool:
    """``a`` allows nothing ``b`` does not."""
    if name == "writes":
        return all(any(_inside(x, y) for y in b) for x in a)
    return a <= b


def confine_model(stack: list[ConfineLayer], name: str, root: Path
                  ) -> tuple[frozenset[object], bool]:
    """(the merged value, whether a file holds it) by docs/policy.md: what an earlier file
    sets is the bound, else the default; only a site or user file widens the default (where
    no earlier file set the key); any other file's value is met with the default first, and
    one that only asks for more than the default is ignored; a final file that leaves the
    key unset, where no earlier file set it, holds the default."""
    default = CONFINE_DEFAULTS[name]
    bound: frozenset[object] | None = None
    for layer in stack:
        value = layer.value(name, root)
        if value is not None:
            if bound is not None:
                bound = _meet(name, bound, value)
            elif layer.origin in WIDENS:
                bound = value
            elif _meet(name, default, value) != default or value == default:
                bound = _meet(name, default, value)
        if layer.final and bound is None:
            bound = default
    return (default, False) if bound is None else (bound, True)


def test_a_later_file_never_widens_confine(tmp_path: Path) -> None:
    """For stacks of 1 to 5 files of every role, final or not: each merged [confine] key
    equals the model of docs/policy.md; it is never wider than what the stack without its
    last file gives (unless a site or user file sets a key no earlier file holds), never
    wider than what any final file and the files before it give, and never wider than the
    stack without its project and SAFEHUB_POLICY files; those alone never widen the
    defaults."""
    root = tmp_path
    seen = dict.fromkeys(("room", "floor", "not granted", "narrowed"), 0)

    def merged(stack: list[ConfineLayer], name: str) -> frozenset[object]:
        policy = Policy.from_files([parse_text(
            layer.toml(root), str(root / ("safehub.toml" if layer.origin == "project"
                                          else f"{i}.toml")), origin=layer.origin)
            for i, layer in enumerate(stack)])
        setting = policy.confine(name)
        seen["not granted"] += bool(setting.notes)
        return frozenset(setting.value)

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(confine_stacks)
    def check(stack: list[ConfineLayer]) -> None:
        for name, default in CONFINE_DEFAULTS.items():
            value = merged(stack, name)
            assert (value, stack) == (confine_model(stack, name, root)[0], stack)
            shorter = merged(stack[:-1], name)
            if not _narrower(name, value, shorter):
                assert stack[-1].origin in WIDENS, (name, stack)
                assert not confine_model(stack[:-1], name, root)[1], (name, stack)
                seen["room"] += 1
            seen["narrowed"] += value != shorter and _narrower(name, value, shorter)
            for i, layer in enumerate(stack):
                if layer.final:
                    floor = merged(stack[:i + 1], name)
                    assert _narrower(name, value, floor), (name, stack, i)
                    later = [x.value(name, root) for x in stack[i + 1:]]
                    seen["floor"] += any(v is not None and not _narrower(name, v, floor)
                                         for v in later)
            admins = [x for x in stack if x.origin in WIDENS]
            assert _narrower(name, value, merged(admins, name)), (name, stack)
            others = [x for x in stack if x.origin not in WIDENS]
            assert _narrower(name, merged(others, name), default), (name, stack)

    check()
    assert min(seen.values()) > 10, seen  # every kind of case was reached
