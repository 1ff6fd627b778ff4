"""Reports: Chrome/Perfetto traces, PNG plots (matplotlib, imported lazily) and terminal tables."""
