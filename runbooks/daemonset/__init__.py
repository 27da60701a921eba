"""The DaemonSet steps."""
