"""Slack's encodings of command text: decoded before parsing, never a crash."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from handlers.decoding import decode, escape, words

IDS = st.from_regex(r"[A-Z0-9]{1,12}", fullmatch=True)
LABELS = st.text(alphabet=st.characters(blacklist_characters="<>|"), max_size=30)


def test_mentions_channels_groups_and_links() -> None:
    """Each bracketed form decodes to what the person meant."""
    text = "canary <@U123|ana> <#C9|ops> <!subteam^S7|@leads> <!here> image=<http://reg.io/x:1|reg.io/x:1> <https://a.b>"
    assert words(text) == ["canary", "U123", "C9", "S7", "@here", "image=reg.io/x:1", "https://a.b"]


def test_entities_once() -> None:
    """&lt; &gt; &amp; are undone in one pass, as Slack means them."""
    assert decode("a &lt;b&gt; &amp; &amp;lt;") == "a <b> & &lt;"


def test_non_breaking_spaces_split() -> None:
    """Slack clients send U+00A0 between words; they separate words too."""
    assert words("inventory\u00a0cluster=prod") == ["inventory", "cluster=prod"]


@given(st.text())
def test_decode_never_raises(text: str) -> None:
    """Arbitrary text decodes to a string, whatever brackets and ampersands it holds."""
    assert isinstance(decode(text), str)
    assert all(w.strip() == w and w for w in words(text))


@given(IDS, st.one_of(st.none(), LABELS))
def test_user_mentions_round_trip(user: str, name: str | None) -> None:
    """<@U…> and <@U…|name> decode to the user id."""
    encoded = f"<@{user}>" if name is None else f"<@{user}|{name}>"
    assert decode(encoded) == user
    assert decode(f"approve run-1 as={encoded}") == f"approve run-1 as={user}"


@given(IDS, LABELS)
def test_channel_mentions_round_trip(channel: str, name: str) -> None:
    """<#C…|name> decodes to the channel id."""
    assert decode(f"<#{channel}|{name}>") == channel


@given(st.text())
def test_escaped_text_round_trips(text: str) -> None:
    """What a client escapes, decode gives back exactly."""
    assert decode(escape(text)) == text
