"""What the Dagster UI shows, shared by the stages (no stage imported): metadata.py the metadata
vocabulary and builders, charts.py PNG charts and Markdown tables. Each stage's own values are built in
stages/<stage>/metadata.py."""
