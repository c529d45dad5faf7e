"""Engines: how to run one, and how to read what it prints."""
