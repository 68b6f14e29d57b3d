"""Tools on top of the pipeline: synth, replay, eval, tune, report, bench."""
