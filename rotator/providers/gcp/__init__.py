"""GCP access tokens: workload identity federation (with optional impersonation), service-account
key files, and the controller's own Application Default Credentials, through google-auth."""
