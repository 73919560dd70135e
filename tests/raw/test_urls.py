import pytest

from assets.raw.urls import deletion_key, normalise_url, url_host


@pytest.mark.parametrize(
    "a,b",
    [
        ("HTTP://Example.COM/a?b=1#frag", "http://example.com/a?b=1"),
        ("http://example.com:80/", "http://example.com/"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com/%7Euser", "https://example.com/~user"),
        ("http://example.com./x", "http://example.com/x"),
    ],
)
def test_equivalent_urls_share_a_deletion_key(a, b):
    assert normalise_url(a) == normalise_url(b)
    assert deletion_key(a) == deletion_key(b)


@pytest.mark.parametrize(
    "a,b",
    [
        ("http://example.com/a", "https://example.com/a"),
        ("http://example.com/a", "http://example.com/A"),
        ("http://example.com:8080/", "http://example.com/"),
        ("http://example.com/?a=1", "http://example.com/?a=2"),
    ],
)
def test_different_resources_get_different_keys(a, b):
    assert deletion_key(a) != deletion_key(b)


def test_non_hierarchical_uris():
    assert normalise_url("DNS:www.archive.org") == "dns:www.archive.org"
    assert url_host("dns:www.archive.org") is None
    assert url_host("http://WWW.Example.org:81/x") == "www.example.org"
