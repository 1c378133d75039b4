"""``patches/base.toml``: one reader (``patchseries.pin``) for every command, every table checked by each."""

from __future__ import annotations

import pytest

from conftest import files_of, one_error
from patchseries.pin import load_pin
from patchseries.release import load_wheel_pin

WHEELS = (
    '\n[wheels]\nseries_version = {version}\n\n[wheels.fakelib_fabric]\nsubpackage = "fabric"\n'
    'url = "https://example.invalid/fakelib_fabric-1.0.tar.gz"\nsha256 = "{sha}"\nroot = "fakelib_fabric-1.0"\n'
    'ships = ["fabric"]\n'
)


def test_a_pin_saved_with_a_byte_order_mark_is_read_by_the_wheel_commands_too(synthetic):
    pin_file = synthetic.ws.pin_file
    pin_file.write_bytes("\ufeff".encode() + pin_file.read_bytes() + WHEELS.format(version=3, sha="a" * 64).encode())

    wheel_pin = load_wheel_pin(pin_file, load_pin(pin_file))

    assert wheel_pin.series_version == 3
    assert [s.name for s in wheel_pin.standalones] == ["fakelib_fabric"]


@pytest.mark.parametrize("command", ["fetch", "apply", "edit", "check", "export", "forward", "matrix", "wheels"])
def test_a_bad_wheels_table_is_refused_by_every_command_that_reads_the_pin(synthetic, command):
    with synthetic.ws.pin_file.open("a") as pin_file:
        pin_file.write(WHEELS.format(version=0, sha="a" * 64))
    before = files_of(synthetic.ws.patches.parent)
    args = ("--checkout", str(synthetic.tree)) if command == "forward" else ()

    error = one_error(synthetic.run(command, *args))

    assert error == (
        f"error: pin file {synthetic.ws.pin_file}: [wheels] series_version is not a positive integer (such as 7): 0"
    )
    assert files_of(synthetic.ws.patches.parent) == before


def test_a_pin_file_with_a_byte_order_mark_is_read(synthetic):
    synthetic.ws.pin_file.write_bytes(b"\xef\xbb\xbf" + synthetic.ws.pin_file.read_bytes())

    assert synthetic.run("fetch").returncode == 0
    assert synthetic.run("check").returncode == 0
