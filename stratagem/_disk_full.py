"""The one test for a write that failed on a full disk, and the error that names the file (base layer: data
pipelines' caches and checkpoints both write files)."""

from __future__ import annotations

import errno
from pathlib import Path

from stratagem.errors import CheckpointError


def raise_if_disk_full(err: BaseException, target: Path, *, what: str = "checkpoint",
                       unchanged: str = "The previous checkpoint there is unchanged. ") -> None:
    """Raises ``CheckpointError`` naming ``target`` if ``err`` (or what caused it) is a full disk or quota.

    ``what`` names the file's kind in the message; ``unchanged`` says what the failed write left as it was.
    """
    # torch.save reports a failed write as "[enforce fail ...] unexpected pos", with the
    # OSError of the Python file it wrote to as the context; safetensors puts it in the text.
    seen: BaseException | None = err
    while seen is not None:
        if (isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT)) \
                or "No space left on device" in str(seen) or "os error 28" in str(seen):
            raise CheckpointError(
                f"Cannot write {what} {str(target)!r}: no space left on device (the file system of "
                f"{str(target.parent)!r} is full, or its quota is used up). {unchanged}Free some space or write to "
                f"another folder. Received: {type(err).__name__}: {str(err)[:200]}"
            ) from err
        seen = seen.__cause__ or seen.__context__
