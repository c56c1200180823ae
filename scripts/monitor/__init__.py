"""Monitoring for notebook 07: a real Prometheus server that scrapes Triton and Ray Serve during a
benchmark, PromQL queries over its HTTP API, and the Grafana dashboard that ships with the repository.

* :mod:`scripts.monitor.prometheus`: the scrape config, ``PrometheusServer`` (started on 127.0.0.1,
  stopped by handle), ``query`` / ``query_range``, ``check_config`` (``promtool check config``).
* :mod:`scripts.monitor.dashboard`: ``env/monitoring/grafana/llm-serving.json``'s panels and a check
  that each panel's PromQL returns data from a live Prometheus.
"""
