"""The manifest checker's concerns, composed by format/checker.manifest_problems."""
