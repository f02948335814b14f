"""Query networks: YAML files of streams, boxes and arrows; validated, then compiled to Spark."""
