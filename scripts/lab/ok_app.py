"""The smallest Serve deployment: what notebook 06 deploys to show where Ray places replicas.

It does nothing but answer ``"ok"``, so every replica that stays pending or runs does so only
because of the resources its options ask for (``num_gpus``, ``accelerator_type``, placement
groups). Defined in the package rather than the notebook, so Ray imports it in each replica by
name instead of pickling a class defined in the kernel.
"""
from ray import serve


@serve.deployment
class Ok:
    """Answers ``"ok"`` to any request."""

    def __call__(self, request) -> str:
        return "ok"
