"""The web console: what the catalog service serves to draw the federation in a browser."""
