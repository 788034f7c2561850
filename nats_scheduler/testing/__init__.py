"""Helpers for tests of the provider and of code built on it: real servers, fast connects."""
