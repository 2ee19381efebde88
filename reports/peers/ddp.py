"""The data-parallel PyTorch peer: a golden bundle trained under DistributedDataParallel.

    /usr/bin/python3 -m reports.peers.ddp BUNDLE --nproc 2 --precision fp32|fp64 --out RESULTS.json
    python3 -m torch.distributed.run --nproc_per_node 2 -m reports.peers.ddp BUNDLE --precision fp32 \
        --out RESULTS.json --device cuda        (torchrun: one process per GPU, any number of nodes)

With --nproc R this process spawns R workers itself (torch.multiprocessing.spawn, rendezvous over
TCP on 127.0.0.1 with a free port): that needs nothing but torch, and works with Debian's torch
1.13 on a CPU (gloo). Under torch.distributed.run (torchrun) the launcher has set RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT and --nproc is left out. The backend is gloo on a CPU and NCCL on GPUs
(rank r uses cuda:LOCAL_RANK; NCCL needs one GPU per rank). Rank 0 writes the results.

Everything single.py's docstring lists must match; what is particular to data parallelism:
  - rank r of R trains on rows [r*B/R, (r+1)*B/R) of each step's global batch (B % R == 0);
  - the loss is the mean over the counted targets (!= -1) of the WHOLE global batch, so ranks with
    more ignored targets must not weigh more. Each rank computes the SUM of its cross-entropies and
    divides by the global count (every rank holds the whole batch, so it counts the targets itself;
    otherwise all-reduce the local counts). DDP then AVERAGES gradients over the R ranks, i.e.
    divides their sum by R; multiplying each rank's loss by R cancels that, so the gradient every
    rank ends with is sum_r d(sum_r)/dp / count = the gradient of the global loss. (Scaling by R
    and dividing by R is exact in binary floating point when R is a power of two.) Megatron-LM,
    DeepSpeed and torchtitan each have their own knob for this (e.g. "calculate per token loss",
    loss scaling by the data-parallel size): a per-rank mean averaged over ranks is wrong whenever
    the ranks count different numbers of targets;
  - the reported loss is the all-reduced sum over ranks divided by the global count;
  - after the all-reduce every rank holds the same full gradients, so clip_grad_norm_ on the
    local (replicated) parameters gives the global pre-clip norm without further communication.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from reports.golden.bundle import BundleError, read_bundle
from reports.peers import recipe
from reports.peers.gpt2 import export_hf_weights


def train(bundle, precision, device, rank, world):
    """The K steps on this rank's rows; returns (losses, grad_norms, {step: HF tensors})."""
    B = bundle.batch_size
    if B % world:
        raise ValueError(f"batch_size {B} is not a multiple of the {world} data-parallel ranks")
    rows = slice(rank * B // world, (rank + 1) * B // world)
    recipe.configure_precision(device)
    model = recipe.make_model(bundle, precision, device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = recipe.make_optimizer(model, bundle.optimizer)  # the same Parameter objects DDP reduces into
    max_norm = recipe.clip_max_norm(bundle.optimizer)
    tokens, targets = recipe.batches(bundle, device)  # [K, B, T], the whole global batch on every rank
    losses, norms, saved = [], [], {}
    for k in range(bundle.steps):
        recipe.set_lr(opt, bundle.optimizer["lrs"][k])
        opt.zero_grad(set_to_none=True)
        count = (targets[k] != -1).sum()  # counted targets of the GLOBAL batch (see the docstring)
        local_sum = recipe.token_loss_sum(ddp(tokens[k, rows]), targets[k, rows])
        (local_sum * world / count).backward()  # DDP's average over ranks divides the R back out
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # pre-clip, global
        opt.step()
        total = local_sum.detach().clone()
        dist.all_reduce(total)  # sum over ranks of the per-rank sums
        losses.append((total / count).item())
        norms.append(norm.item())
        if k + 1 in bundle.param_steps:
            saved[k + 1] = export_hf_weights(model)
    return losses, norms, saved


def worker(rank, world, init_method, args):
    """One rank; with init_method None the launcher's environment (torchrun) is used."""
    on_gpu = args.device.startswith("cuda")
    if on_gpu:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # ranks share the cores
    backend = "nccl" if on_gpu else "gloo"
    if init_method is None:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    try:
        bundle = read_bundle(args.bundle)
        start = time.perf_counter()
        losses, norms, saved = train(bundle, args.precision, device, rank, world)
        if rank == 0:
            framework = f"pytorch {torch.__version__} (DDP, {world} processes, {backend})"
            recipe.write_results(args.out, framework, args.precision, losses, norms, saved)
            print(f"ddp peer: {bundle.steps} steps in {args.precision} on {world} x {device.type} ({backend}) in "
                  f"{time.perf_counter() - start:.1f} s; loss {losses[0]:.6f} -> {losses[-1]:.6f} -> {args.out}")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m reports.peers.ddp", description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="a golden bundle directory (tripod golden --out DIR)")
    parser.add_argument("--nproc", type=int, help="spawn this many ranks (leave out under torchrun)")
    parser.add_argument("--precision", choices=["fp32", "fp64"], default="fp32")
    parser.add_argument("--out", required=True, help="RESULTS.json (rank 0 writes it and the parameters)")
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU per rank)")
    args = parser.parse_args(argv)
    try:
        bundle = read_bundle(args.bundle)  # fail before starting processes
    except BundleError as e:
        print(f"ddp peer: bad bundle: {e}", file=sys.stderr)
        return 2
    if args.nproc is None:
        if "WORLD_SIZE" not in os.environ:
            parser.error("give --nproc R, or launch under torch.distributed.run (torchrun)")
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None, args)
        return 0
    if args.nproc < 1 or bundle.batch_size % args.nproc:
        parser.error(f"--nproc {args.nproc} must divide the bundle's batch_size {bundle.batch_size}")
    # spawn raises ProcessRaisedException (with the worker's traceback) when a rank fails.
    mp.spawn(worker, args=(args.nproc, f"tcp://127.0.0.1:{free_port()}", args), nprocs=args.nproc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
