"""The provider stand-ins as a server of their own, for a Pod in a test cluster (kind): every
stand-in ``rotator dev`` runs (moto, the STS and IAM proxies, the OIDC issuer, Google's and Azure
AD's token services, the controller's own identity endpoints), but no control plane — the
cluster is the control plane, and its service-account issuer is the one trusted.

``python -m rotator_devkit.incluster`` (:mod:`.main`) listens on fixed ports on every address
(:mod:`.settings`), names its Service's DNS name in every URL it hands out, and answers an admin
endpoint (:mod:`.admin`) through which tests learn the controller's environment and count the
provider calls. It comes from the dev-kit image (hack/devkit-image.sh), never the product's.
"""
