"""Clients of what the notebooks start: chat requests to a Serve application (:mod:`.chat`), loads
sent from a thread of their own (:mod:`.load`), and ``serve.status()`` polled until a condition holds
(:mod:`.serve_status`). Benchmarks (:mod:`scripts.bench`), the model lifecycle
(:mod:`scripts.lifecycle`) and the notebook lab (:mod:`scripts.lab`) use them; they use none of those."""
