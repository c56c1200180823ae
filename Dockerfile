# GPU profile (gpu-trtllm): the NGC Triton container with TensorRT-LLM, plus this repository.
# docs/run-on-your-gpu.md explains every flag below.
#
#   docker build -t llm-tutorial-gpu .
#   docker run --rm -it --gpus all --ipc=host --pid=host \
#     --ulimit memlock=-1 --ulimit stack=67108864 \
#     -p 127.0.0.1:8888:8888 -p 127.0.0.1:8000:8000 -p 127.0.0.1:8265:8265 \
#     -e TUTORIAL_BIND_HOST=0.0.0.0 \
#     -e LLAMA_MODEL_DIR=/models/Llama-3.2-1B-Instruct \
#     -v "$LLAMA_MODEL_DIR":/models/Llama-3.2-1B-Instruct:ro \
#     llm-tutorial-gpu
#
# - The host needs an NVIDIA driver recent enough for the container's CUDA 12.8 and the NVIDIA
#   Container Toolkit, without which Docker does not know --gpus (server@r25.02:docs/getting_started/quickstart.md).
# - --pid=host: nvidia-smi lists the host's PIDs (NVIDIA/nvidia-docker#1483); the notebooks match them to
#   their own processes (scripts/monitor/gpu.py).
# - --ipc=host: Ray's object store and Triton's Python backend live in /dev/shm, which Docker caps at
#   64 MB; a large --shm-size (e.g. --shm-size=16g) works too.
# - --ulimit memlock=-1 --ulimit stack=67108864: NVIDIA's own docker run for this container
#   (tensorrtllm_backend@v0.17.0:README.md, "Launch Triton TensorRT-LLM container").
# - Ports: 8888 JupyterLab, 8000 Ray Serve's HTTP proxy (serve deploy env/serve/gpu-trtllm.yaml),
#   8265 the Ray dashboard of `ray start --head --dashboard-host "$TUTORIAL_BIND_HOST"` (Ray binds it to
#   localhost otherwise). Triton listens on free ports behind Serve and is not published.
# - TUTORIAL_BIND_HOST=0.0.0.0 makes the tutorial's servers listen on every interface inside the
#   container, so the published ports reach them (the default, outside a container, is 127.0.0.1);
#   "-p 127.0.0.1:..." keeps them on the host's loopback.
# - LLAMA_MODEL_DIR: the Hugging Face checkpoint, mounted read-only at the profile's model_dir.
# Inside, run the notebooks with PROFILE=gpu-trtllm (python3 -m scripts.lab.run_notebooks --profile gpu-trtllm).
FROM nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3

# The image holds the TensorRT-LLM 0.17 wheel and the tensorrtllm backend library only: no TensorRT-LLM
# examples/ (convert_checkpoint.py) (server@r25.02:build.py copies just libtriton_tensorrtllm*.so and
# trtllmExecutorWorker). That source comes in here, pinned to the container's version, v0.17.0.
# Cloning `main`, as many guides do, mixes newer example scripts (new flags, moved folders,
# newer checkpoint formats) with the 0.17 wheel they then import, and fails in odd ways.
# Shallow and without submodules or Git LFS content: only the Python example scripts are needed.
# tensorrtllm_backend is not cloned: the tutorial fills its model repository with its own
# fill_template (scripts/triton/repository) and starts Triton with its own launcher (scripts/triton/server.py),
# both written to that backend's v0.17.0 contract, so nothing would read its all_models/ or tools/.
# No `pip install -r` of TensorRT-LLM's requirements: it would replace the container's TensorRT-LLM
# and torch. examples/llama/convert_checkpoint.py imports only tensorrt_llm and transformers, both in
# the image (server@r25.02:build.py pip-installs transformers); its requirements.txt adds datasets,
# evaluate, rouge_score and sentencepiece for summarize.py and calibration, which this tutorial does
# not run (server@r25.02:docs/getting_started/llm.md: install it "only ... to test the summarize.py example").
RUN command -v git >/dev/null \
      || (apt-get update && apt-get install -y --no-install-recommends git ca-certificates \
          && rm -rf /var/lib/apt/lists/*) \
 && GIT_LFS_SKIP_SMUDGE=1 git clone --depth 1 --branch v0.17.0 https://github.com/NVIDIA/TensorRT-LLM.git /opt/src/TensorRT-LLM \
 && test -f /opt/src/TensorRT-LLM/examples/llama/convert_checkpoint.py

WORKDIR /workspace/tutorial
COPY env/requirements-gpu.txt env/requirements-gpu.txt
# The container already has torch, tensorrt_llm and tritonserver; add serving and notebook tooling.
RUN python3 -m pip install --no-cache-dir -r env/requirements-gpu.txt
COPY . .
RUN python3 -m pip install --no-cache-dir --no-deps -e .
# The container is the environment: make uses its Python and skips env/setup_env.sh.
# TRTLLM_EXAMPLES_DIR repeats the profile's default (env/profiles.toml).
ENV VENV=/usr TUTORIAL_SKIP_SETUP=1 LLAMA_MODEL_DIR=/models/Llama-3.2-1B-Instruct \
    TRTLLM_EXAMPLES_DIR=/opt/src/TensorRT-LLM/examples
EXPOSE 8888 8000 8265
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--allow-root", "notebooks"]
