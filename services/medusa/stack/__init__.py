"""The local federation: installing, starting, watching and stopping the real components."""
