# Triton's Python-based backend "transformers": Triton loads this file for models with backend: "transformers".
# The implementation lives in scripts/triton/backend/transformers_backend.py (importable through the venv).
from scripts.triton.backend.transformers_backend import TritonPythonModel  # noqa: F401
