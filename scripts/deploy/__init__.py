"""Production deployment: the Serve application on Kubernetes through KubeRay's ``RayService``.

:mod:`~scripts.deploy.k8s` renders ``deploy/k8s/<profile>/`` from ``env/profiles.toml`` (the same
source as ``env/serve/<profile>.yaml``); :mod:`~scripts.deploy.kuberay` holds the facts of KubeRay's
CRD and operator at the pinned version; :mod:`~scripts.deploy.validate` checks the rendered objects
offline (Ray's Serve schema, Kubernetes' schemas, the capacity checker).
"""
