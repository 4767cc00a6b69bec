"""rotator's dev kit: what `rotator dev` and the tests run against, never shipped in the product.

- ``controlplane``: a local etcd, kube-apiserver and kube-controller-manager (throwaway PKI,
  RBAC, ServiceAccount tokens, optional audit log), built from Go modules by ``hack/testenv.sh``.
- ``devenv``: the stand-ins (AWS STS and IAM proxies in front of moto, GCP, Azure AD, an OIDC
  issuer), the environment ``rotator dev`` starts, its live table, and the manifest tools that
  apply ``config/`` (a small kustomize renderer, checked against ``kubectl kustomize``).
"""
