"""Consumer env files (agentcoordd/daemon/envfiles.py): where they are and how a
line is read, exactly as agent-coord reads them.

Every expected value in the tables below was checked against agent-coord
itself (its `consumer_env_assignment_value`, `consumer_api_url_configured?`,
`consumer_env_files`, run under a UTF-8 locale), not derived from our code.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcoordd.daemon import envfiles

URL = "AGENT_COORD_API_URL"

# ---- the tables (agent-coord's answers) ------------------------------------------

# (text after `KEY=`, the value agent-coord reads)
VALUES = [
    ("https://x", "https://x"), ("", ""), (" # remote disabled", ""), ("#x", "#x"),
    ("#not-a-comment", "#not-a-comment"), ('""https://x', "https://x"), ("'https://x'", "https://x"),
    ('"https://a"\'b\'', "https://ab"), ("https://x#frag # trailing comment", "https://x#frag"),
    ("https://x # comment", "https://x"), ("https://x#", "https://x#"), ("$FLEET_URL", "$FLEET_URL"),
    ("${FLEET_URL:-https://x}", "${FLEET_URL:-https://x}"), ('"  "', "  "), ("' '", " "),
    ('"https://x', "https://x"), ("'https://x", "https://x"), ("'", ""), ('"', ""),
    ('"https://x\r', "https://x\r"), ("https://x\r", "https://x"), ('"https://x"\r', "https://x"),
    ("https://x; echo hi", "https://x"), ("; # disabled", ""), ("a&b", "a"), ("a|b", "a"),
    ("a<b", "a"), ("a>b", "a"), ("a(b", "a"), ("a)b", "a"), ("a\tb", "a"), ("a\vb", "a"),
    ("a\fb", "a"), ("\vx", ""), ("a\\ b", "a\\"), ('"a\\"b"', "a\\b"), ("'it'\\''s'", "it\\s"),
    ('"a;b c"', "a;b c"), ("'#x'", "#x"), ("a\u00a0b", "a\u00a0b"), ("`cmd`", "`cmd`"),
    ("a=b", "a=b"), ("x\x00y", "x\x00y"), ("\"\"", ""), ("''\"\"''", ""), ('"x"y\'z\'', "xyz"),
    ("\"'\"", "'"), ("'\"'", '"'), ("{a,b}", "{a,b}"), ("*", "*"), ("~/x", "~/x"),
]
LINES = [  # (line without "\n", configures AGENT_COORD_API_URL)
    ("export AGENT_COORD_API_URL='https://x'", True), ("   AGENT_COORD_API_URL=https://x", True),
    ("\texport\tAGENT_COORD_API_URL=https://x", True), ("\vAGENT_COORD_API_URL=x", True),
    ("\fAGENT_COORD_API_URL=x", True), ("\rAGENT_COORD_API_URL=x", True),
    ("export  AGENT_COORD_API_URL=x", True), (" export \t AGENT_COORD_API_URL=x", True),
    ("AGENT_COORD_API_URL=x\r", True),
    ("\u00a0AGENT_COORD_API_URL=x", False), ("\ufeffAGENT_COORD_API_URL=x", False),
    ("exportAGENT_COORD_API_URL=x", False), ("export export AGENT_COORD_API_URL=x", False),
    ("AGENT_COORD_API_URL = x", False), ("AGENT_COORD_API_URL =x", False),
    ("# AGENT_COORD_API_URL=x", False), ("#AGENT_COORD_API_URL=x", False),
    ("declare -x AGENT_COORD_API_URL=x", False), ("readonly AGENT_COORD_API_URL=x", False),
    ("a=1 AGENT_COORD_API_URL=x", False), ("AGENT_COORD_API_URLS=x", False),
    ("XAGENT_COORD_API_URL=x", False), ("agent_coord_api_url=x", False),
    ("AGENT_COORD_API_URL=", False), ("AGENT_COORD_API_URL= # remote disabled", False),
    ("AGENT_COORD_API_URL=''", False), ('AGENT_COORD_API_URL=""', False),
    ("AGENT_COORD_API_URL=; # disabled", False), ("AGENT_COORD_API_URL=\tx", False),
    ("export AGENT_COORD_API_URL", False), ("AGENT_COORD_API_URL", False),
]
FILES = [  # (bytes, configures, value or None)
    (b"AGENT_COORD_API_URL=\n# switched on below\nexport AGENT_COORD_API_URL=\"https://a\"'b'\n",
     True, "https://ab"),
    (b"AGENT_COORD_API_URL=https://a\nAGENT_COORD_API_URL=\n", True, "https://a"),
    (b"AGENT_COORD_API_URL=https://a\nAGENT_COORD_API_URL=https://b\n", True, "https://b"),
    (b"AGENT_COORD_API_URL=https://a\r\nAGENT_COORD_API_URL=https://b\r\n", True, "https://b"),
    (b"AGENT_COORD_API_URL=https://x", True, "https://x"),
    (b"X=1\rAGENT_COORD_API_URL=https://x\n", False, None),
    ("X=1\u2028AGENT_COORD_API_URL=https://x\n".encode(), False, None),
    ("X=1\x85AGENT_COORD_API_URL=https://x\n".encode(), False, None),
    (b"X=1\x0bAGENT_COORD_API_URL=https://x\n", False, None),
    (b"if [ -n \"$X\" ]; then\n  export AGENT_COORD_API_URL=https://x\nfi\n", True, "https://x"),
    (b"source ~/.secrets\nAGENT_COORD_API_URL=https://x # fleet\n", True, "https://x"),
    (b"", False, None), (b"\n\n", False, None),
    ("# caf\u00e9\nAGENT_COORD_API_URL=https://x\n".encode(), True, "https://x"),
]
# Non-UTF-8: agent-coord stops at the first such line (its values are those before it).
BROKEN = [  # (bytes, agent-coord configures?, our values, our error)
    (b"# caf\xe9\nAGENT_COORD_API_URL=https://x\n", False, {}, "line 1 is not UTF-8 text"),
    (b"AGENT_COORD_API_URL=https://x\n# caf\xe9\n", True, {"AGENT_COORD_API_URL": "https://x"},
     "line 2 is not UTF-8 text"),
    (b"AGENT_COORD_API_URL=https://x\xff\n", False, {}, "line 1 is not UTF-8 text"),
]


# ---- one word: the value ------------------------------------------------------------


@pytest.mark.parametrize(("raw", "value"), VALUES, ids=[repr(r) for r, _ in VALUES])
def test_assignment_value_is_agent_coords(raw: str, value: str) -> None:
    assert envfiles.assignment_value(raw) == value


@pytest.mark.parametrize(("raw", "value"), VALUES, ids=[repr(r) for r, _ in VALUES])
def test_a_line_with_that_value_configures_exactly_when_it_is_not_empty(raw: str, value: str) -> None:
    assert envfiles.parse(f"{URL}={raw}\n") == ({URL: value} if value else {})


# ---- which lines are assignments --------------------------------------------------


@pytest.mark.parametrize(("line", "configures"), LINES, ids=[repr(l) for l, _ in LINES])
def test_which_lines_configure_the_api_url(line: str, configures: bool) -> None:
    assert (URL in envfiles.parse(line + "\n")) is configures
    assert (URL in envfiles.parse(line + "\r\n")) is configures  # CRLF files read the same


def test_other_keys_follow_the_same_grammar() -> None:
    text = ("# machine\nexport AGENT_COORD_MACHINE_ID='m 1'\n  AGENT_COORD_STATE_ROOT=/srv/root # x\n"
            "AGENT_COORD_ETCD_ENDPOINTS=;\n_X1=a=b\n1BAD=x\n-X=y\n")
    assert envfiles.parse(text) == {"AGENT_COORD_MACHINE_ID": "m 1",
                                    "AGENT_COORD_STATE_ROOT": "/srv/root", "_X1": "a=b"}


# ---- whole files ----------------------------------------------------------------


@pytest.mark.parametrize(("data", "configures", "value"), FILES, ids=[repr(d) for d, _, _ in FILES])
def test_files_configure_and_the_last_non_empty_line_gives_the_value(
        tmp_path: Path, data: bytes, configures: bool, value: str | None) -> None:
    path = tmp_path / "coord.env"
    path.write_bytes(data)
    loaded = envfiles.load(str(path))
    assert loaded is not None and loaded.error is None
    assert (envfiles.configuring_api_url([loaded]) is not None) is configures
    assert loaded.get(URL) == value


@pytest.mark.parametrize(("data", "agent_coord_configures", "values", "error"), BROKEN,
                         ids=[repr(d) for d, _, _, _ in BROKEN])
def test_a_non_utf8_line_makes_the_file_unusable_and_agent_coord_stops_reading_there(
        tmp_path: Path, data: bytes, agent_coord_configures: bool, values: dict, error: str) -> None:
    """agent-coord skips the rest of the file at the first non-UTF-8 line; we keep
    what it read (for the split-brain report) and call the file unusable."""
    path = tmp_path / "coord.env"
    path.write_bytes(data)
    loaded = envfiles.load(str(path))
    assert loaded is not None
    assert (loaded.values, loaded.error) == (values, error)
    assert (envfiles.configuring_api_url([loaded]) is not None) is agent_coord_configures


def test_missing_file_is_none_and_unreadable_ones_are_errors(tmp_path: Path) -> None:
    assert envfiles.load(str(tmp_path / "absent.env")) is None
    assert envfiles.load(str(tmp_path)) == envfiles.EnvFile(str(tmp_path), error="is a directory")
    big = tmp_path / "big.env"
    big.write_bytes(b"AGENT_COORD_API_URL=https://x\n" + b"#" * envfiles.MAX_ENV_FILE + b"\n")
    loaded = envfiles.load(str(big))
    assert loaded is not None and loaded.error == f"larger than {envfiles.MAX_ENV_FILE} bytes"
    assert loaded.get(URL) == "https://x"  # what agent-coord would have seen, for messages


def test_dev_null_is_an_empty_file_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    assert envfiles.load(os.devnull) == envfiles.EnvFile(os.devnull)
    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    loaded = envfiles.load(str(fifo))  # no writer: returns at once
    assert loaded is not None and loaded.values == {}


def test_a_relative_path_is_the_callers(tmp_path: Path) -> None:
    (tmp_path / "coord.env").write_text("AGENT_COORD_API_URL=https://x\n")
    loaded = envfiles.load("coord.env", str(tmp_path))
    assert loaded == envfiles.EnvFile("coord.env", {URL: "https://x"})  # named as the caller wrote it


# ---- where they are ---------------------------------------------------------------


@pytest.mark.parametrize(("env", "paths"), [
    ({}, []),
    ({"HOME": ""}, []),
    ({"HOME": "/h"}, ["/h/.config/agent-coord/env", "/h/.config/agent-coord/http-env.sh"]),
    ({"HOME": "/h", "XDG_CONFIG_HOME": ""},
     ["/h/.config/agent-coord/env", "/h/.config/agent-coord/http-env.sh"]),
    ({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, ["/x/agent-coord/env", "/x/agent-coord/http-env.sh"]),
    ({"HOME": "/h", "XDG_CONFIG_HOME": "rel"},  # agent-coord uses a relative one as it is
     ["rel/agent-coord/env", "rel/agent-coord/http-env.sh"]),
    ({"AGENT_COORD_ENV_FILE": "/e", "XDG_CONFIG_HOME": "/x"},
     ["/e", "/x/agent-coord/env", "/x/agent-coord/http-env.sh"]),
    ({"AGENT_COORD_ENV_FILE": "", "XDG_CONFIG_HOME": "/x"},
     ["/x/agent-coord/env", "/x/agent-coord/http-env.sh"]),
    ({"AGENT_COORD_ENV_FILE": " "}, [" "]),  # not trimmed
    ({"AGENT_COORD_ENV_FILE": "rel.env"}, ["rel.env"]),
    ({"AGENT_COORD_ENV_FILE": "/x/agent-coord/http-env.sh", "XDG_CONFIG_HOME": "/x"},
     ["/x/agent-coord/http-env.sh", "/x/agent-coord/env"]),  # duplicates once, first place
])
def test_candidates_are_agent_coords_list(env: dict[str, str], paths: list[str]) -> None:
    assert envfiles.candidates(env) == paths


def test_existing_keeps_order_and_skips_absent_files(tmp_path: Path) -> None:
    explicit = tmp_path / "coord.env"
    explicit.write_text("AGENT_COORD_MACHINE_ID=m1\n")
    conventional = tmp_path / "xdg" / "agent-coord" / "http-env.sh"
    conventional.parent.mkdir(parents=True)
    conventional.write_text("export AGENT_COORD_API_URL=https://fleet\n")
    env = {"AGENT_COORD_ENV_FILE": "coord.env", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    files = envfiles.existing(env, str(tmp_path))
    assert [f.path for f in files] == ["coord.env", str(conventional)]
    assert envfiles.configuring_api_url(files) == str(conventional)


# ---- properties -------------------------------------------------------------------

LINE_TEXT = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)))


@given(st.text())
def test_parsing_never_raises_and_never_returns_a_newline_or_an_empty_value(text: str) -> None:
    values = envfiles.parse(text)
    assert all(value and "\n" not in value for value in values.values())


@given(st.binary())
def test_bytes_never_raise_and_agree_with_text(raw: bytes) -> None:
    values, error = envfiles.parse_bytes(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        assert error is not None and error.endswith("is not UTF-8 text")
    else:
        assert (values, error) == (envfiles.parse(text), None)


@given(LINE_TEXT)
def test_a_shell_quoted_value_reads_back_as_itself(value: str) -> None:
    """What `KEY=$(printf %q …)`-style quoting writes, agent-coord's reading returns
    (shlex.quote uses the '…'"'"'…' form: quoted pieces concatenate)."""
    assert envfiles.assignment_value(shlex.quote(value)) == value
    assert envfiles.parse(f"export {URL}={shlex.quote(value)}\r\n").get(URL, "") == value


@given(LINE_TEXT, LINE_TEXT)
def test_unquoted_whitespace_ends_the_word(word: str, rest: str) -> None:
    plain = "".join(c for c in word if c not in envfiles.WORD_ENDS and c not in "\"'")
    for space in envfiles.RUBY_WHITESPACE.replace("\n", ""):
        assert envfiles.assignment_value(plain + space + rest) == plain


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), LINE_TEXT), max_size=6))
def test_the_last_non_empty_assignment_wins(assignments: list[tuple[str, str]]) -> None:
    text = "".join(f"{key}={shlex.quote(value)}\n" for key, value in assignments)
    expected: dict[str, str] = {}
    for key, value in assignments:
        if value:
            expected[key] = value
    assert envfiles.parse(text) == expected
