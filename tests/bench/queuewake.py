"""Benchmark: what one key costs the work queue of an idle controller, in CPU. Prints figures;
asserts nothing.

    python -m tests.bench.queuewake --items 20000 --workers 4

Why it exists: an idle controller's queue takes one key at a time (a Secret update, then its
route), with its other workers blocked in ``get()``. Each key's CPU there is on the propagation
path, shared with the watch threads by one GIL on two cores. A ``done()`` that woke every idle
worker (one condition for the workers and a draining stop, notified to all whenever nothing was
left processing) cost each of them a wake-up, the lock and the GIL, to find nothing; the figures
before and after that change are in its commit message. This drives
:class:`controllers.runtime.queue.Queue` the same way: ``--workers`` threads take keys and call
``done()``; one key is added once the one before it is done; it prints the process's CPU and the
wall time per key, and the workers' wake-ups per key (1.00 at best: the one that takes it).
"""

from __future__ import annotations

import argparse
import threading
import time

from controllers.runtime.queue import Queue
from tests.bench.figures import machine, row
from tests.support.conditions import count_worker_wakeups


def run(items: int, workers: int) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and wake-ups for ``items`` keys taken one at a time."""
    queue: Queue[int] = Queue()
    ready = count_worker_wakeups(queue)
    finished = threading.Semaphore(0)

    def work() -> None:
        while True:
            item, shutdown = queue.get()
            if shutdown:
                return
            assert item is not None
            queue.done(item)
            finished.release()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(items):
        queue.add(i)
        finished.acquire()  # the key is done: the controller is idle again
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    woken = ready.woken
    queue.shut_down()
    for t in threads:
        t.join()
    return cpu, wall, woken


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=4, help="the controller's --workers")
    args = parser.parse_args()
    cpu, wall, woken = run(args.items, args.workers)
    print(f"work queue, one key at a time, {args.workers} workers, {args.items} keys")
    print(f"machine: {machine()}")
    row("CPU per key (the process's)", f"{cpu / args.items * 1e6:.1f} µs")
    row("wall time per key", f"{wall / args.items * 1e6:.1f} µs")
    row("wake-ups per key (one takes the key)", f"{woken / args.items:.2f}")


if __name__ == "__main__":
    main()
