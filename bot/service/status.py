"""An incident's lifecycle state in words: what the card's footer, the channel message, App Home
and `/diagnose status` show (pure: the Workflow and Lifecycle both read it, neither owns it)."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.store import Incident

from .answer import esc


def clock_text(t: float) -> str:
    """A UTC wall time people can read in any timezone ("Nov 26 14:05 UTC")."""
    return datetime.fromtimestamp(t, UTC).strftime("%b %d %H:%M UTC")


def status_word(incident: Incident, now: float) -> str:
    if incident.resolved_at:
        return "resolved"
    if incident.snoozed_until and incident.snoozed_until > now:
        return "snoozed"
    if incident.acked_by:
        return "acknowledged"
    return "open"


def status_lines(incident: Incident, now: float) -> list[str]:
    """mrkdwn lines (ids as mentions, free text escaped) for the card's footer and the headline."""
    out = []
    if incident.resolved_at:
        cause = f": {esc(incident.resolution)}" if incident.resolution else ""
        who = f" by <@{incident.resolved_by}>" if incident.resolved_by else ""
        out.append(f":white_check_mark: Resolved{who}{cause}")
        return out
    if incident.acked_by:
        out.append(f":eyes: Acknowledged by <@{incident.acked_by}>")
    if incident.owner:
        out.append(f":bust_in_silhouette: Owner <@{incident.owner}>")
    if incident.snoozed_until and incident.snoozed_until > now:
        out.append(f":zzz: Snoozed until {clock_text(incident.snoozed_until)}")
    return out
