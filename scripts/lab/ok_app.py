"""The smallest Serve deployment: what notebook 06 deploys to show where Ray places replicas.

It does nothing but answer ``"ok"``, so every replica that stays pending or runs does so only
because of the resources its options ask for (``num_gpus``, ``accelerator_type``, placement
groups). Defined in the package rather than the notebook, so Ray imports it in each replica by
name instead of pickling a class defined in the kernel.

``graceful_shutdown_timeout_s``: deleting an application whose replica never got placed takes this
long. Serve stops a replica by calling its graceful-shutdown method and kills it only when that
returns or the timeout passes (``ActorReplicaWrapper.graceful_stop``/``check_stopped`` in
``ray/serve/_private/deployment_state.py``, ray 2.60); a pending actor never runs the method, so
``serve.delete`` waits the whole timeout, 20 s by default. These replicas hold no requests worth
draining, so 1 s is enough. A deployment dict's own ``graceful_shutdown_timeout_s`` overrides it.
"""
from ray import serve


# A never-placed replica is killed only after this timeout (see the module docstring).
PENDING_DELETE_S = 1


@serve.deployment(graceful_shutdown_timeout_s=PENDING_DELETE_S)
class Ok:
    """Answers ``"ok"`` to any request."""

    def __call__(self, request) -> str:
        return "ok"
