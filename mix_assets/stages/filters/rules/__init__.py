"""One module per document filter: its configuration, its rules and the figures they compare."""
