"""Work on contiguous shards of a list of questions, each shard in its own spawned process: how the warm starts'
labels (:mod:`train.counterfactual`, :mod:`train.dagger`) and the detection labels (:mod:`eval.detection.labels`)
use several CPUs. The results come back in shard order, so a question's labels are the same for any number of
processes.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np


def contiguous_shards(questions: list[int], n: int) -> list[list[int]]:
    """``questions`` cut into ``n`` contiguous shards of near-equal size, in order."""
    bounds = np.linspace(0, len(questions), n + 1).round().astype(int)
    return [questions[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def map_shards(fn, args: list[tuple]) -> list[Any]:
    """``[fn(*a) for a in args]``, each call in its own spawned process (one torch thread each; the processes log as
    the driver does), the results in the order of ``args``. A failing call (or a dead worker) stops the others and
    its error is raised here."""
    import concurrent.futures as cf
    import multiprocessing as mp

    root = logging.getLogger()  # the workers log as the driver does (it may have configured nothing)
    log_level = root.getEffectiveLevel() if root.handlers else None
    pool = cf.ProcessPoolExecutor(len(args), mp_context=mp.get_context("spawn"), initializer=_init_worker,
                                  initargs=(log_level,))
    try:
        futures = [pool.submit(fn, *a) for a in args]
        cf.wait(futures, return_when=cf.FIRST_EXCEPTION)  # a failing shard (or a dead worker) ends the wait
        return [f.result() for f in futures]  # its error is raised here; else in shard order
    except BaseException:
        for proc in list(getattr(pool, "_processes", {}).values()):  # stop the shards still working
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _init_worker(log_level: int | None) -> None:
    import torch

    torch.set_num_threads(1)  # one CPU per labelling process
    if log_level is not None:
        logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s[pid %(process)d]: %(message)s",
                            datefmt="%H:%M:%S")
