"""Durable checkpoints (Kwon et al. 2008): a sans-IO format, a store, backends, a writer."""
