"""The refusals and failures every layer may raise, and the exit code each maps to.

Each error's message is a sentence a user can act on: what is held, by whom,
and what to do. The exit code tells a script whether waiting can help (75),
whether it is not allowed (77), or whether the request itself is wrong (2).
"""

from __future__ import annotations


class TpnodeError(Exception):
    """Base of every error the product reports to a person in plain words."""

    #: True when the message is already the whole line to show (an agent's
    #: answer, worded by :func:`error_line` on its side)
    worded = False


class NoCapacity(TpnodeError):
    """Not enough free cards *now*.

    Not a failure: it means "not your turn yet". A queue catches it and tries
    again next round instead of failing the job. A request that can never fit
    raises :class:`NeverFits` instead, which is deliberately *not* a subclass,
    so a ``except NoCapacity`` retry loop cannot keep such a job waiting forever.
    """


class NeverFits(TpnodeError):
    """The request is larger than this node will ever have: waiting cannot help."""


class LockWaitTimeout(TpnodeError):
    """The allocation lock was not had within the time the caller allowed.

    Like NoCapacity it means "try again later", and like it nothing was
    started; it is kept apart so the message can say what was waited for
    (the lock's holder, or Redis) rather than talk about cards.
    """


class ConfigError(TpnodeError):
    """A setting or flag has a value that cannot be used; the message names it."""


class RuntimeUnavailable(TpnodeError):
    """The job runtime (Docker engine, state file) cannot be reached or read.

    While this is raised nobody knows which cards platform jobs hold, so no
    card may be handed out and none may be shown as free.
    """


class NotAllowed(TpnodeError):
    """The caller may not do this (sysexits' EX_NOPERM, exit code 77); the
    message names the rule and who may."""


class JobNotFound(TpnodeError):
    """No platform job has the run id or name asked for."""


def no_running_job(run_id: str) -> JobNotFound:
    """The one sentence for a run id that names nothing running: a job or a
    reservation, since either may be what the caller means (stop, extend, env, shell)."""
    return JobNotFound(f"no running job or reservation has run id {run_id}")


class BadRequest(TpnodeError):
    """A request that is malformed whatever the node's state (a bad run id, 0 cards)."""


class OverLimit(BadRequest):
    """A request over one of the node's limits (a command too long, a queue
    full): the message names the limit and its setting, and nothing changed."""


class TooMany(OverLimit):
    """Over a limit on how many of something one account, or everyone, may have
    at once (queued launches, connections): fewer later, and it is taken."""


class Conflict(TpnodeError):
    """A well-formed request the node's present state refuses: a run id already
    taken, a job still running, an image or command this node does not have.
    Unlike BadRequest, the same request can succeed once the state changes."""


#: Exit codes are part of the interface, so scripts can tell "try later" from
#: "this is wrong" from "ask someone who may": the CLI exits with them and the
#: agent's errors carry them.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TEMPFAIL, EXIT_NOPERM = 0, 1, 2, 75, 77


def exit_code(error: TpnodeError) -> int:
    """The exit code that reports ``error``: 75 for no capacity now or the lock
    not had in time (EX_TEMPFAIL), 77 for not allowed (EX_NOPERM), 2 for a
    malformed request or setting, else 1."""
    if isinstance(error, (NoCapacity, LockWaitTimeout)):
        return EXIT_TEMPFAIL
    if isinstance(error, NotAllowed):
        return EXIT_NOPERM
    if isinstance(error, (BadRequest, ConfigError)):
        return EXIT_USAGE
    return EXIT_FAIL


def error_line(error: TpnodeError) -> str:
    """The one line that reports ``error`` to a person, the same from the CLI
    and from the agent's API. No capacity says what to do about it: a command
    never waits for cards, it tries again later (or queues through the agent)."""
    if isinstance(error, NoCapacity) and not error.worded:
        return f"no capacity now: {error}; not waiting for cards: try again later"
    return str(error)
