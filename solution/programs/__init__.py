"""Users' own programs: XLA HLO text in, TpuGraphs arrays out."""
