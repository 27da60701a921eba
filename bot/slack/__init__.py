"""Slack."""
