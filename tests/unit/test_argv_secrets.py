"""Secrets in argv are hidden where the collector reads a command line (``gputui.agent.argv_secrets``)."""

from __future__ import annotations

import pytest

from gputui.agent.argv_secrets import REDACTED, redact_argv


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", "abc"], ["--api-key", REDACTED]),
        (["--api_key=abc"], ["--api_key=" + REDACTED]),
        (["--hf-token", "x", "--port", "30000"], ["--hf-token", REDACTED, "--port", "30000"]),
        (["--password", "--verbose"], ["--password", "--verbose"]),  # no value given: nothing to hide
        (["-key", "k"], ["-key", REDACTED]),
        (
            ["HF_TOKEN=hf_x", "OPENAI_API_KEY=y", "CUDA_VISIBLE_DEVICES=0"],
            ["HF_TOKEN=***", "OPENAI_API_KEY=***", "CUDA_VISIBLE_DEVICES=0"],
        ),
        (["AWS_SECRET_ACCESS_KEY=z"], ["AWS_SECRET_ACCESS_KEY=***"]),
        (["--db", "postgres://u:pw@h:5432/d"], ["--db", "postgres://u:***@h:5432/d"]),
        (["-c", "token sk-abcdefghijklmnop1234 used"], ["-c", "token *** used"]),
        (["hf_ABCDEFGHIJKLMNOPQRST"], [REDACTED]),
        (["AKIAABCDEFGHIJKLMNOP"], [REDACTED]),
        (["ghp_abcdefghijklmnopqrstuvwxyz0123"], [REDACTED]),
    ],
)
def test_secrets_are_hidden_and_their_options_kept(argv: list[str], shown: list[str]) -> None:
    assert redact_argv(argv) == shown


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-tokens", "4096", "--max-num-batched-tokens", "8192", "--tokenizer", "meta/llama"],
        ["--ssl-keyfile", "/etc/ssl/key.pem", "--kv-cache-dtype", "fp8", "--tokenizer-path", "/m"],
        ["--url", "http://127.0.0.1:30000/health", "--keep-alive", "5"],
        ["python3", "-m", "sglang.launch_server", "--model-path", "sk-model", "--tp", "8"],
    ],
)
def test_what_is_no_secret_is_left_as_it_is(argv: list[str]) -> None:
    assert redact_argv(argv) is argv
