# Triton's Python-based backend "vllm": Triton loads this file for models with backend: "vllm".
# The implementation lives in scripts/triton/backend/vllm_backend.py (importable through the venv's editable install).
from scripts.triton.backend.vllm_backend import TritonPythonModel  # noqa: F401
