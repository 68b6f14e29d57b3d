"""``mmr bench``: benchmarks measured side by side in one run (``command`` holds the command and
the table of benches; one module a bench)."""
