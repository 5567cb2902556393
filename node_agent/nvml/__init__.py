"""NVML access for the probes: a worker process owns the library, the agent calls it with deadlines."""
