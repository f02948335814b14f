"""BPM: contract-based load movement between participants (Balazinska et al., NSDI 2004)."""
