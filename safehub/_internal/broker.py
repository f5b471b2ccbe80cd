"""The channel between a confined job and its ``safehub run`` (the trusted side).

Under ``safehub run --confine`` the job can change nothing a later safehub run trusts
(:func:`safehub.run.confine.plan.protected`); what an honest job needs of those files it
asks the parent for (:mod:`safehub.operations.job` says what the parent does: fetch a
cache miss as ``safehub prefetch`` would, append the job's audit lines).

The channel is a ``SOCK_SEQPACKET`` Unix socket the job inherits (its descriptor number in
``SAFEHUB_BROKER``); each request carries a socket of its own for the answer, so the
processes of one job (DataLoader workers, children) never read each other's answers.
Requests are served one at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from safehub._internal import fixes
from safehub.errors import CacheError, SafehubError

__all__ = ["ENV", "Broker", "ask", "available"]

ENV = "SAFEHUB_BROKER"
"""The variable that holds the descriptor number of the job's end of the channel."""

_MAX = 1 << 16


Handler = Callable[[dict[str, Any]], dict[str, Any]]


class Broker:
    """The parent's end: serves requests on a thread until the job's end is closed.
    ``handlers``: the answer to each kind of request (``op``); a handler may raise a
    :class:`SafehubError`, which the job sees raised as it was."""

    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        self._handlers = dict(handlers)
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._thread = threading.Thread(target=self._serve, name="safehub-broker",
                                        daemon=True)

    @property
    def child_fd(self) -> int:
        """The descriptor the job inherits (pass it with ``pass_fds``)."""
        return self._theirs.fileno()

    def environment(self) -> dict[str, str]:
        return {ENV: str(self.child_fd)}

    def start(self) -> None:
        """Serve; call once the job has started (the parent's copy of the job's end is
        closed, so the channel ends with the job's last process)."""
        self._theirs.close()
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (a process the job left behind may still hold its end)."""
        with contextlib.suppress(OSError):
            self._ours.shutdown(socket.SHUT_RDWR)
        if self._thread.is_alive():
            self._thread.join()
        self._ours.close()
        self._theirs.close()

    def _serve(self) -> None:
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self._ours, _MAX, 1)
            except OSError:
                return
            if not msg and not fds:
                return  # every process of the job has closed its end
            answer = json.dumps(self.answer(msg), separators=(",", ":")).encode()
            for fd in fds:
                try:
                    with socket.socket(fileno=fd) as reply:
                        reply.setblocking(False)
                        reply.send(answer[:_MAX])
                except OSError:
                    pass  # not a socket, or gone: the job asked and left

    def answer(self, msg: bytes) -> dict[str, Any]:
        """The answer to one request (a JSON object), never an exception."""
        try:
            request = json.loads(msg.decode())
            if not isinstance(request, dict):
                raise ValueError("not an object")
            handler = self._handlers.get(str(request.get("op")))
            if handler is None:
                raise ValueError(f"unknown request {str(request.get('op'))[:40]!r}")
            return handler(request)
        except SafehubError as e:
            return {"error": {"kind": type(e).__name__, "message": e.message,
                              "fix": fixes.to_json(e.fix) if e.fix is not None else None}}
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            return {"error": {"kind": "SafehubError",
                              "message": f"safehub run refused a malformed request ({e})",
                              "fix": None}}
        except Exception as e:  # the job waits for an answer: it gets one
            return {"error": {"kind": "SafehubError",
                              "message": f"safehub run could not do it for the job: {e}",
                              "fix": fixes.to_json(fixes.run("safehub prefetch SPEC",
                                                             "before the job"))}}


def available(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a confined job with a channel to its ``safehub run``."""
    return ((os.environ if environ is None else environ).get(ENV, "")).isdigit()


def ask(request: Mapping[str, Any]) -> dict[str, Any]:
    """Send ``request`` to the job's ``safehub run`` and wait for the answer; a refusal is
    raised as the error the parent met (:class:`SafehubError` or its subclass)."""
    import safehub.errors as errors

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with ours, theirs, socket.socket(fileno=os.dup(int(os.environ[ENV]))) as channel:
            socket.send_fds(channel, [json.dumps(dict(request)).encode()], [theirs.fileno()])
            theirs.close()
            answer = json.loads(ours.recv(_MAX).decode() or "{}")
    except (OSError, KeyError, ValueError) as e:
        raise CacheError(f"cannot ask safehub run for {request.get('op')} ({e})",
                         fix=fixes.run("safehub prefetch SPEC", "before the confined job")) from e
    if not isinstance(answer, dict):
        answer = {}
    error = answer.get("error")
    if isinstance(error, dict) or "ok" not in answer:
        error = error if isinstance(error, dict) else {"message": "no answer"}
        kind = getattr(errors, str(error.get("kind", "")), None)
        message = str(error.get("message", ""))
        try:
            fix = fixes.from_json(error["fix"]) if error.get("fix") else None
        except ValueError:
            fix = None
        try:
            refusal = kind(message, fix=fix) if isinstance(kind, type) and issubclass(
                kind, SafehubError) else SafehubError(message, fix=fix)
        except TypeError:  # an error that carries more than words (a rename's names)
            refusal = SafehubError(message, fix=fix)
        raise refusal
    return answer
