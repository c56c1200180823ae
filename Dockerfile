# GPU profile (gpu-trtllm): the NGC Triton container with TensorRT-LLM, plus this repository.
#   docker build -t llm-tutorial-gpu .
#   docker run --rm -it --gpus all --shm-size=2g -p 8888:8888 \
#     -v /path/to/Llama-3.2-1B-Instruct:/models/Llama-3.2-1B-Instruct llm-tutorial-gpu
# Inside, run the notebooks with PROFILE=gpu-trtllm (make run PROFILE=gpu-trtllm).
FROM nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3

WORKDIR /workspace/tutorial
COPY env/requirements-gpu.txt env/requirements-gpu.txt
# The container already has torch, tensorrt_llm and tritonserver; add serving and notebook tooling.
RUN python3 -m pip install --no-cache-dir -r env/requirements-gpu.txt
COPY . .
RUN python3 -m pip install --no-cache-dir --no-deps -e .
# The container is the environment: make uses its Python and skips env/setup_env.sh.
ENV VENV=/usr TUTORIAL_SKIP_SETUP=1 LLAMA_MODEL_DIR=/models/Llama-3.2-1B-Instruct
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--allow-root", "notebooks"]
