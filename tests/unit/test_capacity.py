"""Unit tests for scripts.capacity: no Ray cluster needed (clusters are given as dicts)."""
import json
import re
import sys
import types

import pytest

from scripts import capacity
from scripts.capacity import CapacityConfigError, check_capacity

GiB = 2**30

# Llama-3.2-1B-Instruct's config.json (the architecture fields the estimate reads).
LLAMA_1B = {
    "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True,
}
TRTLLM_ENGINE = {"engine": "tensorrt_llm", "dtype": "float16", "max_seq_len": 2048, "max_batch_size": 8}


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


# -- conflicts --------------------------------------------------------------------------------

def test_everything_fits():
    report = check_capacity(app(dep("Triton", 1, autoscale=(1, 2)), dep("Ingress")), nodes(2))
    assert report.ok and report.findings == ()
    assert report.result("Triton").max_placed == 2 and report.result("llm/Ingress").min_placed == 1
    assert "Result: OK" in report.format_report()


def test_one_replica_needs_more_gpus_than_any_node():
    report = check_capacity(app(dep("Big", 4)), nodes(2))
    assert not report.ok
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica" and finding.deployment == "llm/Big"
    assert "GPU 4 on one node; the largest node has 2" in finding.message
    assert "lower num_gpus to 2" in finding.fix and "add a node with at least 4 GPU" in finding.fix
    assert report.result("Big").min_placed == 0 and not report.result("Big").schedulable


def test_replica_cannot_span_nodes_although_the_total_is_enough():
    report = check_capacity(app(dep("TwoGPU", 2)), nodes(1, 1))
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica"
    assert "the cluster has 2 in total, but a replica is one actor on one node" in finding.message


def test_max_replicas_beyond_the_cluster():
    report = check_capacity(app(dep("Triton", 1, autoscale=(1, 4), num_cpus=2)), nodes(2))
    result = report.result("Triton")
    assert result.min_fits and not result.max_fits
    assert (result.min_placed, result.max_placed) == (1, 2)
    (finding,) = report.findings
    assert finding.kind == "max_replicas"
    assert "only 2 of max_replicas=4 replicas fit" in finding.message
    (gpu,) = finding.shortages
    assert (gpu.resource, gpu.needed, gpu.free, gpu.short) == ("GPU", 2, 0, 2)
    assert "lower autoscaling_config.max_replicas to 2" in finding.fix
    assert "use num_gpus: 0.5" in finding.fix and "Triton memory estimate" in finding.fix
    text = report.format_report()
    assert "placed 1/1 at start, 2/4 at peak" in text and "GPU: short by 2" in text and "Result: FAIL" in text


def test_two_deployments_compete_for_the_same_gpus():
    report = check_capacity(app(dep("A", 1, replicas=2), dep("B", 1, replicas=1)), nodes(2))
    assert report.result("A").ok and not report.result("B").min_fits
    (finding,) = report.findings
    assert finding.kind == "min_replicas" and finding.deployment == "llm/B"
    assert "only 0 of num_replicas=1" in finding.message and "never becomes healthy" in finding.message
    assert "competes with llm/A (holds GPU 2)" in finding.message
    assert "lower the replicas or num_gpus of the deployments it competes with" in finding.fix


def test_min_replicas_of_all_are_placed_before_any_max():
    # Each needs 1 GPU at start; the peak of each would take the other's GPU.
    report = check_capacity(app(dep("A", 1, autoscale=(1, 2)), dep("B", 1, autoscale=(1, 2))), nodes(2))
    assert [(d.min_placed, d.max_placed) for d in report.deployments] == [(1, 1), (1, 1)]
    assert kinds(report) == [("llm/A", "max_replicas"), ("llm/B", "max_replicas")]
    assert "competes with llm/B (holds GPU 1)" in report.findings[0].message


def test_accelerator_type_no_node_has():
    report = check_capacity(app(dep("Triton", 1, accelerator_type="H100")),
                            {"nodes": [{"name": "a", "CPU": 8, "GPU": 1, "accelerator_type": "A10G"}]})
    (finding,) = report.findings
    assert finding.kind == "missing_resource"
    assert "accelerator_type:H100 0.001, which no node declares" in finding.message
    assert "remove accelerator_type" in finding.fix and "accelerator_type:A10G" in finding.fix
    assert "ray start --resources='{\"accelerator_type:H100\": 1}'" in finding.fix


def test_accelerator_type_and_custom_resource_present():
    cluster = {"nodes": [{"name": "a", "CPU": 8, "GPU": 1,
                          "resources": {"accelerator_type:H100": 1, "triton_slot": 2}}]}
    config = app(dep("Triton", 1, accelerator_type="H100", resources={"triton_slot": 1}))
    assert check_capacity(config, cluster).ok
    report = check_capacity(app(dep("X", resources={"accelerator_type:H100": 0.001, "nvlink": 1})), nodes(1))
    assert kinds(report) == [("llm/X", "missing_resource")]
    assert "nvlink" in report.findings[0].message and "accelerator_type:H100" in report.findings[0].message


def test_gpu_request_on_a_cluster_without_gpus_says_start_ray_with_gpus():
    report = check_capacity([dep("Triton", 1)], {"nodes": [{"CPU": 4}]})
    (finding,) = report.findings
    assert finding.kind == "unschedulable_replica" and "declares no GPUs" in finding.message
    assert "ray start --num-gpus=N" in finding.fix and "ray.init(num_gpus=N)" in finding.fix


def test_fractional_half_gpu_four_replicas_fit_on_two_gpus():
    assert check_capacity(app(dep("T", 0.5, replicas=4)), nodes(2)).ok
    report = check_capacity(app(dep("T", 0.5, replicas=4)), nodes(1, 1))
    assert report.ok and [n.replicas for n in report.nodes] == [{"llm/T": 2}, {"llm/T": 2}]


@pytest.mark.parametrize("cluster", [nodes(1, 1), nodes(2)], ids=["two-nodes-one-gpu", "one-node-two-gpus"])
def test_fractional_shares_do_not_span_gpus(cluster):
    # 5 x 0.4 = 2 GPUs in total, but a 0.4 share must come from one GPU: 0.8 per GPU, 4 replicas.
    report = check_capacity(app(dep("T", 0.4, autoscale=(2, 5))), cluster)
    result = report.result("T")
    assert (result.min_placed, result.max_placed) == (2, 4)
    (finding,) = report.findings
    (gpu,) = finding.shortages
    assert gpu.fragmented and gpu.free == pytest.approx(0.4) and gpu.largest_free == pytest.approx(0.2)
    assert "no node GPU has 0.4 free in one piece" in gpu.describe()
    assert "lower autoscaling_config.max_replicas to 4" in finding.fix and "num_gpus: 0.33" in finding.fix


def test_fixed_point_sums_are_exact():
    assert check_capacity([dep("T", 0.1, replicas=10, num_cpus=0.1)], {"nodes": [{"CPU": 1, "GPU": 1}]}).ok


def test_defaults_num_cpus_one_and_auto_replicas():
    report = check_capacity([dep("A", replicas=3)], {"nodes": [{"CPU": 2}]})
    assert report.result("A").min_placed == 2 and kinds(report) == [("A", "min_replicas")]
    (cpu,) = report.findings[0].shortages
    assert (cpu.resource, cpu.short) == ("CPU", 1)
    specs = capacity.parse_serve_config([{"name": "A", "num_replicas": "auto"}])
    assert (specs[0].min_replicas, specs[0].max_replicas, specs[0].autoscaling) == (1, 100, True)
    assert "max_replicas 100" in specs[0].notes[0]
    auto = {"name": "A", "num_replicas": "auto", "autoscaling_config": {"max_replicas": 3}}
    specs = capacity.parse_serve_config([auto])
    assert (specs[0].min_replicas, specs[0].max_replicas) == (1, 3)
    (spec,) = capacity.parse_serve_config([{"name": "A"}])
    assert (spec.num_cpus, spec.num_gpus, spec.min_replicas, spec.max_replicas) == (1, 0, 1, 1)


def test_memory_and_per_node_limits():
    config = [dep("M", replicas=3, num_cpus=0, memory="24GiB")]
    report = check_capacity(config, {"nodes": [{"CPU": 4, "memory": "64GiB"}]})
    assert report.result("M").min_placed == 2 and report.findings[0].shortages[0].resource == "memory"
    capped = [dict(dep("C", replicas=3), max_replicas_per_node=1)]
    report = check_capacity(capped, nodes(0, 0))
    assert report.result("C").min_placed == 2 and "raise max_replicas_per_node (now 1)" in report.findings[0].fix


def test_placement_group_bundles_count_on_one_node():
    d = {"name": "LLM", "placement_group_bundles": [{"CPU": 1, "GPU": 1}, {"GPU": 1}],
         "placement_group_strategy": "STRICT_PACK"}
    assert check_capacity([d], nodes(2)).ok
    assert kinds(check_capacity([d], nodes(1, 1))) == [("LLM", "unschedulable_replica")]


def test_report_lists_nodes_and_notes():
    text = check_capacity([dep("A", 1, replicas="auto")], nodes(1)).format_report()
    assert "n0: GPU 1/1, CPU 1/16, memory 0 MiB/64.0 GiB | A x1" in text
    assert "note: num_replicas: auto" in text and "1 of max_replicas=100" in text


# -- malformed input --------------------------------------------------------------------------

@pytest.mark.parametrize("config, message", [
    (app(dep("A"), dep("B", "one")),
     "applications[0].deployments[1].ray_actor_options.num_gpus must be a number >= 0, got 'one'"),
    (app(dep("A", -1)), "ray_actor_options.num_gpus must be a number >= 0, got -1"),
    (app(dep("A", 1.5)), "num_gpus must be a whole number when greater than 1"),
    (app(dep("A", replicas=-2)), "applications[0].deployments[0].num_replicas must be a whole number >= 0, got -2"),
    (app(dep("A", replicas="two")), "num_replicas must be a whole number >= 0 or 'auto', got 'two'"),
    ([{"name": "A", "placement_group_bundles": [{"num_gpus": 1}]}], "bundles name resources as Ray does"),
    (app(dep("A", autoscale=(3, 2))), "autoscaling_config.min_replicas (3) must be <= max_replicas (2)"),
    (app(dict(dep("A", autoscale=(1, 2)), num_replicas=2)), "sets both num_replicas and autoscaling_config"),
    (app({"num_replicas": 1}), "applications[0].deployments[0] lacks 'name'"),
    (app(dep("A", num_gpu=1)), "unknown option(s) 'num_gpu'"),
    (app(dep("A", resources={"GPU": 1})), "use ray_actor_options.num_gpus instead of resources.GPU"),
    (app(dep("A", memory="8 GB of RAM")), "must be a number of bytes >= 0 or a size like '16GiB'"),
    (app(dep("A", memory="8GX")), "unknown memory unit 'GX'"),
    (app(dep("A", num_cpus=True)), "num_cpus must be a number >= 0, got True"),
    (app(dep("A"), dep("A")), "repeats the deployment name 'llm/A'"),
    ({"applications": {"name": "x"}}, "applications must be a list, got dict"),
    ({"applications": [{"name": "x", "import_path": "m:app"}]}, "lists no deployments"),
    ({"proxy_location": "EveryNode"}, "has no 'applications' list"),
    ([], "lists no deployments"),
    ("just text", "must be a mapping with 'applications' or a list of deployments"),
])
def test_malformed_serve_config(config, message):
    with pytest.raises(CapacityConfigError) as info:
        check_capacity(config, nodes(1))
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("cluster, message", [
    ({"machines": []}, "lacks 'nodes'"),
    ({"nodes": []}, "nodes is empty"),
    ({"nodes": [{"name": "a", "GPU": 1}]}, "nodes[0] lacks 'CPU'"),
    ({"nodes": [{"CPU": 4, "GPU": 1.5}]}, "nodes[0].GPU must be a whole number >= 0, got 1.5"),
    ({"nodes": [{"CPU": -4}]}, "nodes[0].CPU must be a number >= 0, got -4"),
    ({"nodes": [{"CPU": 4, "gpu": 1}]}, "nodes[0] has unknown key(s) 'gpu'"),
    ({"nodes": [{"CPU": 4, "memory": "16 GB"}, {"CPU": 4, "memory": "16 Gigs"}]},
     "nodes[1].memory has an unknown memory unit"),
    ({"nodes": [{"CPU": 4, "resources": {"H100": "many"}}]}, "nodes[0].resources.H100 must be a number >= 0"),
])
def test_malformed_cluster(cluster, message):
    with pytest.raises(CapacityConfigError) as info:
        check_capacity([dep("A")], cluster)
    assert message in str(info.value)


def test_parse_memory():
    assert capacity.parse_memory("16GiB") == 16 * GiB
    assert capacity.parse_memory("1.5 gib") == 3 * GiB // 2
    assert capacity.parse_memory("80GB") == 80 * 10**9
    assert capacity.parse_memory("512Mi") == 512 * 2**20
    assert capacity.parse_memory(1024) == 1024 and capacity.parse_memory("2e3") == 2000
    for bad in ("-1GiB", "GiB", "16G", None, -5):
        with pytest.raises(CapacityConfigError):
            capacity.parse_memory(bad, "x")


# -- live cluster (ray.nodes monkeypatched) ---------------------------------------------------

def test_cluster_from_ray_reads_alive_nodes(monkeypatch):
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: True
    fake.nodes = lambda: [
        {"NodeID": "abcdef0123", "Alive": True, "NodeManagerAddress": "10.0.0.1",
         "Resources": {"CPU": 8.0, "GPU": 2.0, "memory": 3.2e10, "object_store_memory": 1e10,
                       "node:10.0.0.1": 1.0, "accelerator_type:H100": 1.0}},
        {"NodeID": "dead", "Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 64.0, "GPU": 8.0}},
    ]
    monkeypatch.setitem(sys.modules, "ray", fake)
    cluster = capacity.cluster_from_ray()
    (node,) = cluster.nodes
    assert (node.name, node.cpu, node.gpu, node.memory) == ("10.0.0.1 (abcdef01)", 8.0, 2, 32_000_000_000)
    assert node.resources == {"node:10.0.0.1": 1.0, "accelerator_type:H100": 1.0}
    report = check_capacity([dep("T", 1, accelerator_type="H100", autoscale=(1, 3))], cluster)
    assert report.result("T").max_placed == 2 and "node:" not in report.cluster.format()


# -- Triton instance memory -------------------------------------------------------------------

def test_llama_parameter_count():
    assert capacity.llama_parameter_count(LLAMA_1B) == 1_235_814_400  # Llama-3.2-1B
    untied = dict(LLAMA_1B, tie_word_embeddings=False)
    assert capacity.llama_parameter_count(untied) == 1_235_814_400 + 128256 * 2048


def test_triton_instance_memory_counts():
    gpu = 12 * GiB
    weights = 1_235_814_400 * 2
    kv = 2 * 16 * 8 * 64 * 2048 * 8 * 2
    per_instance = weights + kv + int(0.1 * (weights + kv) + 512 * 2**20)
    one = capacity.triton_instance_memory(TRTLLM_ENGINE, 1, gpu, LLAMA_1B)
    assert (one.weight_bytes, one.kv_cache_bytes, one.per_instance_bytes) == (weights, kv, per_instance)
    assert one.fits and one.usable_bytes == int(0.9 * gpu)
    four = capacity.triton_instance_memory(TRTLLM_ENGINE, 4, "12GiB", LLAMA_1B)
    assert not four.fits and four.total_bytes == 4 * per_instance
    assert four.max_safe_count == int(0.9 * gpu) // per_instance == 3
    assert capacity.max_safe_instance_count(TRTLLM_ENGINE, gpu, LLAMA_1B) == 3
    assert "lower instance_group count to 3" in four.format_report()
    # Two Serve replicas sharing the GPU (num_gpus: 0.5) each run their own Triton.
    assert capacity.max_safe_instance_count(TRTLLM_ENGINE, gpu, LLAMA_1B, replicas_per_gpu=2) == 1


def test_triton_memory_vllm_names_and_reservation():
    engine = {"engine": "vllm", "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 64}
    est = capacity.triton_instance_memory(engine, 1, 80 * GiB, LLAMA_1B)
    assert est.kv_cache_bytes == 2 * 16 * 8 * 64 * 512 * 64 * 2
    reserved = capacity.triton_instance_memory(dict(engine, gpu_memory_utilization=0.5), 2, 80 * GiB, LLAMA_1B)
    assert reserved.per_instance_bytes == 40 * GiB and not reserved.fits and reserved.max_safe_count == 1
    assert capacity.max_safe_instance_count(engine, "1GiB", LLAMA_1B) == 0
    assert "not even one instance fits" in capacity.triton_instance_memory(engine, 1, "1GiB", LLAMA_1B).format_report()
    given = capacity.triton_instance_memory(engine, 1, 80 * GiB, LLAMA_1B, num_parameters=10**9)
    assert given.weight_bytes == 2 * 10**9


@pytest.mark.parametrize("engine, kwargs, message", [
    ({"dtype": "float16", "max_seq_len": 2048}, {}, "engine config lacks 'max_batch_size' or 'max_num_seqs'"),
    (dict(TRTLLM_ENGINE, dtype="float64"), {}, "engine config.dtype must be one of"),
    (dict(TRTLLM_ENGINE, max_seq_len=-1), {}, "engine config.max_seq_len must be a whole number >= 1, got -1"),
    (TRTLLM_ENGINE, {"instance_count": 0}, "instance_count must be a whole number >= 1, got 0"),
    (TRTLLM_ENGINE, {"model_config": None}, "needs the model's config.json"),
    (TRTLLM_ENGINE, {"model_config": {"hidden_size": 8}}, "model config lacks 'vocab_size'"),
])
def test_triton_memory_malformed(engine, kwargs, message):
    args = {"instance_count": 1, "gpu_memory_bytes": 80 * GiB, "model_config": LLAMA_1B} | kwargs
    with pytest.raises(CapacityConfigError, match=re.escape(message)):
        capacity.triton_instance_memory(engine, **args)


# -- command line -----------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    import yaml

    def write(name, data):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else
                        (json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data)))
        return str(path)
    return write


def test_cli_exit_0_when_everything_fits(files, capsys):
    rc = capacity.main(["--serve-config", files("serve.yaml", app(dep("T", 1, autoscale=(1, 2)))),
                        "--cluster", files("cluster.yaml", nodes(2))])
    out = capsys.readouterr().out
    assert rc == 0 and "Result: OK" in out and "llm/T" in out


def test_cli_exit_1_when_something_cannot_fit(files, capsys):
    rc = capacity.main(["--serve-config", files("serve.yaml", app(dep("T", 1, autoscale=(1, 4)))),
                        "--cluster", files("cluster.yaml", nodes(2))])
    out = capsys.readouterr().out
    assert rc == 1 and "[max_replicas] llm/T" in out and "lower autoscaling_config.max_replicas to 2" in out


def test_cli_triton_memory(files, capsys):
    args = ["--engine-config", files("engine_config.json", TRTLLM_ENGINE),
            "--model-config", files("config.json", LLAMA_1B), "--gpu-memory", "12GiB"]
    assert capacity.main(args + ["--instance-count", "1"]) == 0
    assert "largest safe count: 3" in capsys.readouterr().out
    assert capacity.main(args + ["--instance-count", "4"]) == 1
    assert "lower instance_group count to 3" in capsys.readouterr().out


@pytest.mark.parametrize("serve, cluster, message", [
    ("applications: [name: x\n", None, "is not valid YAML at line"),
    (app(dep("A", "one")), None, "num_gpus must be a number >= 0, got 'one'"),
    (None, {"nodes": [{"CPU": 4, "memory": "4 parsecs"}]}, "unknown memory unit 'parsecs'"),
    ("", None, "is empty"),
])
def test_cli_exit_2_for_malformed_input(files, capsys, serve, cluster, message):
    rc = capacity.main(["--serve-config", files("serve.yaml", app(dep("A")) if serve is None else serve),
                        "--cluster", files("cluster.yaml", nodes(1) if cluster is None else cluster)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and message in captured.err
    assert "Traceback" not in captured.err


def test_cli_exit_2_for_missing_file_and_arguments(files, capsys, tmp_path):
    assert capacity.main(["--serve-config", str(tmp_path / "nope.yaml"), "--cluster", files("c.yaml", nodes(1))]) == 2
    assert "cannot read the Serve config" in capsys.readouterr().err
    assert capacity.main(["--serve-config", files("s.yaml", app(dep("A")))]) == 2
    assert "needs the cluster: --cluster FILE or --live" in capsys.readouterr().err
    assert capacity.main(["--engine-config", files("e.json", TRTLLM_ENGINE), "--model-config",
                          files("m.json", LLAMA_1B)]) == 2
    assert "needs --gpu-memory" in capsys.readouterr().err


def test_cli_as_a_module_prints_one_line_error(tmp_path):
    import subprocess

    bad = tmp_path / "serve.yaml"
    bad.write_text("applications:\n- name: llm\n  deployments:\n  - name: T\n    ray_actor_options: {num_gpus: one}\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: a, CPU: 4, GPU: 1}]\n")
    command = [sys.executable, "-m", "scripts.capacity", "--serve-config", str(bad), "--cluster", str(cluster)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: applications[0].deployments[0].ray_actor_options.num_gpus "
                           "must be a number >= 0, got 'one'\n")


def test_anonymized_cluster_hides_names_and_memory():
    from scripts.capacity import Cluster, Node

    live = Cluster((Node("10.0.0.7 (ab12cd34)", 8, 2, 64 * 2**30, {"accelerator_type:H100": 1.0}),
                    Node("10.0.0.8 (ef56ab78)", 4)))
    shown = live.anonymized()
    assert [n.name for n in shown.nodes] == ["node0", "node1"] and all(n.memory is None for n in shown.nodes)
    assert shown.total("GPU") == 2 and shown.nodes[0].resources == {"accelerator_type:H100": 1.0}
    assert "10.0.0.7" not in shown.format() and "memory" not in shown.format()
