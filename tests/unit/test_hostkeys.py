"""known_hosts parsing and host key verdicts, checked against OpenSSH's own ssh-keygen where it can say."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest

from gputui.core.link import LinkError
from gputui.transports.ssh.hostkeys import knownhosts
from gputui.transports.ssh.hostkeys.knownhosts import (
    HostKeyCheck,
    check_host_key,
    fingerprint_sha256,
    hash_name,
    host_field_matches,
    known_key_types,
    load_known_hosts,
    lookup_name,
    parse_known_hosts,
    record_host_key,
)


def _keygen(tmp_path: Path, name: str, key_type: str = "ed25519") -> tuple[str, bytes, Path]:
    path = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "", "-f", str(path)], check=True, timeout=30
    )
    words = Path(f"{path}.pub").read_text().split()
    return words[0], base64.b64decode(words[1]), path


def _b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    key_type, blob, path = _keygen(tmp_path, "k")
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{path}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert fingerprint_sha256(blob) == out[1]
    assert out[1].startswith("SHA256:")
    assert "=" not in out[1]


def test_lookup_name_brackets_non_default_ports() -> None:
    assert lookup_name("gpu1", 22) == "gpu1"
    assert lookup_name("127.0.0.1", 2222) == "[127.0.0.1]:2222"
    assert lookup_name("::1", 2222) == "[::1]:2222"
    assert lookup_name("gpu1", 2222, host_key_alias="nodealias") == "nodealias"


@pytest.mark.parametrize(
    ("field", "name", "expected"),
    [
        ("gpu1", "gpu1", True),
        ("GPU1", "gpu1", True),
        ("gpu1,gpu2", "gpu2", True),
        ("gpu*", "gpu7", True),
        ("gpu?", "gpu12", False),
        ("*,!gpu3", "gpu3", False),
        ("*,!gpu3", "gpu4", True),
        ("!gpu3", "gpu4", False),
        ("[127.0.0.1]:2222", "[127.0.0.1]:2222", True),
        ("[127.0.0.1]:2222", "127.0.0.1", False),
        ("127.0.0.1", "[127.0.0.1]:2222", False),
        ("[127.0.0.*]:*", "[127.0.0.9]:2200", True),
        ("[a]", "a", False),
    ],
)
def test_pattern_rules(field: str, name: str, expected: bool) -> None:
    assert host_field_matches(field.split(","), name) is expected


def test_hashed_names_round_trip() -> None:
    field = hash_name("[127.0.0.1]:2222")
    assert field.startswith("|1|")
    assert host_field_matches([field], "[127.0.0.1]:2222")
    assert not host_field_matches([field], "[127.0.0.1]:2223")
    assert not host_field_matches(["|1|garbage"], "x")
    assert not host_field_matches(["|1|!!!|???"], "x")


def test_hashed_lines_written_by_ssh_keygen_match(tmp_path: Path) -> None:
    key_type, blob, _ = _keygen(tmp_path, "k")
    known = tmp_path / "known_hosts"
    known.write_text(f"[gpu-a.example]:2222 {key_type} {_b64(blob)}\ngpu-b {key_type} {_b64(blob)}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True, timeout=30)
    text = known.read_text()
    assert "gpu-a" not in text
    lines = parse_known_hosts(text, str(known))
    assert check_host_key(lines, "[gpu-a.example]:2222", blob).status == "known"
    assert check_host_key(lines, "gpu-b", blob).status == "known"
    assert check_host_key(lines, "gpu-a.example", blob).status == "unknown"


def test_our_hashed_line_is_found_by_ssh_keygen(tmp_path: Path) -> None:
    key_type, blob, _ = _keygen(tmp_path, "k")
    known = tmp_path / "sub" / "known_hosts"
    record_host_key(str(known), "[127.0.0.1]:2299", key_type, blob, hashed=True)
    found = subprocess.run(
        ["ssh-keygen", "-F", "[127.0.0.1]:2299", "-f", str(known)], capture_output=True, text=True, timeout=30
    )
    assert found.returncode == 0
    assert _b64(blob) in found.stdout
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    assert oct(known.parent.stat().st_mode & 0o777) == "0o700"


def test_record_appends_after_a_missing_final_newline(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("# no newline at end")
    blob = b"\x00\x00\x00\x0bssh-ed25519" + b"k" * 36
    line = record_host_key(str(known), "gpu1", "ssh-ed25519", blob, hashed=False)
    assert known.read_text() == f"# no newline at end\n{line}\n"
    assert check_host_key(load_known_hosts([str(known)]), "gpu1", blob).status == "known"


MARKER_FILE = """\
# comment line

@cert-authority *.example {ktype} {ca}
@revoked * {ktype} {revoked}
@bogus-marker gpu1 {ktype} {other}
gpu1,gpu1.example {ktype} {good} comment words here
[gpu2]:2222 {ktype} {good}
gpu-* {ktype} {other}
*,!gpu-x9 {ktype} {other}
only-two-fields
gpu3 {ktype} not*base64
"""


def _marker_lines(blobs: dict[str, bytes]) -> list:
    text = MARKER_FILE.format(ktype="ssh-ed25519", **{k: _b64(v) for k, v in blobs.items()})
    return parse_known_hosts(text, "/k/known_hosts")


BLOBS = {
    name: b"\x00\x00\x00\x0bssh-ed25519" + name.encode() * 8 for name in ("ca", "revoked", "other", "good")
}


def test_markers_and_junk_lines_load_without_error() -> None:
    lines = _marker_lines(BLOBS)
    assert [ln.marker for ln in lines] == ["@cert-authority", "@revoked", None, None, None, None]
    assert lines[2].where == "/k/known_hosts:6"


def test_verdicts_over_a_file_with_markers() -> None:
    lines = _marker_lines(BLOBS)
    assert check_host_key(lines, "gpu1", BLOBS["good"]).status == "known"
    assert check_host_key(lines, "GPU1.example", BLOBS["good"]).status == "known"
    assert check_host_key(lines, "[gpu2]:2222", BLOBS["good"]).status == "known"
    # The CA key must never be taken for a host's own key.
    ca_only = [ln for ln in lines if ln.marker is not None]
    assert check_host_key(ca_only, "node.example", BLOBS["ca"]).status == "unknown"
    # A revoked key is refused for any host, even where a plain line also lists it.
    revoked = check_host_key(lines, "gpu1", BLOBS["revoked"])
    assert revoked.status == "revoked"
    assert revoked.line is not None
    assert revoked.line.where == "/k/known_hosts:4"
    # A host with a recorded key presenting another one: changed, naming the first recorded line.
    # (Wildcard lines carrying the other key would match gpu1 too, as in OpenSSH: leave them out here.)
    exact = [ln for ln in lines if not any("*" in p for p in ln.patterns)]
    changed = check_host_key(exact, "gpu1", BLOBS["other"])
    assert changed == HostKeyCheck("changed", lines[2])
    assert check_host_key(lines, "gpu1", BLOBS["other"]).status == "known"
    # Wildcards and negation.
    assert check_host_key(lines, "gpu-z", BLOBS["other"]).status == "known"
    assert check_host_key(lines, "elsewhere", BLOBS["other"]).status == "known"
    no_star = [ln for ln in lines if ln.patterns != ("*", "!gpu-x9")]
    assert check_host_key(no_star, "gpu-x9", BLOBS["other"]).status == "known"
    only_negated = [ln for ln in lines if ln.patterns == ("*", "!gpu-x9")]
    assert check_host_key(only_negated, "gpu-x9", BLOBS["other"]).status == "unknown"


def test_known_key_types_ignore_marker_lines() -> None:
    lines = parse_known_hosts(
        "@cert-authority gpu1 ssh-rsa AAAA\ngpu1 ecdsa-sha2-nistp256 AAAA\ngpu1 ssh-ed25519 AAAA\n", "f"
    )
    assert known_key_types(lines, "gpu1") == ["ecdsa-sha2-nistp256", "ssh-ed25519"]
    assert known_key_types(lines, "gpu2") == []


def test_missing_files_count_as_empty(tmp_path: Path) -> None:
    assert load_known_hosts([str(tmp_path / "nope"), os.devnull]) == []


@pytest.mark.parametrize("kind", ["directory", "fifo", "huge"])
def test_a_known_hosts_that_is_no_file_is_one_line(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "known_hosts"
    if kind == "directory":
        planted.mkdir()
    elif kind == "fifo":
        os.mkfifo(planted)  # opening it for reading would block for ever
    else:
        monkeypatch.setattr(knownhosts, "KNOWN_HOSTS_MAX_BYTES", 1024)
        planted.write_bytes(b"# x\n" * 1024)
    with pytest.raises(LinkError, match=f"^known hosts: {planted}: ") as caught:
        load_known_hosts([str(planted)])
    assert "\n" not in str(caught.value)
