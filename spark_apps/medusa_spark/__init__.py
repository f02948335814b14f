"""Medusa's boxes as Spark Structured Streaming queries."""
