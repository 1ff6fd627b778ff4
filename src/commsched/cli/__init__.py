"""Command line (argument parsing only)."""
