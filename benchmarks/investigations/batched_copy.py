"""DDP's ``batched_grad_copy=True`` (torch 2.14: a bucket's gradients copied in with one
``_foreach_copy_`` and one ``div_`` when it is ready, not one copy per parameter) against the default,
with 1 MiB and 25 MiB caps: a lever for tuning only if it shortens the CPU step. One process, a
world of one on gloo (the all-reduce is trivial; the copies into the buckets are what differ),
variants interleaved round by round, medians. Also checks that both give the same parameters.

    python benchmarks/investigations/batched_copy.py resnet18 20
"""

import statistics
import sys
import time

import torch
import torch.distributed as dist
import torchvision


def main(name: str, rounds: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    def make(batched: bool, cap: int):
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)(weights=None)
        ddp = torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb=cap, batched_grad_copy=batched)
        return ddp, torch.optim.SGD(m.parameters(), lr=0.01)

    x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 1000, (16,))
    variants = {f"batched={b} cap={c}": make(b, c) for b in (False, True) for c in (1, 25)}

    def step(ddp, opt) -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for ddp, opt in variants.values():
        for _ in range(3):
            step(ddp, opt)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, (ddp, opt) in variants.items():
            t = time.perf_counter()
            step(ddp, opt)
            times[k].append(time.perf_counter() - t)
    base = statistics.median(times["batched=False cap=25"])
    for k, v in times.items():
        med = statistics.median(v)
        print(f"{name} {k}: {med * 1e3:.1f} ms [{min(v) * 1e3:.1f}, {max(v) * 1e3:.1f}], {base / med:.3f}x of stock DDP's")
    a, b = (dict(variants[k][0].module.named_parameters()) for k in ("batched=False cap=1", "batched=True cap=1"))
    print("same parameters after the same steps:", all(torch.equal(a[n], b[n]) for n in a))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "resnet18", int(sys.argv[2]) if len(sys.argv) > 2 else 20)
