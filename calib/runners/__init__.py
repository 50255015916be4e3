"""Runners execute a model and expose intermediate tensors (see DESIGN.md, Runner protocol)."""
