"""What keeps the notebooks thin: a local Ray/Serve cluster, GPU-conflict reproductions, example
inputs, the notebook runner (chat clients, loads and Serve-state polling: :mod:`scripts.clients`).

Importing this package first, before ``transformers`` or ``ray``, keeps two notices out of a
notebook's outputs: tqdm's "IProgress not found" warning and Ray's "Missing packages:
['ipywidgets']" line. Both say that the kernel has no widget library, which a headless run
(papermill) never has; they carry a path and a timestamp, which would differ on every machine.
"""
import logging
import warnings


def quiet_widget_notices() -> None:
    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets
    logging.getLogger("ray.widgets.util").setLevel(logging.ERROR)  # Ray's "Missing packages" notice


quiet_widget_notices()
