"""Bot-side access to node agents: signed HTTP calls, fan-out to the implicated hosts."""
