"""Models, per-capacity static graphs and the ladder runtime."""
