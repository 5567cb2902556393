"""The Web API client: base URL from SLACK_API_URL, retries for rate limits, 5xx and dropped connections."""

from __future__ import annotations

import logging

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)

from .settings import Settings

DEFAULT_API_URL = "https://slack.com/api/"


def make_web_client(settings: Settings, logger: logging.Logger | None = None) -> WebClient:
    return WebClient(
        token=settings.bot_token,
        base_url=settings.api_url or DEFAULT_API_URL,
        timeout=30,
        logger=logger,
        retry_handlers=[
            # 429: sleeps for Retry-After then retries (chat.postMessage is ~1/s per channel).
            RateLimitErrorRetryHandler(max_retry_count=3),
            ServerErrorRetryHandler(max_retry_count=2),
            ConnectionErrorRetryHandler(max_retry_count=2),
        ],
    )
