"""How a reply becomes audio, one strategy per pipeline shape (see base.Reply; shapes in registry.py)."""
