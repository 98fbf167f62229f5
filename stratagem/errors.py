"""Every exception stratagem raises on purpose lives here.

Plain argument mistakes to a single function are ordinary ``ValueError`` or ``TypeError``; the classes below are for
failures of configuration, of the cluster, and of stored state, which a user recovers from in different ways.
"""

from __future__ import annotations

__all__ = [
    "StratagemError", "ConfigurationError", "CollectiveTimeoutError", "CollectiveError", "WorkerFailedError",
    "CheckpointError", "DataLossError", "ParameterServerError",
]


class StratagemError(Exception):
    """Base class of every stratagem exception."""


class ConfigurationError(StratagemError, ValueError):
    """The job is configured in a way that cannot work.

    Raised by cluster resolution (malformed ``TF_CONFIG``, torchrun or SLURM variables) and by strategies before any
    collective runs (a global batch that does not divide across replicas, an impossible replica count). Recover by
    fixing the configuration the message names; nothing has started yet.
    """


class CollectiveTimeoutError(StratagemError, TimeoutError):
    """A rendezvous or collective did not complete within its timeout.

    Raised by strategies when a peer never joins (the message names the missing ranks) or stops answering. Recover
    by checking that every worker started and can reach the chief's address, or raise the timeout through
    ``CommunicationOptions(timeout_seconds=...)``.
    """

    def __init__(self, message: str, *, operation: str, rank: int, timeout_s: float, call: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.rank = rank
        self.timeout_s = timeout_s
        self.call = call  # the user's call that made the collective (fit, evaluate, predict, strategy.run)
        self.diagnosis: object = None  # who failed (stratagem.distribute.collectives), to name an outer call


class CollectiveError(StratagemError, RuntimeError):
    """A collective failed: a peer closed its connection, or the ranks passed tensors of different shapes.

    Raised by the strategies' collectives, named with the user's call that made them (``fit``, ``evaluate``,
    ``predict``, ``strategy.run``), this rank, and the ranks to blame with their hosts. Recover by fixing what the
    named rank's log says, or by making every rank make the same calls with the same shapes.
    """

    def __init__(self, message: str, *, operation: str, rank: int, call: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.rank = rank
        self.call = call
        self.diagnosis: object = None


class WorkerFailedError(StratagemError, RuntimeError):
    """A worker process of a launched job exited with an error.

    Raised by the launcher's supervisor after it has stopped every other worker. Carries the failing rank, its exit
    code and the last lines of its stderr (normally the traceback). Recover by fixing the error shown.
    """

    def __init__(self, message: str, *, rank: int, exit_code: int, log_tail: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.exit_code = exit_code
        self.log_tail = log_tail


class CheckpointError(StratagemError):
    """A checkpoint could not be written or read back.

    Raised on a corrupt, truncated or unsafe file; the message names the file. Recover by loading an older
    checkpoint.
    """


class DataLossError(StratagemError, OSError):
    """A data file is corrupt or truncated (TF's ``tf.errors.DataLossError``).

    Raised by ``TFRecordDataset`` when a record's length or data fails its CRC32C check, or the file ends inside a
    record; the message names the file and the record's byte offset. Regenerate the file, or drop it from the list
    (``ignore_errors()`` skips the rest of a damaged file).
    """


class ParameterServerError(StratagemError, RuntimeError):
    """A parameter server refused a request, or could not be reached in time.

    Raised by the parameter-server client. A refused request (a malformed message, an unknown variable, a shape or
    dtype that does not match) leaves the server serving; the message says what was wrong. An unreachable server
    names its address: restart it, or resume the job from its last checkpoint.
    """


class CoordinatorError(StratagemError, RuntimeError):
    """A scheduled step failed on a worker, or the chief and its workers lost each other.

    Raised by ``ClusterCoordinator`` on the chief (at ``join``, ``fetch`` or ``schedule`` after a step failed: the
    message holds the worker's error and traceback text) and on workers (the chief stopped, or no worker was alive
    for the timeout). Fix the error shown, or restart the lost task.
    """
