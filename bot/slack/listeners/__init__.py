"""Every listener is registered here, in one place."""

from __future__ import annotations

from slack_bolt import App

from . import actions, commands, events, lifecycle
from .deps import Deps
from .middleware import dedupe_events


def register_listeners(app: App, deps: Deps) -> None:
    app.use(dedupe_events(deps.service.store))
    events.register(app, deps)
    commands.register(app, deps)
    actions.register(app, deps)
    lifecycle.register(app, deps)


__all__ = ["Deps", "register_listeners"]
