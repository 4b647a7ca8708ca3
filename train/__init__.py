"""Kairos train package."""
