"""Screens of the console, one per module."""
