"""A Horovod elastic script (``hvd.elastic.run``, ``TorchState``, ``ElasticSampler``) that logs what it did.

argv: OUT EPOCHS. Every rank appends JSON lines to OUT/log-RANK-PID.jsonl:
``{"event": "synced", ...}`` with a checksum of its whole state right after
``hvd.elastic.run`` restored and synced it, and ``{"event": "step", ...}``
with the example ids of each committed step. ``attempt`` is rank 0's start
time, the same on every rank of one start. A worker whose environment holds
``DIE_AT=EPOCH:BATCH`` kills its host (its supervisor, then itself, with SIGKILL)
in that step, after its forward pass and before its backward pass (whose hooks
start the gradients' all-reduce), on the job's first start only.
"""

import json
import os
import signal
import sys
import time

import torch
from torch import nn

import stratagem.horovod as hvd

out, epochs = sys.argv[1], int(sys.argv[2])
NUM_EXAMPLES, BATCH_SIZE = 72, 4
torch.set_num_threads(1)
hvd.init()
attempt = hvd.broadcast_object(time.time(), root_rank=0)
generator = torch.Generator().manual_seed(0)
x = torch.randn(NUM_EXAMPLES, 6, generator=generator)
y = x @ torch.randn(6, 1, generator=generator)

torch.manual_seed(hvd.rank())  # different on every rank: the sync must make them equal
model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(range(NUM_EXAMPLES), shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
loader = torch.utils.data.DataLoader(range(NUM_EXAMPLES), batch_size=BATCH_SIZE, sampler=sampler)
state.register_reset_callbacks([lambda: [group.update(lr=0.05 * hvd.size()) for group in optimizer.param_groups]])


def log(record: dict) -> None:
    record |= {"attempt": attempt, "rank": hvd.rank(), "size": hvd.size()}
    with open(os.path.join(out, f"log-{hvd.rank()}-{os.getpid()}.jsonl"), "a") as file:
        file.write(json.dumps(record) + "\n")


def checksum() -> list[float]:
    """The state a restart must bring back: weights, momentum, counters and the epoch's processed examples."""
    momenta = [s["momentum_buffer"].sum().item() for s in optimizer.state_dict()["state"].values()
               if s.get("momentum_buffer") is not None]
    return ([p.double().sum().item() for p in model.parameters()] + momenta
            + [state.epoch, state.batch, sum(sampler.processed_indices), len(sampler.processed_indices)])


def die_here(epoch: int, batch: int) -> bool:
    return os.environ.get("DIE_AT") == f"{epoch}:{batch}" and not os.path.exists(os.path.join(out, "died"))


@hvd.elastic.run
def train(state: hvd.elastic.TorchState) -> None:
    log({"event": "synced", "epoch": state.epoch, "batch": state.batch, "checksum": checksum()})
    while state.epoch < epochs:
        for batch_idx, indices in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[indices]), y[indices])
            # NOTE: before backward, whose gradient hooks start the all-reduce: dying after it could let the
            # all-reduce finish on one survivor and not the other, which would then commit different steps.
            if die_here(state.epoch, state.batch):
                open(os.path.join(out, "died"), "w").close()
                os.kill(os.getppid(), signal.SIGKILL)  # the host's supervisor first, so it cannot restart this worker
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            optimizer.step()
            sampler.record_batch(batch_idx, BATCH_SIZE)
            state.batch += 1
            state.commit()
            log({"event": "step", "epoch": state.epoch, "batch": state.batch, "ids": indices.tolist()})
            time.sleep(0.05)
        # As Horovod asks: set_epoch at the end of the epoch, so a restart mid-epoch keeps what was processed.
        state.epoch, state.batch = state.epoch + 1, 0
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
log({"event": "done", "checksum": checksum()})
