"""The GPU worker process (`gpu_worker`: compile, run, judge each plan of each graph sent), its
handle in the driver (`Worker`: start, wait for its hello, kill) and the compile pool's set-up.
Both process targets live here, at module level, so that spawned processes find them by path."""
from __future__ import annotations

import os
import queue
import time
import traceback

from .judge import run_graph
from .plans import error_text


def redirect_output(path: str | None) -> None:
    """This process's stdout and stderr (TileLang's and nvcc's chatter, a fault's last words) into
    `path` (appended), or nowhere for None: the campaign's own lines stay readable."""
    fd = os.open(path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def log_tail(path: str | None, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except (OSError, TypeError):
        return ""


def gpu_worker(device: str, index: int, inq, outq, log: str | None = None) -> None:
    """One process: compile (a cache hit), run, judge each plan of each graph sent; messages
    ("hello", gpu, versions), ("start", gid, i), ("plan", gid, i, record), ("done", gid, info).
    Worker `index` runs on GPU index % device_count; its output goes to `log`."""
    if log:
        redirect_output(log)
    import torch

    import leantile
    from leantile import ir, runtime

    dev = torch.device("cpu")
    if device == "cuda":
        dev = torch.device("cuda", index % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    name = torch.cuda.get_device_name(dev) if device == "cuda" else "cpu"
    try:
        from importlib import metadata
        versions = {p: metadata.version(p) for p in ("torch",)}
        try:
            versions["tilelang"] = metadata.version("tilelang")
        except Exception:
            versions["tilelang"] = None
    except Exception:
        versions = {}
    outq.put(("hello", name, versions))
    while True:
        job = inq.get()
        if job is None:
            return
        gid = job["gid"]
        try:
            info = run_graph(job, dev, outq, leantile, ir, runtime, torch)
        except Exception as e:  # outside any plan (inputs, references): the graph is skipped, said why
            info = {"error": error_text(e), "trace": traceback.format_exc()[-2000:]}
        outq.put(("done", gid, info))
        runtime._CACHE.clear()  # each graph's modules are its own: do not keep them all
        if dev.type == "cuda":
            torch.cuda.empty_cache()



class Worker:
    """A GPU worker process: started, fed one graph at a time, restarted after a fault."""

    def __init__(self, ctx, device: str, index: int, log: str | None = None):
        self.ctx, self.device, self.index, self.log = ctx, device, index, log
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=gpu_worker, args=(device, index, self.inq, self.outq, log), daemon=True)
        self.proc.start()
        self.started, self.gpu, self.versions = time.time(), None, {}
        self.job, self.last = None, time.time()  # the graph it runs, its last word

    def wait_ready(self, timeout: float = 300.0) -> None:
        while self.gpu is None:
            try:
                msg = self.outq.get(timeout=2)
            except queue.Empty:
                if not self.proc.is_alive() or time.time() - self.started > timeout:
                    self.kill()
                    raise RuntimeError(f"GPU worker {self.index} did not start (exit code {self.proc.exitcode})")
                continue
            if msg[0] == "hello":
                self.gpu, self.versions = msg[1], msg[2]

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)


def init_compile_process(n_gpus: int) -> None:
    """A compile process sees one GPU (round robin by pid), so that whatever CUDA state TileLang's
    compile makes is spread over the GPUs, not all on the first; its chatter goes nowhere (a
    failed compile's error comes back as its result)."""
    redirect_output(None)
    if n_gpus > 1:  # one of the GPUs this campaign was given (CUDA_VISIBLE_DEVICES=1,2,3 leaves 0 to others)
        given = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        ids = given or [str(i) for i in range(n_gpus)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[os.getpid() % len(ids)]
