"""Stages: configuration in, library calls, files out. Nothing here is needed to use the library."""
