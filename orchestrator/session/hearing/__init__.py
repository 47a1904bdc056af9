"""How the user's input reaches the thinker, one geometry per input shape (see base.Hearing; shapes in registry.py)."""
