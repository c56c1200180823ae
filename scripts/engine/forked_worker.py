"""vLLM's CPU worker for an engine whose processes fork (``engine_start_method = "fork"``).

A forked worker inherits an OpenMP runtime its parent loaded, without the binding vLLM sets for a
worker through the environment (``scripts.engine.omp``): measured here, its threads then roamed
both cores and a single request streamed at half the speed. This worker applies the same binding
itself, from the same variables, before its first parallel operation starts the thread pool.

It also freezes what it inherited (``gc.freeze()``, as Python's ``gc`` documentation advises for a
fork without exec): a forked worker holds the objects of the Triton stub and of the engine core
besides its own, and without the freeze every full collection walks them all. In notebook 07's
streaming phase the engine's CPU per output token fell from 0.66-0.72 ms to 0.55 ms with it.

This module imports vLLM's worker; ``scripts.engine.config.FORKED_WORKER_CLS`` names it for vLLM's
``worker_cls`` setting, which vLLM imports in the worker process.
"""
from __future__ import annotations

import gc

from vllm.v1.worker.cpu_worker import CPUWorker

from scripts.engine.omp import bind_like_a_spawned_worker


class ForkedCPUWorker(CPUWorker):
    def __init__(self, *args, **kwargs):
        gc.freeze()
        bind_like_a_spawned_worker()
        super().__init__(*args, **kwargs)
