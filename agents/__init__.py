"""Kairos agents package."""
