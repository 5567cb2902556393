"""The Web API client: base URL from SLACK_API_URL, retries for rate limits, 5xx and dropped connections."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import HttpRequest, HttpResponse, RetryHandler, RetryState
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)

from bot import metrics

from .settings import Settings

WRITE_METHODS = ("chat.postMessage", "chat.update", "chat.postEphemeral", "reactions.add", "reactions.remove",
                 "files.getUploadURLExternal", "files.completeUploadExternal")


class ReadRetry(RetryHandler):
    """A built-in handler that stays out of the way for writes (the gateway retries those)."""

    def __init__(self, inner: RetryHandler) -> None:
        super().__init__(max_retry_count=inner.max_retry_count, interval_calculator=inner.interval_calculator)
        self.inner = inner

    def _can_retry(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                   error: Exception | None = None) -> bool:
        if any(request.url.rstrip("/").endswith(m) for m in WRITE_METHODS):
            return False
        return self.inner._can_retry(state=state, request=request, response=response, error=error)

    def prepare_for_next_attempt(self, *, state: RetryState, request: HttpRequest,
                                 response: HttpResponse | None = None, error: Exception | None = None) -> None:
        self.inner.prepare_for_next_attempt(state=state, request=request, response=response, error=error)

DEFAULT_API_URL = "https://slack.com/api/"


class CountingWebClient(WebClient):
    """Every Web API call goes through api_call: a failed attempt is counted (triage_slack_api_errors_total)
    by method and Slack's error code, or the exception's type when no answer came."""

    def api_call(self, api_method: str, **kwargs: Any) -> Any:
        try:
            return super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            resp = exc.response
            code = resp.get("error") if resp is not None else None
            metrics.slack_api_error(api_method, str(code or getattr(resp, "status_code", "") or "unknown"))
            raise
        except Exception as exc:
            metrics.slack_api_error(api_method, type(exc).__name__)
            raise


def make_web_client(settings: Settings, logger: logging.Logger | None = None) -> WebClient:
    return CountingWebClient(
        token=settings.bot_token,
        base_url=settings.api_url or DEFAULT_API_URL,
        timeout=30,
        logger=logger,
        # Reads (files.info, conversations.replies, auth.test) get a few quick retries here; writes
        # are retried up to a deadline by SlackGateway._write, so these handlers must not retry them
        # as well (a retry of a retry multiplies the waits).
        retry_handlers=[ReadRetry(RateLimitErrorRetryHandler(max_retry_count=3)),
                        ReadRetry(ServerErrorRetryHandler(max_retry_count=2)),
                        ReadRetry(ConnectionErrorRetryHandler(max_retry_count=2))],
    )
