"""Stage 5, one module per analysis: a command's engine over a loaded backend, with its report and JSON."""
