"""serve's log lines: LOG_LEVEL, LOG_FORMAT=json, the run, user and verb bound to each line,
one line of at most 2 KB whatever the message, secrets masked."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from bot.logs import MAX_LOG_LINE, bound, configure_logging, context


@pytest.fixture
def root() -> object:
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    yield
    logging.getLogger().handlers[:], _ = saved[0], None
    logging.getLogger().setLevel(saved[1])


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_lines_carry_the_bound_run_user_and_verb(root: object) -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", form="json", secrets=["xoxb-secret-token-1234"], stream=stream)
    log = logging.getLogger("upgradebot.test")
    with bound(user="U0LEAD", verb="approve"), bound(run="r-3k9x0b2a"):
        log.info("approved with xoxb-secret-token-1234\nforged line")
    log.debug("not at INFO")
    try:
        raise ValueError("boom\nacross lines")
    except ValueError:
        log.exception("failed %s", "中" * 3000)
    first, second = (json.loads(line) for line in lines(stream))
    assert (first["run"], first["user"], first["verb"], first["level"]) == ("r-3k9x0b2a", "U0LEAD", "approve", "INFO")
    assert "xoxb-secret" not in first["message"] and "\nforged line" in first["message"]
    assert "run" not in second and "Traceback" in second["exception"] and second["message"].endswith("…")
    assert all(len(line.encode()) <= MAX_LOG_LINE for line in lines(stream)) and len(lines(stream)) == 2
    assert context() == {}


def test_text_lines_end_with_the_context(root: object) -> None:
    stream = io.StringIO()
    configure_logging(level="WARNING", form="text", stream=stream)
    log = logging.getLogger("upgradebot.test")
    with bound(run="r-3k9x0b2a", user="U0ANA"):
        log.info("below the level")
        log.warning("refused")
    (line,) = lines(stream)
    assert line.endswith("upgradebot.test: refused [run=r-3k9x0b2a user=U0ANA]")


def test_context_stays_in_its_thread(root: object) -> None:
    seen: list[dict[str, str]] = []
    with bound(run="r-1"):
        worker = threading.Thread(target=lambda: seen.append(context()))
        worker.start()
        worker.join()
    assert seen == [{}]
    with pytest.raises(ValueError, match="cannot bind colour"), bound(colour="blue"):
        pass
