"""One host's replica of a multi-host job (TF_CONFIG or torchrun variables), for the namespace tests.

Prints what this host's name resolves to and the job-wide sum.
"""

import socket

import torch

import stratagem

strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
rank = strategy.replica_id_in_sync_group
print(f"hostname {socket.gethostname()} resolves to {socket.gethostbyname(socket.gethostname())}")
total = strategy.reduce("sum", torch.tensor(float(rank + 1)), axis=None)
print(f"replica {rank} of {strategy.num_replicas_in_sync}: sum={total.item():g}")
