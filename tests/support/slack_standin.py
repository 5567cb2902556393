"""A local stand-in for the Slack Web API: a real HTTP server on loopback that slack_sdk talks to
through its base URL (SLACK_API_URL), records every call, and can fail on request.

    with SlackStandIn() as slack:                      # starts on 127.0.0.1:<free port>
        env = {"SLACK_API_URL": slack.api_url, "SLACK_BOT_TOKEN": slack.bot_token}
        f = slack.add_file(b"...log...", "rank0.log")  # files.info + url_private_download
        slack.fail("chat.postMessage", status=429, retry_after=1)   # next call answers 429 once
        ...
        calls = slack.wait_for("chat.postMessage", n=1)  # blocks until the bot made the call
        calls[0].params["thread_ts"], calls[0].params["blocks"]
        slack.expect_no("chat.postMessage", within=1.0)  # nothing was posted (chatter ignored)

What it serves (the methods the bot uses; anything else answers {"ok": false, "error":
"unknown_method"} so a test notices):

- auth.test; chat.postMessage / chat.update / chat.postEphemeral / chat.getPermalink (messages are
  kept: `slack.messages(channel)`, `slack.thread(channel, ts)`), conversations.replies;
- reactions.add / reactions.remove (`slack.reactions[(channel, ts)]` is the current set);
- files.info and downloads of `url_private_download` (Bearer bot token required, else 403);
- files.getUploadURLExternal, the upload URL itself, files.completeUploadExternal
  (`slack.uploads`: dicts with channel_id, thread_ts, title, content);
- views.open / views.publish / views.update (`slack.views`);
- users.lookupByEmail (`slack.add_user("U0ALICE", email="alice@corp.example")`);
- conversations.info / conversations.members / users.info, for who may see what
  (`slack.add_conversation("G0SECRET", private=True, members=["UALICE"])`, `slack.add_im("D0BOB", "UBOB")`,
  `slack.add_user("UGUEST", guest=True)`). A channel id starting with C that was never added is a
  public channel with no members; any other unknown id is channel_not_found; an unknown user is a
  full member of the workspace;
- response_url posts (`slack.response_url()` makes one; `slack.responses` records them);
- apps.connections.open with the app token, and a WebSocket at /link for Socket Mode
  (`slack.socket_send(envelope)` pushes an envelope; `slack.socket_acks` holds the bot's acks).

Like Slack it rejects a message whose blocks break Block Kit's limits (more than 50 blocks, a
section over 3000 characters, a button label over 75, a header over 150): `invalid_blocks`.
Every raw request body is kept (`slack.all_request_text()`), so a test can assert that a secret
never reached Slack.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str | None
    at: float
    raw: str = ""


@dataclass
class Failure:
    status: int
    retry_after: int | None
    error: str
    times: int


@dataclass
class _Socket:
    conn: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


def _ws_frame(payload: bytes, opcode: int = 1) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def _ws_read(rfile: Any) -> tuple[int, bytes] | None:
    h = rfile.read(2)
    if len(h) < 2:
        return None
    opcode, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = struct.unpack(">H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", rfile.read(8))[0]
    mask = rfile.read(4) if h[1] & 0x80 else b""
    data = rfile.read(n)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


class SlackStandIn:
    def __init__(self, *, bot_token: str = "xoxb-standin-bot-token", app_token: str = "xapp-1-standin-app-token",
                 bot_user_id: str = "UTRIAGEBOT", bot_id: str = "BTRIAGEBOT", team_id: str = "T0STANDIN") -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.calls: list[Call] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.file_content: dict[str, bytes] = {}
        self.uploads: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.reactions: dict[tuple[str, str], set[str]] = {}
        self.socket_acks: list[dict[str, Any]] = []
        self.not_in_channel: set[str] = set()
        self.conversations: dict[str, dict[str, Any]] = {}  # id -> conversations.info object + "members"
        self.users: dict[str, dict[str, Any]] = {}
        self.usergroups: dict[str, list[str]] = {}  # usergroups.users.list: group id -> user ids
        self.downloads = 0
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._pending_uploads: dict[str, dict[str, Any]] = {}
        self._failures: dict[str, list[Failure]] = {}
        self._stalls: list[tuple[str, Callable[[dict[str, Any]], bool], float]] = []
        self.stalled = threading.Event()  # set when a stalled call has been carried out
        self._sockets: list[_Socket] = []
        self._last_ts = 0.0  # message ts: wall-clock seconds like Slack's, strictly increasing
        self._ts_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> SlackStandIn:
        standin = self

        class Handler(_Handler):
            slack = standin

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="slack-standin").start()
        return self

    def stop(self) -> None:
        for s in self._sockets:
            s.closed = True
            try:
                s.conn.close()
            except OSError:
                pass
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> SlackStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def api_url(self) -> str:
        """The value for SLACK_API_URL."""
        return self.base_url + "/api/"

    # -- setting the scene ------------------------------------------------------------------------

    def next_ts(self) -> str:
        with self._ts_lock:
            self._last_ts = max(round(time.time(), 6), round(self._last_ts + 0.000001, 6))
            return f"{self._last_ts:.6f}"

    def add_file(self, content: bytes, name: str, *, mimetype: str = "text/plain", filetype: str = "text",
                 user: str = "UALICE", size: int | None = None) -> dict[str, Any]:
        """Make a file Slack knows about; returns its file object (as in events and files.info)."""
        fid = f"F{next(self._ids):08d}"
        obj = {
            "id": fid, "name": name, "title": name, "mimetype": mimetype, "filetype": filetype,
            "size": len(content) if size is None else size, "user": user,
            "url_private": f"{self.base_url}/files-pri/{fid}/{name}",
            "url_private_download": f"{self.base_url}/files-pri/{fid}/download/{name}",
        }
        with self._lock:
            self.files[fid] = obj
            self.file_content[fid] = content
        return dict(obj)

    def add_message(self, channel: str, text: str, *, user: str = "UALICE", ts: str | None = None,
                    thread_ts: str | None = None, files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A message people wrote (conversations.replies returns it); returns the message dict."""
        msg = {"type": "message", "user": user, "text": text, "ts": ts or self.next_ts(), "channel": channel}
        if thread_ts:
            msg["thread_ts"] = thread_ts
        if files:
            msg["files"] = files
        with self._lock:
            self._messages.setdefault(channel, []).append(msg)
        return dict(msg)

    def add_conversation(self, channel: str, *, private: bool = False, mpim: bool = False,
                         members: list[str] | None = None) -> None:
        """A channel (public, or private with `private=True`) or group DM (`mpim=True`) and its members."""
        with self._lock:
            self.conversations[channel] = {
                "id": channel, "is_channel": not private and not mpim, "is_group": private and not mpim,
                "is_im": False, "is_mpim": mpim, "is_private": private or mpim, "members": list(members or [])}

    def add_im(self, channel: str, user: str) -> None:
        """The bot's DM with `user`."""
        with self._lock:
            self.conversations[channel] = {"id": channel, "is_channel": False, "is_group": False, "is_im": True,
                                           "is_mpim": False, "is_private": True, "user": user,
                                           "members": [user, self.bot_user_id]}

    def add_user(self, user: str, *, guest: bool = False, email: str | None = None) -> None:
        with self._lock:
            self.users[user] = {"id": user, "name": user.lower(), "is_restricted": guest,
                                "is_ultra_restricted": False, "is_bot": False, "deleted": False,
                                "profile": {"email": email} if email else {}}

    def _lookup_by_email(self, p: dict[str, Any]) -> dict[str, Any]:
        """users.lookupByEmail: only users added with an email are found (like Slack, case-insensitive)."""
        email = str(p.get("email", "")).strip().lower()
        if not email:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            for u in self.users.values():
                if str((u.get("profile") or {}).get("email", "")).lower() == email:
                    return {"ok": True, "user": dict(u)}
        return {"ok": False, "error": "users_not_found"}

    def _conversation(self, channel: str) -> dict[str, Any] | None:
        with self._lock:
            conv = self.conversations.get(channel)
        if conv is None and channel.startswith("C"):
            return {"id": channel, "is_channel": True, "is_group": False, "is_im": False, "is_mpim": False,
                    "is_private": False, "members": []}
        return conv

    def _conversations_info(self, p: dict[str, Any]) -> dict[str, Any]:
        conv = self._conversation(str(p.get("channel", "")))
        if conv is None:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {k: v for k, v in conv.items() if k != "members"}}

    def _conversations_members(self, p: dict[str, Any]) -> dict[str, Any]:
        """Paged like Slack (`limit`, `cursor`: an offset here)."""
        conv = self._conversation(str(p.get("channel", "")))
        if conv is None:
            return {"ok": False, "error": "channel_not_found"}
        limit = max(1, min(int(p.get("limit") or 100), 1000))
        start = int(p.get("cursor") or 0)
        page = conv["members"][start:start + limit]
        more = start + limit < len(conv["members"])
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _users_info(self, p: dict[str, Any]) -> dict[str, Any]:
        user = str(p.get("user", ""))
        if not user:
            return {"ok": False, "error": "user_not_found"}
        with self._lock:
            u = self.users.get(user)
        return {"ok": True, "user": dict(u) if u else {"id": user, "name": user.lower(), "is_restricted": False,
                                                         "is_ultra_restricted": False, "is_bot": False,
                                                         "deleted": False}}

    def fail(self, method: str, *, status: int = 429, retry_after: int | None = 1, error: str = "ratelimited",
             times: int = 1) -> None:
        """The next `times` calls to `method` answer HTTP `status` (429 carries Retry-After)."""
        with self._lock:
            self._failures.setdefault(method, []).append(Failure(status, retry_after, error, times))

    def stall(self, method: str, when: Callable[[dict[str, Any]], bool], seconds: float = 60.0) -> None:
        """The next call to `method` whose parameters satisfy `when` is carried out (the message is
        posted) but answered only after `seconds`: Slack did the write and the reply is late."""
        with self._lock:
            self._stalls.append((method, when, seconds))

    def response_url(self) -> str:
        return f"{self.base_url}/respond/{next(self._ids)}"

    # -- what happened ----------------------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, method: str, n: int = 1, timeout: float = 15.0, where: Any = None) -> list[Call]:
        """Block until at least `n` calls to `method` (matching `where(call)`) were made; return them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                got = [c for c in self.calls if c.method == method and (where is None or where(c))]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = sorted({c.method for c in self.calls})
                    raise AssertionError(f"{n} call(s) to {method} expected within {timeout} s, got {len(got)}; "
                                         f"methods called: {seen}")
                self._changed.wait(left)

    def expect_no(self, method: str, within: float = 1.0, where: Any = None) -> None:
        time.sleep(within)
        got = [c for c in self.calls_to(method) if where is None or where(c)]
        assert not got, f"expected no {method} call, got {[c.params for c in got]}"

    def messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            chans = [channel] if channel else list(self._messages)
            return [dict(m) for c in chans for m in self._messages.get(c, [])]

    def bot_messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.messages(channel) if m.get("bot_id") == self.bot_id]

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return sorted((m for m in self.messages(channel) if m.get("thread_ts", m["ts"]) == thread_ts or
                       m["ts"] == thread_ts), key=lambda m: float(m["ts"]))

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        for m in self.messages(channel):
            if m["ts"] == ts:
                return m
        raise KeyError(f"no message {channel}/{ts}")

    def all_request_text(self) -> str:
        with self._lock:
            return "\n".join(c.raw for c in self.calls)

    # -- Socket Mode ----------------------------------------------------------------------------------

    def wait_socket(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(not s.closed for s in self._sockets):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the bot did not open a Socket Mode connection")
                self._changed.wait(left)

    def socket_send(self, envelope: dict[str, Any]) -> None:
        live = [s for s in self._sockets if not s.closed]
        assert live, "no Socket Mode connection"
        s = live[-1]
        with s.lock:
            s.conn.sendall(_ws_frame(json.dumps(envelope).encode()))

    def drop_sockets(self) -> None:
        """Close every Socket Mode connection from this side, as when Slack's link drops."""
        with self._changed:
            for s in self._sockets:
                if not s.closed:
                    s.closed = True
                    try:
                        s.conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def clear_failures(self, method: str) -> None:
        """Forget the failures still queued for `method` (see fail())."""
        with self._lock:
            self._failures.pop(method, None)

    def wait_socket_ack(self, envelope_id: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for a in self.socket_acks:
                    if a.get("envelope_id") == envelope_id:
                        return a
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no ack for envelope {envelope_id}")
                self._changed.wait(left)

    # -- the API ----------------------------------------------------------------------------------

    def _record(self, call: Call) -> None:
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _failure_for(self, method: str) -> Failure | None:
        with self._lock:
            queue = self._failures.get(method) or []
            if not queue:
                return None
            f = queue[0]
            f.times -= 1
            if f.times <= 0:
                queue.pop(0)
            return f

    def _channel_id(self, channel: str) -> str:
        if channel.startswith("#"):
            return "C" + hashlib.sha1(channel.encode()).hexdigest()[:10].upper()
        return channel

    def _post(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel_id(str(p.get("channel", "")))
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_in_channel:
            return {"ok": False, "error": "not_in_channel"}
        problem = _check_blocks(p.get("blocks"))
        if problem:
            return {"ok": False, "error": "invalid_blocks", "errors": [problem]}
        if not p.get("text") and not p.get("blocks"):
            return {"ok": False, "error": "no_text"}
        msg = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id, "text": p.get("text", ""),
               "blocks": _blocks(p.get("blocks")), "ts": self.next_ts(), "channel": channel}
        if p.get("thread_ts"):
            msg["thread_ts"] = p["thread_ts"]
        if p.get("metadata"):  # Slack takes it as a JSON string or an object
            meta = p["metadata"]
            msg["metadata"] = json.loads(meta) if isinstance(meta, str) else meta
        with self._lock:
            self._messages.setdefault(channel, []).append(msg)
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": msg}

    def _update(self, p: dict[str, Any]) -> dict[str, Any]:
        problem = _check_blocks(p.get("blocks"))
        if problem:
            return {"ok": False, "error": "invalid_blocks", "errors": [problem]}
        with self._lock:
            for m in self._messages.get(str(p.get("channel")), []):
                if m["ts"] == p.get("ts"):
                    m["text"] = p.get("text", m["text"])
                    if p.get("blocks") is not None:
                        m["blocks"] = _blocks(p.get("blocks"))
                    m["edited"] = True
                    return {"ok": True, "channel": p["channel"], "ts": m["ts"]}
        return {"ok": False, "error": "message_not_found"}

    def handle(self, method: str, p: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        f = self._failure_for(method)
        if f is not None:
            headers = {"Retry-After": str(f.retry_after)} if f.retry_after is not None else {}
            return f.status, {"ok": False, "error": f.error}, headers
        if method == "apps.connections.open":
            if token != self.app_token:
                return 200, {"ok": False, "error": "invalid_auth"}, {}
            return 200, {"ok": True, "url": self.base_url.replace("http://", "ws://") + "/link"}, {}
        if token != self.bot_token:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        handlers = {
            "auth.test": lambda: {"ok": True, "url": self.base_url + "/workspace/", "team": "Stand-in",
                                  "user": "gpu-triage", "team_id": self.team_id, "user_id": self.bot_user_id,
                                  "bot_id": self.bot_id, "is_enterprise_install": False},
            "chat.postMessage": lambda: self._post(p),
            "chat.update": lambda: self._update(p),
            "chat.postEphemeral": lambda: {"ok": True, "message_ts": self.next_ts()},
            "chat.getPermalink": lambda: {"ok": True, "permalink": f"{self.base_url}/archives/{p.get('channel')}/p"
                                                                   f"{str(p.get('message_ts')).replace('.', '')}"},
            "conversations.replies": lambda: {"ok": True, "messages": self._replies(p),
                                              "has_more": False, "response_metadata": {"next_cursor": ""}},
            "conversations.history": lambda: self._history(p),
            "reactions.add": lambda: self._react(p, add=True),
            "reactions.remove": lambda: self._react(p, add=False),
            "files.info": lambda: ({"ok": True, "file": dict(self.files[str(p.get("file"))])}
                                   if str(p.get("file")) in self.files else {"ok": False, "error": "file_not_found"}),
            "files.getUploadURLExternal": lambda: self._upload_url(p),
            "files.completeUploadExternal": lambda: self._complete_upload(p),
            "views.open": lambda: self._view("open", p),
            "views.publish": lambda: self._view("publish", p),
            "views.update": lambda: self._view("update", p),
            "conversations.info": lambda: self._conversations_info(p),
            "conversations.members": lambda: self._conversations_members(p),
            "users.info": lambda: self._users_info(p),
            "users.lookupByEmail": lambda: self._lookup_by_email(p),
            "usergroups.users.list": lambda: ({"ok": True, "users": list(self.usergroups[str(p.get("usergroup"))])}
                                              if str(p.get("usergroup")) in self.usergroups
                                              else {"ok": False, "error": "no_such_subteam"}),
        }
        h = handlers.get(method)
        if h is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}
        result = h()
        with self._lock:
            stall = next((x for x in self._stalls if x[0] == method and x[1](p)), None)
            if stall is not None:
                self._stalls.remove(stall)
        if stall is not None:
            self.stalled.set()
            time.sleep(stall[2])
        return 200, result, {}

    def _replies(self, p: dict[str, Any]) -> list[dict[str, Any]]:
        """A thread; as Slack, message metadata only with include_all_metadata."""
        with_meta = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        msgs = [dict(m) for m in self.thread(str(p.get("channel")), str(p.get("ts")))]
        for m in msgs:
            if not with_meta:
                m.pop("metadata", None)
        return msgs

    def _history(self, p: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages, newest first, since `oldest`; metadata only with include_all_metadata."""
        channel = self._channel_id(str(p.get("channel", "")))
        if not channel or str(p.get("channel", "")).startswith("#"):
            return {"ok": False, "error": "channel_not_found"}  # Slack wants the id here
        oldest = float(p.get("oldest") or 0)
        with_meta = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        with self._lock:
            top = [dict(m) for m in self._messages.get(channel, [])
                   if m.get("thread_ts") in (None, m["ts"]) and float(m["ts"]) >= oldest]
        for m in top:
            if not with_meta:
                m.pop("metadata", None)
        top.reverse()
        limit = int(p.get("limit") or 100)
        return {"ok": True, "messages": top[:limit], "has_more": len(top) > limit,
                "response_metadata": {"next_cursor": ""}}

    def _react(self, p: dict[str, Any], add: bool) -> dict[str, Any]:
        key = (str(p.get("channel")), str(p.get("timestamp")))
        with self._lock:
            names = self.reactions.setdefault(key, set())
            name = str(p.get("name"))
            if add and name in names:
                return {"ok": False, "error": "already_reacted"}
            if not add and name not in names:
                return {"ok": False, "error": "no_reaction"}
            (names.add if add else names.discard)(name)
        return {"ok": True}

    def _upload_url(self, p: dict[str, Any]) -> dict[str, Any]:
        fid = f"F{next(self._ids):08d}"
        with self._lock:
            self._pending_uploads[fid] = {"filename": p.get("filename"), "length": p.get("length")}
        return {"ok": True, "upload_url": f"{self.base_url}/upload/{fid}", "file_id": fid}

    def _complete_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        files = p.get("files")
        files = json.loads(files) if isinstance(files, str) else files or []
        out = []
        for f in files:
            with self._lock:
                pending = self._pending_uploads.pop(f["id"], None)
            if pending is None or "content" not in pending:
                return {"ok": False, "error": "file_not_uploaded"}
            self.uploads.append({"id": f["id"], "title": f.get("title"), "channel_id": p.get("channel_id"),
                                 "thread_ts": p.get("thread_ts"), "initial_comment": p.get("initial_comment"),
                                 "filename": pending["filename"], "content": pending["content"]})
            out.append({"id": f["id"], "title": f.get("title")})
        return {"ok": True, "files": out}

    def _view(self, kind: str, p: dict[str, Any]) -> dict[str, Any]:
        view = p.get("view")
        view = json.loads(view) if isinstance(view, str) else view
        if not isinstance(view, dict) or "type" not in view:
            return {"ok": False, "error": "invalid_arguments"}
        problem = _check_blocks(view.get("blocks"), max_blocks=100)
        if problem:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": [problem]}}
        self.views.append({"kind": kind, "user_id": p.get("user_id"), "trigger_id": p.get("trigger_id"),
                           "view": view})
        return {"ok": True, "view": {"id": f"V{next(self._ids):08d}", **view}}


def _blocks(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    return json.loads(raw) if isinstance(raw, str) else raw


def _texts(obj: Any) -> list[tuple[str, str]]:
    """(where, text) of every text object inside a block, for the limit checks."""
    out = []
    if isinstance(obj, dict):
        if obj.get("type") in ("mrkdwn", "plain_text") and isinstance(obj.get("text"), str):
            out.append((obj["type"], obj["text"]))
        for v in obj.values():
            out += _texts(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _texts(v)
    return out


def _check_blocks(raw: Any, max_blocks: int = 50) -> str | None:
    """What Slack would refuse in these blocks, or None."""
    blocks = _blocks(raw)
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        return "blocks must be an array"
    if len(blocks) > max_blocks:
        return f"more than {max_blocks} blocks ({len(blocks)})"
    for i, b in enumerate(blocks):
        t = b.get("type")
        if t == "section" and len((b.get("text") or {}).get("text", "")) > 3000:
            return f"block {i}: section text over 3000 characters"
        if t == "header" and len((b.get("text") or {}).get("text", "")) > 150:
            return f"block {i}: header over 150 characters"
        if t == "actions":
            for e in b.get("elements", []):
                if e.get("type") == "button" and len((e.get("text") or {}).get("text", "")) > 75:
                    return f"block {i}: button text over 75 characters"
        if t == "context" and len(b.get("elements", [])) > 10:
            return f"block {i}: context with more than 10 elements"
        for _, text in _texts(b):
            if len(text) > 3000:
                return f"block {i}: a text over 3000 characters"
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a burst of bot calls must not be reset by a 5-deep listen backlog


class _Handler(BaseHTTPRequestHandler):
    slack: SlackStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else None

    def do_GET(self) -> None:  # noqa: N802
        path = urlparse(self.path).path
        if path == "/link" and self.headers.get("Upgrade", "").lower() == "websocket":
            self._websocket()
            return
        if path.startswith("/files-pri/"):
            fid = path.split("/")[2]
            if self._token() != self.slack.bot_token:
                self._send(403, b"<html>login</html>", "text/html")
                return
            content = self.slack.file_content.get(fid)
            if content is None:
                self._send(404, b"not found", "text/plain")
                return
            self.slack.downloads += 1
            self._send(200, content, "application/octet-stream")
            return
        if path.startswith("/api/"):
            self._api(path[5:], {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}, "")
            return
        self._send(404, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if url.path.startswith("/upload/"):
            fid = url.path.split("/")[2]
            pending = self.slack._pending_uploads.get(fid)
            if pending is None:
                self._send(404, b"unknown upload", "text/plain")
                return
            pending["content"] = raw
            self._send(200, b"OK - " + str(len(raw)).encode(), "text/plain")
            return
        if url.path.startswith("/respond/"):
            body = json.loads(raw or b"{}")
            self.slack.responses.append(body)
            self.slack._record(Call("response_url", body, None, time.time(), raw.decode("utf-8", "replace")))
            self._send(200, b"ok", "text/plain")
            return
        if not url.path.startswith("/api/"):
            self._send(404, b"{}")
            return
        ctype = self.headers.get("Content-Type", "")
        text = raw.decode("utf-8", "replace")
        if "json" in ctype:
            params = json.loads(text or "{}")
        else:
            params = {k: v[0] for k, v in parse_qs(text).items()}
        params.update({k: v[0] for k, v in parse_qs(url.query).items()})
        self._api(url.path[5:], params, text)

    def _api(self, method: str, params: dict[str, Any], raw: str) -> None:
        token = self._token() or params.get("token")
        self.slack._record(Call(method, params, token, time.time(), raw))
        status, body, headers = self.slack.handle(method, params, token)
        self._send(status, json.dumps(body).encode(), headers=headers)

    def _websocket(self) -> None:
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        sock = _Socket(self.connection)
        with self.slack._changed:
            self.slack._sockets.append(sock)
            self.slack._changed.notify_all()
        with sock.lock:
            self.connection.sendall(_ws_frame(json.dumps({"type": "hello", "num_connections": 1}).encode()))
        try:
            while not sock.closed:
                frame = _ws_read(self.rfile)
                if frame is None:
                    break
                opcode, data = frame
                if opcode == 8:  # close
                    break
                if opcode == 9:  # ping -> pong
                    with sock.lock:
                        self.connection.sendall(_ws_frame(data, opcode=10))
                    continue
                if opcode == 1:
                    with self.slack._changed:
                        self.slack.socket_acks.append(json.loads(data))
                        self.slack._changed.notify_all()
        except OSError:
            pass
        finally:
            sock.closed = True
            self.close_connection = True
