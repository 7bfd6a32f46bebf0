"""Every exception tether raises, in one tree.

Split by who is at fault, so callers can decide what to do without parsing messages:

* TetherError
  x ConfigError              developer/user mistake; the message says how to fix it
  x StateError               a value or an operation the state model refuses
    + InvalidStateValue      not JSON-like data (refused at put/merge, never at save)
    + RunNotPaused           an update asked of a run that is not PAUSED
    + WrongRunStatus         an action (resume, decide, roll back…) its status forbids
  x StoreError
    + StoreUnavailable       connection/timeout: transient, retry later
    + StoreNotWritable       disk full, read-only file system, full tablespace: not transient
    + StateTooLarge          a payload over a server limit (MariaDB max_allowed_packet…)
    + VersionConflict        another writer saved first; reload and redo
    + RunNotFound            the run (or the version asked for) is not stored
      + RunExpired           the run was stored but its expiry time has passed
    + CheckpointCorrupt      undecodable payload, truncated row or unknown schema version
      + DecryptionError      encrypted with another key, or tampered with
    + RunExists              a run with that id is already stored
  x RunInProgress            another live runner holds the run's lease
  x LeaseLost                a holder's write refused: another runner took its lease over
  x ModelError               a model call failed
    + ModelUnavailable       network, 5xx, rate limit after retries: transient
    + ModelOutputError       unparsable or invalid reply: fed back to the model
    + PromptTooLong          the provider refused the prompt's size (reported_tokens)
    + MalformedResponse      the provider's body is not a reply (not JSON, no choices)
    + ModelRequestsBlocked   a real provider was called while requests are disallowed (tests)
  x ToolError                a command could not be run as asked
    + CommandTimeout         it ran past its timeout and was killed
    + CommandRefused         the command policy refused it (destructive or unconfirmed)
      + ApprovalRequired     it needs a human's approval and no one is there to ask
    + SessionError           the local or SSH session failed (connect, auth, lost)
  x ContextError             the context engine was asked something impossible
    + BudgetExceeded         pinned content alone does not fit the budget
    + ArtifactNotFound       (tether.context.artifacts) no artefact with that id
  x InvalidAnswer            (tether.agent.interaction) an answer that does not fit its question
  x BlackboardPathError      (orchestrator) a report path outside the working directory
  x SubLoopLocked            (orchestrator) another live process holds the sub-loop lock

Exceptions carry data (``run_id``, ``version``) and never log; the code that handles
an error logs it.
"""

from __future__ import annotations

__all__ = [
    "BlackboardPathError",
    "BudgetExceeded",
    "CheckpointCorrupt",
    "ConfigError",
    "ContextError",
    "DecryptionError",
    "InvalidStateValue",
    "LeaseLost",
    "ApprovalRequired",
    "CommandRefused",
    "CommandTimeout",
    "ModelError",
    "ModelOutputError",
    "ModelRequestsBlocked",
    "MalformedResponse",
    "ModelUnavailable",
    "PromptTooLong",
    "RunExists",
    "RunInProgress",
    "SessionError",
    "ToolError",
    "RunExpired",
    "RunNotFound",
    "RunNotPaused",
    "StateError",
    "StateTooLarge",
    "StoreError",
    "StoreNotWritable",
    "StoreUnavailable",
    "SubLoopLocked",
    "TetherError",
    "VersionConflict",
    "WrongRunStatus",
]


class TetherError(Exception):
    """Base of every error tether raises on purpose."""


class ConfigError(TetherError, ValueError):
    """A configuration or argument mistake; the message says what to change."""


class StateError(TetherError):
    """The state model refused a value or an operation."""


class InvalidStateValue(StateError, TypeError):
    """A value that cannot be stored and read back exactly.

    Raised when it enters the state (``put``/``merge``), so the bad step is the one
    that fails, not a later save.
    """

    def __init__(self, message: str, *, key: str | None = None, path: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.path = path


class RunNotPaused(StateError):
    """Updating a run's state is allowed only while it is PAUSED."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(
            f"run {run_id!r} is {status}; its state can be updated only while PAUSED (pause it first)"
        )
        self.run_id = run_id
        self.status = status


class WrongRunStatus(StateError):
    """The run's status does not allow the action asked (resume a finished run, decide
    on a run with no pending failure…); the message names the status and what to do."""

    def __init__(self, run_id: str, status: str, action: str, hint: str = "") -> None:
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}" + (f"; {hint}" if hint else ""))
        self.run_id = run_id
        self.status = status
        self.action = action


class StoreError(TetherError):
    """A checkpoint store could not do what was asked."""


class StoreUnavailable(StoreError):
    """The backend could not be reached or timed out: transient, worth a retry."""


class StoreNotWritable(StoreError):
    """The store refuses writes for a reason that waiting will not fix: the disk or the
    tablespace is full, the file system or the database is read-only. ``reason`` says which;
    free space or make the store writable, then resume the run."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StateTooLarge(StoreError):
    """One checkpoint payload is bigger than the store's server accepts in one write.

    ``size`` and ``limit`` are in bytes; the message names the server setting to raise
    (or says to keep big data out of the state, e.g. as an artefact).
    """

    def __init__(self, message: str, *, run_id: str = "", size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.size = size
        self.limit = limit


class VersionConflict(StoreError):
    """Two writers on one run: the other one saved first.

    ``expected`` is the version this writer based its change on, ``actual`` the version
    the store holds now. Reload, reapply and save again.
    """

    def __init__(self, run_id: str, *, expected: int | None, actual: int | None) -> None:
        have = "a newer version" if actual is None else f"version {actual}"
        want = "a new run" if expected == 0 else f"latest version {expected}"
        super().__init__(
            f"version conflict on run {run_id!r}: expected {want}, store has {have}; "
            "another writer saved first: reload the run and retry"
        )
        self.run_id = run_id
        self.expected = expected
        self.actual = actual


class RunExists(VersionConflict):
    """``start`` was given the id of a run that is already stored."""

    def __init__(self, run_id: str, status: object = None) -> None:
        what = f" ({status})" if status is not None else ""
        StoreError.__init__(
            self,
            f"run {run_id!r} already exists{what}: resume it (Runner.resume / `tether resume`), "
            "use Runner.run to start or resume, or pick another run id",
        )
        self.run_id = run_id
        self.status = status
        self.expected = 0
        self.actual = None


class RunNotFound(StoreError, KeyError):
    """The run, or the version of it asked for, is not in the store."""

    def __init__(self, run_id: str, version: int | None = None) -> None:
        what = f"run {run_id!r}" if version is None else f"version {version} of run {run_id!r}"
        super().__init__(f"{what} not found (never saved, deleted, pruned or expired)")
        self.run_id = run_id
        self.version = version

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class RunExpired(RunNotFound):
    """The run was stored, but its expiry time has passed: it is gone, not overwritten by
    another writer. Keep runs longer with ``ExpiryPolicy`` (``TETHER_CHECKPOINT_TTL_HOURS``)."""

    def __init__(self, run_id: str, expired_at: float | None = None) -> None:
        StoreError.__init__(
            self,
            f"run {run_id!r} has expired (its checkpoints outlived the store's expiry time) "
            "and can no longer be loaded or written; start a new run, or keep runs longer "
            "with a longer checkpoint TTL",
        )
        self.run_id = run_id
        self.version = None
        self.expired_at = expired_at


class CheckpointCorrupt(StoreError):
    """A stored checkpoint cannot be decoded; names the run and version."""

    def __init__(self, message: str, *, run_id: str = "", version: int | None = None) -> None:
        where = f"run {run_id!r} version {version}: " if run_id else ""
        super().__init__(f"{where}{message}")
        self.run_id = run_id
        self.version = version


class DecryptionError(CheckpointCorrupt):
    """Encrypted with another key, or altered since it was written."""


class RunInProgress(TetherError):
    """A second runner tried to execute a run that a live runner holds."""

    def __init__(self, run_id: str, owner: str, detail: str = "") -> None:
        super().__init__(
            f"run {run_id!r} is being executed by {owner}{detail}; refusing to run it twice "
            "(wait for it, or resume with force=True if you know it is dead)"
        )
        self.run_id = run_id
        self.owner = owner


class LeaseLost(TetherError):
    """A lease holder's write was refused: the run's lease token is no longer the one it
    holds (it stalled past its lease, and another runner took the run over).

    Checked inside the store's atomic write, so nothing of the refused write landed. The
    holder must stop at once without writing anything more: the run is the new holder's.
    ``held`` is the token this holder had, ``current`` the run's token now (0 when the run
    is gone).
    """

    def __init__(self, run_id: str, *, held: int, current: int) -> None:
        if current:
            what = f"was taken over (the run's fence is now {current}); another runner executes it now"
        else:
            what = "ended: the run is gone (deleted, or expired) or its lease was released"
        super().__init__(
            f"run {run_id!r}: this process's lease (fence {held}) {what}, so this process stopped "
            "without recording anything. Nothing to do here; if it happens often, make the lease "
            "longer than this process's stalls (lease_ttl) and keep its heartbeat running"
        )
        self.run_id = run_id
        self.held = held
        self.current = current


class ModelError(TetherError):
    """A model call failed."""


class ModelUnavailable(ModelError):
    """Network error, 5xx or rate limit that outlasted the retries: transient."""


class ModelOutputError(ModelError):
    """The reply could not be parsed or validated; the loop sends the error back."""

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class PromptTooLong(ModelError):
    """The provider refused the prompt as too long; compress and retry."""

    def __init__(self, message: str, *, reported_tokens: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.reported_tokens = reported_tokens
        self.limit = limit


class MalformedResponse(ModelError):
    """The provider answered with a body that is not a reply (not JSON, no choices, no
    content). Asking again sends the same request to the same server: a DATA failure."""


class ModelRequestsBlocked(ModelError):
    """A real provider was asked while ``tether.models.ALLOW_MODEL_REQUESTS`` is False."""


class ToolError(TetherError):
    """A command could not be run as asked."""


class CommandTimeout(ToolError, TimeoutError):
    """The command ran past its timeout; its whole process group was killed."""

    def __init__(self, command: str, timeout: float) -> None:
        super().__init__(f"command timed out after {timeout:g}s and was killed: {command}")
        self.command = command
        self.timeout = timeout


class CommandRefused(ToolError, PermissionError):
    """The command policy refused the command (destructive, or not confirmed)."""

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"refused by the command policy ({reason}): {command}")
        self.command = command
        self.reason = reason


class ApprovalRequired(CommandRefused):
    """The command needs approval (risky, or an escalation out of the sandbox) and the run has
    no one to ask: an unattended run pauses here until a human decides."""

    key: str = ""
    """What an approval of this command is stored as (``GuardedSession.approval_key``)."""


class SessionError(ToolError):
    """The session itself failed: cannot connect, authentication, connection lost."""


class ContextError(TetherError):
    """The context engine was asked for something it cannot do."""


class BudgetExceeded(ContextError):
    """Even after every allowed compression, the content does not fit the budget."""


class BlackboardPathError(TetherError, PermissionError):
    """A blackboard path that is absolute, contains ``..`` or leads outside the working
    directory through a symlink; ``path`` is the path as given."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class SubLoopLocked(TetherError):
    """The TEST/DEV sub-loop lock of a working directory is held by another live process."""

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder
