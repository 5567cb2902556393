"""The service's only way to talk to Slack: a thin layer over WebClient that renders with blocks.py.

It also downloads files with the bot token, but only from Slack's file host (or the SLACK_API_URL
host in tests): a forged `url_private_download` must never receive the token.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
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
WRITE_DEADLINE_S = 600  # a Slack write is retried (429 Retry-After, 5xx and network backoff) this long
BACKOFF_MAX_S = 30
REACTION_DEADLINE_S = 20  # progress marks are best effort: never hold a worker long
TEXT_FORM_MAX = 3900
MARK_EVENT = "gpu_triage_post"  # message metadata type of our posts: {"mark": what it is}
_LAYOUT_ERRORS = {"msg_too_long", "invalid_blocks", "invalid_blocks_format", "invalid_attachments"}
_TRANSIENT_ERRORS = {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}


def _block_texts(blocks: Any) -> list[str]:
    """The mrkdwn/plain text inside Block Kit blocks, in order (the answer's text-only form)."""
    out: list[str] = []
    for b in blocks or []:
        d = b.to_dict() if hasattr(b, "to_dict") else b
        if not isinstance(d, dict):
            continue
        for key in ("text",):
            t = d.get(key)
            if isinstance(t, dict) and t.get("text"):
                out.append(str(t["text"]))
        for f in d.get("fields") or []:
            if isinstance(f, dict) and f.get("text"):
                out.append(str(f["text"]))
        for e in d.get("elements") or []:
            if isinstance(e, dict) and e.get("type") in ("mrkdwn", "plain_text") and e.get("text"):
                out.append(str(e["text"]))
    return out


def text_form(text: str, blocks: Any, limit: int = TEXT_FORM_MAX) -> str:
    """What a message says without its layout: its blocks' texts (or its fallback text), clipped."""
    body = "\n".join(_block_texts(blocks)) or text
    return bk.clip(body, limit)


class SlackGateway:
    def __init__(self, client: WebClient, download_hosts: set[str], *, write_deadline_s: float = WRITE_DEADLINE_S,
                 sleep: Any = time.sleep) -> None:
        self.client = client
        self.download_hosts = download_hosts
        self.write_deadline_s = write_deadline_s
        self.backoff_base_s = 1.0  # first wait after a 5xx or network error; doubles up to BACKOFF_MAX_S
        self._sleep = sleep
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

    # -- the outbox: every write goes through here ----------------------------------------------------

    def _write(self, method: str, deadline_s: float | None = None, recheck: Callable[[], Any] | None = None,
               **kw: Any) -> Any:
        """Call a Web API write, retried until WRITE_DEADLINE_S: 429 after its Retry-After, 5xx and
        network errors with exponential backoff. A message Slack refuses for its layout or length
        (`msg_too_long`, `invalid_blocks`) is sent again in its text-only form. Other refusals raise.

        After a network error the write may have been done and only the reply lost: `recheck` (for
        posts that carry a metadata mark) finds such a message, which is then the result, so a
        retry never posts twice."""
        fn = getattr(self.client, method)
        limit_s = self.write_deadline_s if deadline_s is None else min(deadline_s, self.write_deadline_s)
        deadline = time.monotonic() + limit_s
        backoff = self.backoff_base_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(**kw)
            except SlackApiError as exc:
                resp = exc.response
                status = getattr(resp, "status_code", 200) or 200
                code = resp.get("error", "") if resp is not None else ""
                if code in _LAYOUT_ERRORS and (kw.get("blocks") or len(kw.get("text") or "") > TEXT_FORM_MAX // 2):
                    log.warning("%s refused (%s): sending its text-only form", method, code)
                    limit = TEXT_FORM_MAX if kw.get("blocks") else TEXT_FORM_MAX // 2
                    kw = {**kw, "blocks": [] if method == "chat_update" else None, "text": text_form(kw.get("text") or "", kw.get("blocks"), limit)}
                    continue
                if status == 429 or code == "ratelimited":
                    headers = getattr(resp, "headers", None) or {}
                    raw = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
                    raw = raw[0] if isinstance(raw, list) else raw
                    if raw and str(raw).isascii() and str(raw).isdigit():
                        wait = float(raw)
                    else:
                        wait, backoff = backoff, min(backoff * 2, BACKOFF_MAX_S)
                elif status >= 500 or code in _TRANSIENT_ERRORS:
                    wait, backoff = backoff, min(backoff * 2, BACKOFF_MAX_S)
                else:
                    raise
                err: Exception = exc
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                found = self._safe_recheck(recheck, method)
                if found is not None:
                    return found
                wait, backoff = backoff, min(backoff * 2, BACKOFF_MAX_S)
                err = exc
            if time.monotonic() + wait > deadline:
                log.error("%s failed for %.0f s (%d attempts), giving up: %s", method, limit_s,
                          attempt, err)
                raise err
            log.info("%s failed (%s), attempt %d; retrying in %.1f s", method, err, attempt, wait)
            self._sleep(wait)

    @staticmethod
    def _safe_recheck(recheck: Callable[[], Any] | None, method: str) -> Any:
        if recheck is None:
            return None
        try:
            found = recheck()
        except Exception as exc:  # Slack still unreachable: the retry loop goes on
            log.info("could not check whether %s went through: %s", method, exc)
            return None
        if found is not None:
            log.info("%s had gone through (its reply was lost): not posting again", method)
        return found

    def _marked(self, mark: str) -> dict[str, Any]:
        return {"event_type": MARK_EVENT, "event_payload": {"mark": mark}}

    def _find_in_thread(self, channel: str, thread_ts: str, mark: str) -> dict[str, Any] | None:
        for m in self.thread_messages(channel, thread_ts, with_metadata=True):
            if m.get("metadata") == self._marked(mark):
                return {"channel": channel, "ts": m["ts"]}
        return None

    # -- messages -----------------------------------------------------------------------------

    def post_answer(self, channel: str, thread_ts: str | None, answer: Answer) -> str:
        mark = f"answer:{answer.incident_id}:v{answer.version}"
        recheck = (lambda: self._find_in_thread(channel, thread_ts, mark)) if thread_ts else None
        resp = self._write("chat_postMessage", recheck=recheck, channel=channel, thread_ts=thread_ts,
                           text=bk.answer_text(answer), blocks=bk.answer_blocks(answer), unfurl_links=False,
                           unfurl_media=False, metadata=self._marked(mark))
        return str(resp["ts"])

    def update_answer(self, channel: str, ts: str, answer: Answer) -> None:
        self._write("chat_update", channel=channel, ts=ts, text=bk.answer_text(answer), blocks=bk.answer_blocks(answer))

    def post_headline(self, channel: str, headline: Headline, mark: str | None = None) -> tuple[str, str]:
        """Post the channel message; returns (channel id, ts): `channel` may be a #name. `mark` goes
        into the message's metadata (not shown) so that a resumed attempt finds this post again."""
        extra: dict[str, Any] = {}
        if mark:
            since = time.time() - 60
            extra = {"metadata": self._marked(mark), "recheck": lambda: self._find_headline_resp(channel, mark, since)}
        resp = self._write("chat_postMessage", channel=channel, text=bk.headline_text(headline),
                                            blocks=bk.headline_blocks(headline), unfurl_links=False, **extra)
        return str(resp["channel"]), str(resp["ts"])

    def _find_headline_resp(self, channel: str, mark: str, oldest: float) -> dict[str, Any] | None:
        found = self.find_headline(channel, mark, oldest)
        return {"channel": found[0], "ts": found[1]} if found else None

    def find_headline(self, channel: str, mark: str, oldest: float) -> tuple[str, str] | None:
        """(channel id, ts) of our channel message carrying `mark` posted since `oldest`, or None.

        The crash window between Slack's answer to chat.postMessage and the store noting its ts: a
        resumed attempt adopts that message instead of posting a second headline."""
        cursor = None
        for _ in range(5):  # 1,000 messages back at most: a resumed item is minutes old
            resp = self.client.conversations_history(channel=channel, oldest=f"{oldest:.6f}", limit=200,
                                                     include_all_metadata=True, cursor=cursor)
            page: list[dict[str, Any]] = resp.get("messages") or []
            for m in page:
                if m.get("metadata") == self._marked(mark):
                    return str(resp.get("channel") or channel), str(m["ts"])
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        return None

    def update_headline(self, channel: str, ts: str, headline: Headline) -> None:
        self._write("chat_update", channel=channel, ts=ts, text=bk.headline_text(headline),
                                blocks=bk.headline_blocks(headline))

    def post_changes(self, channel: str, thread_ts: str, changes: list[str], answer: Answer) -> str:
        resp = self._write("chat_postMessage", channel=channel, thread_ts=thread_ts,
                                            text=bk.clip(bk.changes_text(changes, answer), 3000),
                                            blocks=bk.changes_blocks(changes, answer))
        return str(resp["ts"])

    def post_details(self, channel: str, thread_ts: str | None, answer: Answer) -> str:
        """"Show details": evidence, causes and probes as a reply in the thread."""
        resp = self._write("chat_postMessage", channel=channel, thread_ts=thread_ts, text=bk.details_text(answer),
                                            blocks=bk.details_blocks(answer), unfurl_links=False, unfurl_media=False)
        return str(resp["ts"])

    def post_notice(self, channel: str, thread_ts: str | None, text: str) -> str:
        """A short message in a thread (text is mrkdwn the caller escaped where needed)."""
        if not text.strip():  # nothing to say is said by not posting (Slack refuses empty blocks)
            log.info("not posting an empty notice in %s", channel)
            return ""
        resp = self._write("chat_postMessage", channel=channel, thread_ts=thread_ts, text=bk.clip(text, 3000),
                                            blocks=bk.notice_blocks(text), unfurl_links=False)
        return str(resp["ts"])

    def post_ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        if not text.strip():
            return
        self._write("chat_postEphemeral", channel=channel, user=user, text=bk.clip(text, 3000), thread_ts=thread_ts)

    def respond(self, response_url: str, text: str, ephemeral: bool = True) -> None:
        """Reply through a slash command's / shortcut's response_url (works where the bot is not a member)."""
        from slack_sdk.webhook import WebhookClient

        WebhookClient(response_url, timeout=10).send(
            text=bk.clip(text, 3000), response_type="ephemeral" if ephemeral else "in_channel")

    # -- reactions (progress marks) ----------------------------------------------------------------

    def react(self, channel: str, ts: str, name: str) -> None:
        try:
            self._write("reactions_add", deadline_s=REACTION_DEADLINE_S, channel=channel, timestamp=ts, name=name)
        except SlackApiError as exc:  # already_reacted, missing scope: progress marks are best effort
            log.info("reactions.add %s failed: %s", name, exc.response.get("error"))

    def unreact(self, channel: str, ts: str, name: str) -> None:
        try:
            self._write("reactions_remove", deadline_s=REACTION_DEADLINE_S, channel=channel, timestamp=ts, name=name)
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
        self._write("files_upload_v2", channel=channel, thread_ts=thread_ts, filename=filename, title=title,
                                    content=content, initial_comment=comment)

    def thread_messages(self, channel: str, thread_ts: str, limit: int = 200,
                        with_metadata: bool = False) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = []
        cursor = None
        while len(msgs) < limit:
            resp = self.client.conversations_replies(channel=channel, ts=thread_ts, cursor=cursor, limit=100,
                                                     include_all_metadata=with_metadata)
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

    # -- host actions (bot.service.drain, bot.service.alertmanager) ---------------------------------

    def open_drain_modal(self, trigger_id: str, form: Any) -> None:
        view = bk.drain_modal(incident_id=form.incident_id, version=form.version, host=form.host, reason=form.reason,
                              channel=form.channel, message_ts=form.message_ts)
        self.client.views_open(trigger_id=trigger_id, view=view)

    def post_host_action(self, channel: str, thread_ts: str | None, text: str,
                         repaired_value: str | None = None) -> str:
        resp = self._write("chat_postMessage", channel=channel, thread_ts=thread_ts, text=bk.clip(text, 3000),
                           blocks=bk.host_action_blocks(text, repaired_value), unfurl_links=False)
        return str(resp["ts"])

    def post_host_answer(self, channel: str, thread_ts: str | None, answer: Any) -> str:
        resp = self._write("chat_postMessage", channel=channel, thread_ts=thread_ts, text=bk.host_answer_text(answer),
                           blocks=bk.host_answer_blocks(answer), unfurl_links=False, unfurl_media=False)
        return str(resp["ts"])

    def usergroup_members(self, group: str) -> set[str]:
        """User ids in a Slack user group (usergroups.users.list; scope usergroups:read)."""
        resp = self.client.usergroups_users_list(usergroup=group)
        return {str(u) for u in resp.get("users") or []}

    # -- lifecycle, storms, people (bot.service.lifecycle, grouping, people) --------------------------

    def open_resolve(self, trigger_id: str, *, incident_id: int, judged: str, choices: list[tuple[str, str, str]],
                     channel: str, message_ts: str) -> None:
        view = bk.resolve_modal(incident_id=incident_id, judged=judged, choices=choices, channel=channel,
                                message_ts=message_ts)
        self.client.views_open(trigger_id=trigger_id, view=view)

    def post_storm(self, channel: str, summary: Any) -> tuple[str, str]:
        """The storm's one channel message; returns (channel id, ts)."""
        resp = self._write("chat_postMessage", channel=channel, text=bk.storm_text(summary),
                           blocks=bk.storm_blocks(summary), unfurl_links=False)
        return str(resp["channel"]), str(resp["ts"])

    def update_storm(self, channel: str, ts: str, summary: Any) -> None:
        self._write("chat_update", channel=channel, ts=ts, text=bk.storm_text(summary), blocks=bk.storm_blocks(summary))

    def user_by_email(self, email: str) -> str | None:
        """users.lookupByEmail (scope users:read.email): the Slack user id, or None when nobody has it."""
        try:
            resp = self.client.users_lookupByEmail(email=email)
        except SlackApiError as exc:
            if (exc.response.get("error") if exc.response is not None else "") == "users_not_found":
                return None
            raise
        user = resp.get("user") or {}
        return None if user.get("deleted") or user.get("is_bot") else (user.get("id") or None)
