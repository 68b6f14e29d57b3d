"""Belief state: compact binary codecs and the stores that hold them (memory, Redis)."""
