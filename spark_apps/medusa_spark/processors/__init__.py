"""Processors of the example networks' process boxes."""
