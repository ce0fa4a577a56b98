"""What the Dagster UI shows, shared by the stages: metadata vocabulary and builders (metadata.py) and
PNG charts and Markdown tables (charts.py). Each stage's own metadata is in its stages/<stage>/metadata.py."""
