"""Admin policy files: what may load on this machine, and what it must satisfy.

* :mod:`safehub.policy.keys` declares every key once (type, default, who may set it,
  how files merge it);
* :mod:`safehub.policy.schema` reads one file against that declaration;
* :mod:`safehub.policy.merge` merges each ``[safehub]`` and ``[confine]`` key across files,
  by one function;
* :mod:`safehub.policy.model` holds the merged files and decides on a spec;
* :mod:`safehub.policy.files` finds, reads and caches the files, and describes the
  merged policy (``safehub policy show``).

>>> p = Policy.from_text('''
... [safehub]
... unknown_repos = "deny"
... [[allow]]
... repo = "pytorch/*"
... refs = ["v*"]
... ''', "example.toml")
>>> p.decide(RepoSpec.parse("PyTorch/vision:v0.10.0")).verdict
'allow'
>>> p.decide(RepoSpec.parse("someone/else:v1")).verdict
'deny'
"""

from __future__ import annotations

from safehub.policy.decision import Decision, Requirements, RuntimeRequirements
from safehub.policy.files import (
    PROJECT_FILE,
    Candidate,
    discover,
    load_policy,
    searched,
    user_file,
    validate_file,
)
from safehub.policy.model import Policy, Rule, Setting
from safehub.spec import RepoSpec

__all__ = [
    "PROJECT_FILE",
    "Candidate",
    "Decision",
    "Policy",
    "RepoSpec",
    "Requirements",
    "Rule",
    "RuntimeRequirements",
    "Setting",
    "discover",
    "load_policy",
    "searched",
    "user_file",
    "validate_file",
]
