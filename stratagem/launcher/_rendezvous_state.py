"""torch's c10d rendezvous backend, refusing a rendezvous state that would run code when torch unpickles it.

torch's ``DynamicRendezvousHandler`` keeps the job's membership in the store as
a pickle and reads it back with ``pickle.loads``: any process that reaches the
store could write one that names ``os.system``. Every state this backend
hands to torch has first been read by an unpickler that admits only the
state's own classes (``_torch_internals.RENDEZVOUS_STATE_GLOBALS``), so torch
only loads checked bytes. With the job's secret the store's values are also
signed (``_rendezvous.SignedStore``), so a stranger's state is refused before.
"""

from __future__ import annotations

from torch.distributed.elastic.rendezvous import RendezvousStateError
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import Token
from typing_extensions import override

from stratagem._torch_internals import RENDEZVOUS_STATE_GLOBALS
from stratagem.checkpoint.unpickling import unpickle_exact


class CheckedC10dBackend(C10dRendezvousBackend):
    """``C10dRendezvousBackend`` whose states are checked before torch unpickles them (same arguments)."""

    @override
    def get_state(self) -> tuple[bytes, Token] | None:
        result = super().get_state()
        if result is not None:
            _check(result[0])
        return result

    @override
    def set_state(self, state: bytes, token: Token | None = None) -> tuple[bytes, Token, bool] | None:
        result = super().set_state(state, token)
        if result is not None:
            _check(result[0])
        return result


def _check(state: bytes) -> None:
    try:
        unpickle_exact(state, allowed=RENDEZVOUS_STATE_GLOBALS)
    except Exception as err:  # any failure to read it is the same refusal
        raise RendezvousStateError(
            "The elastic job's rendezvous state in its store is not one torch's rendezvous wrote: it names "
            "something other than the state's own classes, so it was not loaded (it could run code). A process "
            "other than this job's `stratagem run`s writes to the store: keep --master-port on a network only "
            f"the job's hosts reach, and give every host the same STRATAGEM_JOB_SECRET. Received: {err}") from err
