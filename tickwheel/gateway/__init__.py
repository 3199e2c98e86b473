"""Tickwheel."""
