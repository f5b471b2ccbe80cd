"""Test support: real git repos and a loopback HTTPS GitHub stand-in (not part of safehub).

* :mod:`.gitrepo` -- git helpers with fixed identities and dates (``make_repo``, ``git``).
* :mod:`.tls` -- a throwaway CA and a server certificate (``make_tls``).
* :mod:`.server` -- :class:`GitHubStandIn`, one host per part of GitHub, answers from git;
  :mod:`.routes`, :mod:`.answers`, :mod:`.gitview`, :mod:`.registry` and :mod:`.transport`
  are its parts.
"""

from .gitrepo import GitCommandError, commit_files, git, git_env, make_repo, run_git
from .server import ROLES, GitHubStandIn, Rule
from .tls import STANDIN_HOSTS, TLSFiles, make_tls
from .transport import Drip, Reply, RequestRecord

__all__ = [
    "ROLES",
    "STANDIN_HOSTS",
    "Drip",
    "GitCommandError",
    "GitHubStandIn",
    "Reply",
    "RequestRecord",
    "Rule",
    "TLSFiles",
    "commit_files",
    "git",
    "git_env",
    "make_repo",
    "make_tls",
    "run_git",
]
