import sys
from pathlib import Path

# The unit tests live in one folder per package; their shared fakes are one module here
# (`from fakes import ...`), which a test in a subfolder finds only with this folder on sys.path.
UNIT_DIR = str(Path(__file__).resolve().parent)
if UNIT_DIR not in sys.path:
    sys.path.insert(0, UNIT_DIR)
