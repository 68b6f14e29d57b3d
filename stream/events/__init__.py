"""Events: schemas and validation, decoding, input files, batching."""
