"""Shared fixtures: environment hygiene, no leftover process group, no leftover strategy."""

from __future__ import annotations

import os

import pytest

# A test that builds MirroredStrategy(num_replicas>1) outside a worker must get
# a clear error, never a second copy of pytest started as its "replicas".
os.environ["STRATAGEM_DISABLE_SCRIPT_LAUNCH"] = "1"


@pytest.fixture(autouse=True)
def _clean_environment():
    before = dict(os.environ)
    yield
    # torch sets a few of its own on first use of some features; those are not ours.
    leaked = sorted(k for k in set(os.environ) - set(before) if not k.startswith(("TORCHINDUCTOR_", "TRITON_")))
    os.environ.clear()
    os.environ.update(before)
    from stratagem.distribute import collectives, context

    collectives.destroy_process_group()
    context.reset()
    if leaked:
        pytest.fail(f"test leaked environment variables: {leaked}")
