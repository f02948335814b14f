"""Linear Road: the benchmark's input model, its CSV format, and a traffic simulation."""
