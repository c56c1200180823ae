"""Serve configs and clusters as the capacity tests write them (dicts, no Ray cluster needed)."""


def app(*deployments, name="llm"):
    return {"applications": [{"name": name, "route_prefix": "/", "import_path": "x:app",
                              "deployments": list(deployments)}]}


def dep(name, num_gpus=None, replicas=None, autoscale=None, **options):
    d = {"name": name}
    if replicas is not None:
        d["num_replicas"] = replicas
    if autoscale is not None:
        d["autoscaling_config"] = {"min_replicas": autoscale[0], "max_replicas": autoscale[1]}
    if num_gpus is not None:
        options["num_gpus"] = num_gpus
    if options:
        d["ray_actor_options"] = options
    return d


def nodes(*gpus, cpu=16):
    return {"nodes": [{"name": f"n{i}", "CPU": cpu, "GPU": g, "memory": "64GiB"} for i, g in enumerate(gpus)]}


def kinds(report):
    return [(f.deployment, f.kind) for f in report.findings]
