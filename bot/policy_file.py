"""Reading the policy file (``UPGRADEBOT_CONFIG``) into plain data, bounded and strict.

:meth:`bot.settings.Settings.policy` validates what :func:`load` returns. Whatever the file
is, the answer is the data or :class:`PolicyFileError` with one line naming the file, and
it comes at once:

- the file is opened without blocking and judged by ``fstat`` on the open descriptor (not a
  ``stat`` of the path before, which a swap could outrun): a FIFO, ``/dev/zero``, a
  directory are refused unread; at most :data:`MAX_BYTES` are read;
- the bytes must be UTF-8;
- the YAML is scanned (the scanner is iterative) for its nesting before it is composed
  (the composer recurses, and would end in a RecursionError), then the node graph is
  counted with each alias expanded as often as it is used (an alias bomb is a few lines),
  before anything is constructed;
- a mapping key must be a plain value (``? [a, b]`` would be an unhashable key), and a key
  given twice is refused (the later one would silently win);
- only ``true`` and ``false`` (as YAML 1.2 spells them) are booleans: YAML 1.1's unquoted
  ``yes``, ``no``, ``on``, ``off`` stay strings, which the policy's strictly typed booleans
  refuse with the key named (``allow_self_approval: no`` must not be read one way here and
  another in a neighbouring tool, nor ``'yes'`` and ``yes`` differently).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import yaml

from handlers import startup_messages as startup_msg

MAX_BYTES = 1 << 20
"""The largest policy file read: a policy is a few kilobytes."""
MAX_DEPTH = 64
"""The deepest nesting of mappings and lists: a policy needs about six."""
MAX_VALUES = 100_000
"""The most values (every scalar, list and mapping, each alias counted as often as it is used)."""

_OPENING = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
            yaml.FlowSequenceStartToken)
_CLOSING = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class PolicyFileError(ValueError):
    """The policy file cannot be read as a policy; the message is one line naming it."""


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives a key twice (where the later one
    would silently win: a second ``approvers:`` emptying the first) or a key that is not a
    plain value."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(None, None, startup_msg.POLICY_KEY_NOT_PLAIN, key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (lines {seen[key]} and {line})", key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
_BOOL_TAG, _INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
UniqueKeyLoader.yaml_implicit_resolvers = {  # YAML 1.1's booleans and numbers dropped, read as YAML 1.2 reads them
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_BOOL_TAG, _INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# numbers as YAML 1.2 and every other tool read them: decimal only (010, 0x10, 0b11, 1_0 and 1:05,
# which YAML 1.1 reads as 8, 16, 3, 10 and 65, are strings, so a number field refuses them by name)
UniqueKeyLoader.add_implicit_resolver(_INT_TAG, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
UniqueKeyLoader.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$|^[-+]?[0-9]+[eE][-+]?[0-9]+$"
                           r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"), list("-+0123456789."))


def read_text(path: Path) -> str:
    """The file's text; :class:`PolicyFileError` unless it is a regular, UTF-8 file of at most 1 MiB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise PolicyFileError(startup_msg.policy_unreadable(str(path), exc.strerror or str(exc))) from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        raise PolicyFileError(startup_msg.policy_not_regular(str(path)))
    try:
        with os.fdopen(fd, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PolicyFileError(startup_msg.policy_unreadable(str(path), exc.strerror or str(exc))) from exc
    if len(data) > MAX_BYTES:
        raise PolicyFileError(startup_msg.policy_too_large(str(path), MAX_BYTES >> 20))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(startup_msg.policy_not_utf8(str(path), exc.start)) from exc


def _depth(text: str) -> int:
    """The deepest nesting of the YAML ``text``, from its tokens (without recursion), counted up to
    one level past :data:`MAX_DEPTH`: PyYAML's scanner costs the square of the open flow levels
    per token (5,000 ``[`` took 4-13 s), so it stops as soon as the answer is known."""
    depth = deepest = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENING):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
        elif isinstance(token, _CLOSING):
            depth -= 1
    return deepest


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes the document holds once every alias is expanded (stops past the limit)."""
    count, stack = 0, [root]
    while stack and count <= MAX_VALUES:
        node = stack.pop()
        count += 1
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += (key, value)
    return count


def load(path: Path) -> object:
    """The data of the YAML policy file at ``path`` ({} when empty); :class:`PolicyFileError`
    for a file that is not one, ``yaml.YAMLError`` for one that is not valid YAML."""
    text = read_text(path)
    if _depth(text) > MAX_DEPTH:
        raise PolicyFileError(startup_msg.policy_too_deep(str(path), MAX_DEPTH))
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        if _expanded_size(node) > MAX_VALUES:
            raise PolicyFileError(startup_msg.policy_too_many_values(str(path), MAX_VALUES))
        return loader.construct_document(node)
    finally:
        loader.dispose()
