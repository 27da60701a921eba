"""Who the bot is to Slack: its token and what ``auth.test`` said of it (:class:`BotIdentity`),
handed to Bolt as its ``authorize`` (:class:`BotAuthorize`), and Bolt's logger (:data:`BOLT_LOG`)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.authorize import Authorize
from slack_bolt.logger.messages import (
    warning_client_prioritized_and_token_skipped,
    warning_token_skipped,
)

if TYPE_CHECKING:
    from bot.slack.web import SlackWeb


class BotIdentity:
    """The bot token and what ``auth.test`` said about it; Bolt's ``authorize``."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self._lock = threading.Lock()

    def refresh(self, web: SlackWeb) -> None:
        """``auth.test`` now; raises ``SlackClientError``/``OSError`` when it fails."""
        response = web.auth_test()
        with self._lock:
            self.user_id, self.bot_id = response.get("user_id"), response.get("bot_id")
            self.team_id = response.get("team_id")

    def authorize(self, enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id or self.team_id,
            bot_token=self._token, bot_user_id=self.user_id, bot_id=self.bot_id,
        )

    def __repr__(self) -> str:
        return f"BotIdentity(user_id={self.user_id!r}, team_id={self.team_id!r})"


class _ExpectedWarnings(logging.Filter):
    """Bolt falls back to ``SLACK_BOT_TOKEN`` from the environment even when given a client
    and ``authorize``, then warns that the token is unused; that is our intent, not news."""

    expected = frozenset({warning_client_prioritized_and_token_skipped(), warning_token_skipped()})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.expected


class BotAuthorize(Authorize):
    """Bolt's ``authorize``: the cached :class:`BotIdentity`. An :class:`Authorize` of its own,
    as Bolt allows, because a plain function would have its arguments injected by name on
    every request (a third of the front end's own time per command)."""

    def __init__(self, identity: BotIdentity) -> None:
        self.identity = identity

    def __call__(self, *, context: Any, enterprise_id: str | None, team_id: str | None, user_id: str | None,
                 **_: Any) -> AuthorizeResult:
        return self.identity.authorize(enterprise_id, team_id)


BOLT_LOG = logging.getLogger("upgradebot.bolt")
BOLT_LOG.addFilter(_ExpectedWarnings())
