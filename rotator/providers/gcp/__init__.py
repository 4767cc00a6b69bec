"""GCP access tokens: workload identity federation (with optional impersonation) and
service-account key files, through google-auth."""
