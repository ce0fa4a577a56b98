"""Tests of the lines stage (line_dedup)."""
