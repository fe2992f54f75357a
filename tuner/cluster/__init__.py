"""Ray clusters: joining one (address, token, shared storage) and Ray Jobs (submit, jobs, stop)."""
