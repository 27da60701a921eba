"""The run engine."""
