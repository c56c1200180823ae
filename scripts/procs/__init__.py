"""The processes this project starts, whoever starts them: Triton, ``vllm serve``, Prometheus, Ray.

* :mod:`scripts.procs.ports`: a free port of 127.0.0.1 for the next server (``free_port``);
* :mod:`scripts.procs.process_guard`: the guard that stops a server's process group (and removes its
  ``/dev/shm`` files) when the process that owns it dies without stopping it;
* :mod:`scripts.procs.connections`: the client connections a local server still has open;
* :mod:`scripts.procs.managed`: :class:`~scripts.procs.managed.ManagedServer`, the start / wait-ready /
  log-tail / stop cycle every server of this project shares.
"""
