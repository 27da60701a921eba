"""Image references in one spelling (attack finding 5): :func:`normalise` is idempotent, equal
for every spelling of one repository's tag or digest (host case, ``:443``, Docker Hub's names
and ``library/``), and keeps what tells two images apart (another port, another tag)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbooks import validation
from runbooks.image_names import ImageName, normalise, parse, release, same_image

DIGEST = "sha256:" + "3c" * 32

_component = st.from_regex(r"[a-z0-9]{1,6}(?:(?:[._]|__|-{1,2})[a-z0-9]{1,4})?", fullmatch=True)
_plain_component = st.from_regex(r"[a-z0-9]{1,6}(?:(?:_|__|-{1,2})[a-z0-9]{1,4})?", fullmatch=True)  # no '.'
_host = st.from_regex(r"[a-z0-9]{1,8}(?:\.[a-z0-9]{1,5}){1,2}", fullmatch=True)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_digest = st.sampled_from(["", DIGEST, "sha256:" + "0" * 64])


@st.composite
def references(draw: st.DrawFn) -> str:
    """Any reference of the grammar, spelled any way: a host in any case with or without a
    port, Docker Hub's names, or no registry at all."""
    path = "/".join(draw(st.lists(_component, min_size=1, max_size=3)))
    registry = draw(st.one_of(st.just(""), _host, st.sampled_from(["docker.io", "index.docker.io", "localhost"])))
    if registry:
        registry = "".join(c.upper() if draw(st.booleans()) else c for c in registry)
        registry += draw(st.sampled_from(["", ":443", ":5000", ":80"]))
    elif "." in path.split("/")[0]:
        path = "x/" + path  # a first component with a dot would be read as a registry
    tag, digest = draw(st.one_of(st.just(""), _tag)), draw(_digest)
    if not tag and not digest:
        tag = "v1.0.0"
    return (f"{registry}/" if registry else "") + path + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


@st.composite
def respelt(draw: st.DrawFn) -> tuple[str, str]:
    """``(canonical, another spelling of it)``."""
    hub = draw(st.booleans())
    components = draw(st.lists(_plain_component, min_size=1, max_size=3))
    if hub:
        path = "/".join(components if len(components) > 1 else ["library", *components])
        canonical_host = "docker.io"
        host = draw(st.sampled_from(["", "docker.io", "index.docker.io", "registry-1.docker.io"]))
        if host and draw(st.booleans()):
            host += ":443"
        if path.startswith("library/") and draw(st.booleans()):
            spelt_path = path.removeprefix("library/")
        else:
            spelt_path = path
    else:
        path = "/".join(components)
        canonical_host = draw(_host)
        host = canonical_host + draw(st.sampled_from(["", ":443"]))
        spelt_path = path
    host = "".join(c.upper() if draw(st.booleans()) else c for c in host)
    tag, digest = draw(_tag), draw(_digest)
    suffix = f":{tag}" + (f"@{digest}" if digest else "")
    spelling = (f"{host}/" if host else "") + spelt_path + suffix
    return f"{canonical_host}/{path}{suffix}", spelling


@given(references())
def test_normalise_is_idempotent(image: str) -> None:
    once = normalise(image)
    assert normalise(once) == once and parse(once) == parse(image)


@given(respelt())
def test_equivalent_spellings_normalise_equal(pair: tuple[str, str]) -> None:
    canonical, spelling = pair
    assert normalise(spelling) == canonical
    assert same_image(spelling, canonical) and same_image(canonical, spelling)


@given(references())
def test_every_reference_validation_accepts_normalises(image: str) -> None:
    """The grammar :func:`runbooks.validation.image_reference` checks is the one parsed here."""
    try:
        validation.image_reference(image)
    except ValueError:
        return
    assert parse(image).path


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
    ("nvcr.io:0443/nvidia/k8s-device-plugin:v0.17.0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
    ("NVCR.IO/nvidia/k8s-device-plugin:v0.17.0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("library/busybox:1.36", "docker.io/library/busybox:1.36"),
    ("index.docker.io/busybox:1.36", "docker.io/library/busybox:1.36"),
    ("registry-1.docker.io:443/library/busybox:1.36", "docker.io/library/busybox:1.36"),
    ("nvidia/k8s-device-plugin:v0.17.0", "docker.io/nvidia/k8s-device-plugin:v0.17.0"),
    (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
    (f"busybox:1.36@{DIGEST}", f"docker.io/library/busybox:1.36@{DIGEST}"),
    ("localhost/plugin:v1", "localhost/plugin:v1"),
    ("registry.local:5000/plugin:v1", "registry.local:5000/plugin:v1"),
    ("[::1]:443/plugin:v1", "[::1]/plugin:v1"),
    ("docker.io:5000/plugin:v1", "docker.io:5000/plugin:v1"),
    ("nvcr.io/nvidia/k8s-device-plugin:V0.17.0", "nvcr.io/nvidia/k8s-device-plugin:V0.17.0"),
])
def test_the_canonical_spelling(spelling: str, canonical: str) -> None:
    """Host case, :443 and Docker Hub's defaults go; another port, the tag's case and the digest stay."""
    assert normalise(spelling) == canonical


def test_what_tells_two_images_apart_stays() -> None:
    """Another port is another registry; a distribution suffix is another tag (another build);
    a digest is what is pulled when both references carry one."""
    plugin = "nvcr.io/nvidia/k8s-device-plugin"
    assert not same_image(f"{plugin}:v0.17.0", "nvcr.io:5000/nvidia/k8s-device-plugin:v0.17.0")
    assert not same_image(f"{plugin}:v0.17.0", f"{plugin}:v0.17.0-ubi9")
    assert same_image(f"{plugin}:v0.17.0@{DIGEST}", f"{plugin}@{DIGEST}")
    assert not same_image(f"{plugin}:v0.17.0@{DIGEST}", f"{plugin}:v0.17.0")
    assert parse(f"{plugin}@{DIGEST}") == ImageName(registry="nvcr.io", path="nvidia/k8s-device-plugin", digest=DIGEST)
    with pytest.raises(ValueError, match="not an image reference"):
        parse("nvcr.io/NVIDIA/plugin:v1")


def test_a_tag_is_a_version_and_its_suffixes() -> None:
    assert release("v0.17.0-ubi9-local") == ("v0.17.0", ("ubi9", "local"))
    assert release("v0.14.5-ubuntu20.04") == ("v0.14.5", ("ubuntu20.04",))
    assert release("0.4.0") == ("0.4.0", ())
    assert release("v0.17.0-rc.1") == ("v0.17.0", ("rc.1",))
    assert [release(t) for t in ("latest", "v0.17", "v0.17.0.1", "devel-ubi9")] == [None] * 4
