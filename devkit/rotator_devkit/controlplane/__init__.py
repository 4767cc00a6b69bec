"""A real, local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager.

There is no Docker engine on our machines, so no kind: like controller-runtime's envtest we start
the binaries ourselves (built from Go modules by ``make testenv``), and go further — a throwaway
PKI, RBAC authorization, service-account token signing (TokenRequest works), and the garbage
collector, namespace and service-account controllers. ``make dev``, ``rotator dev`` and the test
suite all use it.

- ``assets``: finding the binaries (``KUBEBUILDER_ASSETS``).
- ``pki``: the throwaway certificate authority and keys.
- ``processes``: child processes that never outlive us.
- ``cluster``: :class:`~.cluster.LocalControlPlane`, which puts it all together.
"""
