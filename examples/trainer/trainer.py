#!/usr/bin/env python3
"""A small trainer that behaves like a real training job, in pure Python.

It fits a one-hidden-layer MLP to a fixed random "teacher" network with SGD, a linear
warmup and a cosine learning-rate decay, and does everything a Trainyard job should:

- logs loss, grad_norm, lr, step_time_s, tokens_per_s every step through the SDK, and
  data_wait_s through trainyard.timed() around its data loader;
- checkpoints every --checkpoint-every steps and at the end (two-phase: the loop only
  pays for the in-memory snapshot);
- on a preemption notice (SIGUSR1 or TRAINYARD_PREEMPT_FILE), saves a checkpoint,
  waits until it is durable and exits with status 75 (trainyard.EXIT_PREEMPTED);
- resumes from TRAINYARD_RESUME_FROM (or the checkpoint directory's `latest`) with the
  same step counter; the batch of each step is drawn from (seed, step, rank), so a
  resumed run computes exactly the losses an uninterrupted one would;
- saves a checkpoint at once when Trainyard asks (trainyard.checkpoint_requested());
- plays along with injected faults (trainyard.faults(), docs/faults.md): it stops
  stepping while hung, waits data_stall_s for each batch, takes slow_factor times as
  long per step, and logs a NaN loss or a 100x gradient norm when told to (the model
  itself is never harmed, so clearing the fault leaves the run as it was).

With WORLD_SIZE > 1 each rank draws its own shard of every global batch. There is no
real communication: each rank also draws the other ranks' shards (the data is
synthetic and seeded) and averages the gradients, which is what an all-reduce would
give, so all ranks hold the same weights, as under DDP. Rank 0 writes the checkpoints;
every rank loads them.

Exit status: 0 when all steps are done, 75 when stopped by preemption after a
checkpoint, 1 on failure (including --fail-at-step), 2 on bad arguments.

Without Trainyard's environment it runs standalone, writing checkpoints and metrics to
a fresh temp directory that it prints.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

try:
    import trainyard
except ImportError:  # run from a checkout without PYTHONPATH: use the SDK next door
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "sdk", "python"))
    import trainyard

INPUTS = 8
HIDDEN = 16
NOISE = 0.05
HANG_POLL_S = 0.2  # how often a hung loop looks for the end of the hang (or a preemption)
GRAD_SPIKE_FACTOR = 100.0  # the logged gradient norm under a grad-spike fault


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="total training steps")
    parser.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                        help="sleep this long per step, to mimic GPU work")
    parser.add_argument("--checkpoint-every", type=int, default=50, metavar="STEPS",
                        help="checkpoint period in steps (0: only at the end and on "
                             "preemption)")
    parser.add_argument("--fail-at-step", type=int, default=0, metavar="STEP",
                        help="crash with exit status 1 when this step starts (0: never)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the model and the data")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.05, help="peak learning rate")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--tokens-per-sample", type=int, default=512,
                        help="pretend sequence length, for tokens_per_s")
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "tokens_per_sample", "keep"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, "
                         f"got {getattr(args, name)}")
    for name in ("step_time", "checkpoint_every", "fail_at_step", "warmup_steps"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be >= 0, "
                         f"got {getattr(args, name)}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr: must be a positive number, got {args.lr}")
    return args


# ---- the model: x -> w2 . tanh(W1 x + b1) + b2 ----

@dataclass
class Model:
    w1: list[list[float]]  # HIDDEN x INPUTS
    b1: list[float]
    w2: list[float]
    b2: float

    @staticmethod
    def random(rng: random.Random, scale: float) -> "Model":
        return Model(w1=[[rng.gauss(0.0, scale) for _ in range(INPUTS)] for _ in range(HIDDEN)],
                     b1=[rng.gauss(0.0, scale) for _ in range(HIDDEN)],
                     w2=[rng.gauss(0.0, scale) for _ in range(HIDDEN)],
                     b2=rng.gauss(0.0, scale))

    def forward(self, x: list[float]) -> tuple[float, list[float]]:
        hidden = [math.tanh(sum(w * xi for w, xi in zip(row, x)) + b)
                  for row, b in zip(self.w1, self.b1)]
        return sum(w * h for w, h in zip(self.w2, hidden)) + self.b2, hidden

    def to_state(self) -> dict[str, object]:
        return {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2}

    @staticmethod
    def from_state(state: dict[str, object]) -> "Model":
        return Model(w1=state["w1"], b1=state["b1"], w2=state["w2"],  # type: ignore[arg-type]
                     b2=state["b2"])  # type: ignore[arg-type]


def shard(seed: int, step: int, rank: int, size: int,
          teacher: Model) -> list[tuple[list[float], float]]:
    """The batch of `rank` at `step`: a pure function of its arguments, so a resumed
    run sees the same data as an uninterrupted one."""
    rng = random.Random(seed * 1_000_000_007 + step * 65_537 + rank)
    batch = []
    for _ in range(size):
        x = [rng.uniform(-1.0, 1.0) for _ in range(INPUTS)]
        batch.append((x, teacher.forward(x)[0] + rng.gauss(0.0, NOISE)))
    return batch


def global_batches(args: argparse.Namespace, teacher: Model, world: int, first_step: int
                   ) -> Iterator[tuple[int, list[list[tuple[list[float], float]]]]]:
    """(step, [shard of rank 0, shard of rank 1, ...]) for each step from `first_step`
    to --steps: the trainer's data loader. An injected data stall (data_stall_s) makes
    each batch that much later, as a starved input pipeline would."""
    for step in range(first_step, args.steps + 1):
        stall = trainyard.faults()["data_stall_s"]
        if stall > 0:
            time.sleep(stall)
        yield step, [shard(args.seed, step, r, args.batch_size, teacher) for r in range(world)]


def loss_and_gradients(model: Model, batch: list[tuple[list[float], float]]
                       ) -> tuple[float, Model]:
    """Mean squared error over `batch` and its gradient (as a Model of gradients)."""
    g = Model(w1=[[0.0] * INPUTS for _ in range(HIDDEN)], b1=[0.0] * HIDDEN,
              w2=[0.0] * HIDDEN, b2=0.0)
    total = 0.0
    scale = 2.0 / len(batch)
    for x, target in batch:
        y, hidden = model.forward(x)
        error = y - target
        total += error * error
        dy = scale * error
        g.b2 += dy
        for j in range(HIDDEN):
            g.w2[j] += dy * hidden[j]
            dpre = dy * model.w2[j] * (1.0 - hidden[j] * hidden[j])
            g.b1[j] += dpre
            row = g.w1[j]
            for i in range(INPUTS):
                row[i] += dpre * x[i]
    return total / len(batch), g


def average(grads: list[Model]) -> Model:
    """What an all-reduce (mean) of the ranks' gradients would return."""
    n = len(grads)
    return Model(
        w1=[[sum(g.w1[j][i] for g in grads) / n for i in range(INPUTS)] for j in range(HIDDEN)],
        b1=[sum(g.b1[j] for g in grads) / n for j in range(HIDDEN)],
        w2=[sum(g.w2[j] for g in grads) / n for j in range(HIDDEN)],
        b2=sum(g.b2 for g in grads) / n)


def norm(g: Model) -> float:
    return math.sqrt(sum(v * v for row in g.w1 for v in row) + sum(v * v for v in g.b1)
                     + sum(v * v for v in g.w2) + g.b2 * g.b2)


def sgd_update(model: Model, g: Model, lr: float) -> None:
    for j in range(HIDDEN):
        row, grow = model.w1[j], g.w1[j]
        for i in range(INPUTS):
            row[i] -= lr * grow[i]
        model.b1[j] -= lr * g.b1[j]
        model.w2[j] -= lr * g.w2[j]
    model.b2 -= lr * g.b2


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warmup to --lr, then cosine decay to a tenth of it at --steps."""
    if step <= args.warmup_steps:
        return args.lr * step / args.warmup_steps
    span = max(1, args.steps - args.warmup_steps)
    progress = min(1.0, (step - args.warmup_steps) / span)
    return args.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


# ---- the job ----

def standalone_defaults() -> None:
    """Outside Trainyard: put checkpoints and metrics in a fresh temp directory."""
    if trainyard.checkpoint_dir() is None:
        run_dir = tempfile.mkdtemp(prefix="trainyard-trainer-")
        os.environ["TRAINYARD_CHECKPOINT_DIR"] = os.path.join(run_dir, "checkpoints")
        print(f"standalone run: checkpoints in {run_dir}/checkpoints", flush=True)
        if not os.environ.get("TRAINYARD_METRICS_FILE"):
            metrics_file = os.path.join(run_dir, "metrics.jsonl")
            trainyard.configure(metrics_file=metrics_file)
            print(f"standalone run: metrics in {metrics_file}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    standalone_defaults()
    rank, world = trainyard.rank(), trainyard.world_size()
    if rank >= world:
        print(f"RANK: must be < WORLD_SIZE ({world}), got {rank}", file=sys.stderr)
        return 2
    directory = trainyard.checkpoint_dir()
    assert directory is not None  # standalone_defaults() set it
    checkpointer = trainyard.Checkpointer(directory, keep=args.keep,
                                          logger=trainyard.default_logger(),
                                          resume_from=trainyard.resume_from())
    teacher = Model.random(random.Random(args.seed * 2 + 1), scale=1.0)
    model = Model.random(random.Random(args.seed * 2), scale=0.3)
    start = 0
    loaded = checkpointer.load_latest()
    if loaded is not None:
        start, state = loaded
        model = Model.from_state(state["model"])
        print(f"rank {rank}: resumed from {checkpointer.loaded_path} at step {start}",
              flush=True)
    else:
        print(f"rank {rank}: fresh start", flush=True)
    if rank == 0:
        trainyard.log_params({"model": "mlp", "inputs": INPUTS, "hidden": HIDDEN,
                              "lr": args.lr, "warmup_steps": args.warmup_steps,
                              "steps": args.steps, "batch_size": args.batch_size,
                              "world_size": world, "seed": args.seed})
        trainyard.log(step=start, num_params=HIDDEN * INPUTS + 2 * HIDDEN + 1)

    def save(step: int) -> None:
        if rank == 0:
            checkpointer.save(step, {"step": step, "model": model.to_state()})

    last_saved = start

    def preempted(step: int) -> int:
        """Saves the state after `step` (unless saved), waits for it, returns 75."""
        if last_saved != step:
            save(step)
        checkpointer.wait()
        trainyard.flush()
        print(f"rank {rank}: preempted at step {step}; checkpoint saved, exiting "
              f"with {trainyard.EXIT_PREEMPTED}", flush=True)
        return trainyard.EXIT_PREEMPTED

    # Each step's record gets the wait for its batch as data_wait_s (trainyard.timed).
    data = trainyard.timed(global_batches(args, teacher, world, start + 1))
    for step, batches in data:
        if step == args.fail_at_step:
            raise RuntimeError(f"simulated failure at step {step} (--fail-at-step)")
        effects = trainyard.faults()
        if effects["hang"]:
            # A hung GPU: no progress, though a preemption notice still gets through.
            print(f"rank {rank}: hung before step {step} (injected fault)", flush=True)
            while effects["hang"]:
                if trainyard.preemption_requested():
                    return preempted(step - 1)
                time.sleep(HANG_POLL_S)
                effects = trainyard.faults()
            print(f"rank {rank}: no longer hung", flush=True)
        t_compute = time.perf_counter()
        lr = learning_rate(step, args)
        # Every rank computes every shard's gradient: a simulated all-reduce.
        results = [loss_and_gradients(model, batch) for batch in batches]
        loss = sum(l for l, _ in results) / world
        grad = average([g for _, g in results])
        grad_norm = norm(grad)
        sgd_update(model, grad, lr)
        # A slow GPU (or link) stretches the step's work, the pretend GPU time included.
        slow = effects["slow_factor"]
        extra = (slow - 1.0) * (time.perf_counter() - t_compute) if slow > 1.0 else 0.0
        if args.step_time > 0 or extra > 0:
            time.sleep(args.step_time * slow + extra)
        # The step: waiting for its batch, then the work.
        step_time = data.last_wait_s + (time.perf_counter() - t_compute)
        # Injected training faults change what is logged, never the model.
        logged_loss = float("nan") if effects["loss_nan"] else loss
        logged_grad_norm = grad_norm * GRAD_SPIKE_FACTOR if effects["grad_spike"] else grad_norm
        trainyard.log(step=step, loss=logged_loss, grad_norm=logged_grad_norm, lr=lr,
                      step_time_s=step_time,
                      tokens_per_s=args.batch_size * args.tokens_per_sample / step_time)
        print(f"rank {rank} step {step}/{args.steps} loss {logged_loss:.6f} lr {lr:.5f} "
              f"grad_norm {logged_grad_norm:.4f}", flush=True)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            save(step)
            last_saved = step
        if trainyard.checkpoint_requested() and last_saved != step:
            print(f"rank {rank}: checkpoint requested at step {step}", flush=True)
            save(step)
            last_saved = step
        if trainyard.preemption_requested():
            return preempted(step)
    if last_saved != args.steps and start < args.steps:
        save(args.steps)
    checkpointer.wait()
    trainyard.flush()
    print(f"rank {rank}: done, {args.steps} steps; {data.wait_fraction:.1%} of the time "
          f"waiting for data", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
