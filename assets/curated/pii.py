"""PII and secrets detection and redaction for curated web text (pure code, no Dagster).

Detected types, in the fixed order of ``PII_TYPES``:

- ``email``          addresses with a dotted domain (file names such as ``logo@2x.png`` excluded)
- ``ip_address``     *public* IPv4 / IPv6 only; private, loopback, link-local, reserved, multicast and
                     documentation ranges are left alone (decided by the stdlib ``ipaddress`` module);
                     IPv4 that reads as a version/section number (``version 1.2.3.4``) is skipped
- ``phone``          ``+CC`` international numbers and common national formats (NANP, trunk-0 European)
- ``payment_card``   13-19 digits, optional space/dash groups, known IIN prefix and Luhn-valid
- ``iban``           country code + check digits + BBAN, per-country length and ISO 7064 mod-97 check
- ``aws_key``        access key ids (AKIA, ASIA, ...) and 40-char secret keys in assignments
- ``github_token``   ghp_/gho_/ghu_/ghs_/ghr_ and github_pat_ tokens
- ``gitlab_token``   glpat- personal access tokens
- ``slack_token``    xox[abprs]- tokens and hooks.slack.com webhook URLs
- ``private_key``    ``-----BEGIN ... PRIVATE KEY-----`` blocks up to their END line
- ``jwt``            three base64url segments whose header decodes to a JSON object with ``"alg"``
- ``generic_secret`` the value of ``api_key=`` / ``apikey:`` / ``secret=`` / ``password=`` / ``token=`` ...
                     assignments and ``Bearer`` credentials, when the value is not empty or a placeholder

Placeholder scheme used by ``redact``: personal data becomes ``<EMAIL>``, ``<IP_ADDRESS>``, ``<PHONE>``,
``<PAYMENT_CARD>``, ``<IBAN>``; credentials become ``<SECRET:type>`` (``<SECRET:aws_key>``,
``<SECRET:jwt>``, ...). For assignments only the value is replaced, so ``password=<SECRET:generic_secret>``
keeps the key name readable.

Overlaps are resolved deterministically: candidates are ranked by type (``_PRIORITY``: a private-key block
beats everything inside it, specific token formats beat generic assignments, IBAN/card beat phone), then by
start offset, then longer first; a candidate overlapping an accepted span is dropped.

Every pattern is linear by design: start positions are restricted by a look-behind to token boundaries,
repeated character classes are disjoint from their separators (no ambiguous splits) and every quantifier is
bounded, so one attempt costs a bounded number of steps whatever the input. Key/value assignments are
found from their ``=`` / ``:`` backwards over a bounded window instead of trying every keyword everywhere.

Known limits (precision over recall on web text): a dotted quad whose octets are all <= 31 (``zlib
1.2.3.4``) counts as an IP only next to words like ``ip``/``dns``/``server`` or when all octets are equal
(``1.1.1.1``); a national number needs separators (a bare digit run is an id) and a 7-digit local number
needs a ``tel``/``phone``/``call`` cue; an assignment value ends at whitespace, a quote or ``&``; an
all-letter word value or one containing ``example``/``your``/``changeme`` is a placeholder, not a secret;
only ASCII digits count.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

PII_TYPES: tuple[str, ...] = (
    "email",
    "ip_address",
    "phone",
    "payment_card",
    "iban",
    "aws_key",
    "github_token",
    "gitlab_token",
    "slack_token",
    "private_key",
    "jwt",
    "generic_secret",
)

_PERSONAL_TYPES = frozenset({"email", "ip_address", "phone", "payment_card", "iban"})

PLACEHOLDERS: dict[str, str] = {t: (f"<{t.upper()}>" if t in _PERSONAL_TYPES else f"<SECRET:{t}>") for t in PII_TYPES}

# Lower rank wins an overlap. Containers first (a key block holds base64 that could look like anything),
# then formats with a fixed prefix, then structured numbers, then the loosest detector (phone) last.
_PRIORITY: dict[str, int] = {
    t: i
    for i, t in enumerate(
        (
            "private_key",
            "jwt",
            "aws_key",
            "github_token",
            "gitlab_token",
            "slack_token",
            "generic_secret",
            "email",
            "iban",
            "payment_card",
            "ip_address",
            "phone",
        )
    )
}


@dataclass(frozen=True, slots=True)
class PiiMatch:
    """One detected span: ``text[start:end]`` is PII or a secret of kind ``type``."""

    type: str
    start: int
    end: int


def _spans(kind: str, pattern: re.Pattern, text: str, valid: Callable[[str], bool] | None = None) -> Iterator[PiiMatch]:
    """The matches of ``pattern`` in ``text`` whose matched string passes ``valid`` (all when it is None)."""
    for m in pattern.finditer(text):
        if valid is None or valid(m.group()):
            yield PiiMatch(kind, m.start(), m.end())


# --------------------------------------------------------------------------------------------- email

_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+\-])"
    r"[A-Za-z0-9_%+\-](?:[A-Za-z0-9._%+\-]{0,63})"
    r"@"
    r"(?:[A-Za-z0-9\-]{1,63}\.){1,8}"
    r"([A-Za-z]{2,24})"
    r"(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])"
)
# ``logo@2x.png`` and friends are retina-image file names, not mailboxes.
_FILE_TLDS = frozenset(
    {"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "tif", "tiff", "avif", "js", "css", "mp4"}
)


def _find_emails(text: str) -> Iterator[PiiMatch]:
    if "@" not in text:
        return
    for m in _EMAIL_RE.finditer(text):
        if m.group(1).lower() in _FILE_TLDS:
            continue
        yield PiiMatch("email", m.start(), m.end())


# ----------------------------------------------------------------------------------------------- ip

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# re.ASCII on the digit patterns: Arabic-Indic and other Unicode digits match \d but break int()/ipaddress.
_IPV4_RE = re.compile(rf"(?<![\w.\-]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w\-]|\.\w)", re.ASCII)
# A dotted quad right after one of these words is a version / section number, not an address.
_VERSION_CONTEXT_RE = re.compile(
    r"(?i)(?:\bv|\bver\.?|\bversion|\bversions|\brelease|\bbuild|\bfirmware|\bkernel|\brevision|\brev\.?"
    r"|\bsection|\bsec\.|\bchapter|\bclause|\barticle|\bstep|\brule|\bfigure|\bfig\.|\btable|\bitem|§)"
    r"\s{0,3}[:#]?\s{0,3}$"
    r"|[A-Za-z]/$|[=<>~!]=\s{0,3}$"  # Firefox/2.0.0.11, novas==3.1.1.3
)
# Versions have small components (zlib 1.2.3.4, GCC 2.7.2.2); a quad of small octets is an address only
# when the text around says so, or when it is a repeated-octet resolver like 1.1.1.1 / 8.8.8.8.
_SMALL_OCTET = 31
_IP_CONTEXT_RE = re.compile(
    r"(?i)\b(?:ips?|ipv4|address(?:es)?|addr|dns|servers?|host(?:name)?|resolvers?|nameservers?|gateway|ping"
    r"|traceroute|route|hops?|peers?|client|remote|proxy|firewall|block(?:ed)?|ban(?:ned)?"
    r"|connect(?:ed|ion)?)\b|://"
)
# "192.0.2.0/24" names a network, not a host.
_CIDR_RE = re.compile(r"/(\d{1,3})(?!\d)", re.ASCII)
# The matches of r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:]|\.\d)", written to start with the
# character class every match starts with (re jumps to it instead of trying every position: ~1/3 less CPU), then
# the branch that character selects: a colon opens the first group, a hex digit is the first of its 1-4.
_HEX4 = "[0-9A-Fa-f]{0,4}"
_IPV6_RE = re.compile(
    rf"[0-9A-Fa-f:](?<![\w:.][0-9A-Fa-f:])(?:(?<=:){_HEX4}(?::{_HEX4}){{1,6}}|(?<!:)[0-9A-Fa-f]{{0,3}}(?::{_HEX4}){{2,7}})"
    r"(?![\w:]|\.\d)",
    re.ASCII,
)
_IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


def _is_public_ip(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if not addr.is_global or addr.is_multicast or addr.is_reserved or addr.is_unspecified:
        return False
    # Only 2000::/3 is handed out as global unicast; anything else that parses is a coincidence.
    return addr.version == 4 or addr in _IPV6_GLOBAL_UNICAST


# What every match of _IPV4_RE / _PHONE_CANDIDATE_RE / _CARD_RE / _IBAN_RE contains. Each starts with a character
# class, which the regex engine skips to in C, so a text without one costs a fast scan instead of an attempt at
# every position (the full patterns start with a look-behind); a text with one is searched in full as before.
_IPV4_HINT_RE = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d", re.ASCII)
_PHONE_HINT_RE = re.compile(r"\d[\d ().\-/]{5,24}\d", re.ASCII)
_CARD_HINT_RE = re.compile(r"\d(?:[ \-]?\d){12}", re.ASCII)
_IBAN_HINT_RE = re.compile(r"\d(?<=[A-Z]{2}\d)\d", re.ASCII)  # [A-Z]{2}\d{2}, found from its digits (~2x)


def _find_ips(text: str) -> Iterator[PiiMatch]:
    if _IPV4_HINT_RE.search(text):
        for m in _IPV4_RE.finditer(text):
            if _VERSION_CONTEXT_RE.search(text, max(0, m.start() - 16), m.start()):
                continue
            octets = [int(o) for o in m.group().split(".")]
            if max(octets) <= _SMALL_OCTET and len(set(octets)) > 1:
                if not _IP_CONTEXT_RE.search(text, max(0, m.start() - 40), m.start()):
                    continue
            cidr = _CIDR_RE.match(text, m.end())
            if cidr and int(cidr.group(1)) < 32:
                continue
            if _is_public_ip(ipaddress.IPv4Address(m.group())):
                yield PiiMatch("ip_address", m.start(), m.end())
    if "::" in text or text.count(":") >= 7:
        for m in _IPV6_RE.finditer(text):
            s = m.group()
            # "2004::" (a year before a reST "::") parses; real addresses show at least three groups.
            if sum(1 for g in s.split(":") if g) < 3 or ("::" not in s and s.count(":") != 7):
                continue
            cidr = _CIDR_RE.match(text, m.end())
            if cidr and int(cidr.group(1)) < 128:
                continue
            try:
                addr = ipaddress.IPv6Address(s)
            except ValueError:
                continue
            if _is_public_ip(addr):
                yield PiiMatch("ip_address", m.start(), m.end())


# -------------------------------------------------------------------------------------------- phone

# A candidate is a run of digits and phone separators; the structure is checked in Python afterwards.
# The matches of r"(?<![\w+\-./(#])(?:\+|\()?\d[\d ().\-/]{5,24}\d(?![\w\-/]|[.,]\d)", written to start with the
# class every match starts with (re jumps to it instead of trying every position: ~1/2 less CPU); a "+" or "(" must
# be followed by the first digit.
_PHONE_CANDIDATE_RE = re.compile(
    r"[+(\d](?<![\w+\-./(#][+(\d])(?:(?<=[+(])\d|(?<=\d))[\d ().\-/]{5,24}\d(?![\w\-/]|[.,]\d)", re.ASCII
)
_PHONE_GROUP_RE = re.compile(r"\+?\(?\d{1,12}\)?", re.ASCII)
_DATE_LIKE_RE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./](?:\d{4}|\d{2})", re.ASCII)
# Numbers introduced by these words are references, not phone numbers.
_PHONE_NEG_CONTEXT_RE = re.compile(
    r"(?i)(?:#|\bno\.?|\bnr\.?|\border|\binvoice|\btracking|\bisbn(?:-1[03])?|\bissn|\bref\.?|\bid"
    r"|\bsku|\bserial|\baccount|\bacct\.?|\bcase|\bticket|\bpart|\bmodel|\bpatent|\bdoi)\s{0,3}[:#]?\s{0,3}$"
)
_PHONE_POS_CONTEXT_RE = re.compile(
    r"(?i)(?:\btel\.?|\btelephone|\bphone|\bmobile|\bcell|\bfax|\bcall|\bwhatsapp|\bhotline|\bph\.?)"
    r"[^\n\d]{0,12}$"
)
_PHONE_MAX_GROUPS = 7
# The fewest digits `_phone_shape` accepts (the local 3 + 4; every other shape needs 8 or more): a candidate
# with fewer (dates and figures: "2008 01") is passed over without splitting it into groups.
_PHONE_MIN_DIGITS = 7
_NOT_DIGITS = str.maketrans("", "", "+() .-/")  # what a candidate holds besides its digits


def _phone_shape(groups: Sequence[str]) -> str | None:
    """``"phone"`` if the tokens ``groups`` (digits with their own parens / plus) form a phone number,
    ``"local"`` if they form one only when the text says so (555-0123), else None."""
    if len(groups) > _PHONE_MAX_GROUPS or any(g.count("(") != g.count(")") for g in groups):
        return None
    digits = [g.strip("+()") for g in groups]
    n = sum(len(d) for d in digits)
    if groups[0].startswith("00") and len(digits[0]) > 2:
        # 0044 20 ... is the +44 form written with the international call prefix.
        return _phone_shape(["+" + groups[0][2:], *groups[1:]])
    if groups[0].startswith("+"):
        if not 8 <= n <= 15 or digits[0].startswith("0"):
            return None
        if len(groups) == 1:
            return "phone"
        if len(digits[0]) > 3 or sum(1 for d in digits[1:] if len(d) == 1) > 1:
            return None
        return "phone"
    if len(groups) == 1:
        return None  # no structure: a bare digit run is an id, not a phone
    lens = [len(d) for d in digits]
    # NANP: (NXX) NXX-XXXX, optionally with a leading 1.
    if lens[-2:] == [3, 4] and (
        (lens[:-2] == [3] and digits[0][0] in "23456789" and digits[1][0] in "23456789")
        or (lens[:-2] == [1, 3] and digits[0] == "1" and digits[1][0] in "23456789" and digits[2][0] in "23456789")
    ):
        return "phone"
    # Trunk-0 national formats (UK, FR, DE, NL, AU, ...): 0 + area code (never 0), then groups of 2-8
    # digits. Equal-length groups are French-style pairs (five of them) or not a phone (lottery draws,
    # "012 013 023 123").
    if (
        digits[0][0] == "0"
        and digits[0][1:2] not in ("", "0")
        and lens[0] <= 5
        and 10 <= n <= 12
        and all(2 <= x <= 8 for x in lens)
        and (len(set(lens)) > 1 or lens == [2, 2, 2, 2, 2])
    ):
        return "phone"
    if lens == [3, 4] and digits[0][0] in "23456789":
        return "local"
    return None


def _find_phones(text: str) -> Iterator[PiiMatch]:
    if not _PHONE_HINT_RE.search(text):
        return
    for m in _PHONE_CANDIDATE_RE.finditer(text):
        cand = m.group()
        if len(cand.translate(_NOT_DIGITS)) < _PHONE_MIN_DIGITS:
            continue
        toks = [(g.start(), g.end(), g.group()) for g in _PHONE_GROUP_RE.finditer(cand)]
        if not toks:
            continue
        # At most one separator char between groups; a wider gap starts another number.
        runs: list[list[tuple[int, int, str]]] = [[toks[0]]]
        for prev, tok in zip(toks, toks[1:]):
            gap = cand[prev[1] : tok[0]]
            if gap in ("", " ", "-", ".", "/"):
                runs[-1].append(tok)
            else:
                runs.append([tok])
        for run in runs:
            # Only a whole run counts: a window inside a longer digit sequence (lottery draws, tracking
            # numbers) would find a phone-shaped piece almost anywhere.
            shape = _phone_shape([t[2] for t in run])
            if shape is None:
                continue
            start, end = m.start() + run[0][0], m.start() + run[-1][1]
            if any(_DATE_LIKE_RE.fullmatch(tok) for tok in text[start:end].split()):
                continue
            if _PHONE_NEG_CONTEXT_RE.search(text, max(0, start - 16), start):
                continue
            if shape == "local" and not _PHONE_POS_CONTEXT_RE.search(text, max(0, start - 24), start):
                continue
            yield PiiMatch("phone", start, end)


# ------------------------------------------------------------------------------------- payment card

_CARD_RE = re.compile(r"(?<![\w\-.,])\d(?:[ \-]?\d){12,18}(?![\w\-]|[.,]\d)", re.ASCII)
# (IIN prefix, allowed lengths): a number qualifies when any prefix matches with one of its lengths.
_CARD_IINS: tuple[tuple[str, frozenset[int]], ...] = tuple(
    (p, frozenset(lengths))
    for prefixes, lengths in (
        (("4",), (13, 16, 19)),  # Visa
        (tuple(str(x) for x in range(51, 56)), (16,)),  # Mastercard
        (tuple(str(x) for x in range(2221, 2721)), (16,)),  # Mastercard 2-series
        (("34", "37"), (15,)),  # American Express
        (("6011", "65") + tuple(str(x) for x in range(644, 650)), (16, 17, 18, 19)),  # Discover
        (("36",), (14, 15, 16, 17, 18, 19)),  # Diners Club International
        (("300", "301", "302", "303", "304", "305", "38", "39"), (14, 16, 17, 18, 19)),  # Diners
        (tuple(str(x) for x in range(3528, 3590)), (16, 17, 18, 19)),  # JCB
        (("62",), (16, 17, 18, 19)),  # UnionPay
        (("50", "56", "57", "58", "63", "67"), (13, 14, 15, 16, 17, 18, 19)),  # Maestro
    )
    for p in prefixes
)
_CARD_LAYOUTS_SPECIAL = frozenset({(4, 6, 5), (4, 6, 4)})  # Amex, Diners


def luhn_valid(digits: str) -> bool:
    """Whether a string of decimal digits passes the Luhn (mod 10) check."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _valid_card(cand: str) -> bool:
    digits = re.sub(r"\D", "", cand)
    seps = set(re.sub(r"\d", "", cand))
    if len(seps) > 1:
        return False
    if seps:
        lens = tuple(len(g) for g in re.split(r"[ \-]", cand))
        if lens not in _CARD_LAYOUTS_SPECIAL and not (all(x == 4 for x in lens[:-1]) and 1 <= lens[-1] <= 4):
            return False
    if len(set(digits)) == 1:
        return False  # 0000 0000 0000 0000 passes Luhn but is a filler
    if not any(digits.startswith(p) and len(digits) in ls for p, ls in _CARD_IINS):
        return False
    return luhn_valid(digits)


def _find_cards(text: str) -> Iterator[PiiMatch]:
    if _CARD_HINT_RE.search(text):
        yield from _spans("payment_card", _CARD_RE, text, _valid_card)


# --------------------------------------------------------------------------------------------- iban

# Total IBAN length per country (SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip

_IBAN_RE = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}"
    r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?)"
    r"(?![A-Za-z0-9])",
    re.ASCII,
)


def iban_valid(iban: str) -> bool:
    """Whether ``iban`` (spaces allowed) has its country's length and passes the ISO 7064 mod-97 check."""
    s = iban.replace(" ", "").upper()
    if IBAN_LENGTHS.get(s[:2]) != len(s) or not (s.isascii() and s.isalnum()):
        return False
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _find_ibans(text: str) -> Iterator[PiiMatch]:
    if _IBAN_HINT_RE.search(text):
        yield from _spans("iban", _IBAN_RE, text, iban_valid)


# ------------------------------------------------------------------------------------------ secrets

_AWS_KEY_ID_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "ABIA", "ACCA")
_AWS_KEY_ID_RE = re.compile(rf"(?<![A-Za-z0-9])(?:{'|'.join(_AWS_KEY_ID_PREFIXES)})[A-Z0-9]{{16}}(?![A-Za-z0-9])")
# Checked, like generic assignments, backwards from an "=" or ":" (see _ASSIGN_OP_RE).
_AWS_SECRET_KEY_BEFORE_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?[ \t]{0,3}$"
)
_AWS_SECRET_VALUE_RE = re.compile(r"[=>]?[ \t]{0,3}[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
_GITHUB_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,251})(?![A-Za-z0-9_])"
)
_GITLAB_RE = re.compile(r"(?<![A-Za-z0-9_\-])glpat-[A-Za-z0-9_\-]{20,64}(?:\.[A-Za-z0-9_\-]{1,32}){0,2}")
_SLACK_RE = re.compile(
    r"(?<![A-Za-z0-9_\-])xox[abprs]-[A-Za-z0-9\-]{10,250}(?![A-Za-z0-9_\-])"
    r"|https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,200}"
)
_PEM_BEGIN_RE = re.compile(r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_RE = re.compile(r"-----END (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----")
# Without an END line (truncated paste) the block runs over header and base64 lines.
_PEM_BODY_RE = re.compile(
    r"(?:[ \t]{0,8}\r?\n[ \t]{0,8}(?:[A-Za-z0-9+/=]{1,100}|[A-Za-z\-]{1,40}: [^\n]{0,200})(?=[ \t]{0,8}(?:\r?\n|$)))*"
)
_PEM_MAX_CHARS = 20_000
_PEM_KEY_MATERIAL_RE = re.compile(r"[A-Za-z0-9+/=]{32}")
_JWT_RE = re.compile(
    r"(?<![A-Za-z0-9_\-.])(eyJ[A-Za-z0-9_\-]{5,2000})\.([A-Za-z0-9_\-]{2,8000})\.([A-Za-z0-9_\-]{0,2000})"
    r"(?![A-Za-z0-9_\-.])"
)
# Generic assignments are found from their operator backwards: "=" and ":" are rare enough in prose that
# checking the few characters before each one is cheaper than trying a keyword at every position.
# An operator counts only after the last letter of a key (every key below, AWS's too, ends in y, t, n or d)
# and at most 4 of " \t\"'": checked by fixed-width look-behinds after the plain class (scanned fast), so
# ":"-dense text (CSS, logs) stays cheap without a Python loop over every ":" (~40% less CPU for that step).
# "=>" / ":=" end in the value regex.
_ASSIGN_OP_RE = re.compile(r"[=:](?:" + "|".join(rf"(?<=[yYtTnNdD][ \t\"']{{{i}}}.)" for i in range(5)) + ")")
# A service prefix (STRIPE_API_KEY, db-password, client_secret) may precede the key: only a letter or
# digit right before it breaks the match.
_GENERIC_KEY_BEFORE_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:api[_\-]?key|apikey|api[_\-]?secret|api[_\-]?token|secret(?:[_\-]?key)?"
    r"|password|passwd|pwd|token|private[_\-]?key)[\"']?[ \t]{0,3}$"
)
_GENERIC_VALUE_RE = re.compile(r"[=>]?[ \t]{0,3}[\"']?([^\s\"'<>,;&`(){}\[\]=]{1,200}={0,2})")
_BEARER_RE = re.compile(r"(?<![A-Za-z0-9])[Bb]earer[ \t]{1,3}([A-Za-z0-9._~+/\-]{20,500}=*)")
# ``getpass.getpass``, ``self.token``, ``var.set(...)``: code that reads a secret, not the secret.
_CODE_REF_RE = re.compile(r"[A-Za-z_]{1,50}(?:\.[A-Za-z_]{1,50}){1,10}")
_PLACEHOLDER_RE = re.compile(
    r"(?i)(?:x+|\*+|\.+|-+|_+|#+|0+|•+|\?+"
    r"|null|none|nil|undefined|true|false|required|optional|hidden|secret|password|token|string|str"
    r"|test|testing|admin|default|empty|value|env|process\.env\.[\w.]{1,100}|os\.environ.{0,100})"
)
_PLACEHOLDER_PART_RE = re.compile(
    r"(?i)your|example|placeholder|changeme|change_me|redacted|dummy|sample|xxxx|\*\*\*|\.\.\.|<|>"
)


def _is_real_secret_value(v: str) -> bool:
    if len(v) < 6 or v[0] in "$%{<[@:=/~" or "://" in v:
        return False
    if _PLACEHOLDER_RE.fullmatch(v) or _PLACEHOLDER_PART_RE.search(v):
        return False
    if v.isdigit() or len(set(v)) < 4:
        return False  # counts, ids and fillers ("token: 4096", "aaaaaa")
    # A plain word ("password: required", "The secret: Practice") reads as prose; a credential mixes
    # character classes or case (hunter2, s3cr3t, hUnTeRpass).
    return not (v.isalpha() and (v.islower() or v.isupper() or v.istitle()))


def _find_secrets(text: str) -> Iterator[PiiMatch]:
    if "PRIVATE KEY" in text:
        ends = [(m.start(), m.end()) for m in _PEM_END_RE.finditer(text)]
        end_starts = [s for s, _ in ends]
        covered = -1
        for m in _PEM_BEGIN_RE.finditer(text):
            if m.start() < covered:
                continue
            k = bisect.bisect_left(end_starts, m.end())
            if k < len(ends) and ends[k][0] - m.end() <= _PEM_MAX_CHARS:
                if not _PEM_KEY_MATERIAL_RE.search(text, m.end(), ends[k][0]):
                    continue  # "... (private key in base64 encoding) ..." is documentation, not a key
                stop = ends[k][1]
            else:
                body = _PEM_BODY_RE.match(text, m.end(), min(len(text), m.end() + _PEM_MAX_CHARS))
                stop = body.end() if body else m.end()
            covered = stop
            yield PiiMatch("private_key", m.start(), stop)
    if "eyJ" in text:
        for m in _JWT_RE.finditer(text):
            if _jwt_header_ok(m.group(1)):
                yield PiiMatch("jwt", m.start(), m.end())
    if any(p in text for p in _AWS_KEY_ID_PREFIXES):
        yield from _spans("aws_key", _AWS_KEY_ID_RE, text)
    if any(p in text for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")):
        yield from _spans("github_token", _GITHUB_RE, text)
    if "glpat-" in text:
        yield from _spans("gitlab_token", _GITLAB_RE, text)
    if "xox" in text or "hooks.slack.com" in text:
        yield from _spans("slack_token", _SLACK_RE, text)
    for op in _ASSIGN_OP_RE.finditer(text):
        window = max(0, op.start() - 40)
        if _AWS_SECRET_KEY_BEFORE_RE.search(text, window, op.start()):
            aws = _AWS_SECRET_VALUE_RE.match(text, op.end())
            # The fixed 40-char format is evidence enough; AWS's documented *EXAMPLEKEY values stay found.
            if aws and len(set(aws.group(1))) > 4 and not aws.group(1).isalpha():
                yield PiiMatch("aws_key", aws.start(1), aws.end(1))
                continue
        if not _GENERIC_KEY_BEFORE_RE.search(text, window, op.start()):
            continue
        val = _GENERIC_VALUE_RE.match(text, op.end())
        if val is None or text[val.end() : val.end() + 1] in ("(", "["):
            continue
        v = val.group(1).rstrip(".")
        if _is_real_secret_value(v) and not _CODE_REF_RE.fullmatch(v):
            yield PiiMatch("generic_secret", val.start(1), val.start(1) + len(v))
    if "earer" in text:
        for m in _BEARER_RE.finditer(text):
            if _is_real_secret_value(m.group(1)):
                yield PiiMatch("generic_secret", m.start(1), m.end(1))


def _b64url_json(segment: str) -> object:
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def _jwt_header_ok(header: str) -> bool:
    obj = _b64url_json(header)
    return isinstance(obj, dict) and isinstance(obj.get("alg"), str)


# ------------------------------------------------------------------------------------------- public

_DETECTORS = (_find_secrets, _find_emails, _find_ibans, _find_cards, _find_ips, _find_phones)


def find_pii(text: str) -> list[PiiMatch]:
    """All PII / secret spans in ``text``, non-overlapping and sorted by start offset."""
    candidates = [c for detect in _DETECTORS for c in detect(text)]
    candidates.sort(key=lambda c: (_PRIORITY[c.type], c.start, c.start - c.end))
    starts: list[int] = []
    accepted: list[PiiMatch] = []  # kept sorted by start, pairwise disjoint
    for c in candidates:
        k = bisect.bisect_right(starts, c.start)
        if k > 0 and accepted[k - 1].end > c.start:
            continue
        if k < len(accepted) and accepted[k].start < c.end:
            continue
        starts.insert(k, c.start)
        accepted.insert(k, c)
    return accepted


def redact(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every match replaced by its ``PLACEHOLDERS`` entry, and a count for every type."""
    counts = dict.fromkeys(PII_TYPES, 0)
    matches = find_pii(text)
    if not matches:
        return text, counts
    parts: list[str] = []
    pos = 0
    for m in matches:
        parts.append(text[pos : m.start])
        parts.append(PLACEHOLDERS[m.type])
        counts[m.type] += 1
        pos = m.end
    parts.append(text[pos:])
    return "".join(parts), counts


# --------------------------------------------------------------------------------------- evaluation


def evaluate(
    examples: Iterable[Mapping[str, object]],
    detect: Callable[[str], list[PiiMatch]] = find_pii,
) -> dict[str, dict[str, float]]:
    """Per-type precision/recall of ``detect`` on ``{"text", "spans": [{"type", "value"}]}`` examples.

    A predicted span is a true positive when its type matches and its text equals or contains a labelled
    value of that type in the same example; a labelled value is recalled when such a span covers it.
    """
    stats = {t: {"tp": 0, "fp": 0, "found": 0, "labelled": 0} for t in PII_TYPES}
    for ex in examples:
        text = str(ex["text"])
        labels = [(str(s["type"]), str(s["value"])) for s in ex["spans"]]  # type: ignore[union-attr]
        preds = [(p.type, text[p.start : p.end]) for p in detect(text)]
        for ptype, ptext in preds:
            hit = any(lt == ptype and lv in ptext for lt, lv in labels)
            stats[ptype]["tp" if hit else "fp"] += 1
        for ltype, lvalue in labels:
            stats[ltype]["labelled"] += 1
            if any(pt == ltype and lvalue in ptext for pt, ptext in preds):
                stats[ltype]["found"] += 1
    out: dict[str, dict[str, float]] = {}
    for t, s in stats.items():
        n_pred = s["tp"] + s["fp"]
        out[t] = {
            "precision": s["tp"] / n_pred if n_pred else 1.0,
            "recall": s["found"] / s["labelled"] if s["labelled"] else 1.0,
            "tp": s["tp"],
            "fp": s["fp"],
            "fn": s["labelled"] - s["found"],
            "labelled": s["labelled"],
        }
    return out


def format_report(metrics: Mapping[str, Mapping[str, float]]) -> str:
    """``evaluate``'s result as a fixed-width table, one row per type."""
    lines = [f"{'type':<16}{'labelled':>9}{'tp':>6}{'fp':>6}{'fn':>6}{'precision':>11}{'recall':>8}"]
    for t in PII_TYPES:
        m = metrics[t]
        lines.append(
            f"{t:<16}{m['labelled']:>9.0f}{m['tp']:>6.0f}{m['fp']:>6.0f}{m['fn']:>6.0f}"
            f"{m['precision']:>11.3f}{m['recall']:>8.3f}"
        )
    return "\n".join(lines)
