#!/usr/bin/python3
"""PyTorch DistributedDataParallel on CPU (gloo), as a Trainyard job.

Each rank is started by the Trainyard agent with MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK and LOCAL_RANK set, so the process group is formed with init_method="env://" and no
launcher is needed. (Debian's `torchrun` does not run on Python 3.11; the agent plays
its part.) The model is a small MLP classifier trained on synthetic data labelled by a
fixed random "teacher"; each rank draws its own shard of every batch.

What the job does with the SDK:
- logs loss (averaged over ranks), grad_norm, lr, step_time_s, samples_per_s;
- rank 0 checkpoints every --checkpoint-every steps through trainyard.Checkpointer
  (the state is torch.save'd to bytes in the loop; writing happens in the background);
  every rank loads the checkpoint on start, so TRAINYARD_CHECKPOINT_DIR must be on
  storage all ranks see;
- preemption: a rank that got the notice tells the others through the per-step
  all-reduce, so all ranks stop after the same step; rank 0 saves and waits, then
  every rank exits with 75 (trainyard.EXIT_PREEMPTED).

Run with /usr/bin/python3 (Debian's python3-torch); the pyenv python does not see it.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:
    import trainyard
except ImportError:  # run from a checkout without PYTHONPATH: use the SDK next door
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "sdk", "python"))
    import trainyard

FEATURES = 32
CLASSES = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.1, help="peak learning rate (SGD)")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=50, metavar="STEPS",
                        help="0: only at the end and on preemption")
    parser.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                        help="extra sleep per step, to mimic a bigger model")
    parser.add_argument("--log-every", type=int, default=10, help="print every N steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    for name in ("warmup_steps", "checkpoint_every", "step_time"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(args, name)}")
    return args


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def batch(seed: int, step: int, rank: int, size: int,
          teacher: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's shard at `step`, a pure function of its arguments (resumable)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(size, FEATURES, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warmup, then cosine decay to a tenth of --lr at --steps."""
    if args.warmup_steps and step <= args.warmup_steps:
        return args.lr * step / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps))
    return args.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def to_bytes(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> bytes:
    buffer = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, buffer)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # several ranks share a node's cores; avoid oversubscription
    env = os.environ
    print(f"rank {env.get('RANK')} of {env.get('WORLD_SIZE')} (local {env.get('LOCAL_RANK')}): "
          f"rendezvous at {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}", flush=True)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    directory = trainyard.checkpoint_dir()
    if directory is None:
        print("TRAINYARD_CHECKPOINT_DIR: must be set (a directory all ranks can read)",
              file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts)
    model = Classifier()
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(
        args.seed + 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    checkpointer = trainyard.Checkpointer(directory, logger=trainyard.default_logger(),
                                          resume_from=trainyard.resume_from())
    start = 0
    loaded = checkpointer.load_latest()
    if loaded is not None:
        start, blob = loaded
        state = torch.load(io.BytesIO(blob))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        print(f"rank {rank}: resumed from {checkpointer.loaded_path} at step {start}",
              flush=True)
    ddp = DistributedDataParallel(model)
    num_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        trainyard.log_params({"model": "mlp-classifier", "lr": args.lr,
                              "batch_size": args.batch_size, "world_size": world,
                              "steps": args.steps, "seed": args.seed, "backend": "gloo"})

    def save(step: int) -> None:
        if rank == 0:
            checkpointer.save(step, to_bytes(step, model, optimizer))

    last_saved = start
    for step in range(start + 1, args.steps + 1):
        t0 = time.perf_counter()
        lr = learning_rate(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch(args.seed, step, rank, args.batch_size, teacher)
        loss = F.cross_entropy(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf))
        optimizer.step()
        if args.step_time > 0:
            time.sleep(args.step_time)
        # One small all-reduce carries the mean loss and whether any rank was told to
        # stop, so every rank leaves the loop after the same step.
        shared = torch.tensor([loss.item(), 1.0 if trainyard.preemption_requested() else 0.0],
                              dtype=torch.float64)
        dist.all_reduce(shared)
        mean_loss, preempted = shared[0].item() / world, shared[1].item() > 0
        step_time = time.perf_counter() - t0
        trainyard.log(step=step, loss=mean_loss, grad_norm=grad_norm, lr=lr,
                      step_time_s=step_time, samples_per_s=args.batch_size / step_time,
                      num_params=num_params)
        if step % args.log_every == 0 or step == start + 1:
            print(f"rank {rank} step {step}/{args.steps} loss {mean_loss:.4f} lr {lr:.4f}",
                  flush=True)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            save(step)
            last_saved = step
        if preempted:
            if last_saved != step:
                save(step)
            checkpointer.wait()
            trainyard.flush()
            dist.barrier()  # no rank leaves before rank 0's checkpoint is durable
            dist.destroy_process_group()
            print(f"rank {rank}: preempted at step {step}; exiting with "
                  f"{trainyard.EXIT_PREEMPTED}", flush=True)
            return trainyard.EXIT_PREEMPTED
    if start < args.steps and last_saved != args.steps:
        save(args.steps)
    checkpointer.wait()
    trainyard.flush()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done, {args.steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
