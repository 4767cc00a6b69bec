"""AWS credentials: static files, STS web-identity sessions, and rotated IAM user keys."""
