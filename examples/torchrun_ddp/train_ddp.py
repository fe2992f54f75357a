"""A torchrun DDP script, in the style of PyTorch's own DDP examples: a small MLP on MNIST.

    torchrun --standalone --nproc_per_node=2 train_ddp.py --lr 0.003 --epochs 3

torchrun (or tuner, under ``scaling.workers: 2``) starts it once per process with RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set; ``init_process_group`` reads them.
Each process trains on its part of the images (DistributedSampler; DDP averages the
gradients), the ranks add up their validation counts (all_reduce), and rank 0 prints

    Epoch 3 | world 2 | loss 0.1310 | val_accuracy 0.9612

It reads MNIST's IDX files (train-images-idx3-ubyte.gz, ...) from --data, by default
$TUNER_DATA_DIR/MNIST/raw. The lines marked "tuner" save a checkpoint and resume from one,
and do nothing when the script runs by itself.
"""

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def ddp_setup() -> torch.device:
    """The process group, from the environment torchrun sets (env://)."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl")
        return device
    dist.init_process_group(backend="gloo")
    return torch.device("cpu")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format): a magic number giving the dimensions, then the bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder: Path, count: int) -> TensorDataset:
    images = read_idx(folder / "train-images-idx3-ubyte.gz")[:count]
    labels = read_idx(folder / "train-labels-idx1-ubyte.gz")[:count]
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return TensorDataset((x - 0.1307) / 0.3081, torch.from_numpy(labels.astype(np.int64)))


class Trainer:
    def __init__(self, model: nn.Module, train: DataLoader, val: DataLoader, lr: float, device: torch.device):
        self.device = device
        self.model = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
        self.train, self.val = train, val
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.loss_fn = nn.CrossEntropyLoss()

    def run_epoch(self, epoch: int) -> float:
        self.model.train()
        self.train.sampler.set_epoch(epoch)
        total = torch.zeros(2, device=self.device)  # loss sum, images
        for x, y in self.train:
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            total += torch.stack([loss.detach() * len(y), torch.tensor(float(len(y)), device=self.device)])
        dist.all_reduce(total)
        return (total[0] / total[1]).item()

    @torch.no_grad()
    def evaluate(self) -> float:
        self.model.eval()
        counts = torch.zeros(2, device=self.device)  # correct, images
        for x, y in self.val:
            x, y = x.to(self.device), y.to(self.device)
            counts += torch.tensor([(self.model(x).argmax(1) == y).sum().item(), len(y)], device=self.device)
        dist.all_reduce(counts)  # every rank's share of the validation images
        return (counts[0] / counts[1]).item()

    def state(self, epoch: int) -> dict:
        return {"model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--train-size", type=int, default=12000, help="first N training images (the rest unused)")
    parser.add_argument("--data", default=os.path.join(os.environ.get("TUNER_DATA_DIR", "data"), "MNIST", "raw"))
    args = parser.parse_args()

    device = ddp_setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = load(Path(args.data), args.train_size)
    split = len(data) * 9 // 10
    train_set = torch.utils.data.Subset(data, range(split))
    val_set = torch.utils.data.Subset(data, range(split, len(data)))
    train = DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set))
    val = DataLoader(val_set, batch_size=512, sampler=DistributedSampler(val_set, shuffle=False, drop_last=True))
    model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    trainer = Trainer(model, train, val, args.lr, device)

    start = 0
    resume = os.environ.get("TUNER_RESUME_FROM")  # tuner: a retry, a resumed sweep, PBT
    if resume:
        state = torch.load(Path(resume) / "state.pt", map_location=device)
        trainer.model.module.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]

    for epoch in range(start + 1, args.epochs + 1):
        loss = trainer.run_epoch(epoch)
        accuracy = trainer.evaluate()
        if rank == 0:
            if os.environ.get("TUNER_CHECKPOINT_DIR"):  # tuner: this epoch's checkpoint, before its line
                torch.save(trainer.state(epoch), Path(os.environ["TUNER_CHECKPOINT_DIR"]) / "state.pt")
            print(f"Epoch {epoch} | world {world} | loss {loss:.4f} | val_accuracy {accuracy:.4f}", flush=True)
    if rank == 0:
        torch.save(trainer.model.module.state_dict(), "model.pt")  # in the working folder: the trial's own
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
