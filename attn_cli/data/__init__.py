"""Stage 3, plain data every later stage shares: the Capture of a forward pass, what a run selects, the JSON document base."""
