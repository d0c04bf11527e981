"""The one way leantile starts worker processes (`kernels`' lowering, the suite's and the
search's compiles): spawned, never forked (no CUDA context or TileLang state is copied), no
more of them than the free memory holds, each leaving Ctrl-C to the command, which ends them
(leantile.interrupts; a terminal's Ctrl-C reaches the whole process group, and an idle worker
would print a traceback); stopped mid-task and reaped when the command stops."""
from __future__ import annotations

import time

WORKER_BYTES = 1 << 30  # a worker: ~330 MiB once TileLang is imported, lowering or nvcc on top


def memory_for_workers(bytes_each: int = WORKER_BYTES) -> int:
    """How many workers the available memory holds (Linux's MemAvailable): a 64-core machine with
    16 GiB free must not start 39 of them. Unknown: no cap."""
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 1 << 20
    return max(1, kib * 1024 // bytes_each)


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def spawn_pool(workers: int):
    """A ProcessPoolExecutor of at most `workers` spawned processes (fewer where the memory holds
    fewer), or None where no process can be started here (a sandbox without /dev/shm: sem_open
    fails): the caller then works in its own process."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    try:
        return ProcessPoolExecutor(max_workers=max(1, min(workers, memory_for_workers())),
                                   mp_context=mp.get_context("spawn"), initializer=_ignore_sigint)
    except (OSError, NotImplementedError, ValueError):
        return None


def stop_now(pool) -> None:
    """End the pool's workers now, mid-task (Ctrl-C, SIGTERM, an error, or the work is done),
    reap them (no zombie left behind) and drop what was queued."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)
    for proc in procs:  # still there (seen once in a test: a worker caught while it was starting): killed
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
    # The executor's own thread sees the worker die and joins it too: where its waitpid reaps the
    # child first, ours fails (ECHILD), join returns at once and is_alive() stays True until that
    # thread records the exit code (test_stop_now_... saw it: stop_now back in 0.7 ms, the worker
    # "alive"). Wait for the exit codes, briefly, so that what returns is reaped and says so.
    deadline = time.monotonic() + 5
    while any(proc.is_alive() for proc in procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    queued = [w.future for w in list((getattr(pool, "_pending_work_items", None) or {}).values())]
    pool.shutdown(wait=False, cancel_futures=True)
    # The executor's thread cancels what was queued, and may do so late (make test under load,
    # 2026-11-30: after tell_cancelled had looked, the future then CANCELLED and never told). Nor
    # may anyone else touch a future while that thread lives: it calls set_running_or_notify_cancel
    # itself, which raises on one already told, and the thread dies leaving the running future
    # pending (seen too). So: wait for the thread to end (its workers are gone: it fails what ran
    # with BrokenProcessPool and exits), then tell what it cancelled and left untold.
    thread = getattr(pool, "_executor_manager_thread", None)
    if thread is not None:
        thread.join(timeout=10)
    if thread is None or not thread.is_alive():
        tell_cancelled(queued)


def tell_cancelled(futures) -> None:
    """Tell the waiters of each cancelled future of `futures` that it is done. shutdown(cancel_futures=
    True) cancels what was queued but leaves telling to the executor's own thread, which a pool whose
    workers are gone may never get to: concurrent.futures.wait then counts the cancelled future as
    pending until its timeout (make test, 2026-11-30: a 60 s wait, then the assertion). The thread
    may tell them first; then there is nothing left to tell."""
    for f in futures:
        if f.cancelled() and getattr(f, "_state", None) == "CANCELLED":  # not yet CANCELLED_AND_NOTIFIED
            try:
                f.set_running_or_notify_cancel()
            except RuntimeError:  # told in between, by the executor's thread
                pass
