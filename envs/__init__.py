"""Kairos envs package."""
