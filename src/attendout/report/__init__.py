"""Tables and figures, built from result files (run directories) only."""
