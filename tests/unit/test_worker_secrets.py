"""Secret references: resolution on the worker only, and scrubbing of captured output."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.workers.secrets import Scrubber, SecretNotFound, SecretStore, env_name, resolve


def test_references_resolve_anywhere_in_the_config() -> None:
    """A {"secret": NAME} object is replaced at any depth, with an optional template."""
    store = SecretStore(environ={"TICKWHEEL_SECRET_API_TOKEN": "tok-123", "TICKWHEEL_SECRET_DB_PASS": "pw"})
    config = {
        "url": "https://x.example",
        "headers": {"Authorization": {"secret": "api-token", "template": "Bearer {}"}},
        "steps": [{"env": {"PASS": {"secret": "DB_PASS"}}}, "plain", 3],
    }
    resolved, used = resolve(config, store)
    assert resolved["headers"]["Authorization"] == "Bearer tok-123"
    assert resolved["steps"] == [{"env": {"PASS": "pw"}}, "plain", 3]
    assert set(used) == {"tok-123", "pw"}
    assert config["headers"]["Authorization"] == {"secret": "api-token", "template": "Bearer {}"}


def test_environment_wins_over_the_secrets_file(tmp_path: Path) -> None:
    """Secrets come from TICKWHEEL_SECRET_<NAME>, else from the worker's secrets file."""
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"from-file": "f-value", "both": "file"}))
    store = SecretStore.load(path, environ={"TICKWHEEL_SECRET_BOTH": "env"})
    assert store.get("from-file") == "f-value"
    assert store.get("both") == "env"
    assert "f-value" not in repr(store)
    assert env_name("api-token.v2") == "TICKWHEEL_SECRET_API_TOKEN_V2"


def test_missing_secret_names_the_reference_not_a_value() -> None:
    """An unknown secret fails with its name; objects with other keys are not references."""
    store = SecretStore(environ={})
    with pytest.raises(SecretNotFound, match="'nope'"):
        resolve({"a": {"secret": "nope"}}, store)
    untouched, used = resolve({"a": {"secret": "x", "other": 1}}, store)
    assert untouched == {"a": {"secret": "x", "other": 1}}
    assert used == ()


def test_scrubber_masks_values_and_their_escaped_forms() -> None:
    """A secret is masked raw, URL-encoded and JSON-escaped; the longest match wins."""
    scrubber = Scrubber(['p@ss/w"rd', "abc", "abcdef"])
    text = 'raw p@ss/w"rd url p%40ss%2Fw%22rd json p@ss/w\\"rd and abcdefg abc'
    assert scrubber.scrub(text) == "raw *** url *** json *** and ***g ***"


@settings(max_examples=100, deadline=None)
@given(
    secret=st.text(alphabet="abcXYZ019", min_size=3, max_size=12),
    noise=st.text(alphabet="abcXYZ019 \n", max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=6),
)
def test_streamed_output_never_leaks_a_secret_split_across_writes(
    secret: str, noise: str, cuts: list[int]
) -> None:
    """Writing a stream in arbitrary pieces, a secret never survives in the emitted text."""
    scrubber = Scrubber([secret])
    stream = noise + secret + noise + secret
    emitted, pending = "", ""
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    for start, end in itertools.pairwise(bounds):
        pending += stream[start:end]
        cut = scrubber.safe_cut(pending)
        emitted += scrubber.scrub(pending[:cut])
        pending = pending[cut:]
    emitted += scrubber.scrub(pending)
    assert secret not in emitted
