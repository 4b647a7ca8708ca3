"""Kairos eval package."""
