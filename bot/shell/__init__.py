"""The shell."""
