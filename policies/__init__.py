"""Kairos policies package."""
