"""The service's only way to talk to Slack: a thin layer over WebClient that renders with blocks.py.

It also downloads files with the bot token, but only from Slack's file host (or the SLACK_API_URL
host in tests): a forged `url_private_download` must never receive the token.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlparse

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.service.answer import Answer, Headline, HomeData
from bot.service.errors import UserFacingError
from bot.service.inputs import FileRef

from . import blocks as bk
from .payloads import bot_post_text

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 120


class SlackGateway:
    def __init__(self, client: WebClient, download_hosts: set[str]) -> None:
        self.client = client
        self.download_hosts = download_hosts
        self._identity: dict[str, Any] | None = None
        self._identity_lock = threading.Lock()

    # -- identity ---------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """auth.test once: the bot's user id and the workspace URL (for permalinks)."""
        with self._identity_lock:
            if self._identity is None:
                resp = self.client.auth_test()
                self._identity = {"user_id": resp.get("user_id"), "bot_id": resp.get("bot_id"),
                                  "url": resp.get("url"), "team_id": resp.get("team_id")}
            return self._identity

    def permalink(self, channel: str | None, ts: str | None) -> str | None:
        """A link built from the workspace URL: no chat.getPermalink call per incident."""
        if not channel or not ts:
            return None
        try:
            base = self.identity().get("url")
        except SlackApiError:
            return None
        if not base:
            return None
        return f"{base.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"

    # -- messages -----------------------------------------------------------------------------

    def post_answer(self, channel: str, thread_ts: str | None, answer: Answer) -> str:
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=bk.answer_text(answer),
                                            blocks=bk.answer_blocks(answer), unfurl_links=False, unfurl_media=False)
        return str(resp["ts"])

    def update_answer(self, channel: str, ts: str, answer: Answer) -> None:
        self.client.chat_update(channel=channel, ts=ts, text=bk.answer_text(answer), blocks=bk.answer_blocks(answer))

    def post_headline(self, channel: str, headline: Headline) -> tuple[str, str]:
        """Post the channel message; returns (channel id, ts): `channel` may be a #name."""
        resp = self.client.chat_postMessage(channel=channel, text=bk.headline_text(headline),
                                            blocks=bk.headline_blocks(headline), unfurl_links=False)
        return str(resp["channel"]), str(resp["ts"])

    def update_headline(self, channel: str, ts: str, headline: Headline) -> None:
        self.client.chat_update(channel=channel, ts=ts, text=bk.headline_text(headline),
                                blocks=bk.headline_blocks(headline))

    def post_changes(self, channel: str, thread_ts: str, changes: list[str], answer: Answer) -> str:
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread_ts,
                                            text=bk.clip(bk.changes_text(changes, answer), 3000),
                                            blocks=bk.changes_blocks(changes, answer))
        return str(resp["ts"])

    def post_details(self, channel: str, thread_ts: str | None, answer: Answer) -> str:
        """"Show details": evidence, causes and probes as a reply in the thread."""
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=bk.details_text(answer),
                                            blocks=bk.details_blocks(answer), unfurl_links=False, unfurl_media=False)
        return str(resp["ts"])

    def post_notice(self, channel: str, thread_ts: str | None, text: str) -> str:
        """A short message in a thread (text is mrkdwn the caller escaped where needed)."""
        if not text.strip():  # nothing to say is said by not posting (Slack refuses empty blocks)
            log.info("not posting an empty notice in %s", channel)
            return ""
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=bk.clip(text, 3000),
                                            blocks=bk.notice_blocks(text), unfurl_links=False)
        return str(resp["ts"])

    def post_ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        if not text.strip():
            return
        self.client.chat_postEphemeral(channel=channel, user=user, text=bk.clip(text, 3000), thread_ts=thread_ts)

    def respond(self, response_url: str, text: str, ephemeral: bool = True) -> None:
        """Reply through a slash command's / shortcut's response_url (works where the bot is not a member)."""
        from slack_sdk.webhook import WebhookClient

        WebhookClient(response_url, timeout=10).send(
            text=bk.clip(text, 3000), response_type="ephemeral" if ephemeral else "in_channel")

    # -- reactions (progress marks) ----------------------------------------------------------------

    def react(self, channel: str, ts: str, name: str) -> None:
        try:
            self.client.reactions_add(channel=channel, timestamp=ts, name=name)
        except SlackApiError as exc:  # already_reacted, missing scope: progress marks are best effort
            log.info("reactions.add %s failed: %s", name, exc.response.get("error"))

    def unreact(self, channel: str, ts: str, name: str) -> None:
        try:
            self.client.reactions_remove(channel=channel, timestamp=ts, name=name)
        except SlackApiError as exc:
            log.info("reactions.remove %s failed: %s", name, exc.response.get("error"))

    # -- files ----------------------------------------------------------------------------------

    def file_info(self, file_id: str) -> FileRef:
        f = self.client.files_info(file=file_id)["file"]
        return FileRef(id=f["id"], name=f.get("name") or f.get("title") or f["id"], size=f.get("size"),
                         mimetype=f.get("mimetype"), filetype=f.get("filetype"),
                         url=f.get("url_private_download") or f.get("url_private"))

    def download(self, f: FileRef, limit: int) -> bytes:
        """Fetch a file with the bot token; refuses foreign hosts and anything past `limit` bytes."""
        if not f.url:
            raise UserFacingError(f"Slack gave no download link for {f.name}; is the bot in this channel?")
        host = urlparse(f.url).hostname or ""
        if host not in self.download_hosts:
            raise UserFacingError(f"Refusing to download {f.name} from {host}: not a Slack file host")
        req = urllib.request.Request(f.url, headers={"Authorization": f"Bearer {self.client.token}"})
        try:
            with urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S) as resp:  # noqa: S310 - host checked
                ctype = resp.headers.get("Content-Type", "")
                data = resp.read(limit + 1)
        except urllib.error.HTTPError as exc:
            raise UserFacingError(f"Could not download {f.name}: Slack answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise UserFacingError(f"Could not download {f.name}: {getattr(exc, 'reason', exc)}") from None
        if len(data) > limit:
            raise UserFacingError(f"{f.name} is larger than the {limit >> 20} MB upload limit (TRIAGE_MAX_UPLOAD_MB)")
        if ctype.startswith("text/html") and data.lstrip()[:15].lower().startswith((b"<!doctype", b"<html")):
            # Slack serves its login page instead of the file when the token lacks files:read.
            raise UserFacingError(f"Could not download {f.name}: Slack sent a login page (is files:read granted?)")
        return data

    def upload_text(self, channel: str, thread_ts: str | None, filename: str, title: str, content: str,
                    comment: str | None = None) -> None:
        self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=filename, title=title,
                                    content=content, initial_comment=comment)

    def thread_messages(self, channel: str, thread_ts: str, limit: int = 200) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = []
        cursor = None
        while len(msgs) < limit:
            resp = self.client.conversations_replies(channel=channel, ts=thread_ts, cursor=cursor, limit=100)
            msgs.extend(resp.get("messages", []))
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        for m in msgs:  # a bot's post says what it says in attachments and blocks too
            if m.get("bot_id") or m.get("subtype") == "bot_message":
                m["text"] = bot_post_text(m)
        return msgs[:limit]

    # -- views ----------------------------------------------------------------------------------

    def open_wrong_cause(self, trigger_id: str, *, incident_id: int, version: int, judged: str,
                         choices: list[tuple[str, str, str]], channel: str, message_ts: str) -> None:
        view = bk.wrong_cause_modal(incident_id=incident_id, version=version, judged=judged, choices=choices,
                                    channel=channel, message_ts=message_ts)
        self.client.views_open(trigger_id=trigger_id, view=view)

    def publish_home(self, user: str, data: HomeData) -> None:
        self.client.views_publish(user_id=user, view=bk.home_view(data))
